// Shared by the GEMVs (gemv.cu: f32 activations; gemv_q8.cu and
// gemv_stream.cu: activations re-quantized to int8): the activation loader
// and quantizer, the launch plan of row groups and the reduction + store
// epilogue of the unit kernels. Internal to those files.
#pragma once
#include <algorithm>
#include <cstdint>

#include "rlx/backends/cuda/device/glu_act.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/glu.h"
#include "rlx/backends/cuda/kernels/quant_common.cuh"

namespace rlx::cuda::quant_detail {

constexpr int kGemvMaxThreads = 256;

// 16 bytes at p: from global memory through the read-only path, or (kSmemX)
// from a copy of x in shared memory.
template <bool kSmemX, class T>
__device__ __forceinline__ T load16(const T* p) {
  if constexpr (kSmemX) return *p;
  else return __ldg(p);
}

// kChunk consecutive activations x[i .. i + kChunk) as f32. Block-type chunks
// start at multiples of 32 elements, so with a 16-byte-aligned x the loads
// are 16 bytes wide (`vec`); x is small and shared by every row, so these
// reads hit L1/L2, not DRAM. kSmemX: x is a copy in shared memory (vec holds).
template <int N, bool kSmemX = false>
__device__ __forceinline__ void load_x(const void* x, int64_t i, FloatKind io, bool vec, float (&o)[N]) {
  if constexpr (N % 8 == 0) {
    if (vec) {
      if (io == FloatKind::F32) {
#pragma unroll
        for (int j = 0; j < N; j += 4) {
          const float4 v = load16<kSmemX>(reinterpret_cast<const float4*>(static_cast<const float*>(x) + i + j));
          o[j] = v.x, o[j + 1] = v.y, o[j + 2] = v.z, o[j + 3] = v.w;
        }
      } else {
#pragma unroll
        for (int j = 0; j < N; j += 8) {
          const uint4 v = load16<kSmemX>(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + i + j));
          const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int h = 0; h < 4; ++h) {
            const uint16_t lo = static_cast<uint16_t>(w[h] & 0xFFFF), hi = static_cast<uint16_t>(w[h] >> 16);
            if (io == FloatKind::F16) {
              o[j + 2 * h] = __half2float(__ushort_as_half(lo));
              o[j + 2 * h + 1] = __half2float(__ushort_as_half(hi));
            } else {
              o[j + 2 * h] = __uint_as_float(static_cast<uint32_t>(lo) << 16);
              o[j + 2 * h + 1] = __uint_as_float(static_cast<uint32_t>(hi) << 16);
            }
          }
        }
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) o[j] = load_as_f32(x, i + j, io);
}

// x [m, k] → two int8 planes xa, xb (the same layout) and dx [m·k / 32]:
// per 32 elements x̃ = dx·(kQ8Ratio·a + b) with kQ8Ratio·dx = max|x| / 127,
// a = round(x / (kQ8Ratio·dx)) and b = round((x − kQ8Ratio·dx·a) / dx), so
// |x − x̃| ≤ dx/2 (about 2^-16 of the block's largest |x|). With `xs`, also
// xs[blk] = kQ8Ratio·Σa + Σb over each block (an integer, exact as a float:
// |xs| < 2^20), for the "− min" and bias terms of a whole block at once. A
// thread takes 8 consecutive elements, four neighbouring lanes a block
// (blockDim is a multiple of 32, so a block's lanes are in one warp and one
// round). The rounding to integers is the low byte of v + 1.5·2^23 (no F2I).
// A NaN or infinity in the block makes dx NaN; a block whose largest |x| is
// under 1e-30 becomes zeros. Used by gemv_q8.cu, gemv_stream.cu and
// gemv_staged.cu.
__device__ __forceinline__ uint32_t low_bytes(const uint32_t (&b)[8], int o) {
  return __byte_perm(__byte_perm(b[o], b[o + 1], 0x0040), __byte_perm(b[o + 2], b[o + 3], 0x0040), 0x5410);
}

// kAhead: rounds whose loads a thread issues together (x comes from L2 right
// after griddepcontrol.wait, so each round's load is a full round trip).
template <int kAhead = 1, bool kSmemX = false>
__device__ __forceinline__ void quantize_x(const void* x, int m, int64_t k, FloatKind io, bool x_vec, int8_t* xa,
                                           int8_t* xb, float* dx, float* xs = nullptr) {
  constexpr float kMagic = 12582912.0f;  // 1.5·2^23
  constexpr int kMagicBits = 0x4B400000;
  const int64_t tasks = m * k / 8;
  for (int64_t base0 = 0; base0 < tasks; base0 += kAhead * blockDim.x) {
    float va[kAhead][8];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t t = base0 + u * blockDim.x + threadIdx.x;
      if (t < tasks) {
        load_x<8, kSmemX>(x, 8 * t, io, x_vec, va[u]);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) va[u][i] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t t = base0 + u * blockDim.x + threadIdx.x;
      const bool on = t < tasks;
      const float (&v)[8] = va[u];
      float amax = 0.0f, bad = 0.0f;  // bad: NaN when an element is NaN or infinite
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i])), bad = fmaf(v[i], 0.0f, bad);
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      bad += __shfl_xor_sync(0xffffffffu, bad, 1);
      bad += __shfl_xor_sync(0xffffffffu, bad, 2);
      // No IEEE division here: each one was a reciprocal, a check and a
      // slow-path call in the chain between x's arrival and the first dot
      // product. A scale one ulp off moves no bound: |x − x̃| ≤ dx/2 holds
      // for whatever dx and 1/dx the levels are computed with.
      const float d = amax * (1.0f / (127.0f * dev::kQ8Ratio));  // dx
      // Blocks whose largest |x| is under 1e-30 quantize to zero (127 / max
      // would overflow for subnormal maxima); above 2^100 the approximate
      // reciprocal would flush, so those keep the division.
      float inv_a = 0.0f;
      if (amax >= 1e-30f) inv_a = amax < 0x1p100f ? 127.0f * dev::rcp_approx(amax) : 127.0f / amax;
      const float da = d * dev::kQ8Ratio, inv_b = inv_a * dev::kQ8Ratio;
      uint32_t ba[8], bb[8];
      int level_sum = 0;  // kQ8Ratio·Σa + Σb over the thread's 8 elements
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float ra = fmaf(v[i], inv_a, kMagic);
        const float rem = fmaf(-(ra - kMagic), da, v[i]);
        ba[i] = __float_as_uint(ra);
        bb[i] = __float_as_uint(fmaf(rem, inv_b, kMagic));
        level_sum += dev::kQ8Ratio * (static_cast<int>(ba[i]) - kMagicBits) + (static_cast<int>(bb[i]) - kMagicBits);
      }
      if (xs) {  // xs is the same pointer in every thread: the branch is uniform
        level_sum += __shfl_xor_sync(0xffffffffu, level_sum, 1);
        level_sum += __shfl_xor_sync(0xffffffffu, level_sum, 2);
      }
      if (!on) continue;
      reinterpret_cast<uint2*>(xa)[t] = make_uint2(low_bytes(ba, 0), low_bytes(ba, 4));
      reinterpret_cast<uint2*>(xb)[t] = make_uint2(low_bytes(bb, 0), low_bytes(bb, 4));
      if ((t & 3) == 0) {
        dx[t / 4] = d + bad;
        if (xs) xs[t / 4] = static_cast<float>(level_sum);
      }
    }
  }
}

