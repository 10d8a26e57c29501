// quantize_fp8's per-row chain (rlx/ir/builder.h) → one kernel
// (kernels/scaled_matmul.h: launch_quantize_fp8_rows). The builder emits
//   F = Cast(X) to f32          (only when X is f16/bf16)
//   A = Abs(F)
//   R = Reduce(max, A, last axis, keepdims)
//   M = Max(R, tiny)            tiny: a one-value f32 constant
//   S = Div(M, largest)         the scale, read by the fp8 matmul
//   I = Div(largest, M)
//   D = Mul(F, I)
//   Q = Cast(D) to f8e4m3 / f8e5m2
// seven or eight launches that move x about eight times in f32; the kernel
// reads X once and writes S and Q. It runs at Q's place (X must still be
// intact there, so the memory plan keeps X live until Q: fp8_quant_reads),
// every node between the chain's first and Q is the chain's, and only S and
// Q may have readers outside it. Per-tensor scales (a Reduce over every
// axis) stay unfused: they need a grid-wide maximum.
#include <optional>

#include "rlx/backends/cuda/kernels/scaled_matmul.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

struct Fp8QuantMatch {
  NodeId x = -1, f = -1, a = -1, r = -1, m = -1, s = -1, i = -1, d = -1, q = -1;
  float tiny = 0.0f, largest = 1.0f;
};

constexpr NodeId kMaxSpan = 12;  // Q is at most this many nodes after the chain's first

bool is_fn(const Node& n, OpKind op, BinaryFn fn) {
  return n.op == op && std::holds_alternative<BinaryAttrs>(n.attrs) && n.attr<BinaryAttrs>().fn == fn;
}
// The value of a one-element f32 constant.
std::optional<float> scalar_constant(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.op != OpKind::Constant || n.type.dtype != DType::F32) return std::nullopt;
  const Tensor& v = n.attr<ConstantAttrs>().value;
  if (v.numel() != 1) return std::nullopt;
  return v.data<float>()[0];
}

std::optional<Fp8QuantMatch> match(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId q) {
  auto only = [&](NodeId of, std::initializer_list<NodeId> readers) {
    const auto& u = users[static_cast<size_t>(of)];
    if (is_graph_output(g, of) || u.size() != readers.size()) return false;
    for (NodeId r : readers)
      if (std::find(u.begin(), u.end(), r) == u.end()) return false;
    return true;
  };
  const Node& qn = g.node(q);
  if (qn.op != OpKind::Cast || (qn.type.dtype != DType::F8E4M3 && qn.type.dtype != DType::F8E5M2))
    return std::nullopt;
  Fp8QuantMatch m;
  m.q = q;
  m.d = qn.inputs[0];
  const Node& d = g.node(m.d);
  if (!is_fn(d, OpKind::Binary, BinaryFn::Mul) || d.type.dtype != DType::F32 || !only(m.d, {q})) return std::nullopt;
  m.f = d.inputs[0];
  m.i = d.inputs[1];
  // I = largest / M, S = M / largest, the same constant; S is I's sibling among M's two readers.
  const Node& in = g.node(m.i);
  if (!is_fn(in, OpKind::Binary, BinaryFn::Div) || !only(m.i, {m.d})) return std::nullopt;
  const auto largest = scalar_constant(g, in.inputs[0]);
  m.m = in.inputs[1];
  const auto& mu = users[static_cast<size_t>(m.m)];
  if (!largest || mu.size() != 2 || is_graph_output(g, m.m)) return std::nullopt;
  m.s = mu[0] == m.i ? mu[1] : mu[0];
  const Node& s = g.node(m.s);
  if (!is_fn(s, OpKind::Binary, BinaryFn::Div) || s.inputs[0] != m.m || scalar_constant(g, s.inputs[1]) != largest)
    return std::nullopt;
  const Node& mx = g.node(m.m);
  if (!is_fn(mx, OpKind::Binary, BinaryFn::Max)) return std::nullopt;
  m.r = mx.inputs[0];
  auto tiny = scalar_constant(g, mx.inputs[1]);
  if (!tiny) {
    m.r = mx.inputs[1];
    tiny = scalar_constant(g, mx.inputs[0]);
  }
  const Node& r = g.node(m.r);
  if (!tiny || r.op != OpKind::Reduce || !only(m.r, {m.m})) return std::nullopt;
  const auto& ra = r.attr<ReduceAttrs>();
  const int rank = static_cast<int>(r.type.shape.size());
  const bool last_axis = ra.axes.size() == 1 && (ra.axes[0] == -1 || ra.axes[0] == rank - 1);
  if (ra.fn != ReduceFn::Max || !ra.keepdims || !last_axis) return std::nullopt;
  m.a = r.inputs[0];
  const Node& a = g.node(m.a);
  if (a.op != OpKind::Unary || a.attr<UnaryAttrs>().fn != UnaryFn::Abs || a.inputs[0] != m.f || !only(m.a, {m.r}))
    return std::nullopt;
  // F is X itself (f32) or Cast(X) read by the chain alone.
  m.x = m.f;
  const Node& f = g.node(m.f);
  if (f.op == OpKind::Cast && f.type.dtype == DType::F32 && only(m.f, {m.a, m.d})) m.x = f.inputs[0];
  else m.f = -1;
  const Node& x = g.node(m.x);
  if (!is_static(x.type.shape) || x.type.shape.empty() || static_numel(x.type.shape) == 0) return std::nullopt;
  const NodeId first = m.f >= 0 ? m.f : m.a;
  if (q - first > kMaxSpan || m.x >= first) return std::nullopt;
  for (NodeId k = first; k < q; ++k)
    if (k != m.f && k != m.a && k != m.r && k != m.m && k != m.s && k != m.i && k != m.d && !g.node(k).is_leaf())
      return std::nullopt;
  m.tiny = *tiny, m.largest = *largest;
  return m;
}

}  // namespace

std::vector<NodeId> fp8_quant_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id) {
  if (!env_bool("RLX_CUDA_FUSE_FP8_QUANT")) return {};
  if (auto m = match(g, users, id)) return {m->x};
  return {};
}

void lower_fp8_quants(LowerCtx& c) {
  if (!env_bool("RLX_CUDA_FUSE_FP8_QUANT")) return;
  for (NodeId q = 0; q < c.graph.size(); ++q) {
    const auto m = match(c.graph, c.all_users(), q);
    if (!m) continue;
    QuantizeFp8Rows a;
    a.x = c.ptr(m->x);
    a.x_dtype = c.type(m->x).dtype;
    const auto xd = c.dims(m->x);
    a.cols = xd.back();
    a.rows = static_numel(c.type(m->x).shape) / a.cols;
    a.tiny = m->tiny, a.largest = m->largest;
    a.scale = static_cast<float*>(c.ptr(m->s));
    a.q = c.ptr(q);
    a.q_dtype = c.type(q).dtype;
    if (quantize_fp8_rows_unsupported(a) != nullptr) continue;  // the nodes lower one by one
    for (NodeId s : {m->f, m->a, m->r, m->m, m->s, m->i, m->d, q})
      if (s >= 0) c.absorb(s);
    c.add_at(q, q,
             str("fp8 quantization ", dtype_name(a.x_dtype), " [", a.rows, ", ", a.cols, "] -> ",
                 dtype_name(a.q_dtype), " + per-row f32 scales (%", m->s, " scale, %", q, " cast fused)"),
             [a](cudaStream_t s) { launch_quantize_fp8_rows(a, s); });
  }
}

}  // namespace rlx::cuda
