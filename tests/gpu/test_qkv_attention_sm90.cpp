// QKV projection + attention in one Hopper kernel
// (kernels/qkv_attention_sm90.h) against a float64 reference, and the
// lowering that runs an encoder's projection and attention as that kernel
// (lower_attention.cpp) against the CPU backend.
//
// X, W and bias hold random values rounded to the dtype; the reference rounds
// Q, K and V to the dtype as the kernel (and the unfused GEMM) does, then
// takes the softmax in float64: keys of the query's own sequence that the key
// mask keeps, a row with none gives zeros. Tolerance |got − ref| ≤
// tol·(1 + |ref|), tol = 4e-3 (f16), 2.5e-2 (bf16): the kernel rounds each
// softmax numerator (and its exponent argument) to the dtype.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rlx/backends/cuda/kernels/qkv_attention_sm90.h"
#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/models/bert/bert.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
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

#define SKIP_WITHOUT_KERNEL() RLX_SKIP_WITHOUT_SM90_KERNEL(sm90_qkv_attention_available)

int sm_count() {
  int n = 0;
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
  return n;
}

struct Case {
  int64_t B, L;
  int H;
  int64_t K;
  bool mask = true, bias = true, bias_f32 = false;
  int sms = 0;  // grid sized for this many SMs (0: the device's)
};

