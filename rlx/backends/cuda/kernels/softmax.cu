// Softmax over the last axis, and over an arbitrary axis via (outer, axis, inner).
//
// Last axis: the row is held in registers exactly as in norm.cu — each thread
// loads NV 16-byte vectors (all in flight before first use), the row max is
// reduced (warp shuffles, or shared memory across warps in block mode), each
// element becomes exp(x − max) in place, the sum is reduced, and the thread
// stores the vectors it loaded scaled by 1/sum. x is read once and y written
// once: 2 · rows · cols · sizeof(T) bytes of traffic.
//   cols ≤ 1024 : one warp per row, 4 rows per block.
//   ≤ 8192, 16-bit: one block per row, 4 vectors per thread kept packed
//                 (softmax_packed_kernel, below).
//   ≤ 16384     : one block per row, cols/(4·V) threads (4 vectors each).
//   otherwise, or cols % V ≠ 0 / misaligned: a scalar block-per-row kernel
//   reading the row three times (max, sum, write; re-reads hit L1/L2).
// A row that is entirely −inf has max = −inf; it is written as zeros. A NaN or
// +inf in a row makes the whole row NaN (as the CPU kernel).
//
// Other axis (inner > 1): one thread per (outer, inner) column walks the axis
// with an online max/sum (one read), then writes (second read); neighbouring
// threads take neighbouring inner indices, so every access is coalesced.
#include "rlx/backends/cuda/kernels/softmax.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/device/vec.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"

namespace rlx::cuda {
namespace {

using dev::from_f32;
using dev::to_f32;

using dev::Vec;
using dev::load_f32;
using dev::store_f32;

__device__ __forceinline__ float row_max(float v, float* scratch) {
  if (blockDim.x == 32) return dev::warp_max(v);
  return dev::block_max(v, scratch);
}
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  if (blockDim.x == 32) return dev::warp_sum(v);
  return dev::block_sum(v, scratch);
}

constexpr int max_threads_for(int elems_per_thread) { return elems_per_thread <= 16 ? 1024 : 512; }

template <typename T, int NV>
__global__ void __launch_bounds__(max_threads_for(NV * 16 / sizeof(T)))
    softmax_reg_kernel(const T* xg, T* yg, int64_t rows, int cols) {
  dev::pdl_begin();
  constexpr int V = 16 / sizeof(T);
  __shared__ float scratch[32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // warp mode only: whole warps leave
  const int tpr = blockDim.x, t = threadIdx.x;
  const T* x = xg + static_cast<size_t>(row) * cols;
  T* y = yg + static_cast<size_t>(row) * cols;

  float v[NV][V];
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = (j * tpr + t) * V;
    if (c < cols) {
      load_f32<T, V>(x + c, v[j]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[j][i] = -INFINITY;
    }
  }
#pragma unroll
  for (int j = 0; j < NV; ++j)
#pragma unroll
    for (int i = 0; i < V; ++i) m = fmaxf(m, v[j][i] != v[j][i] ? INFINITY : v[j][i]);  // NaN → row NaN
  m = row_max(m, scratch);
  const bool dead = m == -INFINITY;  // all −inf → zeros (avoids −inf − −inf = NaN)
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      v[j][i] = dead ? 0.0f : __expf(v[j][i] - m);
      s += v[j][i];
    }
  s = row_sum(s, scratch);
  const float inv = dead ? 0.0f : 1.0f / s;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = (j * tpr + t) * V;
    if (c >= cols) continue;
#pragma unroll
    for (int i = 0; i < V; ++i) v[j][i] *= inv;
    store_f32<T, V>(y + c, v[j]);
  }
}

// The 16-bit pair type, for the packed max.
template <typename T> struct Pair;
template <> struct Pair<__half> { using type = __half2; };
template <> struct Pair<__nv_bfloat16> { using type = __nv_bfloat162; };

// Packed 16-bit rows (1025-8192 columns), bandwidth-bound like norm.cu's
// packed rows: each thread keeps its four 16-byte vectors as loaded (16
// registers), so 1280 threads fit per SM with 64 bytes each in flight. The
// max is taken on the pairs themselves (NaN-propagating); exp(x - max) is
// computed once per element, summed in f32 and written back over x in T, and
// the store pass scales those by 1/sum in f32. Rounding e to T first adds at
// most half an ulp of T to the output (f16: e < 2^-14 is a subnormal, but so
// is every output below it, since sum ≥ 1). The alternatives measured worse:
// e kept as f32 (32 registers of row: 81% of the copy bandwidth at 4096
// columns), or exp computed again in the store pass (64%; by our count two
// ex2 per element keep the MUFU pipe busy as long as the memory traffic).
constexpr int kPackedThreads = 256, kPackedMinBlocks = 5, kPackedNV = 4;

