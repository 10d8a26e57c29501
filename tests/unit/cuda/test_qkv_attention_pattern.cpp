// Where the CUDA lowering runs an encoder's QKV projection and attention as
// one kernel (qkv_attention_pattern, lower_attention.cpp): the graph part of
// the decision, on graphs after the compile passes (QKV fusion, f16 policy).
// No GPU.
#include <gtest/gtest.h>

#include "rlx/backends/cuda/lowering.h"
#include "rlx/ir/builder.h"
#include "rlx/models/bert/bert.h"
#include "tests/unit/cuda/pattern_util.h"

using namespace rlx;

namespace {

// (projections matched, attentions) in `g` lowered at `precision`.
std::pair<int, int> matches(const Graph& g, DType precision = DType::F16) {
  return rlx::test::pattern_matches(g, precision, cuda::qkv_attention_pattern, {OpKind::Attention});
}

struct Spec {
  int64_t B = 4, L = 128, hidden = 384;
  int heads = 12;
  bool mask = true, causal = false, attention_output = false;
};

// Self-attention by hand: one projection to [B, L, 3·hidden], Q/K/V Narrows,
// an optional key mask [B, L].
Graph self_attention(const Spec& sp) {
  Graph g;
  auto x = input(g, "x", DType::F32, {sp.B, sp.L, sp.hidden});
  auto w = param(g, "w", DType::F32, {3 * sp.hidden, sp.hidden});
  auto b = param(g, "b", DType::F32, {3 * sp.hidden});
  auto qkv = matmul(x, w, MatMulAttrs{false, true}) + b;
  AttentionAttrs at;
  at.num_heads = at.num_kv_heads = sp.heads;
  at.head_dim = static_cast<int>(sp.hidden / sp.heads);
  Value mask;
  if (sp.mask) {
    mask = input(g, "mask", DType::F32, {sp.B, sp.L});
    at.mask = MaskKind::Custom;
  }
  if (sp.causal) at.mask = MaskKind::Causal;
  auto o = attention(narrow(qkv, -1, 0, sp.hidden), narrow(qkv, -1, sp.hidden, sp.hidden),
                     narrow(qkv, -1, 2 * sp.hidden, sp.hidden), at, sp.causal ? Value{} : mask);
  output("y", o + x);
  if (sp.attention_output) output("o", o);
  return g;
}

TEST(QkvAttentionPattern, EveryBertLayerMatches) {
  bert::BertConfig mini;
  mini.hidden = 384;
  mini.layers = 6;
  mini.heads = 12;
  mini.intermediate = 1536;
  mini.vocab_size = 1000;
  const SymbolBinding shape{{"B", 256}, {"L", 128}};
  EXPECT_EQ(matches(specialize(bert::build_graph(mini), shape)), std::make_pair(6, 6));
  bert::BertConfig base;  // D = 64
  base.layers = 2;
  base.vocab_size = 1000;
  EXPECT_EQ(matches(specialize(bert::build_graph(base), {{"B", 3}, {"L", 20}}), DType::BF16), std::make_pair(2, 2));
  // Symbolic shapes are decided per binding, when the executable is specialized.
  EXPECT_EQ(matches(bert::build_graph(mini)).first, 0);
}

TEST(QkvAttentionPattern, HandBuiltSelfAttentionMatches) {
  EXPECT_EQ(matches(self_attention({})), std::make_pair(1, 1));
  Spec s;
  s.mask = false;
  s.L = 1;
  EXPECT_EQ(matches(self_attention(s)), std::make_pair(1, 1));
}

TEST(QkvAttentionPattern, RefusedCases) {
  Spec s;
  s.L = 129;  // longer than a CTA's 128 rows
  EXPECT_EQ(matches(self_attention(s)).first, 0);
  s = {};
  s.hidden = 512, s.heads = 4;  // head_dim 128
  EXPECT_EQ(matches(self_attention(s)).first, 0);
  s = {};
  s.hidden = 96, s.heads = 3;  // 96 columns per projection: not a multiple of 64
  EXPECT_EQ(matches(self_attention(s)).first, 0);
  s = {};
  s.causal = true;  // only key masks
  EXPECT_EQ(matches(self_attention(s)).first, 0);
  s = {};
  s.attention_output = true;  // still fuses: the kernel writes the attention's output
  EXPECT_EQ(matches(self_attention(s)).first, 1);
  EXPECT_EQ(matches(self_attention({}), DType::F32).first, 0);  // the kernel is f16/bf16
}

}  // namespace
