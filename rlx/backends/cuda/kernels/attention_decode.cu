// Attention decode (Lq ≤ 8, long Lk): split-KV flash-decoding on tensor
// cores (f16/bf16, D ∈ {32, 64, 128, 256}), plus the f32 combine kernel.
//
// Algorithm. The G = H/Hkv query heads that share a kv head, times the Lq
// queries, form R = G·Lq rows (row r = query r / G, head kvh·G + r % G);
// 16 of them fill one m16 fragment, so one CTA reads each K/V row once for a
// whole GQA group (R > 16 takes ⌈R/16⌉ row groups). The key range the rows can
// see (kv_len, causal, window; all read on the device, so CUDA-graph replays
// may change lengths) is cut into `splits` equal chunks, one per CTA, sized at
// run time from the actual kv_len (splits beyond what it needs exit at once;
// one active split writes the output itself). Inside a CTA each
// of the 4 warps takes 16 keys of every 64-key tile (at D = 256, 8 warps and
// 128-key tiles, so a cache of up to 128 keys is one CTA's single pass; a warp
// with no key in the split skips its share):
//   S = Q·Kᵀ (16 × 16, mma m16n8k16), logits/masks, online softmax per warp,
//   O += P·V (P stays in registers as the A fragment, V via ldmatrix.trans),
// then the 4 warps merge (m, l, O) through shared memory. With one active
// split the CTA writes the normalized output; otherwise it writes f32 partials
// (unnormalized O, max m in log2 units, sum l) to the caller's workspace, and
// the last split of the row group to arrive (an atomic counter) merges them:
// O = Σ O_s·2^(m_s−M) / Σ l_s·2^(m_s−M). No second kernel.
//
// Memory plan. The job is reading the KV cache, so that is all that streams:
// K and V tiles (64 keys × D) go global → shared by 16-byte cp.async, each
// warp-wide request covering whole 128-byte lines, kStages deep (two tiles in
// flight while the third is consumed; ~70 KB in flight per SM at D = 128;
// the 8-warp D = 256 tile, 135 KB, is a single stage).
// Rows past the split's end are zero-filled, not read. Smem rows are padded by
// 16 bytes (stride D + 8) so ldmatrix phases are bank-conflict free. The
// split count targets one full wave of CTAs (SMs × CTAs per SM) with the
// least wave-quantization loss, at ≥ 256 keys per split.
#include <algorithm>

#include "rlx/backends/cuda/kernels/attention.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/attention.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

using namespace dev;

constexpr int kMaxSplits = 128;
// One key tile per CTA: decode CTAs are latency-bound. One CTA walking all
// of a short cache's tiles, to skip the merge (2.1 µs), measured slower from
// three tiles on: 160 keys 7.3 against 6.2 µs with three stages filled up
// front (docs/performance.md, eighteenth session).
constexpr int kMinKeysPerSplit = 64;

// Warps per CTA: 4, or 8 at D = 256, where a 128-key tile then fits one CTA
// in one pass (a single stage), so up to 128 keys need no cross-split merge
// (RLX_CUDA_DECODE_ATTN_WIDE). The merge costs more than the wider CTA:
// 96 / 128 keys 4.42 / 4.76 µs against 6.51 / 6.58 with 4 warps, and no
// slower at 16-64 keys (H200, rlx_decode_bench, session 37).
int decode_warps(int D) { return D == 256 && env_bool("RLX_CUDA_DECODE_ATTN_WIDE") ? 8 : 4; }

template <typename T, int D, int W = 4>
struct Decode {
  static constexpr int kWarps = W;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int BN = 16 * kWarps;  // keys per tile, 16 per warp
  static constexpr int kStride = D + 8;
  static constexpr int kStages = W > 4 ? 1 : D == 256 ? 2 : 3;
  static constexpr bool kQInRegs = D <= 128;
  static constexpr int kOStride = D + 4;  // f32 merge scratch row
  static constexpr int kTileBytes = 2 * BN * kStride * static_cast<int>(sizeof(T));  // K + V
  static constexpr int kQBytes = 16 * kStride * static_cast<int>(sizeof(T));
  static constexpr int kMergeBytes = (kWarps * 16 * kOStride + 2 * kWarps * 16) * 4;
  static constexpr int kSmemBytes = kQBytes + (kStages * kTileBytes > kMergeBytes ? kStages * kTileBytes : kMergeBytes);
  // The cross-split merge keeps 16 rows × splits × 3 floats where the tiles were.
  static_assert(16 * kMaxSplits * 3 * 4 <= kStages * kTileBytes, "split merge scratch exceeds the tile stages");
};