void run_case(DType dt, const Case& cs) {
  SCOPED_TRACE(testing::Message() << dtype_name(dt) << " B=" << cs.B << " L=" << cs.L << " H=" << cs.H
                                  << " K=" << cs.K << " mask=" << cs.mask << " bias=" << cs.bias
                                  << " f32 bias=" << cs.bias_f32 << " sms=" << cs.sms);
  const int64_t B = cs.B, L = cs.L, K = cs.K, M = B * L, D = 32, HD = cs.H * D, N = 3 * HD;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(M * K)), w(static_cast<size_t>(N * K)), bias_h(static_cast<size_t>(N));
  std::vector<float> bias_f(static_cast<size_t>(N));
  for (auto& v : x) v = to_bits(dt, u(rng()));
  for (auto& v : w) v = to_bits(dt, 0.2f * u(rng()));
  for (int64_t j = 0; j < N; ++j) {
    bias_h[static_cast<size_t>(j)] = to_bits(dt, 0.5f * u(rng()));
    bias_f[static_cast<size_t>(j)] = static_cast<float>(from_bits(dt, bias_h[static_cast<size_t>(j)]));
  }
  // Key mask: each sequence keeps a prefix of random length (some none, some all), and
  // one sequence a scattered set.
  std::vector<uint8_t> mask(static_cast<size_t>(M), 1);
  if (cs.mask) {
    std::uniform_int_distribution<int64_t> len(0, L);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = b == 0 ? 0 : b == 1 ? L : len(rng());
      for (int64_t l = 0; l < L; ++l) mask[static_cast<size_t>(b * L + l)] = l < n ? 1 : 0;
    }
    if (B > 2)
      for (int64_t l = 0; l < L; ++l) mask[static_cast<size_t>(2 * L + l)] = (l % 3 != 1) ? 1 : 0;
  }

  // Reference: QKV rounded to the dtype, then attention in float64.
  std::vector<double> qkv(static_cast<size_t>(M * N));
  {
    std::vector<double> xd(x.size()), wd(w.size());
    for (size_t i = 0; i < x.size(); ++i) xd[i] = from_bits(dt, x[i]);
    for (size_t i = 0; i < w.size(); ++i) wd[i] = from_bits(dt, w[i]);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = cs.bias ? bias_f[static_cast<size_t>(j)] : 0.0;
        const double* xr = &xd[static_cast<size_t>(i * K)];
        const double* wr = &wd[static_cast<size_t>(j * K)];
        for (int64_t k = 0; k < K; ++k) s += xr[k] * wr[k];
        qkv[static_cast<size_t>(i * N + j)] = from_bits(dt, to_bits(dt, static_cast<float>(s)));
      }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> ref(static_cast<size_t>(M * HD), 0.0), p(static_cast<size_t>(L));
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < cs.H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        const double* q = &qkv[static_cast<size_t>((b * L + i) * N + h * D)];
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; ++j) {
          p[static_cast<size_t>(j)] = -INFINITY;
          if (!mask[static_cast<size_t>(b * L + j)]) continue;
          const double* k = &qkv[static_cast<size_t>((b * L + j) * N + HD + h * D)];
          double s = 0.0;
          for (int64_t d = 0; d < D; ++d) s += q[d] * k[d];
          p[static_cast<size_t>(j)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        if (mx == -INFINITY) continue;
        double sum = 0.0;
        for (double& v : p) sum += (v = std::exp(v - mx));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j < L; ++j)
            o += p[static_cast<size_t>(j)] * qkv[static_cast<size_t>((b * L + j) * N + 2 * HD + h * D + d)];
          ref[static_cast<size_t>((b * L + i) * HD + h * D + d)] = o / sum;
        }
      }

  DevMem dX(x.size() * 2), dW(w.size() * 2), dBias(bias_f.size() * 4), dMask(mask.size()), dOut(ref.size() * 2);
  ASSERT_EQ(cudaMemcpy(dX.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dW.p, w.data(), w.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  if (cs.bias_f32) {
    ASSERT_EQ(cudaMemcpy(dBias.p, bias_f.data(), bias_f.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  } else {
    ASSERT_EQ(cudaMemcpy(dBias.p, bias_h.data(), bias_h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ASSERT_EQ(cudaMemcpy(dMask.p, mask.data(), mask.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dOut.p, 0xFF, ref.size() * 2), cudaSuccess);  // NaN: every element must be written

  QkvAttentionArgs a;
  a.dtype = dt;
  a.X = dX.p;
  a.W = dW.p;
  a.bias = cs.bias ? dBias.p : nullptr;
  a.bias_f32 = cs.bias_f32;
  a.key_mask = cs.mask ? static_cast<const uint8_t*>(dMask.p) : nullptr;
  a.out = dOut.p;
  a.B = B, a.L = L, a.K = K, a.H = cs.H, a.D = 32;
  a.scale = static_cast<float>(scale);
  ASSERT_EQ(sm90_qkv_attention_unsupported(a), nullptr);
  launch_sm90_qkv_attention(a, cs.sms > 0 ? cs.sms : sm_count(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> out(ref.size());
  ASSERT_EQ(cudaMemcpy(out.data(), dOut.p, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  const double tol = dt == DType::F16 ? 4e-3 : 2.5e-2;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double want = ref[i], got = from_bits(dt, out[i]);
    if (!(std::fabs(got - want) <= tol * (1.0 + std::fabs(want))) && ++bad <= 5)
      ADD_FAILURE() << "out[token " << static_cast<int64_t>(i) / HD << ", " << static_cast<int64_t>(i) % HD
                    << "] = " << got << ", want " << want;
  }
  EXPECT_EQ(bad, 0) << bad << " bad values";
}

TEST(QkvAttentionSm90, MatchesFloat64) {
  SKIP_WITHOUT_KERNEL();
  RLX_TRACE_SEED();
  const std::vector<Case> cases = {
      {40, 128, 12, 384},                         // MiniLM's layer: 12 heads, 128-token sequences
      {70, 128, 2, 384, true, true, true},        // more tiles than CTAs per head; f32 bias
      {30, 128, 4, 384, true, true, false, 8},    // a grid for 8 SMs: two CTAs per head, 15 tiles each
      {7, 40, 3, 200, false},                     // 3 sequences per tile, rows past a tile; K ends mid-slab
      {5, 100, 4, 384},                           // one sequence per tile of 100 rows
      {3, 128, 12, 512, true, false},             // the largest K (8 slabs > 4 stages), no bias
      {300, 1, 2, 64},                            // one token per sequence: 128 sequences per tile
      {50, 8, 1, 96, true, true, true},           // a warp's rows span two sequences
      {1, 16, 12, 384},                           // one short sequence (1 × 16)
  };
  for (DType dt : {DType::F16, DType::BF16})
    for (const Case& cs : cases) run_case(dt, cs);
}

TEST(QkvAttentionSm90, RefusesWhatItCannotRun) {
  alignas(16) static char buf[64];
  QkvAttentionArgs a;
  a.X = a.W = a.out = buf;
  a.B = 2, a.L = 128, a.K = 384, a.H = 12, a.D = 32, a.scale = 0.17f;
  EXPECT_EQ(sm90_qkv_attention_unsupported(a), nullptr);
  auto refused = [&](auto&& change) {
    QkvAttentionArgs b = a;
    change(b);
    return sm90_qkv_attention_unsupported(b) != nullptr;
  };
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) { b.dtype = DType::F32; }));
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) { b.D = 64; }));
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) { b.L = 129; }));
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) { b.K = 520; }));
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) { b.K = 100; }));
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) { b.scale = 0.0f; }));
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) { b.X = buf + 2; }));
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) { b.bias = buf + 1; }));
  EXPECT_TRUE(refused([](QkvAttentionArgs& b) {
    b.bias = buf + 2;
    b.bias_f32 = true;
  }));
}

