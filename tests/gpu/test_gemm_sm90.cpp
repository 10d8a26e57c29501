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
#include <array>
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
#include "rlx/passes/layer_norm_fold.h"
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

// C[M, N] (leading dimension ldc) = A[M, K] (lda)·B[N, K]ᵀ + bias in dtype dt.
GemmArgs gemm_args(DType dt, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B, void* C,
                   int64_t ldc, const void* bias) {
  GemmArgs g;
  g.dtype = dt;
  g.trans_b = true;
  g.M = M, g.N = N, g.K = K;
  g.A = A, g.lda = lda;
  g.B = B, g.ldb = K;
  g.C = C, g.ldc = ldc;
  g.bias = bias;
  return g;
}

template <typename V>
void upload(const DevMem& d, const std::vector<V>& v) {
  ASSERT_EQ(cudaMemcpy(d.p, v.data(), v.size() * sizeof(V), cudaMemcpyHostToDevice), cudaSuccess);
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
  upload(dA, a);
  upload(dB, b);
  upload(dBias, bias);
  const GemmArgs g = gemm_args(dt, M, N, K, dA.p, lda, dB.p, dC.p, ldc, with_bias ? dBias.p : nullptr);
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
// for x ≥ 0 and, for x < 0, within 2^-10·max(1, |x|) absolute, about an ulp
// of x itself (dev::gelu_erf_f16x2's bound: tanh.approx near −1 is an f16
// step, 2^-11, off, which h = x/2 scales; an f16 emulation with every tanh
// a step off stays below 5.1e-4·max(1, |x|)).
TEST(GemmSm90, GeluErfF16x2EveryInput) {
  SKIP_WITHOUT_SM90();
  constexpr int64_t M = 65536, N = 8, K = 8;
  std::vector<uint16_t> a(static_cast<size_t>(M * K), 0), b(static_cast<size_t>(N * K), 0);
  for (int64_t m = 0; m < M; ++m) a[static_cast<size_t>(m * K)] = static_cast<uint16_t>(m);
  for (int64_t j = 0; j < N; ++j) b[static_cast<size_t>(j * K)] = f32_to_f16(1.0f);
  DevMem dA(a.size() * 2), dB(b.size() * 2), dC(static_cast<size_t>(M * N) * 2);
  upload(dA, a);
  upload(dB, b);
  const GemmArgs g = gemm_args(DType::F16, M, N, K, dA.p, K, dB.p, dC.p, N, nullptr);
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
          const double rel = std::fabs(gv - ref) / std::max(1.0, std::fabs(x));
          worst_neg = std::max(worst_neg, rel);
          ok = rel <= 0x1p-10;
        }
        if (!ok && bad++ < 10) ADD_FAILURE() << "gelu(" << x << ") = " << gv << ", want " << ref;
      }
    }
    EXPECT_EQ(bad, 0);
    if (packed[0] == '1') {
      RecordProperty("worst_error_over_max_1_abs_x_negative_x", str(worst_neg));
      std::printf("f16x2 GELU-erf: worst |error| / max(1, |x|) for x < 0: %.3g (bound 2^-10 = %.3g)\n", worst_neg,
                  0x1p-10);
    }
  }
}

// ---- LayerNorm folding (Sm90LnFold) ----

// Row partials in the kernels' format: (mean, M2) of each 128-column block.
std::vector<float> row_partials(const std::vector<double>& x, int64_t M, int64_t cols) {
  const int64_t parts = (cols + 127) / 128;
  std::vector<float> st(static_cast<size_t>(2 * parts * M));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t b = 0; b < parts; ++b) {
      const int64_t c0 = 128 * b, c1 = std::min(cols, c0 + 128);
      double mean = 0, m2 = 0;
      for (int64_t c = c0; c < c1; ++c) mean += x[static_cast<size_t>(r * cols + c)];
      mean /= double(c1 - c0);
      for (int64_t c = c0; c < c1; ++c) m2 += std::pow(x[static_cast<size_t>(r * cols + c)] - mean, 2);
      st[static_cast<size_t>(2 * (b * M + r))] = static_cast<float>(mean);
      st[static_cast<size_t>(2 * (b * M + r) + 1)] = static_cast<float>(m2);
    }
  return st;
}