// Keys one split takes before the decode kernel splits them further: a
// 64-key tile with 4 warps; with 8 warps RLX_CUDA_DECODE_ATTN_TILES 128-key
// tiles, which its CTA walks one after another (one stage) instead of paying
// the cross-split merge.
int decode_min_keys(int D) {
  if (decode_warps(D) != 8) return kMinKeysPerSplit;
  const int64_t tiles = env_int("RLX_CUDA_DECODE_ATTN_TILES");
  RLX_CHECK_AS(InvalidArgument, tiles >= 1 && tiles <= 8, "RLX_CUDA_DECODE_ATTN_TILES=", tiles,
               " must be 1..8");
  return static_cast<int>(tiles) * Decode<__half, 256, 8>::BN;
}

template <typename T>
__device__ __forceinline__ void store4(T* p, float4 v) {
  *reinterpret_cast<uint2*>(p) = make_uint2(pack2<T>(v.x, v.y), pack2<T>(v.z, v.w));
}

// Four outputs at element `at` of a.out: as T, or (a.out_f32) as f32 holding
// the T-rounded values, the bits the folded Cast to f32 would store.
template <typename T>
__device__ __forceinline__ void store_out(const AttnArgs& a, int64_t at, float4 v) {
  if (!a.out_f32) return store4(static_cast<T*>(a.out) + at, v);
  auto r = [](float x) { return to_f32(from_f32<T>(x)); };
  *reinterpret_cast<float4*>(static_cast<float*>(a.out) + at) = make_float4(r(v.x), r(v.y), r(v.z), r(v.w));
}

// cp_async_rows (device/attention.cuh) cut at row `cut` ≤ limit: `before`
// copies the tile's rows below cut, otherwise the rest (zero-filling rows at
// or past limit). The two calls write disjoint smem rows, so the first may
// run before pdl_wait and the second after it.
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void cp_async_rows_cut(T* s, const T* src, int64_t stride, int row0, int limit, int cut,
                                                  bool before, int tid) {
  constexpr int kChunks = D / 8, kStride = D + 8, kRowsPerIt = THREADS / kChunks;
  const int r = tid / kChunks, ch = tid % kChunks;
  const T* p = src + (row0 + r) * stride + ch * 8;
  const uint32_t dst = smem_u32(s + r * kStride + ch * 8);
#pragma unroll
  for (int it = 0; it < ROWS / kRowsPerIt; ++it) {
    const int row = row0 + r + it * kRowsPerIt;
    if (before ? row < cut : row >= cut)
      cp_async_16(dst + it * kRowsPerIt * kStride * static_cast<int>(sizeof(T)), row < limit ? p : src, row < limit);
    p += kRowsPerIt * stride;
  }
}

