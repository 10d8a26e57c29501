// dev::GemvUnit<T>'s raw unit bytes read from shared memory: GemvUnit::load
// reads global memory (__ldg); lds_raw(GemvUnit<T>{}, b, j) builds the same
// Raw from a block at b in shared memory (kernels/gemv_staged.cu's stages,
// and the benchmarks that stage weights the same way). Units with kAlign 2
// read whole 4-byte words and funnel-shift, so up to 2 bytes past a unit's
// data may be read: keep that slack inside the buffer.
#pragma once
#include <cstdint>

#include "rlx/backends/cuda/device/quant_blocks.cuh"

namespace rlx::cuda::dev {

__device__ __forceinline__ uint32_t lds_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// N 32-bit words from a 2-byte-aligned shared address (one extra word when it
// is not 4-byte aligned; the stage's slack keeps that word inside the buffer).
template <int N>
__device__ __forceinline__ void lds_words_a2(const uint8_t* p, uint32_t (&o)[N]) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint32_t*>(p - (a & 3));
  const uint32_t sh = 8 * static_cast<uint32_t>(a & 3);
  uint32_t v[N + 1];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = w[i];
  v[N] = sh ? w[N] : 0u;
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] = __funnelshift_r(v[i], v[i + 1], sh);
}
__device__ __forceinline__ uint32_t lds_u32_a2(const uint8_t* p) {
  uint32_t o[1];
  lds_words_a2<1>(p, o);
  return o[0];
}
__device__ __forceinline__ uint2 lds8_a2(const uint8_t* p) {
  uint32_t o[2];
  lds_words_a2<2>(p, o);
  return make_uint2(o[0], o[1]);
}
__device__ __forceinline__ uint4 lds16_a2(const uint8_t* p) {
  uint32_t o[4];
  lds_words_a2<4>(p, o);
  return make_uint4(o[0], o[1], o[2], o[3]);
}


// Same byte positions as dev::GemvUnit<T>::load (quant_blocks.cuh).
__device__ __forceinline__ GemvUnit<DType::Q4_0>::Raw lds_raw(GemvUnit<DType::Q4_0>, const uint8_t* b, int j) {
  return {lds_u16(b), lds8_a2(b + 2 + 8 * j)};
}
__device__ __forceinline__ GemvUnit<DType::Q5_0>::Raw lds_raw(GemvUnit<DType::Q5_0>, const uint8_t* b, int j) {
  return {lds_u16(b), lds_u32_a2(b + 2), lds8_a2(b + 6 + 8 * j), j};
}
__device__ __forceinline__ GemvUnit<DType::Q8_0>::Raw lds_raw(GemvUnit<DType::Q8_0>, const uint8_t* b, int j) {
  return {lds_u16(b), lds16_a2(b + 2 + 16 * j)};
}
__device__ __forceinline__ GemvUnit<DType::Q4_K>::Raw lds_raw(GemvUnit<DType::Q4_K>, const uint8_t* b, int j) {
  return {*reinterpret_cast<const uint4*>(b), *reinterpret_cast<const uint4*>(b + 16 + 16 * j), j};
}
__device__ __forceinline__ GemvUnit<DType::Q5_K>::Raw lds_raw(GemvUnit<DType::Q5_K>, const uint8_t* b, int j) {
  return {*reinterpret_cast<const uint4*>(b), *reinterpret_cast<const uint4*>(b + 16 + 16 * (j % 2)),
          *reinterpret_cast<const uint4*>(b + 48 + 16 * j), j};
}
__device__ __forceinline__ GemvUnit<DType::Q6_K>::Raw lds_raw(GemvUnit<DType::Q6_K>, const uint8_t* b, int j) {
  const int n = j / 4, l = 8 * (j % 4);
  return {lds8_a2(b + 64 * n + l), lds8_a2(b + 64 * n + 32 + l), lds8_a2(b + 128 + 32 * n + l),
          lds8_a2(b + 192 + 8 * n), lds_u16(b + 208), j};
}
__device__ __forceinline__ GemvUnit<DType::IQ4_XS>::Raw lds_raw(GemvUnit<DType::IQ4_XS>, const uint8_t* b, int j) {
  const auto* p = reinterpret_cast<const uint2*>(b + 8 + 16 * j);
  return {*reinterpret_cast<const uint2*>(b), p[0], p[1], j};
}

}  // namespace rlx::cuda::dev
