// Activation math shared by the elementwise kernels and the GEMM epilogue
// (kernels/gemm_sm90.cu), so a fused epilogue computes what the separate
// unary kernel would. The library builds without --use_fast_math: a fast
// instruction (ex2_approx, __fdividef) is used where its error is accounted for.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "rlx/backends/cuda/device/gelu_f16x2_fit.h"
#include "rlx/backends/cuda/device/types.cuh"

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

// GELU-erf for f16 storage in 12 instructions (gelu_erf_bf16 takes ~21):
// x·σ(g(x)) with g = logit Φ, which is odd, fitted as x·P(x²) with P of
// degree 5 (weighted minimax on |x| ≤ 5.6, the weights being each f16
// output's half-ulp); the coefficients below carry the −log₂e of
// σ(g) = 1/(1 + 2^(−g·log₂e)). x² is clamped at 36, past which g's fit
// stops tracking: for x < −6 the exponent stays ≥ 3·|x| and the result rounds
// to −0 in f16, as the exact GELU does; for x > 6 it is x. No cancellation in
// the negative tail (the exponential only grows there). Within 0.33 ulp of the
// exact GELU for every finite f16 input (a float32 emulation), and within one
// ulp of the correctly rounded value on the H200
// (CudaKernels.GeluErf16BitEveryInput). Cheaper matters in the GEMM epilogue,
// where the activation runs on one warp per scheduler beside the other
// consumer's main loop.
__device__ __forceinline__ float gelu_erf_f16(float x) {
  const float s = fminf(x * x, 36.0f);
  float p = 4.82961013e-08f;
  p = fmaf(p, s, -3.12709176e-06f);
  p = fmaf(p, s, 6.03619483e-05f);
  p = fmaf(p, s, 0.000675872725f);
  p = fmaf(p, s, -0.106345586f);
  p = fmaf(p, s, -2.30098844f);
  return __fdividef(x, 1.0f + ex2_approx(x * p));  // below 2^−126 the exponential no longer moves 1 + e
}

// GELU-erf of two f16 values (one register) in f16x2 arithmetic, for the
// ping-pong GEMM's epilogue (RLX_CUDA_GELU_F16X2), whose activation runs on
// one warp per scheduler: h + h·tanh(z) with h = x/2 and z = x·Q(min(x², 36))
// ≈ logit Φ(x)/2, Q of degree 2 (least squares on |x| < 5 weighted by
// sech² z, the error's weight in tanh; device/gelu_f16x2_fit.h). Per pair:
// 7 f16x2 instructions and two MUFU.TANH.F16, against ~26 and four MUFU for gelu_erf_f16 on each half with
// its conversions. Error (every f16 input, float64 reference): within an ulp
// for x ≥ 0; for x < 0 the result is h·(1 + t) with t an f16 near −1 (steps
// of 2^-11, and tanh.approx is off by one step there: gelu(−4.22) comes out
// −1.03e-3 against −5.2e-5), so the error is absolute: 1.23e-3 at worst on
// an H100; the bound is 2^-10·max(1, |x|), about an ulp of x
// (GemmSm90.GeluErfF16x2EveryInput; an f16 emulation with every tanh a step
// off reaches 5.1e-4·max(1, |x|)): many ulps of the tiny outputs past
// x ≈ −2, below the rounding of the outputs near |x|.
__device__ __forceinline__ uint32_t gelu_erf_f16x2(uint32_t v) {
  const __half2 x = *reinterpret_cast<const __half2*>(&v);
  // NaN x: u = the clamp, and the NaN stays in h.
  const __half2 u = __hmin2(__hmul2(x, x), __float2half2_rn(kGeluF16x2Clamp));
  __half2 q = __hfma2(u, __float2half2_rn(kGeluF16x2Q2), __float2half2_rn(kGeluF16x2Q1));
  q = __hfma2(q, u, __float2half2_rn(kGeluF16x2Q0));
  const __half2 z = __hmul2(x, q);
  uint32_t t;
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(t) : "r"(*reinterpret_cast<const uint32_t*>(&z)));
  const __half2 h = __hmul2(x, __float2half2_rn(0.5f));
  const __half2 r = __hfma2(h, *reinterpret_cast<const __half2*>(&t), h);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// GELU-erf for bf16 storage, x·Φ(x) with Φ(x) = erfc(−x/√2)/2 and erfc from
// Numerical Recipes' Chebyshev fit, t·exp(−z² + P(t)) with t = 1/(1 + z/2)
// (fractional error < 1.2e-7 for every z ≥ 0). Against 0.5·x·(1 + erff(x/√2))
// it has no cancellation in the negative tail, where 1 + erf keeps few of
// bf16's digits (a numpy emulation of that form, even with an exact erf, is
// off by up to 255 bf16 ulps there), and about half the instructions (the
// FFN's GELU is mostly memory-bound, though: 61.7 → 60.4 µs at 32768 × 1536).
// Within one ulp of the correctly rounded GELU for every finite f16 and bf16
// input (CudaKernels.GeluErf16BitEveryInput). bf16 needs the longer fit:
// its outputs stay normal down to x ≈ −13, past any short polynomial for g.
// f32 storage keeps erff: there the fit's error would show.
__device__ __forceinline__ float gelu_erf_bf16(float x) {
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
  const float e = t * exp2f(fmaf(-z, z, p) * 1.4426950408889634f);  // erfc(z); bf16 keeps its denormal-range results
  return x * (x >= 0.0f ? fmaf(-0.5f, e, 1.0f) : 0.5f * e);
}

// GELU-erf for a 16-bit storage type T (__half or __nv_bfloat16).
template <typename T>
__device__ __forceinline__ float gelu_erf_16bit(float x) {
  if constexpr (std::is_same_v<T, __half>) return gelu_erf_f16(x);
  else return gelu_erf_bf16(x);
}

}  // namespace rlx::cuda::dev
