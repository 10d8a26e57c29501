// Device-only pieces shared by the attention kernels (attention*.cu): the
// kernel argument block, the tensor-core PTX wrappers (cp.async, ldmatrix,
// mma.sync m16n8k16) and the score transform / visibility rules, written once
// so the prefill, decode and SIMT kernels cannot drift apart.
//
// Scores live in the log2 domain: x = s·log2(e), so softmax uses exp2f and the
// scale is pre-multiplied by log2(e). Masked scores are -inf; a row whose
// running max is still -inf contributes nothing and ends as zeros.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "rlx/backends/cuda/device/cp_async.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"

namespace rlx::cuda::dev {

inline constexpr float kLog2e = 1.4426950408889634f;

// Everything a kernel needs, resolved on the host (pointers, strides in
// elements, derived constants). Plain data: passed by value as a kernel param.
struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t q_row_stride, k_row_stride, v_row_stride;
  int64_t q_batch_stride, k_batch_stride, v_batch_stride;
  int B, Lq, Lk, H, Hkv, D;
  int group;          // H / Hkv
  float scale;        // effective scale
  float scale_log2;   // scale · log2(e)
  float softcap;      // 0 = off
  float softcap_log2; // softcap · log2(e)
  int causal;         // bottom-right aligned
  int64_t window;     // > 0: also q_pos − k_pos < window (only with causal)
  const uint8_t* key_mask;  // [B, Lk] (batch stride below), nonzero = keep
  int64_t key_mask_b_stride;
  const void* bias;         // additive, f32 or the storage dtype
  int bias_f32;
  int64_t bias_b_stride, bias_h_stride, bias_q_stride;
  const int32_t* kv_len;    // [B] valid keys per batch (or [1] shared), or null (= Lk)
  int kv_len_b_stride;      // 1, or 0 when one length serves every batch
  bool kv_len_ready;        // kv_len may be read before pdl_wait (AttentionParams)
  const int32_t* kv_stable; // K/V rows below *kv_stable may be read before pdl_wait, or null
  bool out_f32;             // decode: out is f32, each value rounded to T first (AttentionParams::out_f32)
  // Prefill (device int32 [B], or null): with it the mask-free kernel takes a
  // key mask, applied per score only in batch rows b with key_mask_rows[b] != 0
  // (kept keys not a prefix; kv_len then ends at the last kept key); the
  // other rows' masks are prefixes, given by kv_len alone.
  const int32_t* key_mask_rows;
  bool grid_mhb;  // prefill: the grid is (m-tiles, H, B), one work item per CTA
  // Split-KV decode: partial results [rows][splits][D] and (m, l) pairs, and
  // one arrival counter per CTA row group (zeroed before each launch): the
  // last split of a group to finish merges the group's partials.
  float* ws_o;
  float* ws_ml;
  int* ws_count;  // zero before the launch (memset, or counters_zeroed); the merging CTA re-zeroes its own
  bool counters_zeroed;
  int splits;
  int split_min_keys;  // decode: fewest keys that make another split work (set by the launcher)
};

// Valid key count of batch b, clamped to [0, Lk].
__device__ __forceinline__ int attn_kv_len(const AttnArgs& a, int b) {
  if (a.kv_len == nullptr) return a.Lk;
  const int n = __ldg(a.kv_len + b * a.kv_len_b_stride);
  return n < 0 ? 0 : (n > a.Lk ? a.Lk : n);
}

// Keys a query at absolute position q_pos (= i + kvlen − Lq; may be negative)
// can see by position alone: the interval [x, y) (empty when y ≤ x).
__device__ __forceinline__ int2 attn_key_range(const AttnArgs& a, int64_t q_pos, int kvlen) {
  int64_t lo = 0, hi = kvlen;
  if (a.causal) {
    hi = min(hi, q_pos + 1);
    if (a.window > 0) lo = max(lo, q_pos - a.window + 1);
  }
  return make_int2(static_cast<int>(min(lo, int64_t{kvlen})), static_cast<int>(max(hi, int64_t{0})));
}

// tanh from exp2 with an explicit clamp: accurate to ~1e-7 absolute, finite
// for every input (tanh.approx is only ~2^-11 relative).
__device__ __forceinline__ float attn_tanh(float y) {
  y = fminf(fmaxf(y, -15.0f), 15.0f);
  const float e = exp2f(2.0f * kLog2e * y);
  return 1.0f - 2.0f / (e + 1.0f);
}

