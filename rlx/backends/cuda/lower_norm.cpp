// LayerNorm, RmsNorm and their fused-residual forms → the norm kernel family;
// the embedding sum under a LayerNorm → one launch (try_lower_embedding_norm).
#include <algorithm>
#include <array>
#include <functional>

#include "rlx/backends/cuda/kernels/norm.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/backends/cuda/persistent.h"
#include "rlx/core/env.h"
#include "rlx/passes/memory_plan.h"

namespace rlx::cuda {
namespace {

bool is_add(const Node& n) { return n.op == OpKind::Binary && n.attr<BinaryAttrs>().fn == BinaryFn::Add; }

// Whether a node of dims `d` is read by the rows of `full` (a norm's
// [..., cols]) as row r % P: d without its leading 1s is a suffix of full, so
// broadcasting it only repeats it over the leading axes.
bool repeats_over_rows(std::vector<int64_t> d, const std::vector<int64_t>& full) {
  while (d.size() > 1 && d.front() == 1) d.erase(d.begin());
  return d.size() <= full.size() && std::equal(d.begin(), d.end(), full.end() - static_cast<std::ptrdiff_t>(d.size()));
}

// Whether the fused launch, which runs where the norm `at` ran, may still read
// node `s` there. The memory plan was made for the unfused order: Input,
// Param and Constant storage (and views of it) never moves or changes; a
// State may be rewritten in between; anything else must have a reader at or
// after `at` (through views), so that its buffer is not reused before then.
bool readable_at(LowerCtx& c, NodeId s, NodeId at) {
  NodeId base = s;
  while (is_view_op(c.node(base))) base = c.node(base).inputs[0];
  switch (c.node(base).op) {
    case OpKind::Input: case OpKind::Param: case OpKind::Constant: return true;
    case OpKind::State: return false;
    default: break;
  }
  std::function<bool(NodeId)> alive = [&](NodeId n) {
    if (c.is_output(n)) return true;
    for (NodeId u : c.users(n))
      if (u >= at || (is_view_op(c.node(u)) && alive(u))) return true;
    return false;
  };
  return alive(s);
}

}  // namespace

// BERT's embedding layer: LayerNorm (or FusedResidualLayerNorm) R of a tree
// of adds whose leaves are up to kMaxEmbeddingTerms Gathers of 2-D tables
// [n, cols], e.g. word[ids] + pos[positions] (broadcast over the batch) +
// type[type_ids]. Called from the Gather lowering; since nodes are lowered in
// id order, the tree's smallest id (always a Gather) does the matching, and
// its one launch (launch_embedding_norm) replaces the gathers, the adds and
// R. Conditions, all exact:
//   - R is a LayerNorm or FusedResidualLayerNorm of dtype f32, f16 or bf16
//     with gamma and beta of one dtype; the tree is R's data inputs (x, and
//     the residual), reached only through them;
//   - every other tree node has R's dtype, exactly one reader (its parent in
//     the tree), is no graph output, and has dims that, without leading 1s,
//     are a suffix of R's (so it only repeats over R's leading axes: the
//     positions form); interior nodes are Binary adds, leaves are Gathers of a
//     2-D table of R's dtype whose row width is R's last dim (> 0);
//   - the node being lowered is a Gather and the tree's smallest id, and no
//     tree node was absorbed by another fusion;
//   - every table and index is readable at R (readable_at above).
// Each Gather keeps its own error flag, so a bad index names that Gather.
bool try_lower_embedding_norm(LowerCtx& c, NodeId id) {
  if (!env_bool("RLX_CUDA_FUSE_EMBED_NORM")) return false;
  // Up from the gather through single-reader adds to the norm.
  NodeId cur = id, root = -1;
  while (root < 0) {
    if (c.is_output(cur) || c.users(cur).size() != 1) return false;
    const NodeId u = c.users(cur)[0];
    const OpKind op = c.node(u).op;
    if (is_add(c.node(u))) cur = u;
    else if (op == OpKind::LayerNorm || op == OpKind::FusedResidualLayerNorm) root = u;
    else return false;
  }
  const Node& r = c.node(root);
  const DType dt = r.type.dtype;
  if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16) return false;
  const size_t p = r.op == OpKind::FusedResidualLayerNorm ? 2 : 1;  // gamma; data inputs before it
  const DType pt = c.type(r.inputs[p]).dtype;
  if (c.type(r.inputs[p + 1]).dtype != pt) return false;
  const auto full = c.dims(root);
  const int64_t cols = full.back();
  if (cols <= 0) return false;