template <typename T, int D, int W>
__global__ void __launch_bounds__(32 * W) attn_decode_kernel(const AttnArgs a) {
  // With kv_len a program input the key ranges below need nothing from the
  // kernel before; otherwise wait for it first.
  if (!a.kv_len_ready) dev::pdl_wait();
  using P = Decode<T, D, W>;
  constexpr int BN = P::BN, S = P::kStride, KS = D / 16, DT = D / 8, kStages = P::kStages;
  // Tiles requested before the loop: all but one stage, or the one stage.
  constexpr int kAhead = kStages > 1 ? kStages - 1 : 1;
  constexpr bool kQInRegs = P::kQInRegs;

  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sKV = reinterpret_cast<T*>(smem + P::kQBytes);

  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int G = a.group;
  const int R = G * a.Lq;
  const int RG = (R + 15) / 16;

  int64_t bid = blockIdx.x;
  const int split = static_cast<int>(bid % a.splits);
  bid /= a.splits;
  const int rg = static_cast<int>(bid % RG);
  bid /= RG;
  const int kvh = static_cast<int>(bid % a.Hkv);
  const int b = static_cast<int>(bid / a.Hkv);
  const int kvlen = attn_kv_len(a, b);
  const int64_t qoff = static_cast<int64_t>(kvlen) - a.Lq;
  const int r0 = rg * 16;
  const int r_last = min(r0 + 16, R) - 1;

  // This thread's two fragment rows (g, g + 8): visible key interval and head.
  int row_lo[2], row_hi[2], row_i[2], row_h[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = r0 + g + rr * 8;
    const bool ok = r < R;
    row_i[rr] = ok ? r / G : 0;
    row_h[rr] = kvh * G + (ok ? r % G : 0);
    const int2 range = attn_key_range(a, row_i[rr] + qoff, kvlen);
    row_lo[rr] = ok ? range.x : 0;
    row_hi[rr] = ok ? range.y : 0;
  }

  // Keys any row of the CTA can see, then this split's share of them. The
  // grid has a.splits CTAs per row group (sized for the cache's capacity);
  // only as many split as the actual key count needs (≥ kMinKeysPerSplit
  // keys each) work, the others leave at once. With one active split its CTA
  // writes the output directly: a short cache costs one small CTA.
  const int2 first = attn_key_range(a, r0 / G + qoff, kvlen);
  const int2 last = attn_key_range(a, r_last / G + qoff, kvlen);
  const int n_lo = first.x, n_hi = last.y;
  const int total = max(0, n_hi - n_lo);
  const int active = min(a.splits, max(1, (total + a.split_min_keys - 1) / a.split_min_keys));
  if (split >= active) return;
  const int chunk = ((total + active - 1) / active + BN - 1) / BN * BN;
  const int s_lo = n_lo + split * chunk;
  const int s_hi = min(n_hi, s_lo + chunk);
  const int ntiles = s_hi > s_lo ? (s_hi - s_lo + BN - 1) / BN : 0;

  const T* kg = static_cast<const T*>(a.k) + b * a.k_batch_stride + static_cast<int64_t>(kvh) * D;
  const T* vg = static_cast<const T*>(a.v) + b * a.v_batch_stride + static_cast<int64_t>(kvh) * D;

  auto load_tile = [&](int tile, int slot) {
    T* sK = sKV + slot * 2 * BN * S;
    const int n0 = s_lo + tile * BN;
    cp_async_rows<T, D, BN, P::kThreads>(sK, kg, a.k_row_stride, n0, s_hi, tid);
    cp_async_rows<T, D, BN, P::kThreads>(sK + BN * S, vg, a.v_row_stride, n0, s_hi, tid);
  };
  auto load_tile_cut = [&](int tile, int slot, int cut, bool before) {
    T* sK = sKV + slot * 2 * BN * S;
    const int n0 = s_lo + tile * BN;
    cp_async_rows_cut<T, D, BN, P::kThreads>(sK, kg, a.k_row_stride, n0, s_hi, cut, before, tid);
    cp_async_rows_cut<T, D, BN, P::kThreads>(sK + BN * S, vg, a.v_row_stride, n0, s_hi, cut, before, tid);
  };
  // Cache rows below `cut`, written by earlier steps, are requested before
  // pdl_wait: their latency overlaps the kernel before (rope, which writes
  // this step's rows).
  int cut = s_lo;
  if (a.kv_len_ready) {
    if (a.kv_stable != nullptr) {
      cut = min(max(__ldg(a.kv_stable), s_lo), s_hi);
#pragma unroll
      for (int st = 0; st < kAhead; ++st)
        if (st < ntiles && cut > s_lo + st * BN) load_tile_cut(st, st, cut, true);
    }
    dev::pdl_wait();
  }
  dev::pdl_trigger();

  // Q rows: each row has its own (query, head) address.
  {
    const T* qb = static_cast<const T*>(a.q) + b * a.q_batch_stride;
    constexpr int kChunks = D / 8;
    for (int c = tid; c < 16 * kChunks; c += P::kThreads) {
      const int r = c / kChunks, ch = c % kChunks;
      const int rgl = r0 + r;
      const bool ok = rgl < R;
      const T* src = ok ? qb + (rgl / G) * a.q_row_stride + static_cast<int64_t>(kvh * G + rgl % G) * D + ch * 8 : qb;
      cp_async_16(smem_u32(sQ + r * S + ch * 8), src, ok);
    }
  }
#pragma unroll
  for (int st = 0; st < kAhead; ++st) {
    if (st < ntiles) {
      if (cut > s_lo + st * BN) {
        load_tile_cut(st, st, cut, false);
      } else {
        load_tile(st, st);
      }
    }
    cp_async_commit();  // always commit: group counting stays uniform
  }

  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
  const uint32_t sQ_a = smem_u32(sQ + a_row * S + a_col);
  const uint32_t sKV_k = smem_u32(sKV + (warp * 16 + k_row) * S + k_col);
  const uint32_t sKV_v = smem_u32(sKV + BN * S + (warp * 16 + a_row) * S + a_col);
  const bool general = a.softcap > 0.0f || a.bias != nullptr || a.key_mask != nullptr;

  uint32_t qf[kQInRegs ? KS : 1][4];
  float acc[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.0f, 0.0f};

  int slot = 0;
  for (int t = 0; t < ntiles; ++t) {
    if constexpr (kStages > 1) {
      cp_async_wait<kStages - 2>();  // tile t (and Q) landed
      __syncthreads();               // ... for every thread; slot (t − 1) is free again
    } else {
      if (t > 0) {  // the one stage: the next tile once every warp is done with this one
        __syncthreads();
        load_tile(t, 0);
        cp_async_commit();
      }
      cp_async_wait<0>();
      __syncthreads();
    }
    if constexpr (kQInRegs) {
      if (t == 0) {
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) ldmatrix_x4(qf[kk], sQ_a + kk * 32);
      }
    }
    if constexpr (kStages > 1) {
      if (t + kStages - 1 < ntiles) load_tile(t + kStages - 1, (slot + kStages - 1) % kStages);
      cp_async_commit();
    }

    const uint32_t slot_off = static_cast<uint32_t>(slot * P::kTileBytes);
    const int n0 = s_lo + t * BN + warp * 16;
    // A warp whose 16 keys all lie past the split contributes nothing (its
    // rows' m, l and O stay as they are); in a short cache most of the 8-warp
    // tile's warps are such.
    if (n0 >= s_hi) {
      slot = slot + 1 == kStages ? 0 : slot + 1;
      continue;
    }
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t qa[4];
      if constexpr (kQInRegs) {
#pragma unroll
        for (int x = 0; x < 4; ++x) qa[x] = qf[kk][x];
      } else {
        ldmatrix_x4(qa, sQ_a + kk * 32);
      }
      uint32_t kb[4];
      ldmatrix_x4(kb, sKV_k + slot_off + kk * 32);
      mma_16816<T>(s[0], qa, kb[0], kb[1]);
      mma_16816<T>(s[1], qa, kb[2], kb[3]);
    }

