// Attention → the flash-attention family. Q, K and V that are last-axis
// Narrows of one tensor (the fused QKV projection) are read in place with a
// row stride, and those Narrows lower to nothing (DESIGN §5 "Narrow×3 →
// Attention"); a Custom key mask is prepared once per program (see
// PreparedMask). An encoder's attention over its fused QKV projection may
// instead run as one kernel with that projection (qkv_attention_of).
#include "rlx/backends/cuda/kernels/attention.h"
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/kernels/qkv_attention_sm90.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/backends/cuda/persistent.h"
#include "rlx/core/env.h"
#include "rlx/passes/memory_plan.h"

namespace rlx::cuda {

// A last-axis Narrow of a rank-3 tensor whose users are all Attention nodes
// reading it as Q, K or V (and which is not a graph output) needs no copy:
// attention reads it strided. The memory planner makes it a view of its
// source, so the source stays alive until the attention has run.
bool narrow_folds_into_attention(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id) {
  const Node& n = g.node(id);
  if (n.op != OpKind::Narrow || n.type.rank() != 3) return false;
  if (is_graph_output(g, id)) return false;
  const auto& a = n.attr<NarrowAttrs>();
  if (a.axis != 2 && a.axis != -1) return false;
  const auto& us = users[static_cast<size_t>(id)];
  if (us.empty()) return false;
  for (NodeId u : us) {
    const Node& un = g.node(u);
    if (un.op != OpKind::Attention) return false;
    for (size_t k = 3; k < un.inputs.size(); ++k)
      if (un.inputs[k] == id) return false;  // used as a mask/bias, not as Q/K/V
  }
  return true;
}

bool narrow_folds_into_attention(LowerCtx& c, NodeId id) {
  c.users(id);  // computes the table once
  return narrow_folds_into_attention(c.graph, c.all_users(), id);
}

namespace {

struct Operand {
  const void* ptr;
  int64_t row_stride, batch_stride;
};

Operand operand(LowerCtx& c, NodeId id) {
  const auto d = c.dims(id);  // [B, L, W]
  if (narrow_folds_into_attention(c, id)) {
    // The planner made the Narrow a view at start·esize into its source:
    // same pointer, the source's row and batch strides.
    const auto sd = c.dims(c.node(id).inputs[0]);
    return {c.ptr(id), sd[2], sd[1] * sd[2]};
  }
  return {c.ptr(id), d[2], d[1] * d[2]};
}

// A key mask node's byte copy and lengths, in persistent memory: [B·Lk
// bytes | lengths and flags]. `converted` / `lengths`: an earlier node's
// thunk computes them, so later ones only read.
struct PreparedMask {
  void* const* slot = nullptr;
  bool converted = false, lengths = false;
};

// What earlier attentions of the program prepared for this mask node, and
// the note that this one prepares what it converts / reduces. A mask's value
// cannot change between the layers that read it, except in a State, which a
// WriteSlice may rewrite in place during the run: such a mask is prepared by
// every attention that reads it.
PreparedMask prepared_mask(LowerCtx& c, NodeId mask, size_t bytes, bool convert, bool lengths) {
  NodeId root = mask;
  while (is_view_op(c.node(root))) root = c.node(root).inputs[0];
  if (c.node(root).op == OpKind::State) return PreparedMask{c.persistent(bytes)};
  std::any& entry = c.shared()[str("attention.key_mask.", mask)];
  if (!entry.has_value()) entry = PreparedMask{c.persistent(bytes)};
  auto& prep = std::any_cast<PreparedMask&>(entry);
  const PreparedMask before = prep;
  prep.converted |= convert;
  prep.lengths |= lengths;
  return before;
}

// The cache-offset input below which a decode attention's K and V rows are
// written by no kernel of the program, or null. That holds when K and V are
// (views of) WriteSlices along the row axis into States that nothing else in
// the program touches, both at one program-input offset: this program writes
// rows [offset, offset + L) only, and earlier rows come from earlier runs.
const int32_t* stable_kv_rows(LowerCtx& c, NodeId k, NodeId v) {
  const auto cache_write = [&](NodeId s) -> const Node* {
    while (is_view_op(c.node(s))) s = c.node(s).inputs[0];
    const Node& w = c.node(s);
    if (w.op != OpKind::WriteSlice || w.attr<WriteSliceAttrs>().axis != 1) return nullptr;
    const NodeId state = w.inputs[0];
    if (c.node(state).op != OpKind::State || c.users(state).size() != 1) return nullptr;
    return &w;
  };
  const Node* wk = cache_write(k);
  const Node* wv = cache_write(v);
  if (!wk || !wv || wk->inputs[2] != wv->inputs[2]) return nullptr;
  const NodeId offset = wk->inputs[2];
  int64_t count = 1;
  for (int64_t d : c.dims(offset)) count *= d;
  if (!is_program_input(c, offset) || c.type(offset).dtype != DType::I32 || count != 1) return nullptr;
  return static_cast<const int32_t*>(c.ptr(offset));
}

}  // namespace

bool is_program_input(LowerCtx& c, NodeId s) {
  while (is_view_op(c.node(s))) s = c.node(s).inputs[0];
  return c.node(s).op == OpKind::Input;
}

bool blocks_overlap(LowerCtx& c, NodeId a, NodeId b) {
  // [begin, end) of a node's block and of every block it views.
  auto ranges = [&](NodeId id) {
    std::vector<std::pair<uintptr_t, uintptr_t>> out;
    for (;;) {
      int64_t n = 1;
      for (int64_t d : c.dims(id)) n *= d;
      const auto p = reinterpret_cast<uintptr_t>(c.ptr(id));
      out.emplace_back(p, p + static_cast<uintptr_t>(dtype_bytes(c.type(id).dtype, n)));
      const Node& nd = c.node(id);
      if (nd.inputs.empty() || !(is_view_op(nd) || nd.op == OpKind::Narrow || nd.op == OpKind::Reshape)) break;
      id = nd.inputs[0];
    }
    return out;
  };
  for (const auto& [a0, a1] : ranges(a))
    for (const auto& [b0, b1] : ranges(b))
      if (a0 < b1 && b0 < a1) return true;
  return false;
}

namespace {

// One decode query (B = Lq = 1) over a KV cache as the persistent decode
// kernel's split-KV partials and their merge, or null. kv_len must be a
// program input (the kernel reads it before its barrier); with kv_stable the
// earlier steps' cache rows are requested before the barrier too.
std::shared_ptr<const PersistentOps> persistent_attention(const AttentionParams& p) {
  constexpr int kChunk = 64;
  PFloat f;
  const int es = p.dtype == DType::F32 ? 4 : 2;
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (!persistent_enabled() || p.B != 1 || p.Lq != 1 || !to_pfloat(p.dtype, &f) || !p.kv_len || !p.kv_len_ready ||
      p.key_mask || p.bias || p.D % 32 != 0 || p.D > 256 || p.H % p.Hkv != 0 ||
      p.H / p.Hkv > 16 || (p.window > 0 && !p.causal) || !aligned(p.k) || !aligned(p.v) ||
      (p.k_row_stride * es) % 16 != 0 || (p.v_row_stride * es) % 16 != 0)
    return nullptr;
  PersistentOp a;
  a.op.kind = PKind::Attention;
  PAttn& t = a.op.attn;
  t.H = p.H;
  t.Hkv = p.Hkv;
  t.D = p.D;
  t.chunk = kChunk;
  t.max_chunks = (p.Lk + kChunk - 1) / kChunk;
  t.scale = p.scale;
  t.scale_log2 = p.scale * 1.4426950408889634f;
  t.softcap = p.softcap;
  t.softcap_log2 = p.softcap * 1.4426950408889634f;
  t.causal = p.causal;
  t.window = p.window;
  t.k_stride = p.k_row_stride;
  t.v_stride = p.v_row_stride;
  t.kv_len = p.kv_len;
  t.kv_stable = p.kv_stable;
  t.kv_dt = f;
  const size_t q_bytes = static_cast<size_t>(p.H) * p.D * es;
  a.op.in[0] = PIn{p.q, -1, f};
  a.op.in[1] = PIn{p.k, -1, f};
  a.op.in[2] = PIn{p.v, -1, f};
  a.in_bytes[0] = q_bytes;
  a.reads = {{p.q, q_bytes},
             {p.k, static_cast<size_t>(p.Lk) * p.k_row_stride * es},
             {p.v, static_cast<size_t>(p.Lk) * p.v_row_stride * es}};
  PersistentOp m;
  m.op.kind = PKind::AttnMerge;
  m.op.attn = t;
  m.op.out[0] = POut{p.out, -1, f};
  m.out_elems[0] = int64_t{p.H} * p.D;
  m.writes = {{p.out, q_bytes}};
  for (const MemRange& r : a.reads)
    if (r.overlaps(m.writes[0])) return nullptr;
  return std::make_shared<const PersistentOps>(PersistentOps{a, m});
}

// Bytes of a key mask's prepared copy: [B·Lk bytes | lengths and flags].
size_t mask_lengths_offset(int B, int Lk) { return (static_cast<size_t>(B) * Lk + 255) / 256 * 256; }
size_t prepared_mask_bytes(int B, int Lk) {
  return mask_lengths_offset(B, Lk) + key_mask_scratch_ints(B) * sizeof(int32_t);
}

// The Cast to f32 that is the only reader of a 16-bit decode attention (f32
// activations over a 16-bit KV cache), folded into the kernel's stores
// (AttentionParams::out_f32, RLX_CUDA_FUSE_ATTN_CASTS): the node, or -1. The
// kernel then writes the Cast's block at the attention's place, so nothing
// may run between the two, and that block must not overlap what the kernel
// reads (an input that dies at the attention may have left it free).
NodeId folded_output_cast(LowerCtx& c, NodeId id, const AttentionParams& p) {
  const bool enabled = env_bool("RLX_CUDA_FUSE_ATTN_CASTS");
  const auto& us = c.users(id);
  if (!enabled || persistent_enabled() || p.dtype == DType::F32 || c.is_output(id) || us.size() != 1 ||
      attention_path(p) != AttentionPath::Decode)
    return -1;
  const NodeId cast = us[0];
  if (c.node(cast).op != OpKind::Cast || c.type(cast).dtype != DType::F32) return -1;
  for (NodeId k = id + 1; k < cast; ++k)
    if (!c.node(k).is_leaf()) return -1;
  for (NodeId in : c.node(id).inputs)
    if (blocks_overlap(c, cast, in)) return -1;
  return cast;
}

void lower_attention(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto& a = n.attr<AttentionAttrs>();
  const auto qd = c.dims(n.inputs[0]), kd = c.dims(n.inputs[1]);
  AttentionParams p;
  p.dtype = n.type.dtype;
  p.B = static_cast<int>(qd[0]);
  p.Lq = static_cast<int>(qd[1]);
  p.Lk = static_cast<int>(kd[1]);
  p.H = a.num_heads;
  p.Hkv = a.num_kv_heads;
  p.D = a.head_dim;
  p.scale = a.effective_scale();
  p.softcap = a.softcap;
  p.causal = a.mask == MaskKind::Causal || a.mask == MaskKind::SlidingWindow;
  p.window = a.mask == MaskKind::SlidingWindow ? a.window : 0;
  const Operand q = operand(c, n.inputs[0]), k = operand(c, n.inputs[1]), v = operand(c, n.inputs[2]);
  p.q = q.ptr;
  p.k = k.ptr;
  p.v = v.ptr;
  p.q_row_stride = q.row_stride;
  p.q_batch_stride = q.batch_stride;
  p.k_row_stride = k.row_stride;
  p.k_batch_stride = k.batch_stride;
  p.v_row_stride = v.row_stride;
  p.v_batch_stride = v.batch_stride;
  p.out = c.ptr(id);

  const size_t attn_ws = (attention_workspace_bytes(p) + 255) / 256 * 256;
  const NodeId out_cast = folded_output_cast(c, id, p);
  if (out_cast >= 0) {
    p.out = c.ptr(out_cast);
    p.out_f32 = true;
    c.absorb(out_cast);
  }
  DType mask_dt = DType::U8;
  const void* mask_src = nullptr;
  if (a.mask == MaskKind::Custom) {
    mask_dt = c.type(n.inputs[3]).dtype;
    mask_src = c.in_ptr(id, 3);
    p.key_mask_b_stride = p.Lk;
    if (mask_dt == DType::U8 || mask_dt == DType::Bool) p.key_mask = static_cast<const uint8_t*>(mask_src);
  }
  if (a.mask == MaskKind::Bias) {
    const auto bd = c.dims(n.inputs[3]);  // [B|1, H|1, Lq, Lk]
    p.bias = c.in_ptr(id, 3);
    p.bias_dtype = c.type(n.inputs[3]).dtype;
    p.bias_q_stride = p.Lk;
    p.bias_h_stride = bd[1] == 1 ? 0 : int64_t{p.Lq} * p.Lk;
    p.bias_b_stride = bd[0] == 1 ? 0 : bd[1] * p.Lq * p.Lk;
  }
  if (a.kv_len_input) {
    const NodeId len = n.inputs.back();
    p.kv_len = static_cast<const int32_t*>(c.ptr(len));
    p.kv_len_shared = c.type(len).shape[0] == Dim(1) && p.B > 1;
    p.kv_len_ready = is_program_input(c, len);
  }
  if (p.kv_len == nullptr || p.kv_len_ready) p.kv_stable = stable_kv_rows(c, n.inputs[1], n.inputs[2]);
  // A custom key mask is prepared once per program and mask node: the first
  // attention that reads it converts it to bytes (unless it is bytes already)
  // and, on the prefill path, reduces it to per-row lengths (see
  // AttentionParams::key_mask_scratch); the encoder's later layers reuse both.
  // Both live in the program's persistent memory, which nothing else writes.
  const bool custom = a.mask == MaskKind::Custom;
  const bool convert = custom && p.key_mask == nullptr;
  const bool lengths = custom && attention_uses_mask_lengths(p);
  void* const* mslot = nullptr;
  bool converted = false, lengths_ready = false;
  const size_t mask_bytes = static_cast<size_t>(p.B) * static_cast<size_t>(p.Lk);
  const size_t lens_off = mask_lengths_offset(p.B, p.Lk);
  if (custom) {
    const PreparedMask prep = prepared_mask(c, n.inputs[3], prepared_mask_bytes(p.B, p.Lk), convert, lengths);
    mslot = prep.slot;
    converted = prep.converted;
    lengths_ready = prep.lengths;
  }
  c.need_workspace(attn_ws);
  void* const* wslot = c.workspace_slot();
  const size_t n_counters = attention_counter_ints(p);
  int32_t* const* cslot = n_counters ? c.counters(n_counters) : nullptr;
  std::string what = str("attention ", attention_path_name(attention_path(p)), " ", dtype_name(p.dtype), " D=", p.D);
  if (converted || lengths_ready) what += " (key mask prepared by an earlier layer)";
  if (p.out_f32) what += str(", out as f32 (", c.graph.describe(out_cast), " folded)");
  c.add(id, std::move(what), [=](cudaStream_t s) mutable {
    char* m = mslot ? static_cast<char*>(*mslot) : nullptr;
    if (convert) {
      if (!converted) launch_cast(mask_dt, DType::Bool, mask_src, m, static_cast<int64_t>(mask_bytes), s);
      p.key_mask = reinterpret_cast<const uint8_t*>(m);
    }
    if (lengths) {
      p.key_mask_scratch = reinterpret_cast<int32_t*>(m + lens_off);
      p.key_mask_lengths_ready = lengths_ready;
    }
    if (cslot) p.counters = *cslot;
    launch_attention(p, attn_ws ? *wslot : nullptr, s);
  }, persistent_attention(p));
}

// ---- The fused QKV projection + attention ----------------------------------

struct QkvMatch {
  NodeId attn = -1;
  int64_t start[3] = {0, 0, 0};  // the Q, K and V Narrows' first columns
};

// The attention whose Q, K and V are Narrows of projection p, in the form
// kernels/qkv_attention_sm90.h takes: no activation, f16/bf16 throughout
// (bias included), static shapes, X [B, L, K] read from its start, L ≤ 128,
// D 32 or 64, H·D a multiple of 64, no GQA, softcap, kv_len or mask other
// than a key mask [B, L]; the projection not a graph output.
QkvMatch qkv_attention_match(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId p) {
  const QkvMatch none;
  const Node& mm = g.node(p);
  if (mm.op != OpKind::FusedMatMulBiasAct || mm.inputs.size() != 3 || is_graph_output(g, p)) return none;
  const auto& at = mm.attr<FusedMatMulBiasActAttrs>();
  if (at.act != Activation::None || !at.transpose_b) return none;
  const auto& us = users[static_cast<size_t>(p)];
  if (us.size() != 3) return none;
  NodeId attn = -1;
  for (NodeId u : us) {
    if (!narrow_folds_into_attention(g, users, u)) return none;
    const auto& nu = users[static_cast<size_t>(u)];
    if (nu.size() != 1 || (attn >= 0 && nu[0] != attn)) return none;
    attn = nu[0];
  }
  const Node& an = g.node(attn);
  if (an.inputs[0] == an.inputs[1] || an.inputs[0] == an.inputs[2] || an.inputs[1] == an.inputs[2]) return none;
  const auto& a = an.attr<AttentionAttrs>();
  if ((a.mask != MaskKind::None && a.mask != MaskKind::Custom) || a.softcap != 0.0f || a.kv_len_input ||
      a.num_kv_heads != a.num_heads || (a.head_dim != 32 && a.head_dim != 64) || !(a.effective_scale() > 0.0f))
    return none;
  const DType t = an.type.dtype;
  if (t != DType::F16 && t != DType::BF16) return none;
  const NodeId x = mm.inputs[0], w = mm.inputs[1], bias = mm.inputs[2];
  for (NodeId s : {p, x, w, bias})
    if (g.node(s).type.dtype != t) return none;
  for (NodeId s : {attn, p, x, w, bias})
    if (!is_static(g.node(s).type.shape)) return none;
  const auto pd = static_dims(g.node(p).type.shape), xd = static_dims(g.node(x).type.shape);
  const auto wd = static_dims(g.node(w).type.shape);
  const int64_t hd = int64_t{a.num_heads} * a.head_dim;
  if (pd.size() != 3 || xd.size() != 3 || wd.size() != 2) return none;
  const int64_t B = pd[0], L = pd[1], K = xd[2];
  if (xd[0] != B || xd[1] != L || wd[0] != pd[2] || wd[1] != K || L > 128 || hd % 64 != 0 || K % 8 != 0)
    return none;
  if (static_dims(an.type.shape) != std::vector<int64_t>{B, L, hd} ||
      static_dims(g.node(bias).type.shape) != std::vector<int64_t>{pd[2]})
    return none;
  // X is read as rows of K contiguous elements: no offset view (a Narrow).
  if (is_view_op(g.node(x)) && view_op_offset(g.node(x)) != 0) return none;
  if (a.mask == MaskKind::Custom) {
    const auto& ms = g.node(an.inputs[3]).type.shape;
    if (!is_static(ms) || static_numel(ms) != B * L) return none;
  }
  QkvMatch m;
  m.attn = attn;
  for (int i = 0; i < 3; ++i) {
    const Node& nw = g.node(an.inputs[static_cast<size_t>(i)]);
    m.start[i] = nw.attr<NarrowAttrs>().start;
    if (nw.inputs[0] != p || static_dims(nw.type.shape).back() != hd || m.start[i] % 2 != 0) return none;
  }
  return m;
}

}  // namespace

NodeId qkv_attention_pattern(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId p) {
  return qkv_attention_match(g, users, p).attn;
}

// The kernel runs a CTA's projection and attention one after the other, on
// 128 rows however few the sequences hold, so with few CTAs the separate
// kernels, which spread both over the GPU, are faster. Measured end to end
// (H100, session 47; fused against separate): MiniLM 1 × 16 tokens 0.169
// against 0.160 ms, 8 × 128 (48 CTAs) 0.255 against 0.237, 64 × 32 (96)
// 0.297 against 0.315, 32 × 128 (192) 0.373 against 0.400, 256 × 16 0.367
// against 0.462, 256 × 128 2.054 against 2.205; BERT-base 8 × 128 (96)
// 0.757 against 0.710, 256 × 128 11.66 against 11.90. It fuses from as many
// CTAs as SMs; RLX_CUDA_QKV_ATTENTION_MIN_CTAS overrides that.
NodeId qkv_attention_of(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId p, int device) {
  const QkvMatch m = qkv_attention_match(g, users, p);
  if (m.attn < 0 || !env_bool("RLX_CUDA_FUSE_QKV_ATTENTION") || !sm90_qkv_attention_available(device)) return -1;
  const auto& at = g.node(m.attn).attr<AttentionAttrs>();
  const auto od = static_dims(g.node(m.attn).type.shape);
  QkvAttentionArgs a;
  a.B = od[0];
  a.L = static_cast<int>(od[1]);
  a.H = at.num_heads;
  a.D = at.head_dim;
  const int64_t knob = env_int("RLX_CUDA_QKV_ATTENTION_MIN_CTAS");
  return sm90_qkv_attention_ctas(a) >= (knob > 0 ? knob : device_props(device).sm_count) ? m.attn : -1;
}

std::vector<NodeId> attention_cast_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id) {
  const Node& n = g.node(id);
  if (n.op != OpKind::Cast || !env_bool("RLX_CUDA_FUSE_ATTN_CASTS")) return {};
  const NodeId src = n.inputs[0];
  const Node& s = g.node(src);
  if (users[static_cast<size_t>(src)].size() != 1 || is_graph_output(g, src)) return {};
  std::vector<NodeId> reads;
  if (s.op == OpKind::Attention && n.type.dtype == DType::F32) {  // the output's cast
    reads = s.inputs;
  } else if (s.op == OpKind::Rope && users[static_cast<size_t>(id)].size() == 1) {  // Q's, read by an attention
    const Node& a = g.node(users[static_cast<size_t>(id)][0]);
    if (a.op != OpKind::Attention || a.inputs.size() < 3) return {};
    reads = s.inputs;
    for (NodeId w : {a.inputs[1], a.inputs[2]})
      if (g.node(w).op == OpKind::WriteSlice) reads.insert(reads.end(), g.node(w).inputs.begin(), g.node(w).inputs.end());
  }
  return reads;
}

