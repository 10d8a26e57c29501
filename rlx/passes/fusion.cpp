// Fusion rules. Each rule matches a small pattern that ends at a root node and
// replaces the root with one fused node; the matched interior nodes are left
// for DCE. Interior nodes must have exactly one user, so nothing is computed twice.
#include <optional>

#include "rlx/passes/pass_manager.h"

namespace rlx {
namespace {

struct Match {
  OpKind op;
  Attrs attrs;
  std::vector<NodeId> inputs;  // ids in the source graph
};

struct RuleCtx {
  const Graph& g;
  const std::vector<std::vector<NodeId>>& users;
  const Node& node(NodeId id) const { return g.node(id); }
  bool single_use(NodeId id) const {
    if (users[static_cast<size_t>(id)].size() != 1) return false;
    for (const auto& [_, out] : g.outputs())
      if (out == id) return false;
    return true;
  }
};

std::optional<Activation> as_activation(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::GeluErf: return Activation::GeluErf;
    case UnaryFn::GeluTanh: return Activation::GeluTanh;
    case UnaryFn::Relu: return Activation::Relu;
    case UnaryFn::Silu: return Activation::Silu;
    default: return std::nullopt;
  }
}

// Add(MatMul(a, b), bias[N]) with bias on either side → (a, b, bias, transpose_b).
std::optional<Match> match_matmul_bias(const RuleCtx& c, NodeId add, Activation act) {
  const Node& n = c.node(add);
  if (n.op != OpKind::Binary || n.attr<BinaryAttrs>().fn != BinaryFn::Add) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    NodeId mm = n.inputs[static_cast<size_t>(side)], bias = n.inputs[static_cast<size_t>(1 - side)];
    const Node& m = c.node(mm);
    if (m.op != OpKind::MatMul || m.attr<MatMulAttrs>().transpose_a || !c.single_use(mm)) continue;
    const Node& b = c.node(bias);
    if (b.type.rank() != 1 || !(b.type.shape[0] == m.type.shape.back()) || b.type.dtype != m.type.dtype) continue;
    if (!(n.type == m.type)) continue;  // bias must not broadcast the result wider
    return Match{OpKind::FusedMatMulBiasAct,
                 FusedMatMulBiasActAttrs{m.attr<MatMulAttrs>().transpose_b, act},
                 {m.inputs[0], m.inputs[1], bias}};
  }
  return std::nullopt;
}

// act(Add(MatMul(a, b), bias)) → FusedMatMulBiasAct{act}
std::optional<Match> rule_matmul_bias_act(const RuleCtx& c, NodeId id) {
  const Node& n = c.node(id);
  if (n.op != OpKind::Unary) return std::nullopt;
  auto act = as_activation(n.attr<UnaryAttrs>().fn);
  if (!act || !c.single_use(n.inputs[0])) return std::nullopt;
  return match_matmul_bias(c, n.inputs[0], *act);
}

// Add(MatMul(a, b), bias) → FusedMatMulBiasAct{none} (when no activation follows)
std::optional<Match> rule_matmul_bias(const RuleCtx& c, NodeId id) {
  const auto& us = c.users[static_cast<size_t>(id)];
  if (us.size() == 1 && c.node(us[0]).op == OpKind::Unary &&
      as_activation(c.node(us[0]).attr<UnaryAttrs>().fn))
    return std::nullopt;  // leave it for the activation rule
  return match_matmul_bias(c, id, Activation::None);
}

// Norm(Add(x, r), ...) → FusedResidual*Norm(x, r, ...)
std::optional<Match> rule_residual_norm(const RuleCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const bool layer = n.op == OpKind::LayerNorm;
  if (!layer && n.op != OpKind::RmsNorm) return std::nullopt;
  const Node& add = c.node(n.inputs[0]);
  if (add.op != OpKind::Binary || add.attr<BinaryAttrs>().fn != BinaryFn::Add || !c.single_use(n.inputs[0]))
    return std::nullopt;
  if (!(c.node(add.inputs[0]).type == add.type) || !(c.node(add.inputs[1]).type == add.type)) return std::nullopt;
  std::vector<NodeId> ins = {add.inputs[0], add.inputs[1]};
  ins.insert(ins.end(), n.inputs.begin() + 1, n.inputs.end());
  return Match{layer ? OpKind::FusedResidualLayerNorm : OpKind::FusedResidualRmsNorm, n.attrs, ins};
}

struct Rule {
  const char* name;
  std::optional<Match> (*match)(const RuleCtx&, NodeId);
};

constexpr Rule kRules[] = {
    {"matmul+bias+act", rule_matmul_bias_act},
    {"matmul+bias", rule_matmul_bias},
    {"residual+norm", rule_residual_norm},
};

}  // namespace

Graph apply_fusion_rules(const Graph& g, const PassContext& ctx) {
  if (!ctx.fuse) return g;
  const auto users = g.users();
  RuleCtx rc{g, users};
  GraphRewriter rw(g);
  for (NodeId i = 0; i < g.size(); ++i) {
    std::optional<Match> m;
    for (const Rule& r : kRules)
      if ((m = r.match(rc, i))) break;
    if (!m) {
      rw.copy(i);
      continue;
    }
    std::vector<NodeId> ins;
    for (NodeId in : m->inputs) ins.push_back(rw.mapped(in));
    rw.set(i, rw.dst().add(m->op, m->attrs, std::move(ins), g.node(i).name));
  }
  return eliminate_dead_code(rw.finish());
}

}  // namespace rlx