#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int rr = e >> 1;
        const int key = n0 + j * 8 + 2 * t4 + (e & 1);
        const bool vis = key >= row_lo[rr] && key < row_hi[rr] && key < s_hi;
        float x = -INFINITY;
        if (vis) {
          if (general) {
            if (attn_key_kept(a, b, key, s_hi)) x = attn_logit<T>(a, s[j][e], b, row_h[rr], row_i[rr], key);
          } else {
            x = s[j][e] * a.scale_log2;
          }
        }
        s[j][e] = x;
      }

    float alphas[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const float mx = quad_max(fmaxf(fmaxf(s[0][2 * rr], s[0][2 * rr + 1]), fmaxf(s[1][2 * rr], s[1][2 * rr + 1])));
      const float m_new = fmaxf(row_m[rr], mx);
      const float base = attn_row_base(m_new);
      const float alpha = exp2f(row_m[rr] - base);
      row_m[rr] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        s[j][2 * rr] = exp2f(s[j][2 * rr] - base);
        s[j][2 * rr + 1] = exp2f(s[j][2 * rr + 1] - base);
        sum += s[j][2 * rr] + s[j][2 * rr + 1];
      }
      row_l[rr] = row_l[rr] * alpha + sum;
      alphas[rr] = alpha;
    }
    // O is zero before the first tile, and a factor of exactly 1 changes
    // nothing: skip the D/2 multiplies unless some row of the warp rescales.
    if (t > 0 && __any_sync(0xffffffffu, alphas[0] != 1.0f || alphas[1] != 1.0f)) {
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        acc[dt][0] *= alphas[0];
        acc[dt][1] *= alphas[0];
        acc[dt][2] *= alphas[1];
        acc[dt][3] *= alphas[1];
      }
    }

    uint32_t pa[4];
    pa[0] = pack2<T>(s[0][0], s[0][1]);
    pa[1] = pack2<T>(s[0][2], s[0][3]);
    pa[2] = pack2<T>(s[1][0], s[1][1]);
    pa[3] = pack2<T>(s[1][2], s[1][3]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, sKV_v + slot_off + dp * 32);
      mma_16816<T>(acc[2 * dp], pa, vb[0], vb[1]);
      mma_16816<T>(acc[2 * dp + 1], pa, vb[2], vb[3]);
    }
    slot = slot + 1 == kStages ? 0 : slot + 1;
  }

  // Merge the 4 warps' (m, l, O) through smem (the K/V stages are free now).
  // One thread per real row turns the warps' (m, l) into weights once; the
  // output pass is then 4 smem reads and 4 FMAs per element, four elements
  // per thread (decode runs at one warp per scheduler, so every instruction
  // on this path is latency).
  cp_async_wait<0>();
  __syncthreads();
  float* sO = reinterpret_cast<float*>(sKV);
  float* sM = sO + P::kWarps * 16 * P::kOStride;
  float* sL = sM + P::kWarps * 16;
  const int nrows = min(16, R - r0);
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = g + rr * 8;
    const float l = quad_sum(row_l[rr]);
    if (row >= nrows) continue;  // padding rows of the m16 fragment
    if (t4 == 0) {
      sM[warp * 16 + row] = row_m[rr];
      sL[warp * 16 + row] = l;
    }
    if (row_m[rr] == -INFINITY) continue;  // no key seen: its weight below is 0 and its O is not read
    float* o = sO + (warp * 16 + row) * P::kOStride + 2 * t4;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) *reinterpret_cast<float2*>(o + dt * 8) = make_float2(acc[dt][2 * rr], acc[dt][2 * rr + 1]);
  }
  __syncthreads();
  // Per row: the merged max M and sum L; sM becomes each warp's factor
  // 2^(m_w − M), divided by L when this CTA writes the final output.
  if (tid < nrows) {
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < P::kWarps; ++w) M = fmaxf(M, sM[w * 16 + tid]);
    float f[P::kWarps], L = 0.0f;