// The activations of unit j of a block, from quantize_x's planes, as a
// GemvUnit's dot_q8 takes them: each run's words of both levels, its scale
// and (kQ8Sums units) each level's sum. at0 = i·k + e0, the block's first
// element in activation row i. Used by gemv_q8.cu and gemv_staged.cu.
template <class U>
struct Q8Runs {
  static constexpr int kRuns = U::kRuns, kWords = U::kRunLen / 4;
  static_assert(kWords == 2 || kWords == 4, "runs of 8 or 16 elements");
  int a[kRuns][kWords], b[kRuns][kWords], sa[kRuns], sb[kRuns];
  float d[kRuns];
  __device__ __forceinline__ Q8Runs(const int8_t* xa, const int8_t* xb, const float* dx, int64_t at0, int j) {
#pragma unroll
    for (int q = 0; q < kRuns; ++q) {
      const int64_t at = at0 + U::run_start(j, q);  // a multiple of kRunLen: aligned loads
      if constexpr (kWords == 4) {
        const int4 va = *reinterpret_cast<const int4*>(xa + at), vb = *reinterpret_cast<const int4*>(xb + at);
        a[q][0] = va.x, a[q][1] = va.y, a[q][2] = va.z, a[q][3] = va.w;
        b[q][0] = vb.x, b[q][1] = vb.y, b[q][2] = vb.z, b[q][3] = vb.w;
      } else {
        const int2 va = *reinterpret_cast<const int2*>(xa + at), vb = *reinterpret_cast<const int2*>(xb + at);
        a[q][0] = va.x, a[q][1] = va.y;
        b[q][0] = vb.x, b[q][1] = vb.y;
      }
      d[q] = dx[at / 32];
      sa[q] = sb[q] = 0;
      if constexpr (U::kQ8Sums) {
#pragma unroll
        for (int e = 0; e < kWords; ++e) {
          sa[q] = dev::dp4a(0x01010101u, a[q][e], sa[q]);
          sb[q] = dev::dp4a(0x01010101u, b[q][e], sb[q]);
        }
      }
    }
  }
  __device__ __forceinline__ float dot(const typename U::Raw& raw, const typename U::Ctx& c) const {
    return U::dot_q8(raw, c, a, b, d, sa, sb);
  }
};