template <typename T>
__global__ void __launch_bounds__(kPackedThreads, kPackedMinBlocks)
    softmax_packed_kernel(const T* xg, T* yg, int cols) {
  dev::pdl_begin();
  using P2 = typename Pair<T>::type;
  constexpr int V = 8, NV = kPackedNV, NP = V / 2;
  __shared__ float scratch[32];
  const int tpr = blockDim.x, t = threadIdx.x;
  const T* x = xg + static_cast<size_t>(blockIdx.x) * cols;
  T* y = yg + static_cast<size_t>(blockIdx.x) * cols;

  dev::RowRegs<T, V, NV, true> r;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = (j * tpr + t) * V;
    if (c < cols) r.load(j, x + c);
    else r.fill(j, -INFINITY);
  }
  P2 m2 = reinterpret_cast<const P2*>(&r.r[0])[0];
#pragma unroll
  for (int j = 0; j < NV; ++j)
#pragma unroll
    for (int p = 0; p < NP; ++p) m2 = __hmax2_nan(m2, reinterpret_cast<const P2*>(&r.r[j])[p]);
  const float2 mf = dev::unpack2<T>(*reinterpret_cast<const uint32_t*>(&m2));
  // NaN or +inf anywhere makes the row NaN: NaN enters the reduction as +inf
  // (fmaxf would drop it), and the element's own exponent is then NaN
  // (NaN − inf, or inf − inf), which the sum spreads over the row.
  const float m = row_max(mf.x != mf.x || mf.y != mf.y ? INFINITY : fmaxf(mf.x, mf.y), scratch);
  const bool dead = m == -INFINITY;  // all −inf → zeros (avoids −inf − −inf = NaN)
  const float ml = dead ? 0.0f : m * 1.4426950408889634f;  // dead: every exponent is ex2(−inf) = 0
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j)
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      uint32_t& w = reinterpret_cast<uint32_t*>(&r.r[j])[p];
      const float2 f = dev::unpack2<T>(w);
      const float e0 = dev::ex2_approx(fmaf(f.x, 1.4426950408889634f, -ml));
      const float e1 = dev::ex2_approx(fmaf(f.y, 1.4426950408889634f, -ml));
      s += e0 + e1;
      w = dev::pack2<T>(e0, e1);
    }
  s = row_sum(s, scratch);
  r.reload();
  const float inv = dead ? 0.0f : 1.0f / s;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = (j * tpr + t) * V;
    if (c >= cols) continue;
    uint4 o;
    uint32_t* ow = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const float2 f = dev::unpack2<T>(reinterpret_cast<const uint32_t*>(&r.r[j])[p]);
      ow[p] = dev::pack2<T>(f.x * inv, f.y * inv);
    }
    *reinterpret_cast<uint4*>(y + c) = o;
  }
}

template <typename T>
__global__ void __launch_bounds__(256) softmax_generic_kernel(const T* xg, T* yg, int cols) {
  dev::pdl_begin();
  __shared__ float scratch[32];
  const T* x = xg + static_cast<size_t>(blockIdx.x) * cols;
  T* y = yg + static_cast<size_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = to_f32(x[c]);
    m = fmaxf(m, v != v ? INFINITY : v);
  }
  m = dev::block_max(m, scratch);
  const bool dead = m == -INFINITY;
  float s = 0.0f;
  if (!dead)
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(to_f32(x[c]) - m);
  s = dev::block_sum(s, scratch);
  const float inv = dead ? 0.0f : 1.0f / s;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[c] = from_f32<T>(dead ? 0.0f : __expf(to_f32(x[c]) - m) * inv);
}

