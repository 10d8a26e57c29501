// A post-LN encoder layer's feed-forward block → one sm90 kernel
// (kernels/ffn_ln_sm90.h), found at lowering time:
//   H = FusedMatMulBiasAct(X, W1, b1, GELU-erf)   (W1 [F, N])
//   P = FusedMatMulBiasAct(H, W2, b2)             (W2 [N, F])
//   Y = FusedResidualLayerNorm(P, R, gamma, beta)
// Nothing runs at H's and P's places; the kernel runs at Y's and writes Y's
// block (P's, where gemm_ln_fuses makes Y a view of it). The memory plan
// keeps X, W1 and b1 live until then (ffn_ln_reads); H's and P's blocks,
// still planned, are never written.
#include "rlx/backends/cuda/kernels/ffn_ln_sm90.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/core/env.h"
#include "rlx/passes/memory_plan.h"

namespace rlx::cuda {

NodeId ffn_ln_pattern(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId h) {
  const Node& up = g.node(h);
  if (up.op != OpKind::FusedMatMulBiasAct || up.inputs.size() != 3) return -1;
  const auto& at = up.attr<FusedMatMulBiasActAttrs>();
  if (at.act != Activation::GeluErf || !at.transpose_b || users[static_cast<size_t>(h)].size() != 1) return -1;
  if (is_graph_output(g, h)) return -1;
  const NodeId p = users[static_cast<size_t>(h)][0];
  const Node& down = g.node(p);
  if (down.op != OpKind::FusedMatMulBiasAct || down.inputs[0] != h || users[static_cast<size_t>(p)].size() != 1)
    return -1;
  const NodeId ln = users[static_cast<size_t>(p)][0];
  // P and the norm as the GEMM + LayerNorm kernel takes them (N = 128/256/384, dtypes, shapes, F ≤ 2048),
  // though at the norm's place: R may be computed after P.
  if (!gemm_ln_pattern(g, users, ln, false)) return -1;
  const NodeId x = up.inputs[0], w1 = up.inputs[1], b1 = up.inputs[2];
  const DType t = g.node(ln).type.dtype;
  for (NodeId s : {h, x, w1, b1})
    if (g.node(s).type.dtype != t || !is_static(g.node(s).type.shape)) return -1;
  const auto yd = static_dims(g.node(ln).type.shape), xd = static_dims(g.node(x).type.shape);
  const auto w1d = static_dims(g.node(w1).type.shape), hd = static_dims(g.node(h).type.shape);
  const int64_t N = yd.back(), F = hd.back();
  if (xd != yd || w1d != std::vector<int64_t>{F, N} || static_dims(g.node(b1).type.shape) != std::vector<int64_t>{F})
    return -1;
  if (F % 64 != 0) return -1;
  // X is read as rows of N contiguous elements: no offset view (a Narrow).
  if (is_view_op(g.node(x)) && view_op_offset(g.node(x)) != 0) return -1;
  return ln;
}

// Like the GEMM + LayerNorm kernel, a CTA takes 128 rows and runs its whole
// FFN alone, so below a wave of CTAs the separate kernels, which spread each
// GEMM over the GPU, are faster. RLX_CUDA_FFN_LN_MIN_ROWS overrides the wave
// (0: 128 × the SM count). RLX_CUDA_FUSE_FFN_LN is off by default: at
// MiniLM's 256 × 128 the kernel took 195-198 µs a layer against 187 for the
// two kernels (H100, session 48).
NodeId ffn_ln_of(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId h, int device) {
  if (!env_bool("RLX_CUDA_FUSE_FFN_LN")) return -1;  // off by default: skip the pattern
  const NodeId ln = ffn_ln_pattern(g, users, h);
  if (ln < 0 || !sm90_ffn_ln_available(device)) return -1;
  const auto& y = g.node(ln).type.shape;
  const int64_t knob = env_int("RLX_CUDA_FFN_LN_MIN_ROWS");
  const int64_t min_rows = knob > 0 ? knob : int64_t{128} * device_props(device).sm_count;
  return static_numel(y) / static_dims(y).back() >= min_rows ? ln : -1;
}

std::vector<NodeId> ffn_ln_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id,
                                 int device) {
  const Node& n = g.node(id);
  if (n.op != OpKind::FusedResidualLayerNorm || g.node(n.inputs[0]).op != OpKind::FusedMatMulBiasAct) return {};
  const NodeId h = g.node(n.inputs[0]).inputs[0];
  if (ffn_ln_of(g, users, h, device) != id) return {};
  const Node& up = g.node(h);
  return {up.inputs[0], up.inputs[1], up.inputs[2]};
}

bool try_lower_ffn_ln(LowerCtx& c, NodeId h) {
  const NodeId ln = ffn_ln_of(c.graph, c.all_users(), h, c.props.index);
  if (ln < 0 || c.absorbed(ln)) return false;
  const NodeId p = c.users(h)[0];
  const Node& n = c.node(ln);
  FfnLnArgs a;
  a.dtype = n.type.dtype;
  a.param_dtype = c.type(n.inputs[2]).dtype;
  a.X = c.in_ptr(h, 0);
  a.W1 = c.in_ptr(h, 1);
  a.b1 = c.in_ptr(h, 2);
  a.W2 = c.in_ptr(p, 1);
  a.b2 = c.in_ptr(p, 2);
  a.R = c.in_ptr(ln, 1);
  a.gamma = c.in_ptr(ln, 2);
  a.beta = c.in_ptr(ln, 3);
  a.Y = c.ptr(ln);
  a.N = c.dims(ln).back();
  a.M = static_numel(n.type.shape) / a.N;
  a.F = c.dims(h).back();
  a.eps = n.attr<NormAttrs>().eps;
  a.ordered = env_bool("RLX_CUDA_FFN_ORDERED");
  if (sm90_ffn_ln_unsupported(a) != nullptr) return false;
  c.absorb(p);
  c.absorb(ln);
  c.add_at(ln, ln,
           str("sm90 ffn (up + gelu-erf + down) + residual layer_norm ", dtype_name(a.dtype), " M=", a.M, " N=", a.N,
               " F=", a.F, " (projections %", h, " %", p, " fused)"),
           [a](cudaStream_t s) { launch_sm90_ffn_ln(a, s); });
  return true;
}

}  // namespace rlx::cuda
