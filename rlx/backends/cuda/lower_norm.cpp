// LayerNorm, RmsNorm and their fused-residual forms → the norm kernel family.
#include "rlx/backends/cuda/kernels/norm.h"
#include "rlx/backends/cuda/lowering.h"

namespace rlx::cuda {
namespace {

void lower_norm(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const bool residual = n.op == OpKind::FusedResidualLayerNorm || n.op == OpKind::FusedResidualRmsNorm;
  const bool layer = n.op == OpKind::LayerNorm || n.op == OpKind::FusedResidualLayerNorm;
  const size_t p = residual ? 2 : 1;  // index of gamma
  const DType xt = n.type.dtype, pt = c.type(n.inputs[p]).dtype;
  const int64_t cols = n.type.shape.back().value;
  const int64_t rows = static_numel(n.type.shape) / std::max<int64_t>(cols, 1);
  const float eps = n.attr<NormAttrs>().eps;
  const void* x = c.in_ptr(id, 0);
  const void* r = residual ? c.in_ptr(id, 1) : nullptr;
  const void* gamma = c.in_ptr(id, p);
  const void* beta = layer ? c.in_ptr(id, p + 1) : nullptr;
  void* y = c.ptr(id);
  if (layer) {
    c.add(id, str("layer_norm ", dtype_name(xt), residual ? " +residual" : ""),
          [=](cudaStream_t s) { launch_layer_norm(xt, pt, x, r, gamma, beta, y, nullptr, rows, cols, eps, s); });
  } else {
    c.add(id, str("rms_norm ", dtype_name(xt), residual ? " +residual" : ""),
          [=](cudaStream_t s) { launch_rms_norm(xt, pt, x, r, gamma, y, nullptr, rows, cols, eps, s); });
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
        [=](cudaStream_t s) { launch_post_rms_norm(xt, pt, x, a, w1, w2, y, h, rows, cols, eps, s); });
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