std::vector<NodeId> qkv_attention_reads(const Graph& g, const std::vector<std::vector<NodeId>>& users, NodeId id,
                                        int device) {
  const Node& n = g.node(id);
  if (n.op != OpKind::Attention || g.node(n.inputs[0]).op != OpKind::Narrow) return {};
  const NodeId p = g.node(n.inputs[0]).inputs[0];
  if (qkv_attention_of(g, users, p, device) != id) return {};
  const Node& mm = g.node(p);
  return {mm.inputs[0], mm.inputs[1], mm.inputs[2]};
}

// Nothing runs at the projection: the kernel runs at the attention's place
// (its key mask, as the attention lowering prepares it, may be computed in
// between), and the projection's block, still planned, is never written.
bool try_lower_qkv_attention(LowerCtx& c, NodeId p) {
  const NodeId attn = qkv_attention_of(c.graph, c.all_users(), p, c.props.index);
  if (attn < 0 || c.absorbed(attn)) return false;
  const QkvMatch m = qkv_attention_match(c.graph, c.all_users(), p);
  const Node& an = c.node(attn);
  const auto& at = an.attr<AttentionAttrs>();
  const auto od = c.dims(attn);
  QkvAttentionArgs a;
  a.dtype = an.type.dtype;
  a.X = c.in_ptr(p, 0);
  a.W = c.in_ptr(p, 1);
  a.bias = c.in_ptr(p, 2);
  a.w_rows = c.dims(c.node(p).inputs[1])[0];
  a.q_row = m.start[0];
  a.k_row = m.start[1];
  a.v_row = m.start[2];
  a.out = c.ptr(attn);
  a.B = od[0];
  a.L = static_cast<int>(od[1]);
  a.K = static_cast<int>(c.dims(c.node(p).inputs[1])[1]);
  a.H = at.num_heads;
  a.D = at.head_dim;
  a.scale = at.effective_scale();
  if (sm90_qkv_attention_unsupported(a) != nullptr) return false;

  // A key mask in another dtype than bytes is converted once per program (prepared_mask).
  DType mask_dt = DType::U8;
  const void* mask_src = nullptr;
  void* const* mslot = nullptr;
  bool convert = false, converted = false;
  if (at.mask == MaskKind::Custom) {
    mask_dt = c.type(an.inputs[3]).dtype;
    mask_src = c.in_ptr(attn, 3);
    convert = mask_dt != DType::U8 && mask_dt != DType::Bool;
    if (convert) {
      const int B = static_cast<int>(a.B);
      const PreparedMask prep = prepared_mask(c, an.inputs[3], prepared_mask_bytes(B, a.L), true, false);
      mslot = prep.slot;
      converted = prep.converted;
    } else {
      a.key_mask = static_cast<const uint8_t*>(mask_src);
    }
  }
  const int64_t mask_n = a.B * a.L;
  c.absorb(attn);
  c.add_at(attn, attn,
           str("sm90 qkv projection + attention ", dtype_name(a.dtype), " B=", a.B, " L=", a.L, " K=", a.K,
               " D=", a.D, " (projection %", p, " fused)", converted ? " (key mask prepared by an earlier layer)" : ""),
           [=](cudaStream_t s) mutable {
             if (convert) {
               if (!converted) launch_cast(mask_dt, DType::Bool, mask_src, *mslot, mask_n, s);
               a.key_mask = static_cast<const uint8_t*>(*mslot);
             }
             launch_sm90_qkv_attention(a, s);
           });
  return true;
}

void register_attention_lowerings() {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    register_cuda_lowering(OpKind::Attention, {t, t, t, t}, lower_attention, str("attention [", dtype_name(t), "]"));
    register_cuda_lowering(OpKind::Attention, {t, t, t, kAnyDType, t}, lower_attention,
                           str("attention with mask/bias/kv_len [", dtype_name(t), "]"));
    register_cuda_lowering(OpKind::Attention, {t, t, t, kAnyDType, DType::I32, t}, lower_attention,
                           str("attention with mask/bias and kv_len [", dtype_name(t), "]"));
  }
}

}  // namespace rlx::cuda
