// The fused QKV projection + attention kernel (kernels/qkv_attention_sm90.h)
// against a float64 reference, and the lowering that uses it for an
// encoder's self-attention (lower_attention.cpp) against the CPU backend.
//
// X, W and bias hold random values rounded to the dtype, W scaled by 1/√K so
// Q, K and V are of order one. The reference projects in float64, rounds Q,
// K and V to the dtype (as the kernel stages them), then takes softmax(scale
// · Q·Kᵀ) · V over the visible keys (a row that sees none is zeros). Shapes
// cover head_dim 32 and 64, MiniLM's and BERT-base's layers, sequences of
// 65, 100 and 128 tokens (one a CTA; the last CTA's rows past the tensor)
// and of 1, 16, 24, 37 and 64 (packs of 128 / L, the last one short;
// sequences that split a warp's 16 rows), K shorter than a slab and ending
// in a partial one, Q/K/V in another order in a W with spare rows, no bias,
// prefix and scattered key masks, and a sequence whose keys are all hidden.
// Tolerance |got − ref| ≤ tol·(1 + |ref|),
// tol = 8e-3 (f16), 3e-2 (bf16): P is rounded to the dtype before P·V.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/cuda/kernels/qkv_attention_sm90.h"
#include "rlx/ir/builder.h"
#include "rlx/models/bert/bert.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/bert_gpu_util.h"
#include "tests/gpu/graph_run_util.h"
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

enum class Mask { None, Prefix, Scattered };

struct Case {
  int64_t B;
  int L, K, H, D;
  Mask mask = Mask::None;
  bool bias = true, permuted = false;
};

