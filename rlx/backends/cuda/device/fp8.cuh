// fp8 ↔ f32 on the device, bit-exact ports of rlx/core/half.h: OCP E4M3 (no
// infinities, max 448, NaN only at S.1111.111; f32 → e4m3 rounds to nearest
// even and saturates to ±448) and E5M2 (an f16's high byte; f32 → e5m2
// rounds once, directly from f32). Shared by the Cast kernels, the fp8
// weight decoders and the fp8 quantization kernel.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rlx::cuda::dev {

__device__ __forceinline__ float e4m3_to_f32(uint8_t v) {
  const uint32_t e = (v >> 3) & 0xfu, m = v & 7u, s = (v & 0x80u) << 24;
  if (e == 15 && m == 7) return __uint_as_float(0x7fc00000u | s);
  if (e == 0) return __uint_as_float(s | __float_as_uint(static_cast<float>(m) * 0.001953125f));
  return __uint_as_float(s | ((e + 120) << 23) | (m << 20));
}
__device__ __forceinline__ uint8_t f32_to_e4m3(float f) {
  const uint32_t u = __float_as_uint(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  if (a >= 0x43e00000u) return sign | 0x7e;  // ≥ 448 (and inf) saturate
  if (a < 0x3c800000u) return sign | static_cast<uint8_t>(rintf(__uint_as_float(a) * 512.0f));  // subnormal: m·2^-9
  const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;  // RNE to 3 mantissa bits
  return sign | static_cast<uint8_t>(r - (120u << 3));
}
// Two f32 → two e4m3 codes (a's in the low byte), each as f32_to_e4m3 gives it
// (NaN stays NaN, its sign aside): on sm_89+ one hardware conversion for both.
__device__ __forceinline__ uint16_t f32x2_to_e4m3x2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
#else
  return static_cast<uint16_t>(f32_to_e4m3(a) | (f32_to_e4m3(b) << 8));
#endif
}
__device__ __forceinline__ float e5m2_to_f32(uint8_t v) {
  return __half2float(__ushort_as_half(static_cast<uint16_t>(v << 8)));
}
__device__ __forceinline__ uint8_t f32_to_e5m2(float f) {
  const uint32_t u = __float_as_uint(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e;   // NaN stays NaN
  if (a >= 0x47700000u) return sign | 0x7c;  // ≥ 61440 rounds to inf
  if (a < 0x38800000u) return sign | static_cast<uint8_t>(rintf(__uint_as_float(a) * 65536.0f));  // m·2^-16
  const uint32_t r = a - 0x38000000u;
  return sign | static_cast<uint8_t>((r + 0xfffffu + ((r >> 21) & 1u)) >> 21);
}

}  // namespace rlx::cuda::dev