// One thread per (outer, inner) column; online max/sum over the axis.
template <typename T>
__global__ void __launch_bounds__(256)
    softmax_axis_kernel(const T* x, T* y, int64_t outer, int64_t axis, int64_t inner) {
  dev::pdl_begin();
  const int64_t n = outer * inner;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = idx / inner, i = idx - o * inner;
    const size_t base = static_cast<size_t>(o) * axis * inner + i;
    float m = -INFINITY, s = 0.0f;
    bool nan = false;
    for (int64_t a = 0; a < axis; ++a) {
      const float v = to_f32(x[base + a * inner]);
      nan |= v != v;
      if (v > m) {
        s = s * __expf(m - v) + 1.0f;
        m = v;
      } else if (v != -INFINITY) {
        s += __expf(v - m);  // NaN propagates through here
      }
    }
    const bool dead = m == -INFINITY && !nan;
    const float inv = dead ? 0.0f : (nan || m == INFINITY) ? NAN : 1.0f / s;  // NaN/+inf → NaN column (as the CPU)
    for (int64_t a = 0; a < axis; ++a) {
      const size_t k = base + a * inner;
      y[k] = from_f32<T>(dead ? 0.0f : __expf(to_f32(x[k]) - m) * inv);
    }
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T>
void launch_rows(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  if (cols % V == 0 && aligned16(x) && aligned16(y)) {
    const int nvec = cols / V;
    if (cols <= 1024) {
      const dim3 block(32, 4), grid(static_cast<unsigned>((rows + 3) / 4));
      if (nvec <= 32) softmax_reg_kernel<T, 1><<<grid, block, 0, stream>>>(x, y, rows, cols);
      else if (nvec <= 64) softmax_reg_kernel<T, 2><<<grid, block, 0, stream>>>(x, y, rows, cols);
      else if (nvec <= 128) softmax_reg_kernel<T, 4><<<grid, block, 0, stream>>>(x, y, rows, cols);
      else if constexpr (V == 4) softmax_reg_kernel<T, 8><<<grid, block, 0, stream>>>(x, y, rows, cols);
      RLX_CUDA_CHECK_LAUNCH("Softmax");
      return;
    }
    const int tpr = ((nvec + 4 * 32 - 1) / (4 * 32)) * 32;
    if constexpr (sizeof(T) == 2) {
      if (tpr <= kPackedThreads) {
        softmax_packed_kernel<T><<<static_cast<unsigned>(rows), tpr, 0, stream>>>(x, y, cols);
        RLX_CUDA_CHECK_LAUNCH("Softmax");
        return;
      }
    }
    if (tpr <= max_threads_for(4 * V)) {
      softmax_reg_kernel<T, 4><<<static_cast<unsigned>(rows), tpr, 0, stream>>>(x, y, rows, cols);
      RLX_CUDA_CHECK_LAUNCH("Softmax");
      return;
    }
  }
  softmax_generic_kernel<T><<<static_cast<unsigned>(rows), cols >= 256 ? 256 : 64, 0, stream>>>(x, y, cols);
  RLX_CUDA_CHECK_LAUNCH("Softmax");
}

}  // namespace

void launch_softmax(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  RLX_CHECK(cols > 0 && cols < (int64_t{1} << 31), "Softmax: bad row length ", cols);
  RLX_CHECK(rows < (int64_t{1} << 31), "Softmax: ", rows, " rows exceeds the grid limit");
  if (rows <= 0) return;
  dispatch_float(dtype, "Softmax", [&](auto tag) {
    using T = decltype(tag);
    launch_rows<T>(static_cast<const T*>(x), static_cast<T*>(y), rows, static_cast<int>(cols), stream);
  });
}

void launch_softmax_axis(DType dtype, const void* x, void* y, int64_t outer, int64_t axis, int64_t inner,
                         cudaStream_t stream) {
  if (inner == 1) return launch_softmax(dtype, x, y, outer, axis, stream);
  RLX_CHECK(outer >= 0 && axis > 0 && inner >= 0, "Softmax: bad axis view ", outer, "x", axis, "x", inner);
  const int64_t n = outer * inner;
  if (n == 0) return;
  dispatch_float(dtype, "Softmax", [&](auto tag) {
    using T = decltype(tag);
    const int64_t blocks = (n + 255) / 256;
    softmax_axis_kernel<T><<<static_cast<unsigned>(blocks < 65536 * 16 ? blocks : 65536 * 16), 256, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), outer, axis, inner);
    RLX_CUDA_CHECK_LAUNCH("Softmax");
  });
}

}  // namespace rlx::cuda