void run_case(DType dt, const Case& cs) {
  SCOPED_TRACE(testing::Message() << dtype_name(dt) << " B=" << cs.B << " L=" << cs.L << " K=" << cs.K << " H="
                                  << cs.H << " D=" << cs.D << " mask=" << static_cast<int>(cs.mask)
                                  << " bias=" << cs.bias << " permuted=" << cs.permuted);
  const int64_t B = cs.B, L = cs.L, K = cs.K, HD = int64_t{cs.H} * cs.D, M = B * L;
  // Q, K and V rows of W: in order, or V, Q, K after 64 spare rows (and 64 more at the end).
  const int64_t q_row = cs.permuted ? 64 + HD : 0, k_row = cs.permuted ? 64 + 2 * HD : HD,
                v_row = cs.permuted ? 64 : 2 * HD, w_rows = cs.permuted ? 3 * HD + 128 : 3 * HD;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float ws = 1.0f / std::sqrt(static_cast<float>(K));
  std::vector<uint16_t> x(static_cast<size_t>(M * K)), w(static_cast<size_t>(w_rows * K)),
      bias(static_cast<size_t>(w_rows));
  for (auto& v : x) v = to_bits(dt, u(rng()));
  for (auto& v : w) v = to_bits(dt, ws * u(rng()));
  for (auto& v : bias) v = to_bits(dt, 0.5f * u(rng()));
  std::vector<uint8_t> mask(static_cast<size_t>(M), 1);
  std::uniform_int_distribution<int> coin(0, 3);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < L; ++j) {
      uint8_t& m = mask[static_cast<size_t>(b * L + j)];
      if (cs.mask == Mask::Prefix) m = j < L - (b * 7) % L;  // row 0 keeps all
      if (cs.mask == Mask::Scattered) m = b == 1 ? 0 : coin(rng()) != 0;  // row 1 hides every key
    }

  // Reference: Q, K, V [M, HD] rounded to the dtype, then attention per (b, h).
  std::vector<double> wd(w.size()), xd(x.size());
  for (size_t i = 0; i < w.size(); ++i) wd[i] = from_bits(dt, w[i]);
  for (size_t i = 0; i < x.size(); ++i) xd[i] = from_bits(dt, x[i]);
  auto project = [&](int64_t row0) {
    std::vector<double> out(static_cast<size_t>(M * HD));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t c = 0; c < HD; ++c) {
        double s = cs.bias ? from_bits(dt, bias[static_cast<size_t>(row0 + c)]) : 0.0;
        const double* wr = &wd[static_cast<size_t>((row0 + c) * K)];
        const double* xr = &xd[static_cast<size_t>(i * K)];
        for (int64_t k = 0; k < K; ++k) s += xr[k] * wr[k];
        out[static_cast<size_t>(i * HD + c)] = from_bits(dt, to_bits(dt, static_cast<float>(s)));
      }
    return out;
  };
  const std::vector<double> q = project(q_row), k = project(k_row), v = project(v_row);
  const double scale = 1.0 / std::sqrt(static_cast<double>(cs.D));
  std::vector<double> ref(static_cast<size_t>(M * HD), 0.0), p(static_cast<size_t>(L));
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < cs.H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; ++j) {
          p[static_cast<size_t>(j)] = -INFINITY;
          if (cs.mask != Mask::None && !mask[static_cast<size_t>(b * L + j)]) continue;
          double s = 0.0;
          for (int d = 0; d < cs.D; ++d)
            s += q[static_cast<size_t>((b * L + i) * HD + h * cs.D + d)] *
                 k[static_cast<size_t>((b * L + j) * HD + h * cs.D + d)];
          p[static_cast<size_t>(j)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        if (mx == -INFINITY) continue;  // no visible key: zeros
        double sum = 0.0;
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (int d = 0; d < cs.D; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j < L; ++j)
            o += p[static_cast<size_t>(j)] * v[static_cast<size_t>((b * L + j) * HD + h * cs.D + d)];
          ref[static_cast<size_t>((b * L + i) * HD + h * cs.D + d)] = o / sum;
        }
      }

  DevMem dX(x.size() * 2), dW(w.size() * 2), dBias(bias.size() * 2), dMask(mask.size()), dOut(ref.size() * 2);
  ASSERT_EQ(cudaMemcpy(dX.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dW.p, w.data(), w.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dBias.p, bias.data(), bias.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dMask.p, mask.data(), mask.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dOut.p, 0xFF, ref.size() * 2), cudaSuccess);  // NaN: every element must be written

  QkvAttentionArgs a;
  a.dtype = dt;
  a.X = dX.p, a.W = dW.p, a.bias = cs.bias ? dBias.p : nullptr, a.w_rows = w_rows;
  a.q_row = q_row, a.k_row = k_row, a.v_row = v_row;
  a.key_mask = cs.mask != Mask::None ? static_cast<const uint8_t*>(dMask.p) : nullptr;
  a.out = dOut.p;
  a.B = B, a.L = cs.L, a.K = cs.K, a.H = cs.H, a.D = cs.D;
  a.scale = static_cast<float>(scale);
  ASSERT_EQ(sm90_qkv_attention_unsupported(a), nullptr);
  launch_sm90_qkv_attention(a, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> out(ref.size());
  ASSERT_EQ(cudaMemcpy(out.data(), dOut.p, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  const double tol = dt == DType::F16 ? 8e-3 : 3e-2;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double want = ref[i], got = from_bits(dt, out[i]);
    if (!(std::fabs(got - want) <= tol * (1.0 + std::fabs(want))) && ++bad <= 5)
      ADD_FAILURE() << "out[" << static_cast<int64_t>(i) / HD << ", " << static_cast<int64_t>(i) % HD << "] = " << got
                    << ", want " << want;
  }
  EXPECT_EQ(bad, 0) << bad << " bad values";
}

TEST(QkvAttentionSm90, MatchesFloat64) {
  SKIP_WITHOUT_KERNEL();
  RLX_TRACE_SEED();
  const std::vector<Case> cases = {
      {3, 128, 384, 12, 32},                                   // MiniLM's layer
      {2, 128, 768, 12, 64, Mask::Prefix},                     // BERT-base's, right padding
      {5, 37, 200, 2, 32, Mask::Scattered, true, true},        // odd length, partial slab, permuted W
      {4, 1, 64, 1, 64, Mask::None, false},                    // one token, one slab, no bias
      {3, 64, 40, 4, 32, Mask::Prefix},                        // one key tile; K shorter than a slab
      {3, 65, 136, 2, 64, Mask::Scattered},                    // two key tiles, the second of one key
      {2, 100, 384, 6, 64, Mask::Prefix, true, true},
      {40, 16, 384, 12, 32, Mask::Prefix},                     // packs of 8 sequences
      {7, 24, 128, 2, 64, Mask::Scattered},                    // packs of 5; sequences split warps' rows
  };
  for (DType dt : {DType::F16, DType::BF16})
    for (const Case& cs : cases) run_case(dt, cs);
}

// A BERT (hidden 384 in 12 heads of 32, and 256 in 4 heads of 64) in f16 and
// bf16 on CUDA, fusion on and off, against the CPU in f32: every pooled
// embedding within cosine 0.999 (bf16: 0.995), right padding varying per
// row, 77 tokens (a sequence per CTA) and 20 (a pack of five). The fused
// kernel runs once per layer (the CTA minimum lowered: five sequences are
// few); off, the projection and attention kernels run.
TEST(QkvAttentionSm90, BertLayersMatchCpu) {
  SKIP_WITHOUT_KERNEL();
  register_builtin_backends();
  ScopedEnv env_ctas("RLX_CUDA_QKV_ATTENTION_MIN_CTAS", "1");
  for (const auto& [hidden, heads] : {std::pair{384, 12}, std::pair{256, 4}})
    for (const int64_t L : {77, 20}) {
      bert::BertConfig cfg;
      cfg.hidden = hidden;
      cfg.heads = heads;
      cfg.layers = 2;
      cfg.intermediate = 512;
      cfg.vocab_size = 1000;
      const Graph g = bert::build_graph(cfg);
      const int64_t B = 5;
      const std::vector<Tensor> in =
          rlx::test::bert_inputs(B, L, 1000, 11, [&](int64_t b) { return L - 9 * b % L; });
      const Tensor ref = rlx::test::compile_random_bert(g, "cpu", DType::F32, 3)->run(in)[0];
      for (const char* fuse : {"1", "0"}) {
        SCOPED_TRACE(testing::Message() << "hidden " << hidden << " L=" << L
                                        << " RLX_CUDA_FUSE_QKV_ATTENTION=" << fuse);
        ScopedEnv env("RLX_CUDA_FUSE_QKV_ATTENTION", fuse);
        for (DType dt : {DType::F16, DType::BF16}) {
          auto exe = rlx::test::compile_random_bert(g, "cuda", dt, 3);
          const Tensor got = exe->run(in)[0];
          const std::string report = exe->dispatch_report();
          const bool fused = report.find("sm90 qkv projection + attention") != std::string::npos;
          EXPECT_EQ(fused, std::string(fuse) == "1") << report;
          rlx::test::expect_rows_close(ref, got, cfg.hidden, dt == DType::F16 ? 0.999 : 0.995);
        }
      }
    }
}

// Self-attention built by hand: Q, K, V as Narrows of one projection [B, L,
// 3·H·D], no mask; and the same at L = 129, which the kernel cannot take
// (the projection and attention kernels run). Against the CPU in f32. Six
// CTAs fuse only with the CTA minimum lowered ("1"), not by default ("0").
TEST(QkvAttentionSm90, HandBuiltGraphMatchesCpu) {
  SKIP_WITHOUT_KERNEL();
  RLX_TRACE_SEED();
  register_builtin_backends();
  for (const int64_t L : {50, 129}) {
    const int64_t B = 3, K = 96, H = 4, D = 32, HD = H * D;
    Graph g;
    auto x = input(g, "x", DType::F32, {B, L, K});
    auto w = param(g, "w", DType::F32, {3 * HD, K});
    auto b = param(g, "b", DType::F32, {3 * HD});
    auto qkv = matmul(x, w, MatMulAttrs{false, true}) + b;
    AttentionAttrs at;
    at.num_heads = at.num_kv_heads = static_cast<int>(H);
    at.head_dim = static_cast<int>(D);
    auto o = attention(narrow(qkv, -1, 0, HD), narrow(qkv, -1, HD, HD), narrow(qkv, -1, 2 * HD, HD), at);
    output("y", o);
    output("z", o + o);  // a second reader of the attention's output
    auto rnd = [](std::vector<int64_t> shape, float scale) {
      Tensor t = Tensor::empty(DType::F32, std::move(shape));
      std::uniform_real_distribution<float> u(-scale, scale);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng());
      return t;
    };
    const Tensor tx = rnd({B, L, K}, 1.0f), tw = rnd({3 * HD, K}, 0.2f), tb = rnd({3 * HD}, 0.5f);
    const std::vector<std::pair<std::string, Tensor>> params = {{"w", tw}, {"b", tb}};
    const std::vector<Tensor> ref = rlx::test::run_graph(g, "cpu", DType::F32, params, {tx});
    const std::pair<const char*, const char*> settings[] = {{"1", "1"}, {"1", "0"}, {"0", "1"}};
    for (const auto& [fuse, min_ctas] : settings)
      for (DType dt : {DType::F16, DType::BF16}) {
        SCOPED_TRACE(testing::Message() << "L=" << L << " RLX_CUDA_FUSE_QKV_ATTENTION=" << fuse
                                        << " RLX_CUDA_QKV_ATTENTION_MIN_CTAS=" << min_ctas << " " << dtype_name(dt));
        ScopedEnv env("RLX_CUDA_FUSE_QKV_ATTENTION", fuse), env_ctas("RLX_CUDA_QKV_ATTENTION_MIN_CTAS", min_ctas);
        std::string report;
        const std::vector<Tensor> got = rlx::test::run_graph(g, "cuda", dt, params, {tx}, &report);
        const bool fused = report.find("sm90 qkv projection + attention") != std::string::npos;
        EXPECT_EQ(fused, std::string(fuse) == "1" && std::string(min_ctas) == "1" && L <= 128) << report;
        rlx::test::expect_outputs_close(ref, got, dt == DType::F16 ? 1e-2 : 5e-2);
      }
  }
}