  // The tree under R's data inputs: adds inside, gathers at the leaves.
  std::vector<NodeId> gathers, tree{root};
  std::function<bool(NodeId)> collect = [&](NodeId n) {
    const Node& nn = c.node(n);
    if (c.is_output(n) || c.users(n).size() != 1 || nn.type.dtype != dt || !repeats_over_rows(c.dims(n), full))
      return false;
    tree.push_back(n);
    if (is_add(nn)) return collect(nn.inputs[0]) && collect(nn.inputs[1]);
    if (nn.op != OpKind::Gather) return false;
    const auto table = c.dims(nn.inputs[0]);
    if (table.size() != 2 || table[1] != cols || c.type(nn.inputs[0]).dtype != dt) return false;
    gathers.push_back(n);
    return gathers.size() <= static_cast<size_t>(kMaxEmbeddingTerms);
  };
  for (size_t i = 0; i < p; ++i)
    if (!collect(r.inputs[i])) return false;
  std::sort(gathers.begin(), gathers.end());
  if (*std::min_element(tree.begin(), tree.end()) != id) return false;  // also: id is in the tree
  for (NodeId n : tree)
    if (c.absorbed(n)) return false;
  for (NodeId g : gathers)
    for (NodeId s : c.node(g).inputs)
      if (!readable_at(c, s, root)) return false;

  const int64_t rows = static_numel(r.type.shape) / cols;
  EmbeddingNormArgs a;
  a.dtype = dt;
  a.param_dtype = pt;
  a.n_terms = static_cast<int>(gathers.size());
  std::array<int32_t* const*, kMaxEmbeddingTerms> flags{};
  std::string ids;
  for (size_t k = 0; k < gathers.size(); ++k) {
    const Node& g = c.node(gathers[k]);
    EmbeddingTerm& e = a.terms[k];
    e.table = c.ptr(g.inputs[0]);
    e.table_rows = c.dims(g.inputs[0])[0];
    e.index = c.ptr(g.inputs[1]);
    e.index_dtype = c.type(g.inputs[1]).dtype;
    const int64_t n_idx = static_numel(c.type(g.inputs[1]).shape);
    e.period = n_idx == rows ? 0 : n_idx;  // fewer indices than rows: repeated over the leading axes
    flags[k] = c.error_flag(gathers[k]);
    ids += str(k ? " %" : "%", gathers[k]);
  }
  a.gamma = c.in_ptr(root, p);
  a.beta = c.in_ptr(root, p + 1);
  a.y = c.ptr(root);
  a.rows = rows;
  a.cols = cols;
  a.eps = r.attr<NormAttrs>().eps;
  for (NodeId n : tree)
    if (n != id) c.absorb(n);
  const size_t n_terms = gathers.size();
  c.add_at(root, root,
           str("gather x", n_terms, " (", ids, ")", n_terms > 1 ? " + add" : "", " + layer_norm ", dtype_name(dt)),
           [=](cudaStream_t s) mutable {
             for (size_t k = 0; k < n_terms; ++k) a.terms[k].error_flag = *flags[k];
             launch_embedding_norm(a, s);
           });
  return true;
}

