// A sentence encoder's pooling tail → one kernel (kernels/pool_norm.h). The
// BERT builder's mean pooling + L2 normalization lowers to
//   W = Cast(mask)               i32/i64 program input → T (optional, see below)
//   A = Reshape(W) [B, 1, L]
//   P = MatMul(A, X)             X [B, L, H], no transposes
//   Q = Reshape(P) [B, H]
//   Y = RmsNorm(Q, gamma)
//   Z = Cast(Y)                  to a float dtype (optional: the mixed-precision boundary)
// four launches (the cast, a batched M = 1 cuBLASLt GEMM, the norm, the cast)
// that the kernel does in one, summing in f32 without rounding P. It runs at
// the last node's place (Z, else Y) and writes that node's block; X, the
// mask and gamma must still be intact there, so the memory plan extends their
// lives to it (pool_norm_reads) and every node between P and the last is one
// of the pattern's (nothing else can write in between). The mask's Cast is
// absorbed only when its source is a program input and A its only reader.
#include <optional>

#include "rlx/backends/cuda/kernels/pool_norm.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/core/env.h"
#include "rlx/passes/memory_plan.h"

namespace rlx::cuda {
namespace {

struct PoolNormMatch {
  NodeId cast_w = -1;  // the mask's Cast, when absorbed
  NodeId a = -1, mm = -1, q = -1, norm = -1, cast_out = -1, last = -1;
  NodeId w = -1;  // what the kernel reads as weights: the mask input (cast absorbed) or A
  NodeId x = -1, gamma = -1;
};

// The MatMul is at most this many nodes before the pattern's last node (the
// memory plan looks for it from there).
constexpr NodeId kMaxSpan = 8;

bool kernel_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

bool only_user(const std::vector<std::vector<NodeId>>& users, NodeId of, NodeId user) {
  const auto& u = users[static_cast<size_t>(of)];
  return u.size() == 1 && u[0] == user;
}

std::optional<PoolNormMatch> match(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId mm) {
  const Node& p = g.node(mm);
  if (p.op != OpKind::MatMul || p.inputs.size() != 2) return std::nullopt;
  const auto& at = p.attr<MatMulAttrs>();
  const DType t = p.type.dtype;
  if (at.transpose_a || at.transpose_b || !kernel_float(t) || is_graph_output(g, mm)) return std::nullopt;
  PoolNormMatch m;
  m.mm = mm;
  m.a = p.inputs[0];
  m.x = p.inputs[1];
  for (NodeId s : {m.a, m.x, mm})
    if (!is_static(g.node(s).type.shape) || g.node(s).type.dtype != t) return std::nullopt;
  const auto ad = static_dims(g.node(m.a).type.shape), xd = static_dims(g.node(m.x).type.shape);
  if (ad.size() != 3 || xd.size() != 3 || ad[1] != 1 || ad[0] != xd[0] || ad[2] != xd[1]) return std::nullopt;
  const int64_t B = xd[0], H = xd[2];
  // P → Q = Reshape [B, H] → Y = RmsNorm(Q, gamma) [→ Z = Cast(Y)].
  const auto& pu = users[static_cast<size_t>(mm)];
  if (pu.size() != 1) return std::nullopt;
  m.q = pu[0];
  const Node& q = g.node(m.q);
  if (q.op != OpKind::Reshape || is_graph_output(g, m.q) || static_dims(q.type.shape) != std::vector<int64_t>{B, H})
    return std::nullopt;
  const auto& qu = users[static_cast<size_t>(m.q)];
  if (qu.size() != 1) return std::nullopt;
  m.norm = qu[0];
  const Node& n = g.node(m.norm);
  if (n.op != OpKind::RmsNorm || n.inputs.size() != 2 || n.inputs[0] != m.q || n.type.dtype != t) return std::nullopt;
  m.gamma = n.inputs[1];
  const Node& gm = g.node(m.gamma);
  const bool gamma_ok = kernel_float(gm.type.dtype) && is_static(gm.type.shape) &&
                        static_dims(gm.type.shape) == std::vector<int64_t>{H};
  if (!gamma_ok) return std::nullopt;
  m.last = m.norm;
  const auto& nu = users[static_cast<size_t>(m.norm)];
  if (!is_graph_output(g, m.norm) && nu.size() == 1) {
    const Node& c = g.node(nu[0]);
    if (c.op == OpKind::Cast && kernel_float(c.attr<CastAttrs>().to)) m.cast_out = m.last = nu[0];
  }
  if (m.last - mm > kMaxSpan) return std::nullopt;
  // Nothing outside the pattern runs between P and the last node, so no other
  // kernel writes into X, the weights or gamma before the fused one reads them.
  for (NodeId k = mm + 1; k < m.last; ++k)
    if (k != m.q && k != m.norm && !g.node(k).is_leaf()) return std::nullopt;
  // The mask: A is a view of W = Cast(int input) read by nothing else → read the input.
  m.w = m.a;
  const Node& a = g.node(m.a);
  if (a.op == OpKind::Reshape && only_user(users, m.a, mm) && !is_graph_output(g, m.a)) {
    const NodeId cw = a.inputs[0];
    const Node& c = g.node(cw);
    if (c.op == OpKind::Cast && only_user(users, cw, m.a) && !is_graph_output(g, cw)) {
      const Node& src = g.node(c.inputs[0]);
      if (src.op == OpKind::Input && (src.type.dtype == DType::I32 || src.type.dtype == DType::I64)) {
        m.cast_w = cw;
        m.w = c.inputs[0];
      }
    }
  }
  return m;
}

std::vector<PoolNormMatch> find_all(const Graph& g, const std::vector<std::vector<NodeId>>& users) {
  std::vector<PoolNormMatch> out;
  if (!env_bool("RLX_CUDA_FUSE_POOL_NORM")) return out;
  for (NodeId i = 0; i < g.size(); ++i)
    if (auto m = match(g, users, i)) out.push_back(*m);
  return out;
}

}  // namespace

std::vector<NodeId> pool_norm_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id) {
  if (!env_bool("RLX_CUDA_FUSE_POOL_NORM")) return {};
  for (NodeId k = id - 1; k >= 0 && k >= id - kMaxSpan; --k)
    if (auto m = match(g, users, k); m && m->last == id) return {m->x, m->w, m->gamma};
  return {};
}