// Values of dtype dt, row r drawn around its own mean (−3..3) with its own
// spread (0.5..2), as a LayerNorm's input is: bits and their float64 values.
void offset_rows(DType dt, int64_t M, int64_t cols, std::vector<uint16_t>& bits, std::vector<double>& vals) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), mu(-3.0f, 3.0f), sd(0.5f, 2.0f);
  bits.resize(static_cast<size_t>(M * cols));
  vals.resize(bits.size());
  for (int64_t r = 0; r < M; ++r) {
    const float m = mu(rng()), d = sd(rng());
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      bits[i] = to_bits(dt, m + d * 1.7f * u(rng()));
      vals[i] = from_bits(dt, bits[i]);
    }
  }
}

void layer_norm_ref(std::vector<double>& x, int64_t M, int64_t cols, const std::vector<double>& gamma,
                    const std::vector<double>& beta, double eps) {
  for (int64_t r = 0; r < M; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x[static_cast<size_t>(r * cols + c)];
    mean /= double(cols);
    for (int64_t c = 0; c < cols; ++c) var += std::pow(x[static_cast<size_t>(r * cols + c)] - mean, 2);
    const double rstd = 1.0 / std::sqrt(var / double(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      double& v = x[static_cast<size_t>(r * cols + c)];
      v = (v - mean) * rstd * gamma[static_cast<size_t>(c)] + beta[static_cast<size_t>(c)];
    }
  }
}

// n random values of dtype dt in [lo, hi): their bits, and their float64 values in vals.
std::vector<uint16_t> random_bits(DType dt, size_t n, float lo, float hi, std::vector<double>& vals) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> bits(n);
  vals.resize(n);
  for (size_t i = 0; i < n; ++i) vals[i] = from_bits(dt, bits[i] = to_bits(dt, u(rng())));
  return bits;
}

