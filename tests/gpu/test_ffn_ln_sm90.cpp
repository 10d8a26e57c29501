// A post-LN encoder layer's FFN in one Hopper kernel (kernels/ffn_ln_sm90.h)
// against a float64 reference, and the lowering that fuses it
// (lower_ffn_ln.cpp) against the CPU backend.
//
// X, W1, b1, W2, b2 and R hold random values rounded to the dtype (W1 and W2
// scaled by 1/√K, as trained weights are); gamma in [0.5, 1.5) and beta in
// [-0.5, 0.5), as the dtype or f32. The reference rounds the intermediate as
// the unfused kernels store it: H = round(GELU-erf(round(X·W1ᵀ + b1))), then
// Y = LayerNorm(H·W2ᵀ + b2 + R)·gamma + beta. Shapes cover N = 128, 256 and
// 384, one row, half a row tile, partial row tiles, F of one chunk, fewer
// items than ring slots, MiniLM's F, and the kernel's largest F; the
// residual X itself, and Y written over R and over X; both issue orders.
// Y is poisoned first. Tolerance |got − ref| ≤ tol·(1 + |ref|), tol = 6e-3
// (f16), 3e-2 (bf16): the f32 statistics plus the intermediate's rounding
// where the kernel's GELU lands one ulp off the reference's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rlx/backends/cuda/kernels/ffn_ln_sm90.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/gpu/bert_gpu_util.h"
#include "tests/gpu/sm90_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::cuda;
using rlx::test::DevMem;
using rlx::test::from_bits;
using rlx::test::rng;
using rlx::test::ScopedEnv;
using rlx::test::to_bits;

#define SKIP_WITHOUT_KERNEL() RLX_SKIP_WITHOUT_SM90_KERNEL(sm90_ffn_ln_available)

enum class Out { Fresh, OverR, OverX };

struct Case {
  int64_t M, N, F;
  bool bias = true, f32_params = false, residual_is_x = false;
  Out out = Out::Fresh;
};

std::vector<uint16_t> random_bits(DType dt, size_t n, float scale) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = to_bits(dt, scale * u(rng()));
  return v;
}

std::vector<double> widen(DType dt, const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = from_bits(dt, v[i]);
  return d;
}

