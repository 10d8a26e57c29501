// The fp8 matmul's epilogue (scaled_matmul.h): one element a thread, grid
// stride. It runs where cuBLASLt's fp8 GEMM could not scale or bias the
// product itself (an f32 result with a bias, or the f32 fallback GEMM), so
// it is a memory pass over M·N f32 sums, not a hot path.
//
// Per-row fp8 quantization: one read of x and one write of q, where the
// unfused chain moves x about eight times in f32. A row is held in registers
// by a group of threads, 16 bytes of it per load: a warp per row up to 256
// such loads' worth (2048 bf16 or 1024 f32 elements), else a CTA of 256
// threads per row up to 8 loads each; its |max| by a warp or block reduction,
// then each element multiplied and rounded from the registers (e4m3 two at a
// time by the hardware conversion). Rows longer than that, or not whole
// 16-byte vectors, take the scalar kernel, which reads the row twice (the
// second time from L1/L2). H100, 32768 × 384 / × 1536 bf16 (session 54): a CTA
// per row with scalar loads and a division per element 74 / 162 µs; rows in
// registers 33 / 168 µs (a division per element: compute-bound).
#include "rlx/backends/cuda/kernels/scaled_matmul.h"

#include <algorithm>
#include <type_traits>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/fp8.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"

namespace rlx::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(256) scaled_epilogue_kernel(ScaledEpilogue e) {
  dev::pdl_begin();
  const int64_t total = e.M * e.N;
  const T* bias = static_cast<const T*>(e.bias);
  T* y = static_cast<T*>(e.y);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / e.N, n = i - m * e.N;
    const float sa = e.sa ? e.sa[e.sa_rows ? m : 0] : 1.0f;
    const float sb = e.sb ? e.sb[e.sb_rows ? n : 0] : 1.0f;
    float v = (sa * sb) * (e.acc ? e.acc[i] : 0.0f);
    if (bias) v += dev::to_f32(bias[n]);
    y[i] = dev::from_f32<T>(v);
  }
}

constexpr int kQuantThreads = 256;

template <bool kE4M3>
__device__ __forceinline__ uint8_t to_fp8(float v) {
  return kE4M3 ? dev::f32_to_e4m3(v) : dev::f32_to_e5m2(v);
}

// Any row: the |max| pass, then the row again, a CTA per row.
template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kQuantThreads) quantize_fp8_rows_kernel(QuantizeFp8Rows a) {
  dev::pdl_begin();
  __shared__ float scratch[32];
  const T* x = static_cast<const T*>(a.x);
  uint8_t* q = static_cast<uint8_t*>(a.q);
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* row = x + r * a.cols;
    float m = 0.0f;
    for (int64_t j = threadIdx.x; j < a.cols; j += kQuantThreads) m = fmaxf(m, fabsf(dev::to_f32(row[j])));
    const float mm = fmaxf(dev::block_max(m, scratch), a.tiny), inv = __fdiv_rn(a.largest, mm);
    if (threadIdx.x == 0) a.scale[r] = __fdiv_rn(mm, a.largest);
    uint8_t* out = q + r * a.cols;
    for (int64_t j = threadIdx.x; j < a.cols; j += kQuantThreads)
      out[j] = to_fp8<kE4M3>(__fmul_rn(dev::to_f32(row[j]), inv));
  }
}

// Rows of whole 16-byte vectors, held in registers: a group of kGroup threads
// (32: a warp, 256: the CTA) per row, kIters vectors a thread.
template <typename T, bool kE4M3, int kGroup, int kIters>
__global__ void __launch_bounds__(kQuantThreads) quantize_fp8_rows_vec_kernel(QuantizeFp8Rows a) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T)), kGroups = kQuantThreads / kGroup;
  using Bytes = std::conditional_t<kVec == 8, uint2, uint32_t>;  // kVec fp8 codes
  dev::pdl_begin();
  __shared__ float scratch[32];
  const int g = static_cast<int>(threadIdx.x) / kGroup, t = static_cast<int>(threadIdx.x) % kGroup;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kGroups + g; r < a.rows;
       r += static_cast<int64_t>(gridDim.x) * kGroups) {
    const T* row = static_cast<const T*>(a.x) + r * a.cols;
    float v[kIters][kVec];
    float m = 0.0f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t e = (static_cast<int64_t>(it) * kGroup + t) * kVec;
      if (e >= a.cols) break;
      const uint4 raw = *reinterpret_cast<const uint4*>(row + e);
      const T* el = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        v[it][k] = dev::to_f32(el[k]);
        m = fmaxf(m, fabsf(v[it][k]));
      }
    }
    m = fmaxf(kGroup == 32 ? dev::warp_max(m) : dev::block_max(m, scratch), a.tiny);
    const float inv = __fdiv_rn(a.largest, m);
    if (t == 0) a.scale[r] = __fdiv_rn(m, a.largest);
    uint8_t* out = static_cast<uint8_t*>(a.q) + r * a.cols;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t e = (static_cast<int64_t>(it) * kGroup + t) * kVec;
      if (e >= a.cols) break;
      union {
        uint16_t h[kVec / 2];
        uint8_t b[kVec];
        Bytes w;
      } pack;