void lower_pool_norms(LowerCtx& c) {
  for (const PoolNormMatch& m : find_all(c.graph, c.all_users())) {
    PoolNormArgs a;
    a.x_dtype = c.type(m.x).dtype;
    a.x = c.ptr(m.x);
    a.w_dtype = c.type(m.w).dtype;
    a.w = c.ptr(m.w);
    a.gamma_dtype = c.type(m.gamma).dtype;
    a.gamma = c.ptr(m.gamma);
    a.y_dtype = c.type(m.last).dtype;
    a.y = c.ptr(m.last);
    const auto xd = c.dims(m.x);
    a.rows = xd[0];
    a.tokens = xd[1];
    a.cols = xd[2];
    a.eps = c.node(m.norm).attr<NormAttrs>().eps;
    if (pool_norm_unsupported(a) != nullptr) continue;  // the nodes lower one by one
    // A (a view) goes with its cast, when that is absorbed: then the MatMul is its only reader.
    for (NodeId s : {m.cast_w, m.cast_w >= 0 ? m.a : -1, m.mm, m.q, m.norm, m.cast_out})
      if (s >= 0) c.absorb(s);
    std::string what = str("pool + rms_norm ", dtype_name(a.x_dtype), " [", a.rows, ", ", a.tokens, ", ", a.cols,
                           "] -> ", dtype_name(a.y_dtype), " (%", m.mm, " matmul, %", m.norm, " norm");
    if (m.cast_w >= 0) what += str(", %", m.cast_w, " mask cast");
    if (m.cast_out >= 0) what += str(", %", m.cast_out, " cast");
    c.add_at(m.last, m.last, what + " fused)", [a](cudaStream_t s) { launch_pool_norm(a, s); });
  }
}

}  // namespace rlx::cuda
