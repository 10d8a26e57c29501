// A GEMM that adds a residual (GemmArgs::residual: cuBLASLt's C input with
// beta = 1) against a float64 reference, and the lowering that lets a GEMM add
// the other term of the residual norm after it (try_fold_gemm_residual,
// lower_matmul.cpp) against the CPU backend, with the knob on and off.
//
// Operands hold random values in [-1, 1) rounded to the dtype, so the
// reference sees what the GEMM reads; the output is poisoned first. Shapes: one
// row, rows that fill no tile, N and K not multiples of a tile, a batch of
// strided GEMMs, and the output written over the residual (cuBLASLt's in-place
// form). Tolerance |got − ref| ≤ tol·(1 + |ref|) with tol = 2^-10 · √K-scaled
// f32 accumulation plus one rounding: 4e-3 (f16), 2e-2 (bf16), 1e-4 (f32).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rlx/backends/cuda/cublaslt.h"
#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/bert_gpu_util.h"
#include "tests/gpu/cuda_backend_test_util.h"
#include "tests/gpu/graph_run_util.h"
#include "tests/gpu/sm90_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::cuda;
using rlx::test::DevMem;
using rlx::test::rng;
using rlx::test::ScopedEnv;

// A value of `t` as raw storage bytes, and back.
void store(DType t, float v, unsigned char* dst) {
  if (t == DType::F32) {
    std::memcpy(dst, &v, 4);
    return;
  }
  const uint16_t h = rlx::test::to_bits(t, v);
  std::memcpy(dst, &h, 2);
}
double load(DType t, const unsigned char* src) {
  if (t == DType::F32) {
    float v;
    std::memcpy(&v, src, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, src, 2);
  return rlx::test::from_bits(t, h);
}

struct Case {
  int64_t M, N, K, batch = 1;
  bool bias = true, in_place = false;
};

void run_case(GemmEngine& engine, DType dt, const Case& cs) {
  SCOPED_TRACE(testing::Message() << dtype_name(dt) << " M=" << cs.M << " N=" << cs.N << " K=" << cs.K
                                  << " batch=" << cs.batch << " bias=" << cs.bias << " in place=" << cs.in_place);
  const int64_t M = cs.M, N = cs.N, K = cs.K, B = cs.batch, e = dtype_size(dt);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random_bytes = [&](int64_t n) {
    std::vector<unsigned char> v(static_cast<size_t>(n * e));
    for (int64_t i = 0; i < n; ++i) store(dt, u(rng()), v.data() + i * e);
    return v;
  };
  const auto a = random_bytes(B * M * K), w = random_bytes(B * N * K), r = random_bytes(B * M * N),
             bias = random_bytes(N);
  auto at = [&](const std::vector<unsigned char>& v, int64_t i) { return load(dt, v.data() + i * e); };
  std::vector<double> ref(static_cast<size_t>(B * M * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = (cs.bias ? at(bias, j) : 0.0) + at(r, (b * M + i) * N + j);
        for (int64_t k = 0; k < K; ++k) s += at(a, (b * M + i) * K + k) * at(w, (b * N + j) * K + k);
        ref[static_cast<size_t>((b * M + i) * N + j)] = s;
      }

  DevMem dA(a.size()), dW(w.size()), dR(r.size()), dC(r.size()), dBias(bias.size());
  ASSERT_EQ(cudaMemcpy(dA.p, a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dW.p, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dR.p, r.data(), r.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dBias.p, bias.data(), bias.size(), cudaMemcpyHostToDevice), cudaSuccess);
  void* out = cs.in_place ? dR.p : dC.p;
  if (!cs.in_place) {
    ASSERT_EQ(cudaMemset(out, 0xFF, r.size()), cudaSuccess);
  }

  GemmArgs g;
  g.dtype = dt;
  g.trans_b = true;
  g.M = M, g.N = N, g.K = K, g.batch = B;
  g.A = dA.p, g.lda = K, g.stride_a = B > 1 ? M * K : 0;
  g.B = dW.p, g.ldb = K, g.stride_b = B > 1 ? N * K : 0;
  g.C = out, g.ldc = N, g.stride_c = B > 1 ? M * N : 0;
  g.bias = cs.bias ? dBias.p : nullptr;
  g.residual = dR.p;
  engine.plan(g);
  engine.run(g, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> got(r.size());
  ASSERT_EQ(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  const double tol = dt == DType::F16 ? 4e-3 : dt == DType::BF16 ? 2e-2 : 1e-4;
  int64_t bad = 0;
  for (int64_t i = 0; i < B * M * N; ++i) {
    const double want = ref[static_cast<size_t>(i)], v = at(got, i);
    if (!(std::fabs(v - want) <= tol * (1.0 + std::fabs(want))) && ++bad <= 5)
      ADD_FAILURE() << "C[" << i / N << ", " << i % N << "] = " << v << ", want " << want;
  }
  EXPECT_EQ(bad, 0) << bad << " bad values";
}

TEST(GemmResidual, CublasLtAddsTheResidualMatchesFloat64) {
  SKIP_WITHOUT_CUDA();
  RLX_TRACE_SEED();
  GemmEngine engine(0);
  const Case cases[] = {
      {1, 768, 768},
      {37, 200, 72, 1, false},
      {300, 768, 768},
      {130, 96, 3072},  // a long K
      {45, 64, 40, 3},  // strided batches
      {300, 768, 768, 1, true, true},  // the output over the residual
      {64, 128, 64, 2, false, true},
  };
  for (DType dt : {DType::F16, DType::BF16, DType::F32})
    for (const Case& cs : cases) run_case(engine, dt, cs);
  // The problem without a residual is a plan of its own: it must not add one.
  const int64_t M = 16, N = 64, K = 32;
  DevMem dA(size_t{M * K * 2}), dW(size_t{N * K * 2}), dC(size_t{M * N * 2}), dR(size_t{M * N * 2});
  ASSERT_EQ(cudaMemset(dA.p, 0, size_t{M * K * 2}), cudaSuccess);
  ASSERT_EQ(cudaMemset(dW.p, 0, size_t{N * K * 2}), cudaSuccess);
  ASSERT_EQ(cudaMemset(dR.p, 0x3C, size_t{M * N * 2}), cudaSuccess);  // f16 1.0 = 0x3C00; bytes 0x3C3C ≈ 1.06
  GemmArgs g;
  g.dtype = DType::F16;
  g.trans_b = true;
  g.M = M, g.N = N, g.K = K, g.A = dA.p, g.lda = K, g.B = dW.p, g.ldb = K, g.C = dC.p, g.ldc = N;
  g.residual = dR.p;
  engine.plan(g);
  engine.run(g, nullptr);
  GemmArgs plain = g;
  plain.residual = nullptr;
  plain.C = dR.p;  // same alignment as before; A·Wᵀ = 0 overwrites it
  engine.plan(plain);
  engine.run(plain, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> with(size_t{M * N}), without(size_t{M * N});
  ASSERT_EQ(cudaMemcpy(with.data(), dC.p, with.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(without.data(), dR.p, without.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_NEAR(f16_to_f32(with[5]), f16_to_f32(0x3C3C), 1e-6);
  EXPECT_EQ(f16_to_f32(without[5]), 0.0f);
}

// A projection (N = 768, past the fused GEMM + LayerNorm kernel's 384) and the
// residual norm after it, on CUDA with the fold on and off, against the CPU in
// f32: the dispatch report names which ran, and the outputs agree.
TEST(GemmResidual, LoweringFoldsTheResidualAndMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  RLX_TRACE_SEED();
  register_builtin_backends();
  struct Form {
    bool rms, residual_first, bias;
  };
  for (const Form f : {Form{false, false, true}, Form{false, true, false}, Form{true, false, true}}) {
    const int64_t M = 300, N = 768, K = 768;
    Graph g;
    auto x = input(g, "x", DType::F32, {M, K});
    auto r = input(g, "r", DType::F32, {M, N});
    auto w = param(g, "w", DType::F32, {N, K});
    auto gamma = param(g, "gamma", DType::F32, {N});
    auto res = r * r + r;  // computed before the projection, as a layer's input is
    Value p = matmul(x, w, MatMulAttrs{false, true});
    if (f.bias) p = p + param(g, "b", DType::F32, {N});
    const Value sum = f.residual_first ? res + p : p + res;
    auto y = f.rms ? rms_norm(sum, gamma, 1e-6f)
                   : layer_norm(sum, gamma, param(g, "beta", DType::F32, {N}), 1e-12f);
    output("y", y);
    output("z", y + res);  // the residual stays needed after the norm
    auto rnd = [](std::vector<int64_t> shape, float lo, float hi) {
      return rlx::test::bf16_exact_uniform(std::move(shape), lo, hi, rng());
    };
    const Tensor tx = rnd({M, K}, -1, 1), tr = rnd({M, N}, -1, 1), tw = rnd({N, K}, -0.1f, 0.1f),
                 tb = rnd({N}, -0.5f, 0.5f), tg = rnd({N}, 0.5f, 1.5f), tbeta = rnd({N}, -0.5f, 0.5f);
    std::vector<std::pair<std::string, Tensor>> params = {{"w", tw}, {"gamma", tg}};
    if (f.bias) params.emplace_back("b", tb);
    if (!f.rms) params.emplace_back("beta", tbeta);
    const std::vector<Tensor> ref = rlx::test::run_graph(g, "cpu", DType::F32, params, {tx, tr});
    for (const char* fold : {"1", "0"})
      for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
        SCOPED_TRACE(testing::Message() << "rms=" << f.rms << " residual first=" << f.residual_first
                                        << " bias=" << f.bias << " RLX_CUDA_GEMM_RESIDUAL=" << fold << " "
                                        << dtype_name(dt));
        ScopedEnv env("RLX_CUDA_GEMM_RESIDUAL", fold);
        std::string report;
        const std::vector<Tensor> got = rlx::test::run_graph(g, "cuda", dt, params, {tx, tr}, &report);
        const bool folded = report.find("(residual added by %") != std::string::npos &&
                            report.find("+residual act=") != std::string::npos;
        EXPECT_EQ(folded, std::string(fold) == "1") << report;
        EXPECT_EQ(report.find("norm " + std::string(dtype_name(dt)) + " +residual") == std::string::npos,
                  std::string(fold) == "1")
            << report;
        rlx::test::expect_outputs_close(ref, got, dt == DType::F16 ? 8e-3 : dt == DType::BF16 ? 4e-2 : 2e-4);
      }
  }
}

// A BERT with hidden 768 (the fused GEMM + LayerNorm kernel takes at most
// 384, so both residual norms of every layer follow a cuBLASLt projection) in
// f16 on CUDA, the fold on and off, against the CPU in f32: every pooled
// embedding within cosine 0.999, right padding varying per row.
TEST(GemmResidual, BertLayersMatchCpu) {
  SKIP_WITHOUT_CUDA();
  register_builtin_backends();
  const rlx::test::SmallBert b = rlx::test::small_bert(768, 12, 1024, 12, 4);
  rlx::test::expect_knob_fuses_bert(b, 4, "RLX_CUDA_GEMM_RESIDUAL", "(residual added by %", 4);  // two norms a layer
}

}  // namespace
