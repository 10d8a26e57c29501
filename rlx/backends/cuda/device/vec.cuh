// Vector loads and stores: N elements of T moved as one aligned access
// (16 bytes for the usual widths), converted to and from f32 in registers.
#pragma once
#include "rlx/backends/cuda/device/types.cuh"

namespace rlx::cuda::dev {

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ void load_f32(const T* p, float (&o)[N]) {
  const Vec<T, N> t = *reinterpret_cast<const Vec<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] = to_f32(t.v[i]);
}

template <typename T, int N>
__device__ __forceinline__ void store_f32(T* p, const float (&o)[N]) {
  Vec<T, N> t;
#pragma unroll
  for (int i = 0; i < N; ++i) t.v[i] = from_f32<T>(o[i]);
  *reinterpret_cast<Vec<T, N>*>(p) = t;
}

}  // namespace rlx::cuda::dev
