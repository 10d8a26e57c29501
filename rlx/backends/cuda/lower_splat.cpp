// GaussianSplatRender → kernels/splat.cu: projection, a CUB depth sort and
// per-tile blending in the program's workspace (sized by the Gaussian count
// alone), one thunk. Bad parameters set the node's error flag; the run then
// reports them (cuda_backend.cpp).
#include "rlx/backends/cuda/kernels/splat.h"
#include "rlx/backends/cuda/lowering.h"

namespace rlx::cuda {
namespace {

void lower_splat(LowerCtx& c, NodeId id) {
  const Node& n = c.node(id);
  const auto& attrs = n.attr<SplatAttrs>();
  SplatArgs a{};
  a.means = static_cast<const float*>(c.in_ptr(id, 0));
  a.scales = static_cast<const float*>(c.in_ptr(id, 1));
  a.rotations = static_cast<const float*>(c.in_ptr(id, 2));
  a.opacities = static_cast<const float*>(c.in_ptr(id, 3));
  a.colors = static_cast<const float*>(c.in_ptr(id, 4));
  a.view = static_cast<const float*>(c.in_ptr(id, 5));
  a.intrinsics = static_cast<const float*>(c.in_ptr(id, 6));
  a.background = static_cast<const float*>(c.in_ptr(id, 7));
  a.out = static_cast<float*>(c.ptr(id));
  a.n = c.dims(n.inputs[0])[0];
  a.width = attrs.width;
  a.height = attrs.height;
  a.near_plane = attrs.near_plane;
  a.eps2d = attrs.eps2d;
  c.need_workspace(splat_workspace_bytes(a.n));
  void* const* ws = c.workspace_slot();
  int32_t* const* flag = c.error_flag(id);
  c.add(id, str("gaussian splat (", a.n, " gaussians, ", a.width, "x", a.height, ")"), [a, ws, flag](cudaStream_t s) {
    SplatArgs args = a;
    args.error_flag = *flag;
    launch_splat(args, *ws, s);
  });
}

}  // namespace

void register_splat_lowerings() {
  register_cuda_lowering(OpKind::GaussianSplatRender,
                         {DType::F32, DType::F32, DType::F32, DType::F32, DType::F32, DType::F32, DType::F32,
                          DType::F32, DType::F32},
                         lower_splat, "gaussian splat (f64 projection, CUB depth sort, 16x16 tiles)");
}

}  // namespace rlx::cuda
