// Where the CUDA lowering runs a post-LN encoder layer's FFN (up projection
// with GELU-erf, down projection, residual LayerNorm) as one kernel
// (ffn_ln_pattern, lower_ffn_ln.cpp): the graph part of the decision, on
// graphs after the compile passes (bias/activation fusion, f16 policy). No GPU.
#include <gtest/gtest.h>

#include "rlx/backends/cuda/lowering.h"
#include "rlx/ir/builder.h"
#include "rlx/models/bert/bert.h"
#include "tests/unit/cuda/pattern_util.h"

using namespace rlx;

namespace {

// (FFNs matched, residual LayerNorms) in `g` lowered at `precision`.
std::pair<int, int> matches(const Graph& g, DType precision = DType::F16) {
  return rlx::test::pattern_matches(g, precision, cuda::ffn_ln_pattern, {OpKind::FusedResidualLayerNorm});
}

struct Spec {
  int64_t M = 256, hidden = 384, ffn = 1536;
  bool erf = true, up_output = false, residual_is_x = true;
};

// LayerNorm(GELU(x·W1ᵀ + b1)·W2ᵀ + b2 + r) by hand, r = x or another input.
Graph ffn(const Spec& sp) {
  Graph g;
  auto x = input(g, "x", DType::F32, {sp.M, sp.hidden});
  auto w1 = param(g, "w1", DType::F32, {sp.ffn, sp.hidden});
  auto b1 = param(g, "b1", DType::F32, {sp.ffn});
  auto w2 = param(g, "w2", DType::F32, {sp.hidden, sp.ffn});
  auto b2 = param(g, "b2", DType::F32, {sp.hidden});
  auto gamma = param(g, "gamma", DType::F32, {sp.hidden});
  auto beta = param(g, "beta", DType::F32, {sp.hidden});
  auto pre = matmul(x, w1, MatMulAttrs{false, true}) + b1;
  auto h = sp.erf ? gelu(pre) : gelu_tanh(pre);
  auto r = sp.residual_is_x ? x : input(g, "r", DType::F32, {sp.M, sp.hidden});
  output("y", layer_norm(matmul(h, w2, MatMulAttrs{false, true}) + b2 + r, gamma, beta, 1e-12f));
  if (sp.up_output) output("h", h);
  return g;
}

TEST(FfnLnPattern, EveryBertLayerMatches) {
  bert::BertConfig mini;
  mini.hidden = 384;
  mini.layers = 6;
  mini.heads = 12;
  mini.intermediate = 1536;
  mini.vocab_size = 1000;
  const SymbolBinding shape{{"B", 256}, {"L", 128}};
  // Two residual norms a layer, and the embeddings' norm.
  EXPECT_EQ(matches(specialize(bert::build_graph(mini), shape)), std::make_pair(6, 13));
  EXPECT_EQ(matches(specialize(bert::build_graph(mini), shape), DType::BF16).first, 6);
  // Symbolic shapes are decided per binding, when the executable is specialized.
  EXPECT_EQ(matches(bert::build_graph(mini)).first, 0);
  bert::BertConfig base;  // hidden 768: the down projection's accumulators would not fit
  base.layers = 2;
  base.vocab_size = 1000;
  EXPECT_EQ(matches(specialize(bert::build_graph(base), {{"B", 3}, {"L", 20}})).first, 0);
}

TEST(FfnLnPattern, HandBuiltFfnMatches) {
  EXPECT_EQ(matches(ffn({})).first, 1);
  Spec s;
  s.residual_is_x = false;  // any residual, even one cast after the down projection
  EXPECT_EQ(matches(ffn(s)).first, 1);
  s = {};
  s.hidden = 128, s.ffn = 64, s.M = 1;
  EXPECT_EQ(matches(ffn(s)).first, 1);
}

TEST(FfnLnPattern, RefusedCases) {
  Spec s;
  s.erf = false;  // GELU-tanh: the kernel applies GELU-erf
  EXPECT_EQ(matches(ffn(s)).first, 0);
  s = {};
  s.up_output = true;  // the intermediate is read elsewhere
  EXPECT_EQ(matches(ffn(s)).first, 0);
  s = {};
  s.ffn = 1000;  // not a multiple of 64
  EXPECT_EQ(matches(ffn(s)).first, 0);
  s = {};
  s.ffn = 3072;  // past the GEMM + LayerNorm kernel's K
  EXPECT_EQ(matches(ffn(s)).first, 0);
  s = {};
  s.hidden = 320;  // not 128, 256 or 384
  EXPECT_EQ(matches(ffn(s)).first, 0);
  EXPECT_EQ(matches(ffn({}), DType::F32).first, 0);  // the kernel is f16/bf16
}

}  // namespace
