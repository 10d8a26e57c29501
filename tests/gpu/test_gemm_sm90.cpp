// rlx's Hopper GEMM (kernels/gemm_sm90.h) against a float64 reference, and
// the lowering that picks it (GemmEngine::prefer_sm90) against the CPU backend.
//
// Kernel cases, each run by every kernel (classic and ping-pong): f16 and
// bf16, every activation, with and without bias, shapes that are not
// multiples of the 128 × 128 × 64 tiles (partial M, N and K tiles, M = 1),
// padded leading dimensions. A and B hold random values in
// [-1, 1) rounded to the dtype, so the reference sees exactly the kernel's
// operands; the output buffer is poisoned with 0xFF first, and the columns
// of a padded C past N must stay poisoned. Tolerance |got − ref| ≤ tol·(1 +
// |ref|), tol = 2e-3 (f16), 1e-2 (bf16): one rounding of the f32 result.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/cuda/cublaslt.h"
#include "rlx/backends/cuda/kernels/gemm_sm90.h"
#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/sm90_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::cuda;
using rlx::test::DevMem;
using rlx::test::from_bits;
using rlx::test::rng;
using rlx::test::to_bits;
using rlx::test::ScopedEnv;

#define SKIP_WITHOUT_SM90() RLX_SKIP_WITHOUT_SM90_KERNEL(sm90_gemm_available)

double act_ref(Activation a, double x) {
  switch (a) {
    case Activation::GeluErf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh: return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case Activation::Relu: return x < 0 ? 0 : x;
    case Activation::Silu: return x / (1.0 + std::exp(-x));
    case Activation::None: break;
  }
  return x;
}

struct Case {
  int64_t M, N, K, lda_pad = 0, ldc_pad = 0;
};

constexpr Sm90GemmKernel kKernels[] = {Sm90GemmKernel::Classic, Sm90GemmKernel::PingPong};

// One problem, its float64 reference computed once, then every kernel on it.
void run_case(DType dt, Activation act, bool with_bias, const Case& cs) {
  SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << activation_name(act) << " bias=" << with_bias << " M="
                                  << cs.M << " N=" << cs.N << " K=" << cs.K << " lda+" << cs.lda_pad << " ldc+"
                                  << cs.ldc_pad);
  const int64_t M = cs.M, N = cs.N, K = cs.K, lda = K + cs.lda_pad, ldc = N + cs.ldc_pad;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> a(static_cast<size_t>(M * lda)), b(static_cast<size_t>(N * K)), bias(static_cast<size_t>(N));
  for (auto& v : a) v = to_bits(dt, u(rng()));
  for (auto& v : b) v = to_bits(dt, u(rng()));
  for (auto& v : bias) v = to_bits(dt, u(rng()));
  std::vector<double> ref(static_cast<size_t>(M * N)), arow(static_cast<size_t>(K)), bd(b.size());
  for (size_t i = 0; i < b.size(); ++i) bd[i] = from_bits(dt, b[i]);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t k = 0; k < K; ++k) arow[static_cast<size_t>(k)] = from_bits(dt, a[static_cast<size_t>(i * lda + k)]);
    for (int64_t j = 0; j < N; ++j) {
      double s = with_bias ? from_bits(dt, bias[static_cast<size_t>(j)]) : 0.0;
      const double* bj = bd.data() + j * K;
      for (int64_t k = 0; k < K; ++k) s += arow[static_cast<size_t>(k)] * bj[k];
      ref[static_cast<size_t>(i * N + j)] = act_ref(act, s);
    }
  }
  DevMem dA(a.size() * 2), dB(b.size() * 2), dC(static_cast<size_t>(M * ldc) * 2), dBias(bias.size() * 2);
  ASSERT_EQ(cudaMemcpy(dA.p, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dB.p, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dBias.p, bias.data(), bias.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);

  GemmArgs g;
  g.dtype = dt;
  g.trans_b = true;
  g.M = M, g.N = N, g.K = K;
  g.A = dA.p, g.lda = lda;
  g.B = dB.p, g.ldb = K;
  g.C = dC.p, g.ldc = ldc;
  g.bias = with_bias ? dBias.p : nullptr;
  ASSERT_EQ(sm90_gemm_unsupported(g), nullptr);
  const double tol = dt == DType::F16 ? 2e-3 : 1e-2;
  std::vector<uint16_t> c(static_cast<size_t>(M * ldc));
  for (Sm90GemmKernel kernel : kKernels) {
    SCOPED_TRACE(sm90_gemm_kernel_name(kernel));
    ASSERT_EQ(cudaMemset(dC.p, 0xFF, static_cast<size_t>(M * ldc) * 2), cudaSuccess);
    launch_sm90_gemm(g, act, nullptr, kernel);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(c.data(), dC.p, c.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t bad = 0;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        const double r = ref[static_cast<size_t>(i * N + j)], got = from_bits(dt, c[static_cast<size_t>(i * ldc + j)]);
        if (!(std::fabs(got - r) <= tol * (1.0 + std::fabs(r))) && ++bad <= 5)
          ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", want " << r;
      }
      for (int64_t j = N; j < ldc; ++j)
        if (c[static_cast<size_t>(i * ldc + j)] != 0xFFFF && ++bad <= 5)
          ADD_FAILURE() << "padding C[" << i << ", " << j << "] was written";
    }
    EXPECT_EQ(bad, 0) << bad << " bad values";
  }
}

