// Reshape, Transpose, Narrow, Concat, Expand, Gather, WriteSlice → the
// movement kernel family. Reshape and WriteSlice results alias their source
// (memory plan), so Reshape launches nothing.
#include <numeric>

#include "rlx/backends/cuda/kernels/movement.h"
#include "rlx/backends/cuda/lowering.h"

namespace rlx::cuda {

bool narrow_folds_into_attention(LowerCtx& c, NodeId id);  // lower_attention.cpp
bool try_lower_embedding_norm(LowerCtx& c, NodeId id);     // lower_norm.cpp

namespace {

int64_t prod(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

void lower_reshape(LowerCtx& c, NodeId id) {
  const void* src = c.in_ptr(id, 0);
  void* dst = c.ptr(id);
  if (src == dst) return;  // a view: the planner aliased it
  const size_t bytes = static_cast<size_t>(dtype_bytes(c.type(id).dtype, static_numel(c.type(id).shape)));
  c.add(id, "reshape copy",
        [=](cudaStream_t s) { RLX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)); });
}

void lower_transpose(LowerCtx& c, NodeId id) {
  const auto in = c.dims(c.node(id).inputs[0]);
  const auto perm = c.node(id).attr<TransposeAttrs>().perm;
  const size_t es = static_cast<size_t>(dtype_size(c.type(id).dtype));
  const void* x = c.in_ptr(id, 0);
  void* y = c.ptr(id);
  c.add(id, "transpose", [=](cudaStream_t s) {
    launch_transpose(es, x, y, in.data(), perm.data(), static_cast<int>(in.size()), s);
  });
}

void lower_narrow(LowerCtx& c, NodeId id) {
  if (narrow_folds_into_attention(c, id)) return;  // attention reads it in place
  const auto in = c.dims(c.node(id).inputs[0]);
  const auto& a = c.node(id).attr<NarrowAttrs>();
  const auto ax = static_cast<size_t>(norm_axis(a.axis, in.size()));
  const int64_t outer = prod(in, 0, ax), inner = prod(in, ax + 1, in.size()), len = in[ax];
  const size_t es = static_cast<size_t>(dtype_size(c.type(id).dtype));
  const void* x = c.in_ptr(id, 0);
  void* y = c.ptr(id);
  const int64_t start = a.start, length = a.length;
  if (outer == 1 && y == static_cast<const char*>(x) + start * inner * static_cast<int64_t>(es))
    return;  // a contiguous run the planner made a view
  c.add(id, "narrow", [=](cudaStream_t s) { launch_narrow(es, x, y, outer, len, start, length, inner, s); });
}

void lower_concat(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto out = c.dims(id);
  const auto ax = static_cast<size_t>(norm_axis(n.attr<AxisAttrs>().axis, out.size()));
  std::vector<const void*> ins;
  std::vector<int64_t> lens;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    ins.push_back(c.in_ptr(id, i));
    lens.push_back(c.dims(n.inputs[i])[ax]);
  }
  const int64_t outer = prod(out, 0, ax), inner = prod(out, ax + 1, out.size());
  const size_t es = static_cast<size_t>(dtype_size(n.type.dtype));
  void* y = c.ptr(id);
  c.add(id, "concat", [=](cudaStream_t s) {
    launch_concat(es, ins.data(), lens.data(), static_cast<int>(ins.size()), y, outer, inner, s);
  });
}

void lower_expand(LowerCtx& c, NodeId id) {
  const auto out = c.dims(id);
  auto in = c.dims(c.node(id).inputs[0]);
  in.insert(in.begin(), out.size() - in.size(), 1);  // right-align
  const size_t es = static_cast<size_t>(dtype_size(c.type(id).dtype));
  const void* x = c.in_ptr(id, 0);
  void* y = c.ptr(id);
  c.add(id, "expand", [=](cudaStream_t s) {
    launch_expand(es, x, y, in.data(), out.data(), static_cast<int>(out.size()), s);
  });
}

void lower_gather(LowerCtx& c, NodeId id) {
  if (try_lower_embedding_norm(c, id)) return;  // the gathers, their sum and its LayerNorm in one launch
  const Node& n = c.node(id);
  const auto table = c.dims(n.inputs[0]);
  const DType tdt = c.type(n.inputs[0]).dtype;
  if (is_quant(tdt)) throw Unsupported(str("cuda Gather: rows of a ", dtype_name(tdt), " table"));
  const int64_t rows = table[0], inner = prod(table, 1, table.size());
  const DType idt = c.type(n.inputs[1]).dtype;
  const int64_t n_idx = static_numel(c.type(n.inputs[1]).shape);
  const size_t es = static_cast<size_t>(dtype_size(tdt));
  const void* t = c.in_ptr(id, 0);
  const void* idx = c.in_ptr(id, 1);
  void* y = c.ptr(id);
  int32_t* const* flag = c.error_flag(id);
  c.add(id, "gather", [=](cudaStream_t s) { launch_gather(es, t, 1, rows, inner, idt, idx, n_idx, y, *flag, s); });
}

void lower_write_slice(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto st = c.dims(n.inputs[0]), up = c.dims(n.inputs[1]);
  const auto ax = static_cast<size_t>(norm_axis(n.attr<WriteSliceAttrs>().axis, st.size()));
  const int64_t outer = prod(st, 0, ax), inner = prod(st, ax + 1, st.size());
  const size_t es = static_cast<size_t>(dtype_size(n.type.dtype));
  void* state = c.ptr(id);  // aliases input 0
  const void* update = c.in_ptr(id, 1);
  const auto* offset = static_cast<const int32_t*>(c.in_ptr(id, 2));
  const int64_t state_len = st[ax], update_len = up[ax];
  int32_t* const* flag = c.error_flag(id);
  const DType st_dt = n.type.dtype, up_dt = c.type(n.inputs[1]).dtype;
  if (st_dt != up_dt) {
    c.add(id, str("write_slice ", dtype_name(up_dt), " -> ", dtype_name(st_dt)), [=](cudaStream_t s) {
      launch_write_slice_convert(st_dt, up_dt, state, update, offset, outer, state_len, update_len, inner, *flag, s);
    });
    return;
  }
  c.add(id, "write_slice", [=](cudaStream_t s) {
    launch_write_slice(es, state, update, offset, outer, state_len, update_len, inner, *flag, s);
  });
}

}  // namespace

void register_movement_lowerings() {
  register_cuda_lowering(OpKind::Reshape, {kAnyDType, kAnyDType}, lower_reshape, "reshape (view)");
  register_cuda_lowering(OpKind::Bitcast, {kAnyDType, kAnyDType}, lower_reshape, "bitcast (view)");
  register_cuda_lowering(OpKind::Transpose, {kAnyDType, kAnyDType}, lower_transpose, "transpose");
  register_cuda_lowering(OpKind::Narrow, {kAnyDType, kAnyDType}, lower_narrow, "narrow");
  register_cuda_lowering(OpKind::Concat, {kAnyDType, kAnyDType}, lower_concat, "concat", /*variadic=*/true);
  register_cuda_lowering(OpKind::Expand, {kAnyDType, kAnyDType}, lower_expand, "expand");
  for (DType i : {DType::I32, DType::I64})
    register_cuda_lowering(OpKind::Gather, {kAnyDType, i, kAnyDType}, lower_gather, "gather");
  register_cuda_lowering(OpKind::WriteSlice, {kAnyDType, kAnyDType, DType::I32, kAnyDType}, lower_write_slice,
                         "write_slice");
}

}  // namespace rlx::cuda
