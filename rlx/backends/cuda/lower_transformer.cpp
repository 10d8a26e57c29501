// Rope, WriteSlice with rope (K into a KV cache), FusedSwiGLU and FusedGeGLU
// → the rope and glu kernel families; Sample → the select family.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "rlx/backends/cuda/kernels/glu.h"
#include "rlx/backends/cuda/kernels/rope.h"
#include "rlx/backends/cuda/kernels/select.h"
#include "rlx/backends/cuda/lowering.h"
#include "rlx/backends/cuda/persistent.h"
#include "rlx/core/env.h"
#include "rlx/passes/memory_plan.h"

namespace rlx::cuda {
namespace {

// Decode's Rope of Q, WriteSlice-with-rope of K and WriteSlice of V become one
// launch (launch_rope_qkv_write) when one consumer (the layer's attention,
// possibly through a Cast of Q) reads all three, K is rotated at Q's
// positions, V is written at K's cache offset, and both caches are states
// that only these writes touch. K and V are read where they lie (a Narrow of
// a projection is read in place).
//
// Where the launch goes: at P = the rope node, or later if K's or V's source
// is computed after it. The memory plan was made for the unfused order, so
// every source must still be alive at P (read by some node at or after P),
// and every reader of the three results must come after P; otherwise the
// nodes stay separate.
// One decode row (B = L = 1) of the fused rope + cache writes as a
// distributed op of the persistent decode kernel, or null.
std::shared_ptr<const PersistentOps> persistent_rope_qkv(const RopeQkvWrite& w, int32_t* const* flag) {
  PFloat xf, cf, qn = PFloat::F32, kn = PFloat::F32;
  const RopeAttrs &qa = w.q_attrs, &ka = w.k_attrs;
  if (!persistent_enabled() || w.B != 1 || w.L != 1 || !to_pfloat(w.dtype, &xf) || !to_pfloat(w.cache_dtype, &cf) ||
      !w.inputs_ready || qa.head_dim != ka.head_dim || qa.head_dim > 256 || qa.n_rot != ka.n_rot ||
      qa.pairing != ka.pairing || qa.freq_base != ka.freq_base || qa.freq_scale != ka.freq_scale ||
      qa.freq_factors != ka.freq_factors ||
      qa.n_rot % 2 != 0 || qa.n_rot > qa.head_dim || (w.q_norm && !to_pfloat(w.q_norm_dtype, &qn)) ||
      (w.k_norm && !to_pfloat(w.k_norm_dtype, &kn)))
    return nullptr;
  PersistentOp p;
  p.op.kind = PKind::RopeQkv;
  PRope& r = p.op.rope;
  r.q_heads = qa.num_heads;
  r.kv_heads = ka.num_heads;
  r.head_dim = qa.head_dim;
  r.n_rot = qa.n_rot;
  r.neox = qa.pairing == RopePairing::NeoX;
  r.q_off = qa.src_offset;
  r.k_off = ka.src_offset;
  r.v_off = w.v_offset;
  r.freq_scale = qa.freq_scale;
  r.q_norm = w.q_norm;
  r.k_norm = w.k_norm;
  r.q_norm_dt = qn;
  r.k_norm_dt = kn;
  r.q_eps = qa.norm_eps;
  r.k_eps = ka.norm_eps;
  r.position = w.positions;
  r.cache_pos = w.cache_pos;
  r.capacity = w.capacity;
  r.cache_dt = cf;
  p.inv_freq = rope_inv_freq(qa);
  const size_t es = pfloat_bytes(xf), ces = pfloat_bytes(cf);
  const int64_t width = int64_t{ka.num_heads} * ka.head_dim;
  p.op.in[0] = PIn{w.q, -1, xf};
  p.op.in[1] = PIn{w.k, -1, xf};
  p.op.in[2] = PIn{w.v, -1, xf};
  p.reads = {{w.q, static_cast<size_t>(w.q_stride) * es}, {w.k, static_cast<size_t>(w.k_stride) * es},
             {w.v, static_cast<size_t>(w.v_stride) * es}};
  p.op.out[0] = POut{w.y, -1, xf};
  p.op.out[1] = POut{w.k_cache, -1, cf};
  p.op.out[2] = POut{w.v_cache, -1, cf};
  p.writes = {{w.y, static_cast<size_t>(qa.num_heads) * qa.head_dim * es},
              {w.k_cache, static_cast<size_t>(w.capacity * width) * ces},
              {w.v_cache, static_cast<size_t>(w.capacity * width) * ces}};
  p.error_flag = flag;
  return single_persistent_op(std::move(p));
}

bool try_lower_rope_qkv(LowerCtx& c, NodeId id) {
  static const bool enabled = env_bool("RLX_CUDA_FUSE_ROPE_KV");
  if (!enabled) return false;
  const Node& n = c.node(id);
  const NodeId src = n.inputs[0], pos = n.inputs[1];
  const auto only_user_is = [&](NodeId leaf, NodeId user) {
    const auto& u = c.users(leaf);
    return c.node(leaf).op == OpKind::State && u.size() == 1 && u[0] == user;
  };
  NodeId via = id;  // the node the attention reads Q from
  if (c.users(id).size() == 1 && c.node(c.users(id)[0]).op == OpKind::Cast) via = c.users(id)[0];
  NodeId kn = -1, vn = -1;
  for (NodeId reader : c.users(via))
    for (NodeId u : c.node(reader).inputs) {
      const Node& w = c.node(u);
      if (u <= id || w.op != OpKind::WriteSlice || w.attr<WriteSliceAttrs>().axis != 1 || !only_user_is(w.inputs[0], u))
        continue;
      if (w.attr<WriteSliceAttrs>().rope) {
        if (kn < 0 && w.inputs[3] == pos) kn = u;
      } else if (vn < 0 && w.inputs.size() == 3) {
        vn = u;
      }
    }
  if (kn < 0 || vn < 0) return false;
  const Node& k = c.node(kn);
  const Node& v = c.node(vn);
  const auto xd = c.dims(src), cache = c.dims(k.inputs[0]);
  const DType dt = n.type.dtype;
  const RopeAttrs qa = n.attr<RopeAttrs>(), ka = k.attr<WriteSliceAttrs>().rope_attrs;
  if (v.inputs[2] != k.inputs[2] || v.type.dtype != k.type.dtype || c.dims(v.inputs[0]) != cache ||
      int64_t{ka.num_heads} * ka.head_dim != cache[2])
    return false;
  // A [B, L, width] source of dtype dt, read through a Narrow on the last
  // axis when that Narrow has no other reader: (node holding the data,
  // pointer, row stride, column, the narrow or -1).
  struct Src {
    NodeId node;
    const void* p;
    int64_t stride, col;
    NodeId narrow;
  };
  auto source = [&](NodeId s, int64_t width) -> std::optional<Src> {
    const auto d = c.dims(s);
    if (c.type(s).dtype != dt || d.size() != 3 || d[0] != xd[0] || d[1] != xd[1] || d[2] < width) return std::nullopt;
    const Node& ns = c.node(s);
    if (ns.op == OpKind::Narrow && c.users(s).size() == 1 && norm_axis(ns.attr<NarrowAttrs>().axis, 3) == 2) {
      const auto full = c.dims(ns.inputs[0]);
      return Src{ns.inputs[0], c.ptr(ns.inputs[0]), full[2], ns.attr<NarrowAttrs>().start, s};
    }
    return Src{s, c.ptr(s), d[2], 0, -1};
  };
  const auto ks = source(k.inputs[1], ka.src_offset + cache[2]);
  const auto vs = source(v.inputs[1], cache[2]);
  if (!ks || !vs) return false;

  // The last node that reads s, through the views the memory plan aliases to
  // it (a Reshape, a contiguous Narrow). A Narrow that copies ends s's life:
  // reading s in place after it (OLMo 2's V, when Q and K leave the stacked
  // row through copying Narrows) would read a reused buffer.
  std::function<NodeId(NodeId)> last_use = [&](NodeId s) {
    NodeId last = -1;
    for (NodeId u : c.users(s)) {
      last = std::max(last, u);
      if (is_view_op(c.node(u))) last = std::max(last, last_use(u));
    }
    return last;
  };
  const NodeId at = std::max({id, ks->node, vs->node});
  for (NodeId s : {src, ks->node, vs->node})
    if (last_use(s) < at) return false;  // its buffer may be reused by then
  if (kn < at || vn < at) return false;
  for (NodeId fused : {id, kn, vn})
    for (NodeId u : c.users(fused))
      if (u <= at) return false;  // something reads a result before the fused launch

  // Q's Cast to the cache dtype (f32 activations over a 16-bit cache) folds
  // into the launch, which then writes the Cast's block at `at`: nothing but
  // the absorbed nodes may run between `at` and the Cast, and that block must
  // not overlap what the launch reads (RLX_CUDA_FUSE_ATTN_CASTS).
  const bool fold_casts = env_bool("RLX_CUDA_FUSE_ATTN_CASTS");
  NodeId q_cast = -1;
  if (fold_casts && via != id && !persistent_enabled() && !c.is_output(id) && c.type(via).dtype == k.type.dtype &&
      c.type(via).dtype != dt) {
    q_cast = via;
    for (NodeId m = at + 1; m < via && q_cast >= 0; ++m)
      if (!c.node(m).is_leaf() && m != kn && m != vn && m != ks->narrow && m != vs->narrow) q_cast = -1;
    for (NodeId r : {src, ks->node, vs->node, pos, k.inputs[2]})
      if (q_cast >= 0 && blocks_overlap(c, via, r)) q_cast = -1;
  }

  RopeQkvWrite w;
  w.dtype = dt;
  w.cache_dtype = k.type.dtype;
  w.q = c.ptr(src);
  w.q_stride = xd[2];
  w.k = ks->p;
  w.k_stride = ks->stride;
  w.v = vs->p;
  w.v_stride = vs->stride;
  w.v_offset = vs->col;
  w.q_attrs = qa;
  w.k_attrs = ka;
  w.k_attrs.src_offset += ks->col;
  w.q_norm = qa.head_norm ? c.in_ptr(id, 2) : nullptr;
  w.q_norm_dtype = qa.head_norm ? c.type(n.inputs[2]).dtype : DType::F32;
  w.k_norm = ka.head_norm ? c.in_ptr(kn, 4) : nullptr;
  w.k_norm_dtype = ka.head_norm ? c.type(k.inputs[4]).dtype : DType::F32;
  w.positions = static_cast<const int32_t*>(c.ptr(pos));
  w.positions_batched = c.type(pos).rank() == 2;
  w.cache_pos = static_cast<const int32_t*>(c.ptr(k.inputs[2]));
  w.inputs_ready = is_program_input(c, pos) && is_program_input(c, k.inputs[2]);
  w.y = c.ptr(q_cast >= 0 ? q_cast : id);
  w.y_in_cache_dtype = q_cast >= 0;
  w.k_cache = c.ptr(kn);
  w.v_cache = c.ptr(vn);
  w.B = xd[0];
  w.L = xd[1];
  w.capacity = cache[1];
  int32_t* const* flag = c.error_flag(kn);
  auto persistent = persistent_rope_qkv(w, flag);
  // The first such launch with these positions and angles writes the angle
  // table, the later ones (the other layers of its rope base) read it
  // (rope.cu). Not with persistent segments, whose rope does not write it.
  void* const* table = nullptr;
  bool read_table = false;
  if (env_bool("RLX_CUDA_ROPE_ANGLE_TABLE") && !persistent_enabled() && rope_angles_shared(w)) {
    const std::string key = rope_angles_key(w);
    if (auto it = c.shared().find(key); it != c.shared().end()) {
      table = std::any_cast<void* const*>(it->second);
      read_table = true;
    } else {
      table = c.persistent(rope_angles_bytes(w));
      c.shared()[key] = table;
    }
  }
  c.absorb(kn);
  c.absorb(vn);
  if (q_cast >= 0) c.absorb(q_cast);
  for (const auto& sref : {ks, vs})
    if (sref->narrow > id) c.absorb(sref->narrow);  // read in place: no copy needed
  c.add_at(at, id, str("rope q + rope k -> cache + v -> cache (", c.graph.describe(kn), ", ", c.graph.describe(vn), ") ",
                dtype_name(dt), " -> ", dtype_name(w.cache_dtype),
                table ? (read_table ? ", angles from the table" : ", angles to the table") : "",
                q_cast >= 0 ? str(", q as ", dtype_name(w.cache_dtype), " (", c.graph.describe(q_cast), " folded)")
                            : std::string()),
        [=](cudaStream_t s) mutable {
          w.error_flag = *flag;
          if (table) {
            w.angles.cs = static_cast<float2*>(*table);
            w.angles.read = read_table;
            w.angles.write = !read_table;
          }
          launch_rope_qkv_write(w, s);
        },
        std::move(persistent));
  return true;
}

void lower_rope(LowerCtx& c, NodeId id) {
  if (c.dims(c.node(id).inputs[0]).size() == 3 && try_lower_rope_qkv(c, id)) return;
  const Node& n = c.node(id);
  const auto x = c.dims(n.inputs[0]);
  const bool batched = c.type(n.inputs[1]).rank() == 2;
  const RopeAttrs a = n.attr<RopeAttrs>();
  const DType dt = n.type.dtype;
  const void* src = c.in_ptr(id, 0);
  const auto* pos = static_cast<const int32_t*>(c.in_ptr(id, 1));
  void* y = c.ptr(id);
  const int64_t B = x[0], L = x[1], W = x[2];
  const void* norm_w = a.head_norm ? c.in_ptr(id, 2) : nullptr;
  const DType norm_dt = a.head_norm ? c.type(n.inputs[2]).dtype : DType::F32;
  c.add(id, str(a.head_norm ? "head rms_norm + rope " : "rope ", rope_pairing_name(a.pairing), " ", dtype_name(dt)),
        [=](cudaStream_t s) { launch_rope(dt, src, W, pos, batched, y, B, L, a, s, norm_w, norm_dt); });
}

void lower_rope_write(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto st = c.dims(n.inputs[0]), u = c.dims(n.inputs[1]);
  const bool batched = c.type(n.inputs[3]).rank() == 2;
  const RopeAttrs a = n.attr<WriteSliceAttrs>().rope_attrs;
  const DType st_dt = n.type.dtype, u_dt = c.type(n.inputs[1]).dtype;
  void* cache = c.ptr(id);  // aliases input 0
  const void* k = c.in_ptr(id, 1);
  const auto* offset = static_cast<const int32_t*>(c.in_ptr(id, 2));
  const auto* pos = static_cast<const int32_t*>(c.in_ptr(id, 3));
  const void* norm_w = a.head_norm ? c.in_ptr(id, 4) : nullptr;
  const DType norm_dt = a.head_norm ? c.type(n.inputs[4]).dtype : DType::F32;
  const int64_t B = u[0], L = u[1], W = u[2], capacity = st[1];
  int32_t* const* flag = c.error_flag(id);
  c.add(id, str(a.head_norm ? "head rms_norm + rope " : "rope ", rope_pairing_name(a.pairing), " -> cache ",
                dtype_name(u_dt), " -> ", dtype_name(st_dt)),
        [=](cudaStream_t s) {
          launch_rope_write(u_dt, k, W, pos, batched, offset, st_dt, cache, B, L, capacity, a, norm_w, norm_dt, *flag,
                            s);
        });
}

// A one-row GLU as a local op of the persistent decode kernel, or null.
std::shared_ptr<const PersistentOps> persistent_glu(GluKind kind, DType dt, const void* x, void* y, int64_t rows,
                                                    int64_t n) {
  PFloat f;
  if (!persistent_enabled() || rows != 1 || n < 1 || n > kPersistentMaxLocal || !to_pfloat(dt, &f)) return nullptr;
  PersistentOp p;
  p.op.kind = PKind::Glu;
  p.op.glu = PGlu{static_cast<int32_t>(kind), n};
  const size_t es = pfloat_bytes(f);
  p.op.in[0] = PIn{x, -1, f};
  p.in_bytes[0] = static_cast<size_t>(2 * n) * es;
  p.op.out[0] = POut{y, -1, f};
  p.out_elems[0] = n;
  p.reads = {{x, p.in_bytes[0]}};
  p.writes = {{y, static_cast<size_t>(n) * es}};
  return single_persistent_op(std::move(p));
}

void lower_glu(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const GluKind kind = n.op == OpKind::FusedSwiGLU ? GluKind::SwiGLU
                       : n.attr<GluAttrs>().tanh_approx ? GluKind::GeGLUTanh : GluKind::GeGLUErf;
  const int64_t N = n.type.shape.back().value;
  const int64_t rows = static_numel(n.type.shape) / std::max<int64_t>(N, 1);
  const DType dt = n.type.dtype;
  const void* x = c.in_ptr(id, 0);
  void* y = c.ptr(id);
  c.add(id, str(n.op == OpKind::FusedSwiGLU ? "swiglu " : "geglu ", dtype_name(dt)),
        [=](cudaStream_t s) { launch_glu(kind, dt, x, y, rows, N, s); }, persistent_glu(kind, dt, x, y, rows, N));
}

void lower_sample(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto d = c.dims(n.inputs[0]);
  const SampleAttrs a = n.attr<SampleAttrs>();
  const DType dt = c.type(n.inputs[0]).dtype;
  const size_t ws = sample_workspace_bytes(d[0], d[1], a);
  c.need_workspace(ws);
  void* const* wslot = c.workspace_slot();
  const void* logits = c.in_ptr(id, 0);
  const auto* step = n.inputs.size() > 1 ? static_cast<const int32_t*>(c.in_ptr(id, 1)) : nullptr;
  auto* out = static_cast<int32_t*>(c.ptr(id));
  const int64_t B = d[0], V = d[1];
  const size_t n_counters = sample_counter_ints(dt, B, V, a);
  int32_t* const* cslot = n_counters ? c.counters(n_counters) : nullptr;
  c.add(id, str("sample ", dtype_name(dt)), [=](cudaStream_t s) {
    launch_sample(dt, logits, out, B, V, a, step, *wslot, ws, s, cslot ? *cslot : nullptr);
  });
}

}  // namespace

void register_transformer_lowerings() {
  register_cuda_float_lowering(OpKind::Rope, {DType::F32, DType::I32, DType::F32}, lower_rope, "rope");
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (DType w : {DType::F32, DType::F16, DType::BF16})
      register_cuda_lowering(OpKind::Rope, {t, DType::I32, w, t}, lower_rope,
                             str("head rms_norm + rope [", dtype_name(t), ", weight ", dtype_name(w), "]"));
  constexpr DType floats[] = {DType::F32, DType::F16, DType::BF16};
  for (DType st : floats)
    for (DType u : floats) {
      const std::string sig = str(" [", dtype_name(u), " -> ", dtype_name(st), "]");
      register_cuda_lowering(OpKind::WriteSlice, {st, u, DType::I32, DType::I32, st}, lower_rope_write,
                             "write_slice of rope" + sig);
      for (DType w : floats)
        register_cuda_lowering(OpKind::WriteSlice, {st, u, DType::I32, DType::I32, w, st}, lower_rope_write,
                               str("write_slice of head rms_norm + rope", sig, " weight ", dtype_name(w)));
    }
  register_cuda_float_lowering(OpKind::FusedSwiGLU, {DType::F32, DType::F32}, lower_glu, "swiglu");
  register_cuda_float_lowering(OpKind::FusedGeGLU, {DType::F32, DType::F32}, lower_glu, "geglu");
}

void register_select_lowerings() {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    register_cuda_lowering(OpKind::Sample, {t, DType::I32}, lower_sample, str("sample [", dtype_name(t), "]"));
    register_cuda_lowering(OpKind::Sample, {t, DType::I32, DType::I32}, lower_sample, str("sample [", dtype_name(t), "]"));
  }
}

}  // namespace rlx::cuda
