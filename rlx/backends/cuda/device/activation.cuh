// Activation math shared by the elementwise kernels and the GEMM epilogue
// (kernels/gemm_sm90.cu), so a fused epilogue computes what the separate
// unary kernel would. Full-precision libdevice routines: the library builds
// with --use_fast_math.
#pragma once
#include <cuda_runtime.h>

extern "C" __device__ float __nv_expf(float);
extern "C" __device__ float __nv_tanhf(float);

namespace rlx::cuda::dev {

// Overflow-free logistic function, correctly rounded division.
__device__ __forceinline__ float sigmoid_f32(float x) {
  if (x >= 0.0f) return __fdiv_rn(1.0f, 1.0f + __nv_expf(-x));
  const float e = __nv_expf(x);
  return __fdiv_rn(e, 1.0f + e);
}

__device__ __forceinline__ float gelu_tanh_f32(float x) {
  return 0.5f * x * (1.0f + __nv_tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

// GELU-erf for 16-bit storage, x·Φ(x) with Φ(x) = erfc(−x/√2)/2 and erfc from
// Numerical Recipes' Chebyshev fit, t·exp(−z² + P(t)) with t = 1/(1 + z/2)
// (fractional error < 1.2e-7 for every z ≥ 0). Against 0.5·x·(1 + erff(x/√2))
// it has no cancellation in the negative tail, where 1 + erf keeps few of
// bf16's digits (a numpy emulation of that form, even with an exact erf, is
// off by up to 255 bf16 ulps there), and about half the instructions (the
// FFN's GELU is mostly memory-bound, though: 61.7 → 60.4 µs at 32768 × 1536).
// Within one ulp of the correctly rounded GELU for every finite f16 and bf16
// input (CudaKernels.GeluErf16BitEveryInput). f32 storage keeps erff: there
// the fit's error would show.
__device__ __forceinline__ float gelu_erf_16bit(float x) {
  const float z = fabsf(x) * 0.70710678118654752f;
  const float t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  const float e = t * exp2f(fmaf(-z, z, p) * 1.4426950408889634f);  // erfc(z)
  return x * (x >= 0.0f ? fmaf(-0.5f, e, 1.0f) : 0.5f * e);
}

}  // namespace rlx::cuda::dev