#pragma unroll
    for (int w = 0; w < P::kWarps; ++w) {
      f[w] = M == -INFINITY ? 0.0f : exp2f(sM[w * 16 + tid] - M);
      L += sL[w * 16 + tid] * f[w];
    }
    const float scale = active == 1 ? (L > 0.0f ? 1.0f / L : 0.0f) : 1.0f;
#pragma unroll
    for (int w = 0; w < P::kWarps; ++w) sM[w * 16 + tid] = f[w] * scale;
    sL[tid] = M;
    sL[16 + tid] = L;
  }
  __syncthreads();
  constexpr int D4 = D / 4;
  for (int idx = tid; idx < nrows * D4; idx += P::kThreads) {
    const int r = idx / D4, d = (idx % D4) * 4;
    float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < P::kWarps; ++w) {
      const float f = sM[w * 16 + r];
      if (f == 0.0f) continue;  // a warp that saw no key of this row wrote no O for it
      const float4 x = *reinterpret_cast<const float4*>(sO + (w * 16 + r) * P::kOStride + d);
      O.x = fmaf(x.x, f, O.x);
      O.y = fmaf(x.y, f, O.y);
      O.z = fmaf(x.z, f, O.z);
      O.w = fmaf(x.w, f, O.w);
    }
    const int rgl = r0 + r;
    const int64_t row_id = (static_cast<int64_t>(b) * a.Lq + rgl / G) * a.H + kvh * G + rgl % G;
    if (active == 1) {
      store_out<T>(a, row_id * D + d, O);
    } else {
      const int64_t ps = row_id * a.splits + split;
      *reinterpret_cast<float4*>(a.ws_o + ps * D + d) = O;
      if (d == 0) *reinterpret_cast<float2*>(a.ws_ml + 2 * ps) = make_float2(sL[r], sL[16 + r]);
    }
  }
  if (active == 1) return;

  // Arrive; the last of the group's active splits merges their partials:
  // O = Σ O_s·2^(m_s−M) / Σ l_s·2^(m_s−M). The fences publish this CTA's
  // partials before its arrival and order the last CTA's reads after it.
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    int* count = a.ws_count + (static_cast<int64_t>(b) * a.Hkv + kvh) * RG + rg;
    s_last = atomicAdd(count, 1) == active - 1;
  }
  __syncthreads();
  if (!s_last) return;
  // Every active split has arrived: re-zero the counter for the next launch
  // (counters that persist across launches need no memset).
  if (tid == 0) *(a.ws_count + (static_cast<int64_t>(b) * a.Hkv + kvh) * RG + rg) = 0;
  __threadfence();
  // All (m, l) pairs in one round of loads, then per row the weights
  // 2^(m_s − M) / L into sW; the output pass issues its splits' loads four at
  // a time. Serial L2 round trips, not arithmetic, are what this merge costs.
  float* sW = sO;  // [nrows][active] (m, l) pairs, then weights
  auto row_of = [&](int r) { return (static_cast<int64_t>(b) * a.Lq + (r0 + r) / G) * a.H + kvh * G + (r0 + r) % G; };
  for (int i = tid; i < nrows * active; i += P::kThreads) {
    const int r = i / active, s2 = i % active;
    const float2 ml = __ldcg(reinterpret_cast<const float2*>(a.ws_ml) + row_of(r) * a.splits + s2);
    sW[2 * i] = ml.x;
    sW[2 * i + 1] = ml.y;
  }
  __syncthreads();
  float* sWt = sW + 2 * nrows * active;
  if (tid < nrows) {
    const float* ml = sW + 2 * tid * active;
    float M = -INFINITY;
    for (int s2 = 0; s2 < active; ++s2) M = fmaxf(M, ml[2 * s2]);
    float L = 0.0f;
    for (int s2 = 0; s2 < active; ++s2) L += M == -INFINITY ? 0.0f : ml[2 * s2 + 1] * exp2f(ml[2 * s2] - M);
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int s2 = 0; s2 < active; ++s2) sWt[tid * active + s2] = M == -INFINITY ? 0.0f : exp2f(ml[2 * s2] - M) * inv;
  }
  __syncthreads();
  for (int idx = tid; idx < nrows * D4; idx += P::kThreads) {
    const int r = idx / D4, d = (idx % D4) * 4;
    const int64_t row_id = row_of(r);
    const float4* po = reinterpret_cast<const float4*>(a.ws_o + row_id * a.splits * D + d);
    const float* w = sWt + r * active;
    float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < active; s0 += 4) {
      float4 x[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = s0 + j < active ? __ldcg(po + static_cast<int64_t>(s0 + j) * D4) : make_float4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float f = s0 + j < active ? w[s0 + j] : 0.0f;
        O.x = fmaf(x[j].x, f, O.x);
        O.y = fmaf(x[j].y, f, O.y);
        O.z = fmaf(x[j].z, f, O.z);
        O.w = fmaf(x[j].w, f, O.w);
      }
    }
    store_out<T>(a, row_id * D + d, O);
  }
}

