// The gate activations of FusedSwiGLU / FusedGeGLU (kernels/glu.h GluKind),
// shared by the GLU kernel and the GEMV that fuses it. Full-precision
// libdevice routines: the library builds with --use_fast_math.
#pragma once
#include <cuda_runtime.h>

#include "rlx/backends/cuda/kernels/glu.h"

extern "C" __device__ float __nv_expf(float);
extern "C" __device__ float __nv_tanhf(float);

namespace rlx::cuda::dev {

template <GluKind K>
__device__ __forceinline__ float glu_act(float g) {
  if constexpr (K == GluKind::SwiGLU) return __fdiv_rn(g, 1.0f + __nv_expf(-g));
  else if constexpr (K == GluKind::GeGLUErf) return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f));
  else return 0.5f * g * (1.0f + __nv_tanhf(0.79788456080286536f * (g + 0.044715f * g * g * g)));
}

__device__ __forceinline__ float glu_act(GluKind k, float g) {
  switch (k) {
    case GluKind::SwiGLU: return glu_act<GluKind::SwiGLU>(g);
    case GluKind::GeGLUErf: return glu_act<GluKind::GeGLUErf>(g);
    default: return glu_act<GluKind::GeGLUTanh>(g);
  }
}

}  // namespace rlx::cuda::dev
