// Legalization: a node the backend has no kernel for is rewritten into
// primitive ops by its lowering rule; a node with neither is collected, and
// the pass fails once, listing every such node and why.
#include "rlx/core/error.h"
#include "rlx/passes/pass_manager.h"

namespace rlx {
namespace {

using Lowering = NodeId (*)(Graph& dst, const Node& n, const std::vector<NodeId>& ins);

// FusedMatMulBiasAct → MatMul, Add, [Unary]
NodeId lower_matmul_bias_act(Graph& dst, const Node& n, const std::vector<NodeId>& ins) {
  const auto& a = n.attr<FusedMatMulBiasActAttrs>();
  NodeId mm = dst.add(OpKind::MatMul, MatMulAttrs{false, a.transpose_b}, {ins[0], ins[1]}, n.name);
  NodeId y = dst.add(OpKind::Binary, BinaryAttrs{BinaryFn::Add}, {mm, ins[2]}, n.name);
  if (a.act == Activation::None) return y;
  return dst.add(OpKind::Unary, UnaryAttrs{activation_unary(a.act)}, {y}, n.name);
}

// FusedResidual{Layer,Rms}Norm → Add, Norm
NodeId lower_residual_norm(Graph& dst, const Node& n, const std::vector<NodeId>& ins) {
  NodeId sum = dst.add(OpKind::Binary, BinaryAttrs{BinaryFn::Add}, {ins[0], ins[1]}, n.name);
  std::vector<NodeId> rest = {sum};
  rest.insert(rest.end(), ins.begin() + 2, ins.end());
  OpKind op = n.op == OpKind::FusedResidualLayerNorm ? OpKind::LayerNorm : OpKind::RmsNorm;
  return dst.add(op, n.attrs, rest, n.name);
}

// FusedPostRmsNorm → RmsNorm, Add [, RmsNorm, Reshape ×2, Concat]
NodeId lower_post_rms_norm(Graph& dst, const Node& n, const std::vector<NodeId>& ins) {
  NodeId normed = dst.add(OpKind::RmsNorm, n.attrs, {ins[1], ins[2]}, n.name);
  NodeId sum = dst.add(OpKind::Binary, BinaryAttrs{BinaryFn::Add}, {ins[0], normed}, n.name);
  if (ins.size() == 3) return sum;
  NodeId next = dst.add(OpKind::RmsNorm, n.attrs, {sum, ins[3]}, n.name);
  Shape one{Dim(1)};
  const Shape& s = dst.node(ins[0]).type.shape;
  one.insert(one.end(), s.begin(), s.end());
  NodeId a = dst.add(OpKind::Reshape, ShapeAttrs{one}, {sum}, n.name);
  NodeId b = dst.add(OpKind::Reshape, ShapeAttrs{one}, {next}, n.name);
  return dst.add(OpKind::Concat, AxisAttrs{0}, {a, b}, n.name);
}

// Rope with head_norm → [Narrow,] Reshape, RmsNorm, Reshape, Rope
NodeId lower_rope(Graph& dst, const Node& n, const std::vector<NodeId>& ins) {
  RopeAttrs a = n.attr<RopeAttrs>();
  const Shape& xs = dst.node(ins[0]).type.shape;
  const int64_t width = int64_t{a.num_heads} * a.head_dim;
  NodeId x = ins[0];
  if (a.src_offset != 0 || !(xs[2] == Dim(width)))
    x = dst.add(OpKind::Narrow, NarrowAttrs{2, a.src_offset, width}, {x}, n.name);
  NodeId heads = dst.add(OpKind::Reshape, ShapeAttrs{{xs[0], xs[1], Dim(a.num_heads), Dim(a.head_dim)}}, {x}, n.name);
  NodeId normed = dst.add(OpKind::RmsNorm, NormAttrs{a.norm_eps}, {heads, ins[2]}, n.name);
  NodeId rows = dst.add(OpKind::Reshape, ShapeAttrs{{xs[0], xs[1], Dim(width)}}, {normed}, n.name);
  a.head_norm = false;
  a.src_offset = 0;
  return dst.add(OpKind::Rope, a, {rows, ins[1]}, n.name);
}

// WriteSlice with rope → Rope, WriteSlice
NodeId lower_rope_write(Graph& dst, const Node& n, const std::vector<NodeId>& ins) {
  const RopeAttrs& a = n.attr<WriteSliceAttrs>().rope_attrs;
  std::vector<NodeId> rope_in{ins[1], ins[3]};
  if (a.head_norm) rope_in.push_back(ins[4]);
  NodeId rows = dst.add(OpKind::Rope, a, rope_in, n.name);
  return dst.add(OpKind::WriteSlice, WriteSliceAttrs{1}, {ins[0], rows, ins[2]}, n.name);
}

// Fused{Swi,Ge}GLU → act(first half) · second half
NodeId lower_glu(Graph& dst, const Node& n, const std::vector<NodeId>& ins) {
  const Shape& s = dst.node(ins[0]).type.shape;
  const int axis = static_cast<int>(s.size()) - 1;
  const int64_t half = s.back().value / 2;
  NodeId gate = dst.add(OpKind::Narrow, NarrowAttrs{axis, 0, half}, {ins[0]}, n.name);
  NodeId up = dst.add(OpKind::Narrow, NarrowAttrs{axis, half, half}, {ins[0]}, n.name);
  UnaryFn fn = n.op == OpKind::FusedSwiGLU ? UnaryFn::Silu
               : n.attr<GluAttrs>().tanh_approx ? UnaryFn::GeluTanh : UnaryFn::GeluErf;
  NodeId act = dst.add(OpKind::Unary, UnaryAttrs{fn}, {gate}, n.name);
  return dst.add(OpKind::Binary, BinaryAttrs{BinaryFn::Mul}, {act, up}, n.name);
}

Lowering lowering_for(const Node& n) {
  switch (n.op) {
    case OpKind::FusedMatMulBiasAct: return lower_matmul_bias_act;
    case OpKind::FusedResidualLayerNorm: case OpKind::FusedResidualRmsNorm: return lower_residual_norm;
    case OpKind::FusedSwiGLU: case OpKind::FusedGeGLU: return lower_glu;
    case OpKind::FusedPostRmsNorm: return lower_post_rms_norm;
    case OpKind::Rope: return n.attr<RopeAttrs>().head_norm ? lower_rope : nullptr;
    case OpKind::WriteSlice: return n.attr<WriteSliceAttrs>().rope ? lower_rope_write : nullptr;
    default: return nullptr;
  }
}

}  // namespace

Graph legalize(const Graph& g, const PassContext& ctx) {
  if (!ctx.supports) return g;
  GraphRewriter rw(g);
  std::string missing;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    std::string why;
    if (n.is_leaf() || ctx.supports(g, i, &why)) {
      rw.copy(i);
      continue;
    }
    if (Lowering lower = lowering_for(n)) {
      std::vector<NodeId> ins;
      for (NodeId in : n.inputs) ins.push_back(rw.mapped(in));
      NodeId first = rw.dst().size();
      NodeId out = lower(rw.dst(), n, ins);
      rw.set(i, out);
      // The primitives must themselves be supported.
      for (NodeId k = first; k < rw.dst().size(); ++k) {
        std::string why2;
        if (!ctx.supports(rw.dst(), k, &why2))
          missing += str("\n  ", g.describe(i), " lowered, but its part ", op_name(rw.dst().node(k).op), " has no kernel: ", why2);
      }
      continue;
    }
    missing += str("\n  ", g.describe(i), ": ", why.empty() ? "no kernel" : why);
    rw.copy(i);
  }
  if (!missing.empty()) throw Unsupported(str("the backend cannot run this graph:", missing));
  return rw.finish();
}

}  // namespace rlx