#pragma unroll
      for (int k = 0; k < kVec; k += 2) {
        const float lo = __fmul_rn(v[it][k], inv), hi = __fmul_rn(v[it][k + 1], inv);
        if constexpr (kE4M3) {
          pack.h[k / 2] = dev::f32x2_to_e4m3x2(lo, hi);
        } else {
          pack.b[k] = dev::f32_to_e5m2(lo), pack.b[k + 1] = dev::f32_to_e5m2(hi);
        }
      }
      *reinterpret_cast<Bytes*>(out + e) = pack.w;
    }
  }
}

template <typename T, bool kE4M3>
void launch_quantize_t(const QuantizeFp8Rows& a, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = a.cols % kVec == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(a.q) & (kVec - 1)) == 0;
  const int64_t sms = current_sm_count();
  auto grid = [&](int64_t groups_per_cta) {
    return static_cast<unsigned>(std::min((a.rows + groups_per_cta - 1) / groups_per_cta, 16 * sms));
  };
  // The fewest vectors a thread that hold the row: a warp per row, else the CTA.
  auto go = [&](auto group, auto iters) {
    constexpr int kG = decltype(group)::value, kI = decltype(iters)::value;
    if (!vec || a.cols > int64_t{kG} * kVec * kI) return false;
    quantize_fp8_rows_vec_kernel<T, kE4M3, kG, kI><<<grid(kQuantThreads / kG), kQuantThreads, 0, stream>>>(a);
    return true;
  };
  using W = std::integral_constant<int, 32>;
  using C = std::integral_constant<int, kQuantThreads>;
  using I1 = std::integral_constant<int, 1>;
  using I2 = std::integral_constant<int, 2>;
  using I4 = std::integral_constant<int, 4>;
  using I8 = std::integral_constant<int, 8>;
  if (go(W{}, I1{}) || go(W{}, I2{}) || go(W{}, I4{}) || go(W{}, I8{}) || go(C{}, I1{}) || go(C{}, I2{}) ||
      go(C{}, I4{}) || go(C{}, I8{}))
    return;
  quantize_fp8_rows_kernel<T, kE4M3><<<grid(1), kQuantThreads, 0, stream>>>(a);
}

}  // namespace

const char* quantize_fp8_rows_unsupported(const QuantizeFp8Rows& a) {
  if (a.x_dtype != DType::F32 && a.x_dtype != DType::F16 && a.x_dtype != DType::BF16) return "x is not f32/f16/bf16";
  if (a.q_dtype != DType::F8E4M3 && a.q_dtype != DType::F8E5M2) return "q is not fp8";
  if (a.rows <= 0 || a.cols <= 0) return "empty";
  return nullptr;
}

void launch_quantize_fp8_rows(const QuantizeFp8Rows& a, cudaStream_t stream) {
  if (const char* why = quantize_fp8_rows_unsupported(a)) throw Unsupported(str("fp8 quantization: ", why));
  dispatch_float(a.x_dtype, "fp8 quantization", [&](auto tag) {
    using T = decltype(tag);
    if (a.q_dtype == DType::F8E4M3) launch_quantize_t<T, true>(a, stream);
    else launch_quantize_t<T, false>(a, stream);
    RLX_CUDA_CHECK_LAUNCH("fp8 quantization");
  });
}

void launch_scaled_epilogue(const ScaledEpilogue& e, cudaStream_t stream) {
  if (e.M <= 0 || e.N <= 0) return;
  dispatch_float(e.out, "ScaledMatMul epilogue", [&](auto tag) {
    using T = decltype(tag);
    const int64_t blocks = (e.M * e.N + 255) / 256;
    scaled_epilogue_kernel<T><<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(e);
    RLX_CUDA_CHECK_LAUNCH("ScaledMatMul epilogue");
  });
}

}  // namespace rlx::cuda
