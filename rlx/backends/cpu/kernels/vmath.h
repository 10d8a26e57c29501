// Private to the CPU backend: branch-free f32 exp, erf and the activations
// built on them, for hot loops.
// Written with plain arithmetic and bit casts so loops calling them
// vectorize (std::exp / std::erf are libm calls, one element at a time).
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace rlx::cpu {

// e^x, within 2 ulp for x in [−87.3, 88.7]; below that 0 (no denormals),
// above +inf, NaN stays NaN. Cody–Waite reduction
// x = n·ln2 + r, |r| ≤ ln2/2, then a degree-6 Taylor-like polynomial
// (Cephes' expf coefficients) and 2^n from the exponent bits.
inline float exp_fast(float x) {
  const float xc = x != x ? 0.0f : std::min(std::max(x, -87.33654f), 88.72283f);
  const float n = std::nearbyint(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * (r * r) + r + 1.0f;
  // 2^n for n in [−126, 128]: split in two factors so n = 128 (x near 88.7) does not overflow the exponent field.
  const auto ni = static_cast<int32_t>(n);
  const int32_t h = ni >> 1;
  const float s1 = std::bit_cast<float>((h + 127) << 23), s2 = std::bit_cast<float>((ni - h + 127) << 23);
  const float y = e * s1 * s2;
  return x != x ? x : x > 88.72283f ? HUGE_VALF : x < -87.33654f ? 0.0f : y;
}

// erf(x) by Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7, the formula
// PyTorch's vectorized CPU erf uses): 1 − (a1·t + … + a5·t⁵)·e^(−x²),
// t = 1/(1 + p·|x|), sign restored.
inline float erf_fast(float x) {
  const float ax = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * exp_fast(-ax * ax);
  return std::copysign(y, x);
}

// 0.5·x·(1 + erf(x/√2)).
inline float gelu_erf_fast(float x) { return 0.5f * x * (1.0f + erf_fast(x * 0.70710678118654752f)); }

// 2^v within 7.3e-6 (relative) for v in [−126, 127], v clamped to that
// range: the exact split v = n + f, |f| ≤ 1/2, and a degree-4 fit of 2^f.
// Enough for results stored as bf16 (2^−9 half an ulp), about half exp_fast's work.
inline float exp2_coarse(float v) {
  const float c = std::min(std::max(v, -126.0f), 127.0f);
  const float n = std::nearbyint(c), f = c - n;
  float p = 0.009670767875376081f;
  p = p * f + 0.0558755351446921f;
  p = p * f + 0.2402221165794802f;
  p = p * f + 0.6931272626213622f;
  p = p * f + 1.000000052291761f;
  return std::bit_cast<float>(std::bit_cast<int32_t>(p) + (static_cast<int32_t>(n) << 23));
}

// GELU-erf for results stored as bf16, about half gelu_erf_fast's work:
// x·σ(g(x)) with g = logit Φ as x·P(x²) (the CUDA backend's f16 fit,
// device/activation.cuh), x² clamped at 36. Measured against the exact GELU
// rounded to bf16 (CpuKernelsB.GeluErfForBf16NearExact): within 0.54 ulp for
// |x| < 4 and 2.8 ulp wherever |GELU| > 1e-6, where gelu_erf_fast's
// 1 + erf cancels (11 ulp); below −10 it is −0, as the exact value rounds.
inline float gelu_erf_for_bf16(float x) {
  const float s = std::min(x * x, 36.0f);
  float p = 4.82961013e-08f;
  p = p * s - 3.12709176e-06f;
  p = p * s + 6.03619483e-05f;
  p = p * s + 0.000675872725f;
  p = p * s - 0.106345586f;
  p = p * s - 2.30098844f;
  const float r = x / (1.0f + exp2_coarse(x * p));
  return x < -10.0f ? -0.0f : r;
}

// 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), taken as x / (1 + e^(−2u))
// (the same function: (1 + tanh u)/2 is the logistic of 2u), so it needs
// only exp and keeps exp's relative accuracy in the negative tail, where
// 1 + tanh(u) would cancel.
inline float gelu_tanh_fast(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp_fast(-2.0f * u));
}

// x / (1 + e^(−x)).
inline float silu_fast(float x) { return x / (1.0f + exp_fast(-x)); }

}  // namespace rlx::cpu