void expect_close(DType dt, const DevMem& d, const std::vector<double>& ref, double tol) {
  std::vector<uint16_t> got(ref.size());
  ASSERT_EQ(cudaMemcpy(got.data(), d.p, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = from_bits(dt, got[i]);
    if (!(std::fabs(v - ref[i]) <= tol * (1.0 + std::fabs(ref[i]))) && ++bad <= 5)
      ADD_FAILURE() << "C[" << i << "] = " << v << ", want " << ref[i];
  }
  EXPECT_EQ(bad, 0) << bad << " bad values";
}

// The row-scale fold end to end: LN(x)·Wᵀ + b (and its GELU) computed as
// rstd·(x·W'ᵀ) + b' from x's partials, with W' and b' from fold_layer_norm
// (rlx/passes/layer_norm_fold.h) on the host, against float64 on LN(x).
// Rows with means up to ±3 cost precision (x is rounded before it is
// centred): the tolerance is four f16 roundings.
TEST(GemmSm90Fold, RowScaleEqualsLayerNormThenGemm) {
  RLX_SKIP_WITHOUT_SM90_KERNEL(sm90_gemm_fold_available);
  RLX_TRACE_SEED();
  for (DType dt : {DType::F16, DType::BF16})
    for (const auto [M, N, K] : {std::array<int64_t, 3>{300, 264, 384}, {129, 136, 200}})
      for (Activation act : {Activation::None, Activation::GeluErf}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << activation_name(act) << " M=" << M << " N=" << N
                                        << " K=" << K);
        std::vector<uint16_t> xb;
        std::vector<double> x, w, b, gamma, beta;
        offset_rows(dt, M, K, xb, x);
        random_bits(dt, static_cast<size_t>(N * K), -1.0f, 1.0f, w);
        for (double& v : w) v /= std::sqrt(double(K));
        random_bits(dt, static_cast<size_t>(N), -0.5f, 0.5f, b);
        random_bits(dt, static_cast<size_t>(K), 0.5f, 1.5f, gamma);
        random_bits(dt, static_cast<size_t>(K), -0.5f, 0.5f, beta);
        auto as_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
        const std::vector<float> wf = as_float(w), bf = as_float(b), gf = as_float(gamma), betaf = as_float(beta);
        const FoldedLinear fold = fold_layer_norm(wf.data(), N, K, bf.data(), gf.data(), betaf.data());
        std::vector<uint16_t> wb(fold.weight.size()), bb(fold.bias.size());
        for (size_t i = 0; i < wb.size(); ++i) wb[i] = to_bits(dt, fold.weight[i]);
        for (size_t i = 0; i < bb.size(); ++i) bb[i] = to_bits(dt, fold.bias[i]);
        std::vector<double> h = x, ref(static_cast<size_t>(M * N));
        layer_norm_ref(h, M, K, gamma, beta, 1e-12);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t n = 0; n < N; ++n) {
            double acc = b[static_cast<size_t>(n)];
            for (int64_t k = 0; k < K; ++k)
              acc += h[static_cast<size_t>(i * K + k)] * w[static_cast<size_t>(n * K + k)];
            ref[static_cast<size_t>(i * N + n)] = act_ref(act, acc);
          }
        const std::vector<float> st = row_partials(x, M, K);
        DevMem dX(xb.size() * 2), dW(wb.size() * 2), dB(bb.size() * 2), dC(ref.size() * 2), dS(st.size() * 4);
        upload(dX, xb);
        upload(dW, wb);
        upload(dB, bb);
        upload(dS, st);
        const GemmArgs g = gemm_args(dt, M, N, K, dX.p, K, dW.p, dC.p, N, dB.p);
        Sm90LnFold f;
        f.a_stats = static_cast<const float2*>(dS.p);
        launch_sm90_gemm_fold(g, act, f, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        expect_close(dt, dC, ref, dt == DType::F16 ? 8e-3 : 6e-2);
      }
}