// Raw dot product → log2-domain logit with softcap and bias. Only called for
// in-range (b, h, i < Lq, key < Lk).
template <typename T>
__device__ __forceinline__ float attn_logit(const AttnArgs& a, float dot, int b, int h, int i, int key) {
  float x;
  if (a.softcap > 0.0f) {
    x = a.softcap_log2 * attn_tanh(dot * a.scale / a.softcap);
  } else {
    x = dot * a.scale_log2;
  }
  if (a.bias != nullptr) {
    const int64_t off = b * a.bias_b_stride + h * a.bias_h_stride + i * a.bias_q_stride + key;
    const float bv = a.bias_f32 ? __ldg(static_cast<const float*>(a.bias) + off)
                                : to_f32(static_cast<const T*>(a.bias)[off]);
    x = fmaf(bv, kLog2e, x);
  }
  return x;
}

// Key in range (< key_end) and kept by the key-padding mask.
__device__ __forceinline__ bool attn_key_kept(const AttnArgs& a, int b, int key, int key_end) {
  if (key >= key_end) return false;
  return a.key_mask == nullptr || __ldg(a.key_mask + b * a.key_mask_b_stride + key) != 0;
}

// ---------------------------------------------------------------- PTX wrappers


__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D += A·B, m16n8k16, f32 accumulate. A: 4 regs (row-major 16x16), B: 2 regs
// (col-major 16x8), D: 4 floats. Fragment layouts (g = lane/4, t = lane%4):
//   A: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
//   B: b0 (k 2t..2t+1, n g) b1 (k 2t+8.., n g)
//   D: d0,d1 (g, 2t..2t+1) d2,d3 (g+8, 2t..2t+1)
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Async-copy ROWS rows of D elements (row r from src + (row0 + r)·stride) into
// smem rows of stride D + 8; rows at or past `limit` are zero-filled. Thread
// tid always copies chunk tid % (D/8) of rows tid / (D/8) + it·(THREADS / (D/8)),
// so the address walk is one pointer increment per iteration (precomputing
// all addresses costs ~100 registers).
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void cp_async_rows(T* s, const T* src, int64_t stride, int row0, int limit, int tid) {
  constexpr int kChunks = D / 8, kStride = D + 8, kRowsPerIt = THREADS / kChunks;
  static_assert(THREADS % kChunks == 0 && ROWS % kRowsPerIt == 0, "tile does not split evenly over the CTA");
  const int r = tid / kChunks, ch = tid % kChunks;
  const T* p = src + (row0 + r) * stride + ch * 8;
  const int64_t step = kRowsPerIt * stride;
  const int left = limit - row0 - r;
  const uint32_t dst = smem_u32(s + r * kStride + ch * 8);
  if (limit - row0 >= ROWS) {  // a whole tile: no per-row bounds (a third of the instructions)
#pragma unroll
    for (int it = 0; it < ROWS / kRowsPerIt; ++it) {
      cp_async_16(dst + it * kRowsPerIt * kStride * static_cast<int>(sizeof(T)), p, true);
      p += step;
    }
    return;
  }
#pragma unroll
  for (int it = 0; it < ROWS / kRowsPerIt; ++it) {
    const bool ok = it * kRowsPerIt < left;
    cp_async_16(dst + it * kRowsPerIt * kStride * static_cast<int>(sizeof(T)), ok ? p : src, ok);
    p += step;
  }
}

// Online softmax: the value subtracted before exp2 for a row whose running
// max is m_new (0 while the row has seen nothing, so -inf − -inf never occurs).
__device__ __forceinline__ float attn_row_base(float m_new) { return m_new == -INFINITY ? 0.0f : m_new; }

// exp2 of two logits rounded to T, packed as an MMA operand: one
// ex2.approx.{f16,bf16}x2 on sm_90 (half the MUFU work of two exp2f).
template <typename T>
__device__ __forceinline__ uint32_t exp2_x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t y, x = pack2<T>(lo, hi);
  if constexpr (std::is_same_v<T, __half>) {
    asm("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  } else {
    asm("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  }
  return y;
#else
  return pack2<T>(exp2f(lo), exp2f(hi));
#endif
}
template <typename T>
constexpr uint32_t kOnes2 = std::is_same_v<T, __half> ? 0x3C003C00u : 0x3F803F80u;  // (1, 1) in T

// Max / sum over the 4 lanes of a quad (the lanes that share a fragment row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace rlx::cuda::dev