TEST(GemmSm90, MatchesFloat64EveryActivationAndTile) {
  SKIP_WITHOUT_SM90();
  RLX_TRACE_SEED();
  const std::vector<Case> shapes = {{1, 8, 8}, {37, 136, 72}, {128, 128, 64}, {300, 264, 520, 8, 16}, {129, 1536, 384}};
  for (DType dt : {DType::F16, DType::BF16})
    for (Activation act : {Activation::None, Activation::GeluErf, Activation::GeluTanh, Activation::Relu, Activation::Silu})
      for (const Case& cs : shapes) run_case(dt, act, act != Activation::Relu || cs.M != 300, cs);
}

// Many tiles: a grid of 8 × 8 tiles, 33 row tiles of a thin N, and more
// tiles than two per SM (39 × 9 = 351 of them), so the persistent kernel
// gives each CTA several and both consumers take turns, each reusing its
// staging tile. K = 200 ends in a partial slab, fewer slabs than ring stages.
TEST(GemmSm90, ManyTiles) {
  SKIP_WITHOUT_SM90();
  RLX_TRACE_SEED();
  run_case(DType::F16, Activation::GeluErf, true, {1000, 1000, 392});
  run_case(DType::BF16, Activation::Silu, true, {4100, 136, 64, 8, 8});
  run_case(DType::F16, Activation::None, true, {4900, 1032, 200});
  run_case(DType::BF16, Activation::GeluErf, false, {4900, 1032, 200, 0, 8});
}

TEST(GemmSm90, LongK) {
  SKIP_WITHOUT_SM90();
  RLX_TRACE_SEED();
  run_case(DType::F16, Activation::None, true, {260, 392, 3080});
  run_case(DType::BF16, Activation::GeluErf, false, {130, 384, 1544, 0, 8});
}

