// Precision policy (f16 or bf16): float32 params, states and constants are
// stored in the policy dtype; f32 graph inputs are cast once on entry; f32
// outputs are cast back on exit. An op the backend cannot run in half runs in
// f32 with casts only where a value crosses between the two regions — each
// (value, dtype) pair is cast at most once, so there are no round trips
// between consecutive half ops. Norm statistics and accumulations are f32
// inside the kernels regardless.
#include <map>
#include <set>

#include "rlx/core/error.h"
#include "rlx/passes/pass_manager.h"

namespace rlx {
namespace {

// An fp8 matmul's operands and scales are made from f32 values on purpose
// (quantize_fp8: Abs, Reduce, Max, Div, Mul, Cast): those elementwise chains
// (and reshapes), back to the first op of another kind, and the leaves they
// read stay f32 (a scale in f16 loses bits or underflows), as do scales given
// as params.
std::set<NodeId> fp8_f32_chains(const Graph& g) {
  auto chain_op = [](const Node& n) {
    return n.is_leaf() || n.op == OpKind::Cast || n.op == OpKind::Unary || n.op == OpKind::Binary ||
           n.op == OpKind::Reduce || n.op == OpKind::Reshape;
  };
  std::set<NodeId> keep;
  std::vector<NodeId> todo;
  for (NodeId i = 0; i < g.size(); ++i)
    if (g.node(i).op == OpKind::ScaledMatMul)
      for (size_t k = 0; k < 4; ++k) todo.push_back(g.node(i).inputs[k]);
  while (!todo.empty()) {
    const NodeId id = todo.back();
    todo.pop_back();
    const Node& n = g.node(id);
    const bool fp8_cast = n.op == OpKind::Cast && (n.type.dtype == DType::F8E4M3 || n.type.dtype == DType::F8E5M2);
    if (!chain_op(n) || (n.type.dtype != DType::F32 && !fp8_cast) || !keep.insert(id).second) continue;
    for (NodeId in : n.inputs) todo.push_back(in);
  }
  return keep;
}

class PrecisionRewriter {
 public:
  PrecisionRewriter(const Graph& g, const PassContext& ctx)
      : g_(g), ctx_(ctx), map_(static_cast<size_t>(g.size()), -1), keep_f32_(fp8_f32_chains(g)) {}

  Graph run() {
    for (NodeId i = 0; i < g_.size(); ++i) map_[static_cast<size_t>(i)] = rewrite(i);
    for (const auto& [name, id] : g_.outputs()) {
      NodeId now = map_[static_cast<size_t>(id)];
      DType want = g_.node(id).type.dtype;
      out_.set_output(name, as_dtype(now, want));
    }
    return std::move(out_);
  }

 private:
  DType lowered(DType t) const { return t == DType::F32 ? ctx_.precision : t; }

  // `id` (in out_) converted to `t`, cached so each conversion happens once.
  NodeId as_dtype(NodeId id, DType t) {
    if (out_.node(id).type.dtype == t) return id;
    auto key = std::make_pair(id, t);
    auto it = casts_.find(key);
    if (it != casts_.end()) return it->second;
    NodeId c = out_.add(OpKind::Cast, CastAttrs{t}, {id});
    casts_[key] = c;
    return c;
  }

  bool backend_supports(OpKind op, const Attrs& attrs, const std::vector<NodeId>& ins) const {
    if (!ctx_.supports) return true;
    Graph probe;
    std::vector<NodeId> pins;
    for (NodeId in : ins) {
      const Node& n = out_.node(in);
      // Keep leaf kinds that ops check structurally (WriteSlice needs a State).
      const std::string name = str("in", pins.size());
      if (n.op == OpKind::State || n.op == OpKind::WriteSlice) pins.push_back(probe.add_state(name, n.type.dtype, n.type.shape));
      else pins.push_back(probe.add_input(name, n.type.dtype, n.type.shape));
    }
    NodeId id = probe.add(op, attrs, pins);
    return ctx_.supports(probe, id, nullptr);
  }