double gelu_erf(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

void run_case(DType dt, const Case& cs) {
  SCOPED_TRACE(testing::Message() << dtype_name(dt) << " M=" << cs.M << " N=" << cs.N << " F=" << cs.F
                                  << " bias=" << cs.bias << " f32 params=" << cs.f32_params
                                  << " residual is X=" << cs.residual_is_x << " out=" << static_cast<int>(cs.out));
  const int64_t M = cs.M, N = cs.N, F = cs.F;
  const float eps = 1e-12f;
  const auto x = random_bits(dt, static_cast<size_t>(M * N), 1.0f);
  const auto w1 = random_bits(dt, static_cast<size_t>(F * N), 1.0f / std::sqrt(static_cast<float>(N)));
  const auto w2 = random_bits(dt, static_cast<size_t>(N * F), 1.0f / std::sqrt(static_cast<float>(F)));
  const auto b1 = random_bits(dt, static_cast<size_t>(F), 0.5f), b2 = random_bits(dt, static_cast<size_t>(N), 0.5f);
  const auto r = cs.residual_is_x ? x : random_bits(dt, static_cast<size_t>(M * N), 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> gamma(static_cast<size_t>(N)), beta(static_cast<size_t>(N));
  std::vector<uint16_t> gamma_h(gamma.size()), beta_h(beta.size());
  for (size_t j = 0; j < gamma.size(); ++j) {
    gamma_h[j] = to_bits(dt, 1.0f + 0.5f * u(rng()));
    beta_h[j] = to_bits(dt, 0.5f * u(rng()));
    gamma[j] = static_cast<float>(from_bits(dt, gamma_h[j]));  // f32 parameters take the same values
    beta[j] = static_cast<float>(from_bits(dt, beta_h[j]));
  }

  const auto xd = widen(dt, x), w1d = widen(dt, w1), w2d = widen(dt, w2), b1d = widen(dt, b1), b2d = widen(dt, b2),
             rd = widen(dt, r);
  std::vector<double> ref(static_cast<size_t>(M * N)), h(static_cast<size_t>(F)), row(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t f = 0; f < F; ++f) {
      double s = cs.bias ? b1d[static_cast<size_t>(f)] : 0.0;
      for (int64_t k = 0; k < N; ++k) s += xd[static_cast<size_t>(i * N + k)] * w1d[static_cast<size_t>(f * N + k)];
      const double pre = from_bits(dt, to_bits(dt, static_cast<float>(s)));
      h[static_cast<size_t>(f)] = from_bits(dt, to_bits(dt, static_cast<float>(gelu_erf(pre))));
    }
    double mean = 0.0;
    for (int64_t j = 0; j < N; ++j) {
      double s = (cs.bias ? b2d[static_cast<size_t>(j)] : 0.0) + rd[static_cast<size_t>(i * N + j)];
      for (int64_t f = 0; f < F; ++f) s += h[static_cast<size_t>(f)] * w2d[static_cast<size_t>(j * F + f)];
      row[static_cast<size_t>(j)] = s;
      mean += s;
    }
    mean /= static_cast<double>(N);
    double var = 0.0;
    for (double s : row) var += (s - mean) * (s - mean);
    var /= static_cast<double>(N);
    for (int64_t j = 0; j < N; ++j)
      ref[static_cast<size_t>(i * N + j)] =
          (row[static_cast<size_t>(j)] - mean) / std::sqrt(var + eps) * gamma[static_cast<size_t>(j)] +
          beta[static_cast<size_t>(j)];
  }

  // Both issue orders, each from fresh operands (two cases write Y over an input).
  for (const bool ordered : {true, false}) {
    SCOPED_TRACE(testing::Message() << "ordered=" << ordered);
    auto upload = [](DevMem& d, const void* src, size_t bytes) {
      ASSERT_EQ(cudaMemcpy(d.p, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    };
    DevMem dX(x.size() * 2), dW1(w1.size() * 2), dW2(w2.size() * 2), dB1(b1.size() * 2), dB2(b2.size() * 2),
        dR(r.size() * 2), dY(r.size() * 2), dGamma(gamma.size() * 4), dBeta(beta.size() * 4);
    upload(dX, x.data(), x.size() * 2);
    upload(dW1, w1.data(), w1.size() * 2);
    upload(dW2, w2.data(), w2.size() * 2);
    upload(dB1, b1.data(), b1.size() * 2);
    upload(dB2, b2.data(), b2.size() * 2);
    upload(dR, r.data(), r.size() * 2);
    if (cs.f32_params) {
      upload(dGamma, gamma.data(), gamma.size() * 4);
      upload(dBeta, beta.data(), beta.size() * 4);
    } else {
      upload(dGamma, gamma_h.data(), gamma_h.size() * 2);
      upload(dBeta, beta_h.data(), beta_h.size() * 2);
    }
    void* resid = cs.residual_is_x ? dX.p : dR.p;
    void* y = cs.out == Out::OverR ? resid : cs.out == Out::OverX ? dX.p : dY.p;
    if (cs.out == Out::Fresh) {
      ASSERT_EQ(cudaMemset(y, 0xFF, r.size() * 2), cudaSuccess);
    }

    FfnLnArgs a;
    a.dtype = dt;
    a.param_dtype = cs.f32_params ? DType::F32 : dt;
    a.X = dX.p, a.W1 = dW1.p, a.W2 = dW2.p, a.R = resid, a.Y = y;
    a.b1 = cs.bias ? dB1.p : nullptr, a.b2 = cs.bias ? dB2.p : nullptr;
    a.gamma = dGamma.p, a.beta = dBeta.p;
    a.M = M, a.N = N, a.F = F, a.eps = eps, a.ordered = ordered;
    ASSERT_EQ(sm90_ffn_ln_unsupported(a), nullptr);
    launch_sm90_ffn_ln(a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> out(r.size());
    ASSERT_EQ(cudaMemcpy(out.data(), y, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    rlx::test::expect_close_to_reference(dt, out, ref, N, dt == DType::F16 ? 6e-3 : 3e-2);
  }
}

TEST(FfnLnSm90, MatchesFloat64) {
  SKIP_WITHOUT_KERNEL();
  RLX_TRACE_SEED();
  const std::vector<Case> cases = {
      {300, 384, 1536, true, false, true, Out::OverX},  // MiniLM's FFN over its input, a partial row tile
      {1, 128, 64, false},                              // one row, one chunk, no bias
      {64, 128, 192},                  // half a row tile (the second warpgroup's rows all past M), 6 items
      {200, 256, 64, true, true},      // fewer items than ring slots, f32 gamma/beta
      {257, 256, 512, true, false, false, Out::OverR},  // Y written over R
      {130, 384, 4096, true, true},    // the largest F: 64 chunks, each CTA starting at its own
      {700, 384, 1536, true, false, true},  // six CTAs, residual X
  };
  for (DType dt : {DType::F16, DType::BF16})
    for (const Case& cs : cases) run_case(dt, cs);
}

// A BERT (hidden 384, FFN 1536, MiniLM's shapes; two layers) in f16 and bf16
// on CUDA, fusion on and off, against the CPU in f32: every pooled embedding
// within cosine 0.999, right padding varying per row. 200 rows are less than
// a wave of the kernel's CTAs: the minimum is lowered for the fused runs.
TEST(FfnLnSm90, BertLayersMatchCpu) {
  SKIP_WITHOUT_KERNEL();
  register_builtin_backends();
  const rlx::test::SmallBert b = rlx::test::small_bert(384, 12, 1536, 11, 3);
  const std::pair<const char*, const char*> settings[] = {{"1", "1"}, {"1", "0"}, {"0", "1"}};
  for (DType dt : {DType::F16, DType::BF16})
    for (const auto& [fuse, min_rows] : settings) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " RLX_CUDA_FUSE_FFN_LN=" << fuse
                                      << " RLX_CUDA_FFN_LN_MIN_ROWS=" << min_rows);
      ScopedEnv env("RLX_CUDA_FUSE_FFN_LN", fuse), env_rows("RLX_CUDA_FFN_LN_MIN_ROWS", min_rows);
      auto exe = rlx::test::compile_random_bert(b.graph, "cuda", dt, 3);
      const Tensor got = exe->run(b.inputs)[0];
      const std::string report = exe->dispatch_report();
      const bool fused = report.find("sm90 ffn (up + gelu-erf + down)") != std::string::npos;
      EXPECT_EQ(fused, std::string(fuse) == "1" && std::string(min_rows) == "1") << report;
      rlx::test::expect_rows_close(b.ref, got, b.cfg.hidden, 0.999);
    }
}

TEST(FfnLnSm90, RefusesWhatItCannotRun) {
  alignas(16) static char buf[64];
  FfnLnArgs a;
  a.X = a.W1 = a.W2 = a.R = a.gamma = a.beta = a.Y = buf;
  a.M = 64, a.N = 384, a.F = 1536;
  EXPECT_EQ(sm90_ffn_ln_unsupported(a), nullptr);
  FfnLnArgs f = a;
  f.N = 768;
  EXPECT_NE(sm90_ffn_ln_unsupported(f), nullptr);
  f = a, f.F = 1000;
  EXPECT_NE(sm90_ffn_ln_unsupported(f), nullptr);
  f = a, f.F = 8192;
  EXPECT_NE(sm90_ffn_ln_unsupported(f), nullptr);
  f = a, f.dtype = DType::F32;
  EXPECT_NE(sm90_ffn_ln_unsupported(f), nullptr);
  f = a, f.param_dtype = DType::BF16;
  EXPECT_NE(sm90_ffn_ln_unsupported(f), nullptr);
  f = a, f.W2 = buf + 2;
  EXPECT_NE(sm90_ffn_ln_unsupported(f), nullptr);
  f = a, f.gamma = nullptr;
  EXPECT_NE(sm90_ffn_ln_unsupported(f), nullptr);
  f = a, f.M = 0;
  EXPECT_NE(sm90_ffn_ln_unsupported(f), nullptr);
}

}  // namespace
