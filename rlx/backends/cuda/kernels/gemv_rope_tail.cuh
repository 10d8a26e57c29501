// The decode rope + KV-cache writes as the tail of an m = 1 GEMV (GemvRopeTail
// in rope.h): the GEMV's last CTA to finish does what rope_qkv_kernel (rope.cu)
// does for one row with its angles from the table, with the same arithmetic in
// the same order, so the bits are those of the separate launch.
//
// Why: in a decode step the rope launch sat between the q|k|v GEMV and the
// attention, and cost ~4.6 µs of the step's critical path (its wait, one L2
// round trip for the row, its stores, the next kernel's wait) for ~1 µs of
// work. Here the GEMV's CTAs count themselves done on a counter in L2; the
// last one reads the rows the others just stored (L2 hits) and the step goes
// on to the attention with one launch fewer.
//
// Every thread of the CTA must call gemv_rope_tail (it syncs the block).
// smem: gemv_rope_tail_smem(t) bytes of dynamic shared memory, which the
// GEMV's main loop no longer uses.
#pragma once

#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/movement.h"
#include "rlx/backends/cuda/kernels/quant_common.cuh"
#include "rlx/backends/cuda/kernels/rope.h"

namespace rlx::cuda::quant_detail {

// One element's source: the kind of value it is and where it lies.
__device__ __forceinline__ FloatKind tail_kind(DType t) {
  return t == DType::F16 ? FloatKind::F16 : t == DType::BF16 ? FloatKind::BF16 : FloatKind::F32;
}

// Raw bits of element i of p (kind k): the loads of a batch are issued before
// any is converted, so the batch costs one L2 round trip.
__device__ __forceinline__ uint32_t tail_load_bits(const void* p, int64_t i, FloatKind k) {
  return k == FloatKind::F32 ? __ldcg(static_cast<const unsigned int*>(p) + i)
                             : static_cast<uint32_t>(__ldcg(static_cast<const unsigned short*>(p) + i));
}
__device__ __forceinline__ float tail_bits_to_f32(uint32_t b, FloatKind k) {
  switch (k) {
    case FloatKind::F16: return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
    case FloatKind::BF16: return __uint_as_float(b << 16);
    default: return __uint_as_float(b);
  }
}

// Called by every CTA before griddepcontrol.wait: the first CTA asks L2 for
// the head-norm weights, which the head's 178 MB evicted since the last step,
// so the last CTA's loads of them after the GEMV hit L2.
__device__ __forceinline__ void gemv_rope_tail_prefetch(const GemvRopeTail& t) {
  if (blockIdx.x != 0) return;
  const int line = static_cast<int>(threadIdx.x);
  auto fetch = [&](const void* p, DType dt) {
    if (p && line * 128 < t.head_dim * static_cast<int>(dt == DType::F32 ? 4 : 2))
      asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(p) + line * 128));
  };
  fetch(t.q_norm, t.q_norm_dtype);
  fetch(t.k_norm, t.k_norm_dtype);
}