TEST(QkvAttentionSm90, RefusesWhatItCannotRun) {
  alignas(16) static char buf[64];
  QkvAttentionArgs a;
  a.X = a.W = a.out = buf;
  a.w_rows = 3 * 384;
  a.q_row = 0, a.k_row = 384, a.v_row = 768;
  a.B = 2, a.L = 128, a.K = 384, a.H = 12, a.D = 32;
  EXPECT_EQ(sm90_qkv_attention_unsupported(a), nullptr);
  QkvAttentionArgs f = a;
  f.L = 129;
  EXPECT_NE(sm90_qkv_attention_unsupported(f), nullptr);
  f = a, f.D = 128, f.H = 3;
  EXPECT_NE(sm90_qkv_attention_unsupported(f), nullptr);
  f = a, f.H = 3;  // 96 columns: not a multiple of 64
  EXPECT_NE(sm90_qkv_attention_unsupported(f), nullptr);
  f = a, f.dtype = DType::F32;
  EXPECT_NE(sm90_qkv_attention_unsupported(f), nullptr);
  f = a, f.K = 380;
  EXPECT_NE(sm90_qkv_attention_unsupported(f), nullptr);
  f = a, f.v_row = 800;  // past W
  EXPECT_NE(sm90_qkv_attention_unsupported(f), nullptr);
  f = a, f.X = buf + 2;
  EXPECT_NE(sm90_qkv_attention_unsupported(f), nullptr);
  f = a, f.scale = 0.0f;
  EXPECT_NE(sm90_qkv_attention_unsupported(f), nullptr);
}

}  // namespace