// GELU-erf in the ping-pong epilogue for every f16 input: C[m, j] =
// GELU(x_m · 1), A's row m holding x_m then zeros, every B row (1, 0, ...).
// The exact form (RLX_CUDA_GELU_F16X2=0, dev::gelu_erf_f16) stays within an
// ulp of the correctly rounded GELU everywhere; the f16x2 form within an ulp
// for x ≥ 0 and 2^-10 absolute for x < 0 (dev::gelu_erf_f16x2's bound).
TEST(GemmSm90, GeluErfF16x2EveryInput) {
  SKIP_WITHOUT_SM90();
  constexpr int64_t M = 65536, N = 8, K = 8;
  std::vector<uint16_t> a(static_cast<size_t>(M * K), 0), b(static_cast<size_t>(N * K), 0);
  for (int64_t m = 0; m < M; ++m) a[static_cast<size_t>(m * K)] = static_cast<uint16_t>(m);
  for (int64_t j = 0; j < N; ++j) b[static_cast<size_t>(j * K)] = f32_to_f16(1.0f);
  DevMem dA(a.size() * 2), dB(b.size() * 2), dC(static_cast<size_t>(M * N) * 2);
  ASSERT_EQ(cudaMemcpy(dA.p, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dB.p, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  GemmArgs g;
  g.dtype = DType::F16;
  g.trans_b = true;
  g.M = M, g.N = N, g.K = K;
  g.A = dA.p, g.lda = K;
  g.B = dB.p, g.ldb = K;
  g.C = dC.p, g.ldc = N;
  // Sign-magnitude bits as an ordered integer: neighbours differ by one.
  auto key = [](uint16_t v) { return (v & 0x8000) ? -static_cast<int>(v & 0x7fff) : static_cast<int>(v & 0x7fff); };
  for (const char* packed : {"0", "1"}) {
    SCOPED_TRACE(str("RLX_CUDA_GELU_F16X2=", packed));
    ScopedEnv env("RLX_CUDA_GELU_F16X2", packed);
    ASSERT_EQ(cudaMemset(dC.p, 0xFF, static_cast<size_t>(M * N) * 2), cudaSuccess);
    launch_sm90_gemm(g, Activation::GeluErf, nullptr, Sm90GemmKernel::PingPong);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> c(static_cast<size_t>(M * N));
    ASSERT_EQ(cudaMemcpy(c.data(), dC.p, c.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    int bad = 0;
    double worst_neg = 0;
    for (int64_t m = 0; m < M; ++m) {
      const double x = f16_to_f32(static_cast<uint16_t>(m));
      const double ref = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
      const uint16_t want = f32_to_f16(static_cast<float>(ref));
      for (int64_t j = 0; j < N; ++j) {
        const uint16_t got = c[static_cast<size_t>(m * N + j)];
        const double gv = f16_to_f32(got);
        bool ok;
        if (std::isnan(x)) ok = std::isnan(gv);
        else if (std::isinf(x)) ok = x < 0 || (std::isinf(gv) && gv > 0);  // GELU(−∞) is NaN in both forms
        else if (packed[0] == '0' || x >= 0) ok = std::abs(key(got) - key(want)) <= 1;
        else {
          worst_neg = std::max(worst_neg, std::fabs(gv - ref));
          ok = std::fabs(gv - ref) <= 0x1p-10;
        }
        if (!ok && bad++ < 10) ADD_FAILURE() << "gelu(" << x << ") = " << gv << ", want " << ref;
      }
    }
    EXPECT_EQ(bad, 0);
    if (packed[0] == '1') {
      RecordProperty("worst_abs_error_negative_x", str(worst_neg));
      std::printf("f16x2 GELU-erf: worst absolute error for x < 0: %.3g\n", worst_neg);
    }
  }
}

TEST(GemmSm90, RefusesWhatItCannotRun) {
  GemmArgs g;
  g.dtype = DType::F16;
  g.trans_b = true;
  g.M = 64, g.N = 64, g.K = 64;
  alignas(16) static char buf[16];
  g.A = g.B = g.C = buf;
  g.lda = g.ldb = g.ldc = 64;
  EXPECT_EQ(sm90_gemm_unsupported(g), nullptr);
  GemmArgs f = g;
  f.dtype = DType::F32;
  EXPECT_NE(sm90_gemm_unsupported(f), nullptr);
  f = g, f.trans_b = false;
  EXPECT_NE(sm90_gemm_unsupported(f), nullptr);
  f = g, f.K = 60, f.lda = f.ldb = 60;
  EXPECT_NE(sm90_gemm_unsupported(f), nullptr);
  f = g, f.A = buf + 2;
  EXPECT_NE(sm90_gemm_unsupported(f), nullptr);
  f = g, f.batch = 2;
  EXPECT_NE(sm90_gemm_unsupported(f), nullptr);
  f = g, f.M = 8000000, f.N = f.ldc = int64_t{1} << 20, f.K = f.lda = f.ldb = 4096;
  EXPECT_NE(sm90_gemm_unsupported(f), nullptr);  // 62,500 · 8,192 tiles · 64 slabs: past the 32-bit slab count
  f = g, f.batch = 2;
  EXPECT_THROW(launch_sm90_gemm(f, Activation::None, nullptr), Unsupported);
}

// The lowering: y = GELU(x·Wᵀ + b), run on the CPU in f32 and on CUDA in f16
// and bf16, forced onto the sm90 kernel (RLX_CUDA_SM90_GEMM=1) and off it (0).
TEST(GemmSm90, LoweringPicksItAndMatchesCpu) {
  SKIP_WITHOUT_SM90();
  RLX_TRACE_SEED();
  register_builtin_backends();
  const int64_t M = 200, K = 392, N = 1000;
  Graph g;
  auto x = input(g, "x", DType::F32, {M, K});
  auto w = param(g, "w", DType::F32, {N, K});
  auto b = param(g, "b", DType::F32, {N});
  output("y", gelu(matmul(x, w, MatMulAttrs{false, true}) + b));
  auto rnd = [](std::vector<int64_t> shape, float scale) {
    Tensor t = Tensor::empty(DType::F32, std::move(shape));
    std::uniform_real_distribution<float> u(-scale, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_f32(f32_to_bf16(u(rng())));
    return t;
  };
  const Tensor tx = rnd({M, K}, 1.0f), tw = rnd({N, K}, 0.1f), tb = rnd({N}, 0.5f);
  auto run = [&](const std::string& device, DType precision, std::string* report) {
    Session s(device);
    CompileOptions o;
    o.precision = precision;
    auto exe = s.compile(g, o);
    exe->set_param("w", tw);
    exe->set_param("b", tb);
    Tensor y = exe->run({tx})[0];
    if (report) *report = exe->dispatch_report();
    return y.dtype() == DType::F32 ? y : y.to(DType::F32);
  };
  const Tensor ref = run("cpu", DType::F32, nullptr);
  for (const char* mode : {"1", "0"})
    for (DType dt : {DType::F16, DType::BF16}) {
      SCOPED_TRACE(testing::Message() << "RLX_CUDA_SM90_GEMM=" << mode << " " << dtype_name(dt));
      ScopedEnv env("RLX_CUDA_SM90_GEMM", mode);
      std::string report;
      const Tensor got = run("cuda", dt, &report);
      EXPECT_EQ(report.find("sm90 gemm gemm") != std::string::npos, std::string(mode) == "1") << report;
      const double tol = dt == DType::F16 ? 5e-3 : 2e-2;
      int64_t bad = 0;
      for (int64_t i = 0; i < ref.numel(); ++i) {
        const double r = ref.data<float>()[i], v = got.data<float>()[i];
        if (!(std::fabs(v - r) <= tol * (1.0 + std::fabs(r))) && ++bad <= 5)
          ADD_FAILURE() << "y[" << i << "] = " << v << ", want " << r;
      }
      EXPECT_EQ(bad, 0);
    }
}

}  // namespace