  NodeId rewrite(NodeId i) {
    const Node& n = g_.node(i);
    if (keep_f32_.count(i)) return keep_f32(i);
    switch (n.op) {
      case OpKind::Param:
        return out_.add_param(n.attr<LeafAttrs>().name, lowered(n.type.dtype), n.type.shape);
      case OpKind::State:
        return out_.add_state(n.attr<LeafAttrs>().name, lowered(n.type.dtype), n.type.shape);
      case OpKind::Input:
        return out_.add_input(n.attr<LeafAttrs>().name, n.type.dtype, n.type.shape);
      case OpKind::Constant:
        return out_.add_constant(n.attr<ConstantAttrs>().value.to(lowered(n.type.dtype)), n.name);
      default: break;
    }
    // A bitcast reads its input's bytes, so the input keeps its source dtype.
    if (n.op == OpKind::Bitcast) {
      const NodeId in = n.inputs[0];
      return out_.add(n.op, n.attrs, {as_dtype(map_[static_cast<size_t>(in)], g_.node(in).type.dtype)}, n.name);
    }
    Attrs attrs = n.attrs;
    if (auto* c = std::get_if<CastAttrs>(&attrs)) c->to = lowered(c->to);
    if (auto* s = std::get_if<ScaledMatMulAttrs>(&attrs)) s->out = lowered(s->out);
    // First choice: every float input in the policy dtype (an fp8 matmul's scales stay f32).
    std::vector<NodeId> half_ins;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const NodeId in = n.inputs[k];
      NodeId m = map_[static_cast<size_t>(in)];
      const bool keep = n.op == OpKind::ScaledMatMul && (k == 2 || k == 3);
      half_ins.push_back(g_.node(in).type.dtype == DType::F32 && !keep ? as_dtype(m, ctx_.precision) : m);
    }
    // A cast made here for an op that then runs in f32 is left unused; DCE drops it.
    if (backend_supports(n.op, attrs, half_ins)) return out_.add(n.op, attrs, half_ins, n.name);
    // Fallback: this op runs in f32; inputs that were f32 in the source come back to f32.
    std::vector<NodeId> f32_ins;
    for (NodeId in : n.inputs) {
      NodeId m = map_[static_cast<size_t>(in)];
      f32_ins.push_back(g_.node(in).type.dtype == DType::F32 ? as_dtype(m, DType::F32) : m);
    }
    return out_.add(n.op, n.attrs, f32_ins, n.name);
  }

  // A node of an fp8 quantization chain, as the source has it (f32 inputs stay f32).
  NodeId keep_f32(NodeId i) {
    const Node& n = g_.node(i);
    switch (n.op) {
      case OpKind::Param: return out_.add_param(n.attr<LeafAttrs>().name, n.type.dtype, n.type.shape);
      case OpKind::State: return out_.add_state(n.attr<LeafAttrs>().name, n.type.dtype, n.type.shape);
      case OpKind::Input: return out_.add_input(n.attr<LeafAttrs>().name, n.type.dtype, n.type.shape);
      case OpKind::Constant: return out_.add_constant(n.attr<ConstantAttrs>().value, n.name);
      default: break;
    }
    std::vector<NodeId> ins;
    for (NodeId in : n.inputs) {
      const NodeId m = map_[static_cast<size_t>(in)];
      ins.push_back(g_.node(in).type.dtype == DType::F32 ? as_dtype(m, DType::F32) : m);
    }
    return out_.add(n.op, n.attrs, ins, n.name);
  }

  const Graph& g_;
  const PassContext& ctx_;
  Graph out_;
  std::vector<NodeId> map_;
  std::set<NodeId> keep_f32_;
  std::map<std::pair<NodeId, DType>, NodeId> casts_;
};

}  // namespace

Graph apply_precision_policy(const Graph& g, const PassContext& ctx) {
  if (ctx.precision == DType::F32) return g;
  RLX_CHECK(ctx.precision == DType::F16 || ctx.precision == DType::BF16, "precision policy must be f32, f16 or bf16, got ",
            ctx.precision);
  return eliminate_dead_code(PrecisionRewriter(g, ctx).run());
}

}  // namespace rlx
