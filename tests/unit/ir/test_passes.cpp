#include <gtest/gtest.h>

#include <set>

#include "rlx/ir/builder.h"
#include "rlx/passes/memory_plan.h"
#include "rlx/passes/pass_manager.h"

using namespace rlx;

namespace {

int count_ops(const Graph& g, OpKind op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node.op == op;
  return n;
}

// A BERT-style FFN + residual + LayerNorm block.
Graph ffn_block() {
  Graph g;
  auto x = input(g, "x", DType::F32, {"T", 32});
  auto w1 = param(g, "w1", DType::F32, {32, 64});
  auto b1 = param(g, "b1", DType::F32, {64});
  auto w2 = param(g, "w2", DType::F32, {64, 32});
  auto b2 = param(g, "b2", DType::F32, {32});
  auto gm = param(g, "gamma", DType::F32, {32});
  auto bt = param(g, "beta", DType::F32, {32});
  auto h = gelu(matmul(x, w1) + b1);
  auto y = matmul(h, w2) + b2;
  output("y", layer_norm(y + x, gm, bt, 1e-12f));
  return g;
}

}  // namespace

TEST(Passes, FusionRulesFuseMatmulBiasActAndResidualNorm) {
  Graph g = ffn_block();
  PassContext ctx;
  Graph f = apply_fusion_rules(g, ctx);
  verify(f);
  EXPECT_EQ(count_ops(f, OpKind::FusedMatMulBiasAct), 2);
  EXPECT_EQ(count_ops(f, OpKind::FusedResidualLayerNorm), 1);
  EXPECT_EQ(count_ops(f, OpKind::MatMul), 0);
  EXPECT_EQ(count_ops(f, OpKind::Unary), 0);
  EXPECT_EQ(count_ops(f, OpKind::Binary), 0);
  for (const auto& n : f.nodes())
    if (n.op == OpKind::FusedMatMulBiasAct && n.type.shape.back() == Dim(64)) {
      EXPECT_EQ(n.attr<FusedMatMulBiasActAttrs>().act, Activation::GeluErf);
    }
}

TEST(Passes, FusionKeepsIntermediatesThatHaveOtherUsers) {
  Graph g;
  auto x = input(g, "x", DType::F32, {4, 8});
  auto w = param(g, "w", DType::F32, {8, 8});
  auto b = param(g, "b", DType::F32, {8});
  auto mm = matmul(x, w);
  auto y = gelu(mm + b);
  output("y", y);
  output("mm", mm);  // the matmul result is needed on its own
  Graph f = apply_fusion_rules(g, PassContext{});
  EXPECT_EQ(count_ops(f, OpKind::FusedMatMulBiasAct), 0);
  EXPECT_EQ(count_ops(f, OpKind::MatMul), 1);
}

TEST(Passes, LegalizeLowersFusedOpsAndListsWhatCannotRun) {
  Graph f = apply_fusion_rules(ffn_block(), PassContext{});
  PassContext ctx;
  ctx.supports = [](const Graph& g, NodeId id, std::string* why) {
    OpKind op = g.node(id).op;
    bool ok = op != OpKind::FusedMatMulBiasAct && op != OpKind::FusedResidualLayerNorm;
    if (!ok && why) *why = "test backend refuses fused ops";
    return ok;
  };
  Graph l = legalize(f, ctx);
  verify(l);
  EXPECT_EQ(count_ops(l, OpKind::FusedMatMulBiasAct), 0);
  EXPECT_EQ(count_ops(l, OpKind::MatMul), 2);
  EXPECT_EQ(count_ops(l, OpKind::LayerNorm), 1);

  ctx.supports = [](const Graph& g, NodeId id, std::string* why) {
    if (g.node(id).op == OpKind::Softmax) {
      if (why) *why = "no softmax here";
      return false;
    }
    return true;
  };
  Graph s;
  auto x = input(s, "x", DType::F32, {3});
  output("y", softmax(x));
  try {
    legalize(s, ctx);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("node %1 (Softmax): no softmax here"), std::string::npos) << e.what();
  }
}

