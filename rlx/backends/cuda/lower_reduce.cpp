// Softmax, Reduce, ArgMax, TopK → the softmax and reduce kernel families.
// An axis is addressed as a contiguous [outer, axis, inner] view.
#include <algorithm>
#include <numeric>

#include "rlx/backends/cuda/kernels/reduce.h"
#include "rlx/backends/cuda/kernels/softmax.h"
#include "rlx/backends/cuda/lowering.h"

namespace rlx::cuda {
namespace {

struct AxisView {
  int64_t outer = 1, axis = 1, inner = 1;
};

AxisView view(const std::vector<int64_t>& dims, int first, int last) {  // axes [first, last]
  AxisView v;
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    const int64_t d = dims[static_cast<size_t>(i)];
    (i < first ? v.outer : i > last ? v.inner : v.axis) *= d;
  }
  return v;
}

void lower_softmax(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto dims = c.dims(id);
  const int ax = norm_axis(n.attr<AxisAttrs>().axis, dims.size());
  const AxisView v = view(dims, ax, ax);
  const DType dt = n.type.dtype;
  const void* x = c.in_ptr(id, 0);
  void* y = c.ptr(id);
  c.add(id, str("softmax ", dtype_name(dt)), [=](cudaStream_t s) { launch_softmax_axis(dt, x, y, v.outer, v.axis, v.inner, s); });
}

void lower_reduce(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto& a = n.attr<ReduceAttrs>();
  std::vector<int64_t> dims = c.dims(n.inputs[0]);
  std::vector<int> axes;
  for (int ax : a.axes) axes.push_back(norm_axis(ax, dims.size()));
  std::sort(axes.begin(), axes.end());
  const DType dt = n.type.dtype;
  const int64_t esize = dtype_size(dt);
  // Runs of adjacent axes reduce in one launch; separate runs reduce one
  // after another through the workspace (mean of equal-sized group means is
  // the mean, so Mean composes too — except integer Mean, which would truncate twice).
  std::vector<std::pair<int, int>> runs;
  for (int ax : axes) {
    if (!runs.empty() && runs.back().second + 1 == ax) runs.back().second = ax;
    else runs.push_back({ax, ax});
  }
  if (runs.size() > 1 && a.fn == ReduceFn::Mean && is_int(dt))
    throw Unsupported(str("cuda Reduce: integer mean over non-adjacent axes"));
  const void* src = c.in_ptr(id, 0);
  void* const* ws = c.workspace_slot();
  const int64_t in_bytes = shape_numel(dims) * esize;
  // Two ping-pong halves for intermediate results.
  if (runs.size() > 1) c.need_workspace(static_cast<size_t>(2 * ((in_bytes + 255) / 256 * 256)));
  const int64_t half = (in_bytes + 255) / 256 * 256;
  for (size_t r = runs.size(); r-- > 0;) {  // innermost run first keeps indices of outer runs valid
    const AxisView v = view(dims, runs[r].first, runs[r].second);
    const bool last = r == 0;
    const size_t step = runs.size() - 1 - r;
    const ReduceFn fn = a.fn;
    void* final_out = c.ptr(id);
    c.add(id, str("reduce ", reduce_name(fn), " ", dtype_name(dt)), [=](cudaStream_t s) {
      const void* in = step == 0 ? src : static_cast<const char*>(*ws) + ((step - 1) % 2) * half;
      void* out = last ? final_out : static_cast<char*>(*ws) + (step % 2) * half;
      launch_reduce(fn, dt, in, out, v.outer, v.axis, v.inner, s);
    });
    for (int k = runs[r].first; k <= runs[r].second; ++k) dims[static_cast<size_t>(k)] = 1;
  }
}

void lower_argmax(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto dims = c.dims(n.inputs[0]);
  const int ax = norm_axis(n.attr<ArgMaxAttrs>().axis, dims.size());
  const AxisView v = view(dims, ax, ax);
  const DType dt = c.type(n.inputs[0]).dtype;
  const void* x = c.in_ptr(id, 0);
  auto* y = static_cast<int32_t*>(c.ptr(id));
  const ArgmaxPlan plan = argmax_plan(dt, v.outer, v.axis, v.inner);
  c.need_workspace(plan.workspace_bytes);
  void* const* wslot = c.workspace_slot();
  int32_t* const* cslot = plan.counters ? c.counters(plan.counters) : nullptr;
  c.add(id, str("argmax ", dtype_name(dt), plan.splits > 1 ? str(" (", plan.splits, " splits per row)") : ""),
        [=](cudaStream_t s) {
          launch_argmax(dt, x, y, v.outer, v.axis, v.inner, s, cslot ? *wslot : nullptr, cslot ? *cslot : nullptr);
        });
}

void lower_topk(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto& a = n.attr<TopKAttrs>();
  const auto dims = c.dims(n.inputs[0]);
  const int64_t cols = dims.back(), rows = shape_numel(dims) / std::max<int64_t>(cols, 1);
  if (a.k > kMaxTopK) throw Unsupported(str("cuda TopK: k=", a.k, " exceeds ", kMaxTopK));
  const DType dt = c.type(n.inputs[0]).dtype;
  const void* x = c.in_ptr(id, 0);
  void* y = c.ptr(id);
  const int k = a.k;
  const bool idx = a.indices;
  c.add(id, str("topk ", dtype_name(dt)), [=](cudaStream_t s) { launch_topk(dt, x, y, rows, cols, k, idx, s); });
}

}  // namespace

void register_reduce_lowerings() {
  register_cuda_float_lowering(OpKind::Softmax, {DType::F32, DType::F32}, lower_softmax, "softmax");
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    register_cuda_lowering(OpKind::Reduce, {t, t}, lower_reduce, str("reduce [", dtype_name(t), "]"));
    register_cuda_lowering(OpKind::ArgMax, {t, DType::I32}, lower_argmax, str("argmax [", dtype_name(t), "]"));
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    register_cuda_lowering(OpKind::TopK, {t, t}, lower_topk, str("topk values [", dtype_name(t), "]"));
    register_cuda_lowering(OpKind::TopK, {t, DType::I32}, lower_topk, str("topk indices [", dtype_name(t), "]"));
  }
}

}  // namespace rlx::cuda