// The residual fold: C = A·Bᵀ + bias + LN(R) (R's partials; or R itself),
// C's partials out, in place (C = R) as a layer's norm chain runs it; a
// partial last column block (N = 264) and row tile (M = 300).
TEST(GemmSm90Fold, ResidualWithDeferredNormAndStatistics) {
  RLX_SKIP_WITHOUT_SM90_KERNEL(sm90_gemm_fold_available);
  RLX_TRACE_SEED();
  for (DType dt : {DType::F16, DType::BF16})
    for (bool deferred : {true, false})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " deferred=" << deferred << " in_place=" << in_place);
        const int64_t M = 300, N = 264, K = 200, parts = (N + 127) / 128;
        std::vector<double> a, w, b, gamma, beta, r;
        std::vector<uint16_t> ab = random_bits(dt, static_cast<size_t>(M * K), -1.0f, 1.0f, a);
        std::vector<uint16_t> wb = random_bits(dt, static_cast<size_t>(N * K), -1.0f, 1.0f, w);
        std::vector<uint16_t> bb = random_bits(dt, static_cast<size_t>(N), -0.5f, 0.5f, b);
        std::vector<uint16_t> gb = random_bits(dt, static_cast<size_t>(N), 0.5f, 1.5f, gamma);
        std::vector<uint16_t> beb = random_bits(dt, static_cast<size_t>(N), -0.5f, 0.5f, beta);
        std::vector<uint16_t> rb;
        offset_rows(dt, M, N, rb, r);
        const std::vector<float> st = row_partials(r, M, N);
        std::vector<double> h = r, ref(static_cast<size_t>(M * N));
        if (deferred) layer_norm_ref(h, M, N, gamma, beta, 1e-12);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t n = 0; n < N; ++n) {
            double acc = b[static_cast<size_t>(n)] + h[static_cast<size_t>(i * N + n)];
            for (int64_t k = 0; k < K; ++k)
              acc += a[static_cast<size_t>(i * K + k)] * w[static_cast<size_t>(n * K + k)];
            ref[static_cast<size_t>(i * N + n)] = acc;
          }
        DevMem dA(ab.size() * 2), dW(wb.size() * 2), dB(bb.size() * 2), dG(gb.size() * 2), dBe(beb.size() * 2),
            dR(rb.size() * 2), dC(ref.size() * 2), dS(st.size() * 4), dCs(static_cast<size_t>(parts * M * 8));
        for (auto [d, v] : {std::pair{&dA, &ab}, {&dW, &wb}, {&dB, &bb}, {&dG, &gb}, {&dBe, &beb}, {&dR, &rb}})
          upload(*d, *v);
        upload(dS, st);
        ASSERT_EQ(cudaMemset(dC.p, 0xFF, ref.size() * 2), cudaSuccess);
        const GemmArgs g = gemm_args(dt, M, N, K, dA.p, K, dW.p, in_place ? dR.p : dC.p, N, dB.p);
        Sm90LnFold f;
        f.R = dR.p, f.ldr = N;
        if (deferred) f.r_stats = static_cast<const float2*>(dS.p), f.gamma = dG.p, f.beta = dBe.p;
        f.c_stats = static_cast<float2*>(dCs.p);
        launch_sm90_gemm_fold(g, Activation::None, f, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const DevMem& out = in_place ? dR : dC;
        expect_close(dt, out, ref, dt == DType::F16 ? 3e-3 : 2e-2);
        // C's partials (of its values before their rounding) against float64
        // statistics of the float64 reference.
        const std::vector<float> want = row_partials(ref, M, N);
        std::vector<float> got(want.size());
        ASSERT_EQ(cudaMemcpy(got.data(), dCs.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        int bad = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          // M2 relative, the mean absolute
          const double scale = i % 2 ? std::fabs(want[i]) + 1e-3 : 1.0 + std::fabs(want[i]);
          if (!(std::fabs(got[i] - want[i]) <= 1e-4 * scale) && bad++ < 5)
            ADD_FAILURE() << "partial " << i / 2 << (i % 2 ? " M2 " : " mean ") << got[i] << ", want " << want[i];
        }
        EXPECT_EQ(bad, 0);
      }
}

TEST(GemmSm90Fold, RefusesWhatItCannotRun) {
  alignas(16) static char buf[64];
  const GemmArgs g = gemm_args(DType::F16, 64, 64, 64, buf, 64, buf, buf, 64, nullptr);
  Sm90LnFold none;
  EXPECT_THROW(launch_sm90_gemm_fold(g, Activation::None, none, nullptr), InvalidArgument);  // neither fold
  Sm90LnFold both;
  both.a_stats = reinterpret_cast<const float2*>(buf);
  both.R = buf, both.ldr = 64;
  EXPECT_THROW(launch_sm90_gemm_fold(g, Activation::None, both, nullptr), InvalidArgument);
  Sm90LnFold rs;
  rs.a_stats = reinterpret_cast<const float2*>(buf);
  EXPECT_THROW(launch_sm90_gemm_fold(g, Activation::Silu, rs, nullptr), Unsupported);
  Sm90LnFold res;
  res.R = buf, res.ldr = 64;
  EXPECT_THROW(launch_sm90_gemm_fold(g, Activation::GeluErf, res, nullptr), Unsupported);
  res.r_stats = reinterpret_cast<const float2*>(buf);  // without gamma and beta
  EXPECT_THROW(launch_sm90_gemm_fold(g, Activation::None, res, nullptr), InvalidArgument);
  res.r_stats = nullptr, res.ldr = 60;
  EXPECT_THROW(launch_sm90_gemm_fold(g, Activation::None, res, nullptr), InvalidArgument);
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
