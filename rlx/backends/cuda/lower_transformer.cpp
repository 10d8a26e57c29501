// Rope, WriteSlice with rope (K into a KV cache), FusedSwiGLU and FusedGeGLU
// → the rope and glu kernel families; Sample → the select family.
#include "rlx/backends/cuda/kernels/glu.h"
#include "rlx/backends/cuda/kernels/rope.h"
#include "rlx/backends/cuda/kernels/select.h"
#include "rlx/backends/cuda/lowering.h"

namespace rlx::cuda {
namespace {

// Decode's Rope of Q, WriteSlice-with-rope of K and WriteSlice of V become one
// launch (launch_rope_qkv_write) when K comes from the same projection and
// positions as Q, V is written at the same cache offset, and both caches are
// states that only these writes touch. The launch goes where the last of the
// three nodes was (V's projection may come after Q's rope in node order), so
// every user of the three must come after that point. V is read where it
// lies: a Narrow of the same projection, or its own contiguous node.
bool try_lower_rope_qkv(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const NodeId src = n.inputs[0], pos = n.inputs[1];
  const auto only_user_is = [&](NodeId leaf, NodeId user) {
    const auto& u = c.users(leaf);
    return c.node(leaf).op == OpKind::State && u.size() == 1 && u[0] == user;
  };
  NodeId kn = -1;
  for (NodeId u : c.users(src)) {
    const Node& w = c.node(u);
    if (u > id && w.op == OpKind::WriteSlice && w.attr<WriteSliceAttrs>().rope && w.inputs[1] == src &&
        w.inputs[3] == pos && w.attr<WriteSliceAttrs>().axis == 1 && only_user_is(w.inputs[0], u))
      kn = u;
  }
  if (kn < 0) return false;
  const Node& k = c.node(kn);
  const NodeId offset = k.inputs[2];
  NodeId vn = -1;
  for (NodeId u : c.users(offset)) {
    const Node& w = c.node(u);
    if (u > id && u != kn && w.op == OpKind::WriteSlice && !w.attr<WriteSliceAttrs>().rope &&
        w.attr<WriteSliceAttrs>().axis == 1 && w.inputs.size() == 3 && only_user_is(w.inputs[0], u) &&
        w.type.dtype == k.type.dtype && c.dims(w.inputs[0]) == c.dims(k.inputs[0]))
      vn = u;
  }
  if (vn < 0) return false;
  const Node& v = c.node(vn);
  const NodeId vsrc = v.inputs[1];
  const auto xd = c.dims(src);
  const DType dt = n.type.dtype;
  if (c.type(vsrc).dtype != dt || c.dims(vsrc) != std::vector<int64_t>{xd[0], xd[1], c.dims(v.inputs[0])[2]}) return false;
  RopeQkvWrite w;
  NodeId narrow = -1;
  if (c.node(vsrc).op == OpKind::Narrow) {
    // Read V inside the projection (no copy); other narrows may be views.
    const Node& nv = c.node(vsrc);
    const auto& na = nv.attr<NarrowAttrs>();
    if (nv.inputs[0] != src || norm_axis(na.axis, 3) != 2 || c.users(vsrc).size() != 1) return false;
    narrow = vsrc;
    w.v = c.ptr(src);
    w.v_stride = xd[2];
    w.v_offset = na.start;
  } else {
    w.v = c.ptr(vsrc);
    w.v_stride = c.dims(vsrc)[2];
    w.v_offset = 0;
  }
  const RopeAttrs qa = n.attr<RopeAttrs>(), ka = k.attr<WriteSliceAttrs>().rope_attrs;
  if (int64_t{ka.num_heads} * ka.head_dim != c.dims(k.inputs[0])[2]) return false;
  w.dtype = dt;
  w.cache_dtype = k.type.dtype;
  w.q = c.ptr(src);
  w.k = c.ptr(src);
  w.q_stride = w.k_stride = xd[2];
  w.q_attrs = qa;
  w.k_attrs = ka;
  w.q_norm = qa.head_norm ? c.in_ptr(id, 2) : nullptr;
  w.q_norm_dtype = qa.head_norm ? c.type(n.inputs[2]).dtype : DType::F32;
  w.k_norm = ka.head_norm ? c.in_ptr(kn, 4) : nullptr;
  w.k_norm_dtype = ka.head_norm ? c.type(k.inputs[4]).dtype : DType::F32;
  w.positions = static_cast<const int32_t*>(c.ptr(pos));
  w.positions_batched = c.type(pos).rank() == 2;
  w.cache_pos = static_cast<const int32_t*>(c.ptr(offset));
  w.y = c.ptr(id);
  w.k_cache = c.ptr(kn);
  w.v_cache = c.ptr(vn);
  w.B = xd[0];
  w.L = xd[1];
  w.capacity = c.dims(k.inputs[0])[1];
  const NodeId at = std::max({id, kn, vn});
  for (NodeId fused : {id, kn, vn})
    for (NodeId u : c.users(fused))
      if (u <= at) return false;  // something reads a result before the fused launch
  int32_t* const* flag = c.error_flag(kn);
  c.absorb(kn);
  c.absorb(vn);
  if (narrow >= 0) c.absorb(narrow);
  c.add_at(at, id, str("rope q + rope k -> cache + v -> cache (", c.graph.describe(kn), ", ", c.graph.describe(vn), ") ",
                dtype_name(dt), " -> ", dtype_name(w.cache_dtype)),
        [=](cudaStream_t s) mutable {
          w.error_flag = *flag;
          launch_rope_qkv_write(w, s);
        });
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
        [=](cudaStream_t s) { launch_glu(kind, dt, x, y, rows, N, s); });
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
