// Rope, WriteSlice with rope (K into a KV cache), FusedSwiGLU and FusedGeGLU
// → the rope and glu kernel families; Sample → the select family.
#include "rlx/backends/cuda/kernels/glu.h"
#include "rlx/backends/cuda/kernels/rope.h"
#include "rlx/backends/cuda/kernels/select.h"
#include "rlx/backends/cuda/lowering.h"

namespace rlx::cuda {
namespace {

void lower_rope(LowerCtx& c, NodeId id) {
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