template <typename T, int D, int W>
void launch_decode_t(const AttnArgs& a, cudaStream_t stream) {
  using P = Decode<T, D, W>;
  auto kernel = attn_decode_kernel<T, D, W>;
  RLX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, P::kSmemBytes));
  const int RG = (a.group * a.Lq + 15) / 16;
  const int64_t blocks = static_cast<int64_t>(a.B) * a.Hkv * RG * a.splits;
  RLX_CHECK(blocks <= 0x7fffffff, "attention: decode grid too large (", blocks, " blocks)");
  if (a.splits > 1 && !a.counters_zeroed) {
    const int64_t groups = static_cast<int64_t>(a.B) * a.Hkv * RG;
    RLX_CUDA_CHECK(cudaMemsetAsync(a.ws_count, 0, static_cast<size_t>(groups) * sizeof(int), stream));
  }
  AttnArgs args = a;
  args.split_min_keys = decode_min_keys(D);
  kernel<<<static_cast<unsigned>(blocks), P::kThreads, P::kSmemBytes, stream>>>(args);
  RLX_CUDA_CHECK_LAUNCH("attention (decode)");
}

template <typename T>
void launch_decode_dtype(const AttnArgs& a, cudaStream_t stream) {
  switch (a.D) {
    case 32: launch_decode_t<T, 32, 4>(a, stream); return;
    case 64: launch_decode_t<T, 64, 4>(a, stream); return;
    case 128: launch_decode_t<T, 128, 4>(a, stream); return;
    case 256:
      if (decode_warps(256) == 8) launch_decode_t<T, 256, 8>(a, stream);
      else launch_decode_t<T, 256, 4>(a, stream);
      return;
    default: throw Unsupported(str("attention: decode kernel has no head_dim ", a.D));
  }
}