// Row groups of a unit GEMV launch: a block of kGemvMaxThreads threads is
// kGemvMaxThreads / tpr groups of tpr threads (a power of two, 8..256); group
// g owns rpg rows (rpg ≤ R) and its threads stride over the rows' units.
struct UnitGemvPlan {
  int tpr, rpg;
  unsigned blocks;
};

// Threads per row: enough that each does at most 4 units of a row; then,
// while that leaves fewer than `warps_per_sm` warps per SM, more threads per
// row (down to 2 units each), then fewer rows per group, for more loads in
// flight. GLU: a group always holds its gate and up rows (2 rows, 1 output).
inline UnitGemvPlan plan_unit_gemv(int64_t units, int64_t n, bool glu, int R, int warps_per_sm) {
  const int min_rpg = glu ? 2 : 1;
  int tpr = 8, rpg = glu ? 2 : R;
  while (tpr < kGemvMaxThreads && units > 4 * tpr) tpr *= 2;
  const int64_t want_warps = int64_t{warps_per_sm} * sm_count();
  auto warps = [&] { return (n + rpg - 1) / rpg * tpr / 32; };
  while (warps() < want_warps) {
    if (tpr < kGemvMaxThreads && units > 2 * tpr) tpr *= 2;
    else if (rpg > min_rpg) rpg /= 2;
    else break;
  }
  const int groups = kGemvMaxThreads / tpr;
  const int64_t rows_per_block = int64_t{groups} * rpg;  // GLU: 2F rows, one column of F per group
  return {tpr, rpg, static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block)};
}

// Warps per SM plan_unit_gemv aims for. Decode-sized weights (under 4 MB)
// are latency-bound: 16 warps per SM, 2 units per thread, so the few weight
// loads a thread has are issued early and the sums are short. A 4 MB+ matrix
// at m = 1 is bound by instructions instead, and with 16 warps per SM a
// thread did only 2 units: Nsight Compute on 4096² Q4_K (int8 x) counted 23%
// of the instructions in the per-CTA quantization of x and 12% in setup, for
// 512 CTAs of 8 rows. Aiming at 4 warps per SM (4 units a thread, 256 CTAs)
// measured on the H200 (CUDA graph of launches over cold copies, % of the
// 4.22 TB/s copy): Q4_K int8 24.9 → 33.2%, Q5_K int8 28.1 → 36.7%, Q4_K f32
// x 20.5 → 25.1%, Q6_K 27.9 → 32.0%, Q4_0 17.3 → 19.3%, Q8_0 and Q5_0
// unchanged, IQ4_XS int8 24.4 → 23.4% (28.3% with 8 units a thread, where
// the others lost). m > 1 is not measured and keeps 16; a fused GLU GEMV of
// 4 MB+ (gate and up stacked) takes the m = 1 rule without a measurement.
inline int unit_gemv_warps_per_sm(int64_t m, int64_t w_bytes) {
  return m == 1 && w_bytes >= (int64_t{4} << 20) ? 4 : 16;
}