TEST(Passes, PrecisionPolicyCastsOnlyAtRegionBoundaries) {
  Graph g = ffn_block();
  PassContext ctx;
  ctx.precision = DType::F16;
  Graph h = apply_precision_policy(g, ctx);
  verify(h);
  // One cast in (the f32 input), one cast out (the f32 output); params are stored in f16.
  EXPECT_EQ(count_ops(h, OpKind::Cast), 2);
  for (NodeId id : h.leaves(OpKind::Param)) EXPECT_EQ(h.node(id).type.dtype, DType::F16);
  EXPECT_EQ(h.node(h.outputs()[0].second).type.dtype, DType::F32);

  // A backend without a half GELU: that op runs in f32 with exactly one cast
  // on each side, and consecutive half ops stay half.
  ctx.supports = [](const Graph& gg, NodeId id, std::string*) {
    const Node& n = gg.node(id);
    return !(n.op == OpKind::Unary && n.type.dtype == DType::F16);
  };
  Graph m = apply_precision_policy(g, ctx);
  verify(m);
  EXPECT_EQ(count_ops(m, OpKind::Cast), 4);
  int f32_unary = 0;
  for (const auto& n : m.nodes()) f32_unary += n.op == OpKind::Unary && n.type.dtype == DType::F32;
  EXPECT_EQ(f32_unary, 1);
}

TEST(Passes, DeadCodeEliminationKeepsStateWrites) {
  Graph g;
  auto cache = state(g, "cache", DType::F32, {1, 8, 4});
  auto upd = input(g, "upd", DType::F32, {1, 2, 4});
  auto off = input(g, "off", DType::I32, {1});
  write_slice(cache, upd, off, 1);  // no user: a side effect only
  auto x = input(g, "x", DType::F32, {4});
  relu(x);  // dead
  output("y", exp(x));
  Graph d = eliminate_dead_code(g);
  EXPECT_EQ(count_ops(d, OpKind::WriteSlice), 1);
  EXPECT_EQ(count_ops(d, OpKind::Unary), 1);
}

TEST(Passes, MemoryPlanReusesDeadBuffersAndNeverOverlapsLiveOnes) {
  Graph g;
  auto x = input(g, "x", DType::F32, {256});
  Value v = x;
  for (int i = 0; i < 8; ++i) v = exp(v);  // a chain: each buffer dies after its user
  auto r = reshape(v, {16, 16});
  output("y", r);
  MemoryPlan p = plan_memory(g, 256);
  EXPECT_LT(p.arena_bytes, p.unplanned_bytes);
  EXPECT_EQ(p.slots[static_cast<size_t>(r.id)].placement, Placement::View);
  EXPECT_EQ(p.slots[static_cast<size_t>(r.id)].root, v.id);
  // Check every pair of simultaneously live arena buffers is disjoint.
  std::vector<int64_t> last(static_cast<size_t>(g.size()), -1);
  for (NodeId i = 0; i < g.size(); ++i)
    for (NodeId in : g.node(i).inputs) last[static_cast<size_t>(p.slots[static_cast<size_t>(in)].root)] = i;
  last[static_cast<size_t>(x.id)] = g.size();
  last[static_cast<size_t>(v.id)] = g.size();
  for (NodeId a = 0; a < g.size(); ++a)
    for (NodeId b = a + 1; b < g.size(); ++b) {
      const auto& sa = p.slots[static_cast<size_t>(a)];
      const auto& sb = p.slots[static_cast<size_t>(b)];
      if (sa.placement != Placement::Arena || sb.placement != Placement::Arena) continue;
      bool live_together = last[static_cast<size_t>(a)] >= b;
      bool overlap = sa.offset < sb.offset + sb.bytes && sb.offset < sa.offset + sa.bytes;
      EXPECT_FALSE(live_together && overlap) << "%" << a << " and %" << b;
    }
  // The graph input is never reused by later nodes.
  for (NodeId b = 1; b < g.size(); ++b)
    if (p.slots[static_cast<size_t>(b)].placement == Placement::Arena) {
      EXPECT_NE(p.slots[static_cast<size_t>(b)].offset, p.slots[static_cast<size_t>(x.id)].offset);
    }
  EXPECT_NE(p.to_string(g).find("memory plan: arena"), std::string::npos);
}