namespace {

// A one-row norm as a local op of the persistent decode kernel, or null.
// Inputs x (and a / the residual r) and outputs y (and h) are [cols] in xt.
std::shared_ptr<const PersistentOps> persistent_norm(PKind kind, DType xt, DType pt, const void* x, const void* a,
                                                     const void* w1, const void* w2, void* y, void* h, int64_t rows,
                                                     int64_t cols, float eps) {
  PFloat xf, pf;
  if (!persistent_enabled() || rows != 1 || cols < 1 || cols > kPersistentMaxLocal || !to_pfloat(xt, &xf) ||
      !to_pfloat(pt, &pf))
    return nullptr;
  PersistentOp p;
  p.op.kind = kind;
  p.op.norm = PNorm{static_cast<int32_t>(cols), eps, w1, w2, pf};
  const size_t bytes = static_cast<size_t>(cols) * pfloat_bytes(xf);
  p.op.in[0] = PIn{x, -1, xf};
  p.in_bytes[0] = bytes;
  p.reads.push_back({x, bytes});
  if (a) {
    p.op.in[1] = PIn{a, -1, xf};
    p.in_bytes[1] = bytes;
    p.reads.push_back({a, bytes});
  }
  p.op.out[0] = POut{y, -1, xf};
  p.out_elems[0] = cols;
  p.writes.push_back({y, bytes});
  if (h) {
    p.op.out[1] = POut{h, -1, xf};
    p.out_elems[1] = cols;
    p.writes.push_back({h, bytes});
  }
  return single_persistent_op(std::move(p));
}

void lower_norm(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const bool two_terms = n.op == OpKind::FusedResidualLayerNorm || n.op == OpKind::FusedResidualRmsNorm;
  const bool layer = n.op == OpKind::LayerNorm || n.op == OpKind::FusedResidualLayerNorm;
  const size_t p = two_terms ? 2 : 1;  // index of gamma
  const DType xt = n.type.dtype, pt = c.type(n.inputs[p]).dtype;
  const int64_t cols = n.type.shape.back().value;
  const int64_t rows = static_numel(n.type.shape) / std::max<int64_t>(cols, 1);
  const float eps = n.attr<NormAttrs>().eps;
  // A GEMM that produced one term may have added the other (try_fold_gemm_residual).
  const std::optional<size_t> folded = two_terms ? c.folded_residual(id) : std::nullopt;
  const bool residual = two_terms && !folded;
  const void* x = c.in_ptr(id, folded ? *folded : 0);
  const void* r = residual ? c.in_ptr(id, 1) : nullptr;
  const void* gamma = c.in_ptr(id, p);
  const void* beta = layer ? c.in_ptr(id, p + 1) : nullptr;
  void* y = c.ptr(id);
  const std::string sum = residual ? " +residual" : folded ? str(" (residual added by %", n.inputs[*folded], ")") : "";
  if (layer) {
    c.add(id, str("layer_norm ", dtype_name(xt), sum),
          [=](cudaStream_t s) { launch_layer_norm(xt, pt, x, r, gamma, beta, y, nullptr, rows, cols, eps, s); });
  } else {
    c.add(id, str("rms_norm ", dtype_name(xt), sum),
          [=](cudaStream_t s) { launch_rms_norm(xt, pt, x, r, gamma, y, nullptr, rows, cols, eps, s); },
          persistent_norm(PKind::RmsNorm, xt, pt, x, r, gamma, nullptr, y, nullptr, rows, cols, eps));
  }
}

// FusedPostRmsNorm: y = x + rms(a)·w1, and with w2 the second half of the
// stacked result h = rms(y)·w2.
void lower_post_norm(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const bool pair = n.inputs.size() == 4;
  const DType xt = c.type(n.inputs[0]).dtype, pt = c.type(n.inputs[2]).dtype;
  const auto xd = c.dims(n.inputs[0]);
  const int64_t cols = xd.back();
  const int64_t rows = cols > 0 ? static_numel(c.type(n.inputs[0]).shape) / cols : 0;
  const float eps = n.attr<NormAttrs>().eps;
  const void* x = c.in_ptr(id, 0);
  const void* a = c.in_ptr(id, 1);
  const void* w1 = c.in_ptr(id, 2);
  const void* w2 = pair ? c.in_ptr(id, 3) : nullptr;
  void* y = c.ptr(id);
  void* h = pair ? static_cast<char*>(y) + rows * cols * dtype_size(xt) : nullptr;
  c.add(id, str("x + rms_norm(a) ", dtype_name(xt), pair ? ", then rms_norm" : ""),
        [=](cudaStream_t s) { launch_post_rms_norm(xt, pt, x, a, w1, w2, y, h, rows, cols, eps, s); },
        persistent_norm(PKind::PostNorm, xt, pt, x, a, w1, w2, y, h, rows, cols, eps));
}

}  // namespace

void register_norm_lowerings() {
  constexpr DType floats[] = {DType::F32, DType::F16, DType::BF16};
  for (DType x : floats) {
    for (DType p : floats) {
      const std::string d = str("[", dtype_name(x), ", params ", dtype_name(p), "]");
      register_cuda_lowering(OpKind::LayerNorm, {x, p, p, x}, lower_norm, "layer_norm " + d);
      register_cuda_lowering(OpKind::RmsNorm, {x, p, x}, lower_norm, "rms_norm " + d);
      register_cuda_lowering(OpKind::FusedResidualLayerNorm, {x, x, p, p, x}, lower_norm, "residual+layer_norm " + d);
      register_cuda_lowering(OpKind::FusedResidualRmsNorm, {x, x, p, x}, lower_norm, "residual+rms_norm " + d);
      register_cuda_lowering(OpKind::FusedPostRmsNorm, {x, x, p, x}, lower_post_norm, "x + rms_norm(a) " + d);
      register_cuda_lowering(OpKind::FusedPostRmsNorm, {x, x, p, p, x}, lower_post_norm,
                             "x + rms_norm(a), then rms_norm " + d);
    }
  }
}

}  // namespace rlx::cuda