__device__ __forceinline__ void gemv_rope_tail(const GemvRopeTail& t, FloatKind io, float* smem) {
  __shared__ int last;
  __syncthreads();  // every row this CTA owns is stored
  if (threadIdx.x == 0) {
    __threadfence();  // release them before the count
    last = atomicAdd(t.counter, 1) == static_cast<int>(gridDim.x) - 1;
    if (last) {
      __threadfence();  // acquire the other CTAs' rows
      *t.counter = 0;   // every CTA has counted: ready for the next launch
    }
  }
  __syncthreads();
  if (!last) return;

  const int hd = t.head_dim, half = t.n_rot / 2;
  const int qw = t.q_heads * hd, kw = t.kv_heads * hd, heads = t.q_heads + t.kv_heads;
  // smem: the q, k, v rows as f32, then the q and k norm weights, the angles
  // (cos, sin pairs) and one factor per head.
  float* xs = smem;
  float* nw = xs + qw + 2 * kw;
  float* ang = nw + 2 * hd;
  float* rstd = ang + 2 * half;
  const int n_rows = qw + 2 * kw, n_all = n_rows + 2 * hd + 2 * half;
  const FloatKind qn = tail_kind(t.q_norm_dtype), kn = tail_kind(t.k_norm_dtype);
  // Element i of the staged block: its source pointer, index and kind (the
  // norm weights' slots without a weight are left unset and never read).
  auto source = [&](int i, const void** p, int64_t* at, FloatKind* k) {
    *k = io;
    if (i < qw) *p = t.q, *at = i;
    else if (i < qw + kw) *p = t.k, *at = i - qw;
    else if (i < n_rows) *p = t.v, *at = i - qw - kw;
    else if (i < n_rows + hd) *p = t.q_norm, *at = i - n_rows, *k = qn;
    else if (i < n_rows + 2 * hd) *p = t.k_norm, *at = i - n_rows - hd, *k = kn;
    else *p = t.angles, *at = i - n_rows - 2 * hd, *k = FloatKind::F32;
  };
  const int64_t start = __ldcg(t.cache_pos);
  constexpr int kBatch = 16;
  for (int i0 = threadIdx.x; i0 < n_all; i0 += kBatch * blockDim.x) {
    uint32_t bits[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * blockDim.x;
      const void* p;
      int64_t at;
      FloatKind k;
      source(i, &p, &at, &k);
      bits[j] = i < n_all && p != nullptr ? tail_load_bits(p, at, k) : 0u;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * blockDim.x;
      if (i >= n_all) break;
      const void* p;
      int64_t at;
      FloatKind k;
      source(i, &p, &at, &k);
      xs[i] = tail_bits_to_f32(bits[j], k);
    }
  }
  __syncthreads();
  // Head norms as rope.cu's head_norms: a warp per head, lanes striding d.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int h = warp; h < heads; h += nwarps) {
    const bool is_q = h < t.q_heads;
    if (!(is_q ? t.q_norm : t.k_norm)) continue;
    const float* xh = xs + (is_q ? h * hd : qw + (h - t.q_heads) * hd);
    float s = 0.0f;
    for (int d = lane; d < hd; d += 32) s = fmaf(xh[d], xh[d], s);
    s = dev::warp_sum(s);
    if (lane == 0) rstd[h] = rsqrtf(s / static_cast<float>(hd) + (is_q ? t.q_eps : t.k_eps));
  }
  __syncthreads();
  const bool cache_ok = start >= 0 && start + 1 <= t.capacity;
  if (!cache_ok && t.error_flag && threadIdx.x == 0) atomicOr(t.error_flag, kErrSliceOutOfRange);
  const FloatKind ck = tail_kind(t.cache_dtype);
  const int64_t slot = start * kw;
  for (int e = threadIdx.x; e < n_rows; e += blockDim.x) {
    if (e >= qw + kw) {  // V: copied into its cache, one rounding
      if (cache_ok) store_from_f32(t.v_cache, slot + e - qw - kw, xs[e], ck);
      continue;
    }
    const bool is_q = e < qw;
    const int r = is_q ? e : e - qw;  // element of Q's or K's row
    const int h = r / hd, d = r - h * hd;
    const float* xh = xs + (is_q ? 0 : qw) + h * hd;
    const float* w = nw + (is_q ? 0 : hd);
    const bool normed = (is_q ? t.q_norm : t.k_norm) != nullptr;
    const float f = normed ? rstd[is_q ? h : t.q_heads + h] : 1.0f;
    auto src = [&](int dd) { return normed ? xh[dd] * f * w[dd] : xh[dd]; };
    float o;
    if (d >= t.n_rot) {
      o = src(d);
    } else {
      int i, partner;
      bool first;
      if (t.neox) {
        first = d < half;
        i = first ? d : d - half;
        partner = first ? d + half : d - half;
      } else {
        first = (d & 1) == 0;
        i = d >> 1;
        partner = first ? d + 1 : d - 1;
      }
      const float a = src(d), b = src(partner), c = ang[2 * i], s = ang[2 * i + 1];
      o = first ? fmaf(a, c, -b * s) : fmaf(a, c, b * s);
    }
    if (is_q) store_from_f32(t.y, r, o, io);
    else if (cache_ok) store_from_f32(t.k_cache, slot + r, o, ck);
  }
}

}  // namespace rlx::cuda::quant_detail
