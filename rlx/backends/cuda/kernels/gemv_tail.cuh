// The work an m = 1 GEMV does in its last CTA after the product (GemvTail,
// gemv_tail.h): the decode rope + KV-cache writes, as rope_qkv_kernel (rope.cu)
// does them for one row with its angles from the table, or the post-norm pair,
// as post_rms_norm_reg_kernel (norm.cu) does it; the same arithmetic in the
// same order, so the bits are those of the separate launch.
//
// Why: in a decode step each of those launches sat between two GEMVs on the
// critical path and cost a kernel boundary (its wait, its loads, its stores,
// then the next kernel's wait) for about a microsecond of work. Here the
// GEMV's CTAs count themselves done on a counter in L2; the last one reads
// the rows the others just stored (L2 hits) and the step goes on with one
// launch fewer.
//
// Every thread of the CTA calls gemv_tail (it syncs the block); smem is
// gemv_tail_smem(t) bytes of dynamic shared memory, which the GEMV's main
// loop no longer uses.
#pragma once

#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/movement.h"
#include "rlx/backends/cuda/kernels/quant_common.cuh"
#include "rlx/backends/cuda/kernels/gemv_tail.h"

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
// the tail's weights (head-norm or post-norm), which the output head's 178 MB
// evicted since the last step, so the last CTA's loads of them hit L2.
__device__ __forceinline__ void gemv_tail_prefetch(const GemvTail& t) {
  if (blockIdx.x != 0) return;
  const int line = static_cast<int>(threadIdx.x);
  auto fetch = [&](const void* p, DType dt, int n) {
    if (p && line * 128 < n * static_cast<int>(dt == DType::F32 ? 4 : 2))
      asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(p) + line * 128));
  };
  if (t.kind == GemvTailKind::Rope) {
    fetch(t.rope.q_norm, t.rope.q_norm_dtype, t.rope.head_dim);
    fetch(t.rope.k_norm, t.rope.k_norm_dtype, t.rope.head_dim);
  } else {
    fetch(t.norm.w1, t.norm.param_dtype, t.norm.cols);
    fetch(t.norm.w2, t.norm.param_dtype, t.norm.cols);
  }
}

// Whether this CTA is the last of the grid to get here, after every CTA has
// stored its rows (their stores are then visible to it).
__device__ __forceinline__ bool gemv_tail_last_cta(int32_t* counter) {
  __shared__ int last;
  __syncthreads();  // every row this CTA owns is stored
  if (threadIdx.x == 0) {
    __threadfence();  // release them before the count
    last = atomicAdd(counter, 1) == static_cast<int>(gridDim.x) - 1;
    if (last) {
      __threadfence();  // acquire the other CTAs' rows
      *counter = 0;     // every CTA has counted: ready for the next launch
    }
  }
  __syncthreads();
  return last != 0;
}

__device__ __forceinline__ void gemv_rope_tail(const GemvRopeTail& t, FloatKind io, float* smem) {
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

// f32 of v rounded to kind k (the value a store of k then a load would give).
__device__ __forceinline__ float round_to(float v, FloatKind k) {
  switch (k) {
    case FloatKind::F16: return __half2float(__float2half_rn(v));
    case FloatKind::BF16: return __bfloat162float(__float2bfloat16_rn(v));
    default: return v;
  }
}

// post_rms_norm_reg_kernel for one row, a = the GEMV's product: threads
// t < p.threads hold columns t + i·p.threads, the others add zeros to the
// block sums (so the sums, over the same warps' partials, are bit-identical).
__device__ __forceinline__ void gemv_post_norm_tail(const GemvPostNormTail& p, const void* a, FloatKind io,
                                                    float* scratch) {
  constexpr int kMaxPer = kGemvPostNormTailMaxPer;
  const int t = threadIdx.x, nt = p.threads, cols = p.cols;
  const bool active = t < nt;
  const FloatKind pk = tail_kind(p.param_dtype);
  uint32_t wb1[kMaxPer], wb2[kMaxPer], xb[kMaxPer], ab[kMaxPer];
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {  // every load issued before any is used
    const int c = t + i * nt;
    const bool in = active && i < p.per && c < cols;
    wb1[i] = in ? tail_load_bits(p.w1, c, pk) : 0u;
    wb2[i] = in && p.w2 ? tail_load_bits(p.w2, c, pk) : 0u;
    xb[i] = in ? tail_load_bits(p.x, c, io) : 0u;
    ab[i] = in ? tail_load_bits(a, c, io) : 0u;
  }
  float xv[kMaxPer], av[kMaxPer];
  float q = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    xv[i] = tail_bits_to_f32(xb[i], io);
    av[i] = tail_bits_to_f32(ab[i], io);
    if (i < p.per) q = fmaf(av[i], av[i], q);
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float rstd = rsqrtf(dev::block_sum(q, scratch) * inv_cols + p.eps);
  float q2 = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    if (i >= p.per) break;
    const int c = t + i * nt;
    const float yv = round_to(xv[i] + av[i] * rstd * tail_bits_to_f32(wb1[i], pk), io);
    if (active && c < cols) store_from_f32(p.y, c, yv, io);
    xv[i] = yv;  // the rounded sum, as the next norm sees it
    q2 = fmaf(xv[i], xv[i], q2);
  }
  if (!p.w2) return;
  const float rstd2 = rsqrtf(dev::block_sum(q2, scratch) * inv_cols + p.eps);
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    if (i >= p.per) break;
    const int c = t + i * nt;
    if (active && c < cols) store_from_f32(p.h, c, xv[i] * rstd2 * tail_bits_to_f32(wb2[i], pk), io);
  }
}

// The GEMV kernels' entry: y is their product, smem their dynamic shared memory.
__device__ __forceinline__ void gemv_tail(const GemvTail& t, const void* y, FloatKind io, float* smem) {
  if (!gemv_tail_last_cta(t.counter)) return;
  if (t.kind == GemvTailKind::Rope) gemv_rope_tail(t.rope, io, smem);
  else gemv_post_norm_tail(t.norm, y, io, smem);
}

}  // namespace rlx::cuda::quant_detail
