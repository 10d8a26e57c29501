// Weighted token pooling + RMS norm (pool_norm.h).
//
// One 256-thread CTA per row b. Warp w takes tokens w, w + 8, ...; lane i
// the 16-byte vectors i, i + 32, ... of each token's row (coalesced), summing
// weight × x into f32 registers. The eight warps' partial sums meet in shared
// memory and are added in warp order (deterministic), then the row's sum of
// squares is a block reduction and each thread writes its columns.
#include "rlx/backends/cuda/kernels/pool_norm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/core/error.h"

namespace rlx::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kMaxVecs = 8;  // 16-byte vectors per lane and token

__device__ __forceinline__ float load_any(const void* p, int64_t i, DType t) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return 0.0f;
  }
}

// The weight as the graph computes it: an integer mask cast to T first.
template <typename T>
__device__ __forceinline__ float load_weight(const void* p, int64_t i, DType t) {
  if (t == DType::I32) return dev::to_f32(dev::from_f32<T>(static_cast<float>(static_cast<const int32_t*>(p)[i])));
  if (t == DType::I64) return dev::to_f32(dev::from_f32<T>(static_cast<float>(static_cast<const int64_t*>(p)[i])));
  return dev::to_f32(static_cast<const T*>(p)[i]);
}

__device__ __forceinline__ void store_any(void* p, int64_t i, float v, DType t) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::F16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: break;
  }
}

// J: vectors per lane and token (a power of two ≥ the row's vectors / 32).
template <typename T, int J>
__global__ void __launch_bounds__(kThreads) pool_norm_kernel(const PoolNormArgs a) {
  constexpr int E = 16 / sizeof(T);  // elements per 16-byte vector
  extern __shared__ float s_part[];  // [kWarps][cols], then 32 floats of reduction scratch
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t b = blockIdx.x;
  const int cols = static_cast<int>(a.cols), vecs = cols / E;

  float acc[J][E];
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int e = 0; e < E; ++e) acc[j][e] = 0.0f;

  dev::pdl_wait();  // x is the kernel before's output
  const T* x = static_cast<const T*>(a.x) + b * a.tokens * cols;
  // kRows tokens per warp per step, their loads issued before any is used.
  constexpr int kRows = kMaxVecs / J;
  for (int64_t l0 = warp; l0 < a.tokens; l0 += kWarps * kRows) {
    float w[kRows];
    uint4 raw[kRows][J];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t l = l0 + r * kWarps;
      w[r] = l < a.tokens ? load_weight<T>(a.w, b * a.tokens + l, a.w_dtype) : 0.0f;
      const uint4* row = reinterpret_cast<const uint4*>(x + (l < a.tokens ? l : 0) * cols);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int v = lane + 32 * j;
        raw[r][j] = l < a.tokens && v < vecs ? row[v] : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const T* xs = reinterpret_cast<const T*>(&raw[r][j]);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[j][e] = fmaf(w[r], dev::to_f32(xs[e]), acc[j][e]);
      }
  }
  dev::pdl_trigger();

#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int v = lane + 32 * j;
    if (v >= vecs) break;
#pragma unroll
    for (int e = 0; e < E; ++e) s_part[warp * cols + v * E + e] = acc[j][e];
  }
  __syncthreads();

  float* scratch = s_part + kWarps * cols;
  float sq = 0.0f;
  for (int c = static_cast<int>(threadIdx.x); c < cols; c += kThreads) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += s_part[w * cols + c];
    s_part[c] = s;  // only this thread reads column c of warp 0's part
    sq = fmaf(s, s, sq);
  }
  sq = dev::block_sum(sq, scratch);
  const float rstd = rsqrtf(sq / static_cast<float>(cols) + a.eps);
  for (int c = static_cast<int>(threadIdx.x); c < cols; c += kThreads)
    store_any(a.y, b * cols + c, s_part[c] * rstd * load_any(a.gamma, c, a.gamma_dtype), a.y_dtype);
}

bool kernel_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

const char* pool_norm_unsupported(const PoolNormArgs& a) {
  if (!kernel_float(a.x_dtype) || !kernel_float(a.gamma_dtype) || !kernel_float(a.y_dtype))
    return "a float dtype is not f32/f16/bf16";
  if (a.w_dtype != a.x_dtype && a.w_dtype != DType::I32 && a.w_dtype != DType::I64)
    return "the weights are neither x's dtype nor i32/i64";
  const int64_t e = 16 / static_cast<int64_t>(dtype_size(a.x_dtype));
  if (a.rows <= 0 || a.tokens <= 0 || a.cols <= 0) return "empty";
  if (a.cols % e != 0) return "cols is not a multiple of a 16-byte vector";
  if (a.cols > kPoolNormMaxCols || a.cols / e > 32 * kMaxVecs) return "cols is too large";
  if (a.rows > 0x7fffffff || a.tokens > (int64_t{1} << 40) / a.cols) return "too large";
  if (a.x == nullptr || a.w == nullptr || a.gamma == nullptr || a.y == nullptr) return "a pointer is null";
  if (!aligned16(a.x)) return "x is not 16-byte aligned";
  return nullptr;
}

void launch_pool_norm(const PoolNormArgs& a, cudaStream_t stream) {
  const char* op = "pool + rms_norm";
  if (const char* why = pool_norm_unsupported(a)) throw Unsupported(str(op, ": ", why));
  const size_t smem = (static_cast<size_t>(kWarps) * static_cast<size_t>(a.cols) + 32) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(a.rows));
  const int64_t per_lane = (a.cols / (16 / static_cast<int64_t>(dtype_size(a.x_dtype))) + 31) / 32;
  const int j = per_lane <= 1 ? 1 : per_lane <= 2 ? 2 : per_lane <= 4 ? 4 : 8;
  auto go = [&](auto t) {
    using T = decltype(t);
    switch (j) {
      case 1: pool_norm_kernel<T, 1><<<grid, kThreads, smem, stream>>>(a); break;
      case 2: pool_norm_kernel<T, 2><<<grid, kThreads, smem, stream>>>(a); break;
      case 4: pool_norm_kernel<T, 4><<<grid, kThreads, smem, stream>>>(a); break;
      default: pool_norm_kernel<T, 8><<<grid, kThreads, smem, stream>>>(a); break;
    }
  };
  switch (a.x_dtype) {
    case DType::F32: go(float{}); break;
    case DType::F16: go(__half{}); break;
    default: go(__nv_bfloat16{}); break;
  }
  RLX_CUDA_CHECK_LAUNCH(op);
}

}  // namespace rlx::cuda
