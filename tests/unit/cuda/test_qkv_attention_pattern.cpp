// Where the CUDA lowering runs an encoder's QKV projection and attention as
// one kernel (qkv_attention_projection, lower_attention.cpp): the graph part
// of the decision, on graphs after the compile passes (fusion, precision
// policy). No GPU.
#include <gtest/gtest.h>

#include "rlx/backends/cuda/lowering.h"
#include "rlx/ir/builder.h"
#include "rlx/models/bert/bert.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"

using namespace rlx;

namespace {

struct Spec {
  int64_t B = 4, L = 128, K = 384;
  int heads = 12, kv_heads = 12, head_dim = 32;
  MaskKind mask = MaskKind::Custom;
  DType precision = DType::F16;
  bool qkv_output = false;  // the projection is also a graph output
  bool v_output = false;    // the V narrow is also a graph output
  bool gelu = false;        // an activation on the projection
  float softcap = 0.0f;
};

// How many attentions of the lowered graph take the fused form, and how many there are.
std::pair<int, int> fused_attentions(const Graph& g, DType precision) {
  register_builtin_backends();
  CompileOptions o;
  o.precision = precision;
  const Graph lowered = Session("cpu").lower(g, o);
  const auto users = lowered.users();
  int attentions = 0, hits = 0;
  for (NodeId i = 0; i < lowered.size(); ++i) {
    if (lowered.node(i).op != OpKind::Attention) continue;
    ++attentions;
    const NodeId p = cuda::qkv_attention_projection(lowered, users, i);
    if (p < 0) continue;
    EXPECT_EQ(lowered.node(p).op, OpKind::FusedMatMulBiasAct);
    ++hits;
  }
  return {hits, attentions};
}

bool fuses(const Spec& sp) {
  const int64_t hd = int64_t{sp.heads} * sp.head_dim, kvd = int64_t{sp.kv_heads} * sp.head_dim;
  Graph g;
  auto x = input(g, "x", DType::F32, {sp.B, sp.L, sp.K});
  auto m = input(g, "mask", DType::I32, {sp.B, sp.L});
  auto w = param(g, "w", DType::F32, {hd + 2 * kvd, sp.K});
  auto b = param(g, "b", DType::F32, {hd + 2 * kvd});
  Value qkv = matmul(x, w, MatMulAttrs{false, true}) + b;
  if (sp.gelu) qkv = gelu(qkv);
  AttentionAttrs a;
  a.num_heads = sp.heads;
  a.num_kv_heads = sp.kv_heads;
  a.head_dim = sp.head_dim;
  a.mask = sp.mask;
  a.softcap = sp.softcap;
  Value v = narrow(qkv, 2, hd + kvd, kvd);
  Value ctx = attention(narrow(qkv, 2, 0, hd), narrow(qkv, 2, hd, kvd), v, a,
                        sp.mask == MaskKind::Custom ? m : Value{});
  output("y", ctx);
  if (sp.qkv_output) output("qkv", qkv);
  if (sp.v_output) output("v", v);
  const auto [hits, attentions] = fused_attentions(g, sp.precision);
  EXPECT_EQ(attentions, 1);
  return hits == 1;
}

TEST(QkvAttentionPattern, MiniLmLayerFuses) { EXPECT_TRUE(fuses({})); }

TEST(QkvAttentionPattern, ShortSequencesNoMaskAndBF16Fuse) {
  Spec s;
  s.L = 40;
  s.mask = MaskKind::None;
  s.precision = DType::BF16;
  EXPECT_TRUE(fuses(s));
  s = {};
  s.L = 1;
  s.K = 64;
  EXPECT_TRUE(fuses(s));
}

TEST(QkvAttentionPattern, RefusedCases) {
  const auto refused = [](auto&& change, const char* what) {
    Spec s;
    change(s);
    EXPECT_FALSE(fuses(s)) << what;
  };
  refused([](Spec& s) { s.head_dim = 64; }, "head dim 64");
  refused([](Spec& s) { s.L = 129; }, "sequences past 128 tokens");
  refused([](Spec& s) { s.K = 520; }, "K past 512");
  refused([](Spec& s) { s.K = 100; }, "K not a multiple of 8");
  refused([](Spec& s) { s.mask = MaskKind::Causal; }, "a causal mask");
  refused([](Spec& s) { s.kv_heads = 4; }, "grouped KV heads");
  refused([](Spec& s) { s.precision = DType::F32; }, "f32");
  refused([](Spec& s) { s.qkv_output = true; }, "the projection is read elsewhere");
  refused([](Spec& s) { s.v_output = true; }, "a narrow is read elsewhere");
  refused([](Spec& s) { s.gelu = true; }, "an activation on the projection");
  refused([](Spec& s) { s.softcap = 30.0f; }, "a soft cap");
}

// Every layer of a BERT with MiniLM's heads takes the fused form once its
// shapes are bound (as a compile specializes them); BERT-base's (head dim 64)
// none, nor MiniLM's past 128 tokens.
TEST(QkvAttentionPattern, BertLayers) {
  bert::BertConfig mini;
  mini.hidden = 384;
  mini.heads = 12;
  mini.layers = 3;
  mini.intermediate = 1536;
  mini.vocab_size = 1000;
  const Graph gm = bert::build_graph(mini);
  EXPECT_EQ(fused_attentions(specialize(gm, {{"B", 8}, {"L", 64}}), DType::F16), (std::pair<int, int>{3, 3}));
  EXPECT_EQ(fused_attentions(specialize(gm, {{"B", 8}, {"L", 256}}), DType::F16), (std::pair<int, int>{0, 3}));
  bert::BertConfig base;
  base.layers = 2;
  base.vocab_size = 1000;
  const Graph gb = specialize(bert::build_graph(base), {{"B", 8}, {"L", 64}});
  EXPECT_EQ(fused_attentions(gb, DType::F16), (std::pair<int, int>{0, 2}));
}

}  // namespace
