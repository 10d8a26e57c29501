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

// NV vectors of V elements of T that one thread holds of a row: as f32, or
// (kPacked) as the loaded vectors themselves, converted on each use. Packed
// 16-bit rows take half the registers, so a thread keeps twice the bytes in
// flight at the same occupancy, which is what a bandwidth-bound row kernel
// needs; values the kernel rewrites in place need the f32 form.
template <typename T, int V, int NV, bool kPacked>
struct RowRegs {
  float f[NV][V];
  __device__ __forceinline__ void load(int j, const T* p) { load_f32<T, V>(p, f[j]); }
  __device__ __forceinline__ void fill(int j, float x) {
#pragma unroll
    for (int i = 0; i < V; ++i) f[j][i] = x;
  }
  __device__ __forceinline__ float at(int j, int i) const { return f[j][i]; }
  __device__ __forceinline__ void reload() {}
};
template <typename T, int V, int NV>
struct RowRegs<T, V, NV, true> {
  Vec<T, V> r[NV];
  __device__ __forceinline__ void load(int j, const T* p) { r[j] = *reinterpret_cast<const Vec<T, V>*>(p); }
  __device__ __forceinline__ void fill(int j, float x) {
#pragma unroll
    for (int i = 0; i < V; ++i) r[j].v[i] = from_f32<T>(x);
  }
  __device__ __forceinline__ float at(int j, int i) const { return to_f32(r[j].v[i]); }
  // Call between passes: makes the packed words opaque, so the next pass
  // converts them again instead of the compiler keeping the previous pass's
  // floats alive (which would undo the packing and spill).
  __device__ __forceinline__ void reload() {
    static_assert(sizeof(Vec<T, V>) % 4 == 0);
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
      for (int w = 0; w < static_cast<int>(sizeof(Vec<T, V>) / 4); ++w)
        asm volatile("" : "+r"(reinterpret_cast<uint32_t*>(&r[j])[w]));
  }
};

}  // namespace rlx::cuda::dev