int decode_smem(int D) {
  switch (D) {
    case 32: return Decode<__half, 32>::kSmemBytes;
    case 64: return Decode<__half, 64>::kSmemBytes;
    case 128: return Decode<__half, 128>::kSmemBytes;
    case 256: return decode_warps(256) == 8 ? Decode<__half, 256, 8>::kSmemBytes : Decode<__half, 256>::kSmemBytes;
    default: return -1;
  }
}

}  // namespace

namespace detail {

bool attention_decode_supported(DType dtype, int D, size_t smem_optin_bytes) {
  if (dtype != DType::F16 && dtype != DType::BF16) return false;
  const int smem = decode_smem(D);
  return smem > 0 && static_cast<size_t>(smem) <= smem_optin_bytes;
}

int attention_decode_splits(DType dtype, const dev::AttnArgs& a) {
  (void)dtype;  // both 16-bit types use the same tiles
  int device = 0, sms = 0, smem_sm = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  RLX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  RLX_CUDA_CHECK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  const int smem = decode_smem(a.D);
  const int per_sm = std::clamp(smem_sm / (smem + 1024), 1, 4);
  const int64_t target = static_cast<int64_t>(sms) * per_sm;
  const int64_t base = static_cast<int64_t>(a.B) * a.Hkv * ((a.group * a.Lq + 15) / 16);
  const int min_keys = decode_min_keys(a.D);
  const int max_splits = std::clamp(a.Lk / min_keys, 1, kMaxSplits);
  if (base >= target || max_splits == 1) return 1;
  // Fewest splits with the best wave efficiency (CTAs / (waves · target)).
  int best = 1;
  double best_eff = static_cast<double>(base) / static_cast<double>(target);
  for (int s = 2; s <= max_splits; ++s) {
    const int64_t ctas = base * s;
    const int64_t waves = (ctas + target - 1) / target;
    const double eff = static_cast<double>(ctas) / static_cast<double>(waves * target);
    if (eff > best_eff + 0.02) {
      best = s;
      best_eff = eff;
    }
  }
  return best;
}

void launch_attention_decode(DType dtype, const dev::AttnArgs& a, cudaStream_t stream) {
  RLX_CHECK(a.splits >= 1 && a.splits <= kMaxSplits, "attention: decode split count ", a.splits, " out of range");
  if (dtype == DType::F16) {
    launch_decode_dtype<__half>(a, stream);
  } else if (dtype == DType::BF16) {
    launch_decode_dtype<__nv_bfloat16>(a, stream);
  } else {
    throw Unsupported(str("attention: decode kernel has no ", dtype_name(dtype), " variant"));
  }
}

}  // namespace detail
}  // namespace rlx::cuda