// The rows a thread of a unit GEMV works on: live[r] and the row's bytes
// wr[r]. GLU (glu ≥ 0): rows row0 (gate) and half + row0 (up).
template <int R>
struct UnitRows {
  int group, gt;
  int64_t row0, half;
  bool live[R];
  const uint8_t* wr[R];

  __device__ UnitRows(const uint8_t* w, int64_t n, int64_t row_bytes, int tpr, int rpg, int glu) {
    group = threadIdx.x / tpr;
    gt = threadIdx.x % tpr;
    half = n / 2;
    row0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / tpr) + group) * (glu >= 0 ? 1 : rpg);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      live[r] = glu >= 0 ? r < 2 && row0 < half : r < rpg && row0 + r < n;
      wr[r] = w + (live[r] ? (glu >= 0 ? row0 + r * half : row0 + r) : 0) * row_bytes;
    }
  }

  // Unit u (of the row's units, in the order the threads stride them) of every live row.
  template <class U>
  __device__ __forceinline__ void fetch(int64_t u, typename U::Raw (&raw)[R]) const {
    const int64_t b = u / U::kUnits;
    const int j = static_cast<int>(u % U::kUnits);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (live[r]) raw[r] = U::load(wr[r] + b * U::kBlockBytes, j);
  }
};

template <int R, int M>
__device__ __forceinline__ void zero(float (&acc)[R][M]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.0f;
}

// Reduces acc over the group's tpr threads and stores y (the GLU product for
// glu ≥ 0). Within a warp: a butterfly over the group's lanes (aligned, since
// tpr is a power of two); across the warps of a group (tpr > 32) through
// shared memory with one __syncthreads, which every thread of the block
// reaches.
template <int M, int R>
__device__ __forceinline__ void unit_gemv_store(float (&acc)[R][M], const UnitRows<R>& rows, void* y, int m,
                                                int64_t n, int tpr, int rpg, int glu, FloatKind io) {
  const int width = tpr < 32 ? tpr : 32;
  const int gt = rows.gt, group = rows.group;
  const int64_t row0 = rows.row0, half = rows.half;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i)
      for (int o = width / 2; o > 0; o >>= 1) acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], o);
  const auto gated = [&](float g, float u) { return dev::glu_act(static_cast<GluKind>(glu), g) * u; };
  __shared__ float red[kGemvMaxThreads / 32][R * M];
  if (tpr <= 32) {
    if (glu >= 0) {
#pragma unroll
      for (int i = 0; i < M; ++i)
        if (i % tpr == gt && rows.live[0] && i < m) store_from_f32(y, i * half + row0, gated(acc[0][i], acc[1][i]), io);
      return;
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < M; ++i)
        if ((r * M + i) % tpr == gt && rows.live[r] && i < m) store_from_f32(y, i * n + row0 + r, acc[r][i], io);
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wpg = tpr / 32;
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < M; ++i) red[warp][r * M + i] = acc[r][i];
  }
  __syncthreads();
  if (glu >= 0) {
    if (gt < M && gt < m && row0 < half) {
      float g = 0.0f, u = 0.0f;
      for (int v = 0; v < wpg; ++v) g += red[group * wpg + v][gt], u += red[group * wpg + v][M + gt];
      store_from_f32(y, gt * half + row0, gated(g, u), io);
    }
    return;
  }
  if (gt < R * M) {
    const int r = gt / M, i = gt % M;
    if (r < rpg && i < m && row0 + r < n) {
      float s = 0.0f;
      for (int v = 0; v < wpg; ++v) s += red[group * wpg + v][gt];
      store_from_f32(y, i * n + row0 + r, s, io);
    }
  }
}

}  // namespace rlx::cuda::quant_detail