// A BERT with MiniLM's head shape (hidden 384, 12 heads of 32) in f16 and
// bf16 on CUDA, the fusion on and off, against the CPU in f32: every pooled
// embedding within cosine 0.999, right padding varying per row (one row with
// a single token). L = 40: three sequences per tile. Also below the knob's
// minimum row count, which keeps the two kernels.
TEST(QkvAttentionSm90, BertLayersMatchCpu) {
  SKIP_WITHOUT_KERNEL();
  register_builtin_backends();
  bert::BertConfig cfg;
  cfg.hidden = 384;
  cfg.heads = 12;
  cfg.layers = 2;
  cfg.intermediate = 512;
  cfg.vocab_size = 1000;
  const Graph g = bert::build_graph(cfg);
  const int64_t B = 7, L = 40;
  const std::vector<Tensor> in =
      rlx::test::bert_inputs(B, L, 1000, 13, [&](int64_t b) { return b == B - 1 ? 1 : L - 5 * b; });
  const Tensor ref = rlx::test::compile_random_bert(g, "cpu", DType::F32, 5)->run(in)[0];
  // 280 rows: fused unless the minimum row count is above that.
  const std::pair<const char*, const char*> settings[] = {{"1", "0"}, {"0", "0"}, {"1", "1000"}};
  for (DType dt : {DType::F16, DType::BF16})
    for (const auto& [fuse, min_rows] : settings) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " RLX_CUDA_FUSE_QKV_ATTENTION=" << fuse
                                      << " RLX_CUDA_QKV_ATTENTION_MIN_ROWS=" << min_rows);
      ScopedEnv env("RLX_CUDA_FUSE_QKV_ATTENTION", fuse), env_rows("RLX_CUDA_QKV_ATTENTION_MIN_ROWS", min_rows);
      auto exe = rlx::test::compile_random_bert(g, "cuda", dt, 5);
      exe->run(in);
      const Tensor got = exe->run(in)[0];  // a replay, where graphs are on
      const std::string report = exe->dispatch_report();
      const bool fused = report.find("sm90 qkv projection + attention") != std::string::npos;
      EXPECT_EQ(fused, std::string(fuse) == "1" && std::string(min_rows) == "0") << report;
      rlx::test::expect_rows_close(ref, got, cfg.hidden, 0.999);
    }
}

// The graph form the kernel replaces, with the layer input read again after
// the attention (its block must stay live until the fused kernel has run)
// and a mask given as f32: CUDA (fused) against the CPU, element by element.
TEST(QkvAttentionSm90, LoweringKeepsTheInputLiveAndMatchesCpu) {
  SKIP_WITHOUT_KERNEL();
  RLX_TRACE_SEED();
  register_builtin_backends();
  const int64_t B = 9, L = 64, K = 384, H = 12, HD = H * 32;
  Graph g;
  auto x0 = input(g, "x", DType::F32, {B, L, K});
  auto m = input(g, "mask", DType::F32, {B, L});
  auto w = param(g, "w", DType::F32, {3 * HD, K});
  auto bias = param(g, "b", DType::F32, {3 * HD});
  auto x = x0 * scalar(g, 2.0f);  // computed in the program, so its block is planned
  auto qkv = matmul(x, w, MatMulAttrs{false, true}) + bias;
  AttentionAttrs at;
  at.num_heads = at.num_kv_heads = static_cast<int>(H);
  at.head_dim = 32;
  at.mask = MaskKind::Custom;
  auto ctx = attention(narrow(qkv, 2, 0, HD), narrow(qkv, 2, HD, HD), narrow(qkv, 2, 2 * HD, HD), at, m);
  output("y", ctx + x);
  auto rnd = [](std::vector<int64_t> shape, float lo, float hi) {
    Tensor t = Tensor::empty(DType::F32, std::move(shape));
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_f32(f32_to_bf16(u(rng())));
    return t;
  };
  const Tensor tx = rnd({B, L, K}, -0.5f, 0.5f), tw = rnd({3 * HD, K}, -0.1f, 0.1f), tb = rnd({3 * HD}, -0.5f, 0.5f);
  Tensor tm = Tensor::empty(DType::F32, {B, L});
  for (int64_t i = 0; i < B * L; ++i) tm.data<float>()[i] = (i % L) < L - 7 * (i / L) ? 1.0f : 0.0f;
  auto run = [&](const std::string& device, DType precision, std::string* report) {
    Session s(device);
    CompileOptions o;
    o.precision = precision;
    auto exe = s.compile(g, o);
    exe->set_param("w", tw);
    exe->set_param("b", tb);
    Tensor out = exe->run({tx, tm})[0];
    if (report) *report = exe->dispatch_report();
    return out.dtype() == DType::F32 ? out : out.to(DType::F32);
  };
  const Tensor ref = run("cpu", DType::F32, nullptr);
  ScopedEnv fuse("RLX_CUDA_FUSE_QKV_ATTENTION", "1");
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::string report;
    const Tensor got = run("cuda", dt, &report);
    EXPECT_NE(report.find("sm90 qkv projection + attention"), std::string::npos) << report;
    const double tol = dt == DType::F16 ? 1e-2 : 5e-2;
    int64_t bad = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const double want = ref.data<float>()[i], v = got.data<float>()[i];
      if (!(std::fabs(v - want) <= tol * (1.0 + std::fabs(want))) && ++bad <= 5)
        ADD_FAILURE() << "y[" << i << "] = " << v << ", want " << want;
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
