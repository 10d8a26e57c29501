// A post-LN transformer's projection and the residual LayerNorm after it →
// one sm90 kernel (kernels/gemm_ln_sm90.h), found at lowering time:
//   P = FusedMatMulBiasAct(A, W, bias)      (no activation, W [N, K])
//   Y = FusedResidualLayerNorm(P, R, gamma, beta)
// The kernel runs where P ran and writes Y; P itself is never stored. So that
// the memory plan agrees, plan_cuda_memory makes Y a view of P's block
// (gemm_ln_fuses answers for both): the block is then live from P's place to
// Y's last reader, apart from A and from everything else live in between.
// Should the lowering still refuse (a misaligned parameter), the GEMM writes
// P and the norm kernel runs in place over it, which is also correct.
#include <algorithm>

#include "rlx/backends/cuda/kernels/gemm_ln_sm90.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/core/env.h"
#include "rlx/passes/memory_plan.h"

namespace rlx::cuda {

// Measured (rlx_gemm_bench, MiniLM at 256 × 128 tokens, against the
// cuBLASLt GEMM then the norm kernel): 1.25× at K = 384 and, since each CTA
// starts at its own K slab, 1.12× at K = 1536 (FFN down; 0.91× before, H100,
// session 45). Longer K is unmeasured and keeps the two kernels.
constexpr int64_t kGemmLnMaxK = 2048;

bool gemm_ln_pattern(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId ln, bool at_projection) {
  const Node& n = g.node(ln);
  if (n.op != OpKind::FusedResidualLayerNorm || n.inputs.size() != 4) return false;
  const NodeId p = n.inputs[0], r = n.inputs[1], gamma = n.inputs[2], beta = n.inputs[3];
  const Node& mm = g.node(p);
  if (mm.op != OpKind::FusedMatMulBiasAct || r == p) return false;
  const auto& at = mm.attr<FusedMatMulBiasActAttrs>();
  if (at.act != Activation::None || !at.transpose_b || users[static_cast<size_t>(p)].size() != 1) return false;
  if (is_graph_output(g, p)) return false;
  const NodeId a = mm.inputs[0], w = mm.inputs[1], bias = mm.inputs[2];
  const DType t = n.type.dtype;
  if (t != DType::F16 && t != DType::BF16) return false;
  for (NodeId s : {p, r, a, w, bias})
    if (g.node(s).type.dtype != t) return false;
  const DType pt = g.node(gamma).type.dtype;
  if ((pt != t && pt != DType::F32) || g.node(beta).type.dtype != pt) return false;
  for (NodeId s : {ln, p, r, a, w, bias, gamma, beta})
    if (!is_static(g.node(s).type.shape)) return false;
  const auto yd = static_dims(n.type.shape), wd = static_dims(g.node(w).type.shape);
  const auto ad = static_dims(g.node(a).type.shape);
  if (yd.empty() || wd.size() != 2 || ad.size() != yd.size()) return false;
  const int64_t N = yd.back(), K = wd[1];
  if (wd[0] != N || ad.back() != K || K % 8 != 0 || K > kGemmLnMaxK || (N != 128 && N != 256 && N != 384)) return false;
  if (!std::equal(ad.begin(), ad.end() - 1, yd.begin()) || static_dims(g.node(r).type.shape) != yd ||
      static_dims(g.node(p).type.shape) != yd)
    return false;
  for (NodeId s : {bias, gamma, beta})
    if (static_dims(g.node(s).type.shape) != std::vector<int64_t>{N}) return false;
  // A is read as rows of K contiguous elements: no offset view (a Narrow).
  if (is_view_op(g.node(a)) && view_op_offset(g.node(a)) != 0) return false;
  // The kernel runs at P's place: what it reads of the norm must exist by then
  // (inputs, params and constants do from the start, and a builder may add a
  // norm's params after P; a State may still be written in between).
  if (at_projection)
    for (NodeId s : {r, gamma, beta})
      if (s > p && (!g.node(s).is_leaf() || g.node(s).op == OpKind::State)) return false;
  return true;
}

// The kernel gives each 128 rows one CTA that runs its whole K loop and
// epilogue alone, so with less than a wave of CTAs its time is one CTA's
// (15-28 µs per projection at M = 16, H200) while cuBLASLt and the norm
// kernel spread the work over the GPU (5-13 µs and 5 µs): below a wave the
// two kernels are faster (MiniLM 1 × 16: 0.169-0.171 ms unfused against
// 0.203-0.215 ms fused, sessions 25 and 28). RLX_CUDA_GEMM_LN_MIN_ROWS
// overrides the wave (0: 128 × the SM count).
int64_t gemm_ln_min_rows(int device) {
  const int64_t knob = env_int("RLX_CUDA_GEMM_LN_MIN_ROWS");
  return knob > 0 ? knob : int64_t{128} * device_props(device).sm_count;
}

bool gemm_ln_fuses(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId ln, int device) {
  if (!gemm_ln_pattern(g, users, ln) || !env_bool("RLX_CUDA_FUSE_GEMM_LN") || !sm90_gemm_ln_available(device))
    return false;
  const auto& y = g.node(ln).type.shape;
  return static_numel(y) / static_dims(y).back() >= gemm_ln_min_rows(device);
}

bool try_lower_gemm_layer_norm(LowerCtx& c, NodeId id) {
  const auto& us = c.users(id);
  if (us.size() != 1) return false;
  const NodeId ln = us[0];
  if (c.absorbed(ln) || !gemm_ln_fuses(c.graph, c.all_users(), ln, c.props.index)) return false;
  const Node& n = c.node(ln);
  GemmLnArgs a;
  a.dtype = n.type.dtype;
  a.param_dtype = c.type(n.inputs[2]).dtype;
  a.A = c.in_ptr(id, 0);
  a.W = c.in_ptr(id, 1);
  a.bias = c.in_ptr(id, 2);
  a.R = c.in_ptr(ln, 1);
  a.gamma = c.in_ptr(ln, 2);
  a.beta = c.in_ptr(ln, 3);
  a.Y = c.ptr(ln);  // P's block (plan_cuda_memory)
  a.N = c.dims(ln).back();
  a.M = static_numel(n.type.shape) / a.N;
  a.K = c.dims(c.node(id).inputs[1])[1];
  a.eps = n.attr<NormAttrs>().eps;
  if (sm90_gemm_ln_unsupported(a) != nullptr) return false;
  c.absorb(ln);
  c.add(id,
        str("sm90 gemm + residual layer_norm ", dtype_name(a.dtype), " M=", a.M, " N=", a.N, " K=", a.K, " (norm %", ln,
            " fused)"),
        [a](cudaStream_t s) { launch_sm90_gemm_ln(a, s); });
  return true;
}

}  // namespace rlx::cuda
