// QKV projection + attention for head dim 32 in one kernel (qkv_attention_sm90.h).
//
// Work. Tiles of 128 rows of X hold spt = ⌊128 / L⌋ whole sequences
// (tile_rows = spt·L rows; the rest of the 128 are computed and ignored).
// CTA c serves head c mod H and every per_head-th tile from c / H on, with
// per_head·H CTAs filling the SMs once: its head's 96 weight rows (Q, K and
// V, 32 each) are loaded into shared memory once.
//
// Per tile:
//   GEMM       a producer warp streams X's 128 rows in slabs of 64 columns
//              by TMA through a ring of kStages stages (full / empty
//              mbarriers), the ring running ahead across tiles; each of two
//              warpgroups computes 64 rows × 96 columns with wgmma m64n96k16
//              (or, ping-pong, one warpgroup the whole tile: see below).
//   epilogue   + bias, rounded to T into sQKV [128][96 + 8] (Q | K | V per
//              row), plus one keep flag per key row (its sequence exists,
//              the key mask keeps it).
//   attention  warp w takes query rows 16w..16w+15 against the keys of their
//              sequences (all in sQKV): S = Q·Kᵀ by mma.sync m16n8k16 from
//              ldmatrix fragments, keys outside the row's sequence or masked
//              -inf, one row max (no online rescaling: every key is in
//              registers), P = 2^(S·scale·log2e − max) two at a time in T
//              (ex2.approx.{f16,bf16}x2) packed as the P·V operand, row sums
//              by an MMA of P against ones, O = P·V; O / sum (0 for a row
//              that sees no key) staged over the warp's own Q columns and
//              written with 16-byte stores.
#include "rlx/backends/cuda/kernels/qkv_attention_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/attention.cuh"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/device/wgmma.cuh"
#include "rlx/backends/cuda/kernels/gemm_sm90.h"
#include "rlx/core/env.h"
#include "rlx/core/error.h"

namespace rlx::cuda {
namespace {

using namespace dev;

constexpr int kD = 32, kN = 3 * kD, kBM = 128, kBK = 64, kThreads = 256, kWarps = kThreads / 32, kStages = 4;
constexpr int kMaxK = 512;
constexpr int kXSlabBytes = kBM * kBK * 2;   // X: 128 rows × 64 columns
constexpr int kWSlabBytes = kN * kBK * 2;    // W: 96 rows × 64 columns
constexpr int kWPartBytes = kD * kBK * 2;    // Q's, K's or V's 32 rows of a W slab
constexpr int kS = kN + 8;                   // sQKV row, elements: conflict-free fragment writes and ldmatrix
constexpr int kMaxL = kBM;

// Both kernels: two consumer warpgroups and a producer warp.
constexpr int kCtaThreads = kThreads + 32;

// Shared memory of a kernel that stages `copies` QKV tiles (one per
// warpgroup that attends on its own): the X ring, the head's W slabs, the
// staged tiles, the bias, the keep flags, then the mbarriers (wbar,
// full[kStages], empty[kStages], turn[2]). smem_bytes and carve agree by
// construction: both walk this one list.
int smem_bytes(int64_t K, int copies) {
  const int nk = static_cast<int>((K + kBK - 1) / kBK);
  return 1024 + kStages * kXSlabBytes + nk * kWSlabBytes + copies * (kBM * kS * 2 + kBM) + kN * 4 +
         (3 + 2 * kStages) * 8;
}
template <typename T>
struct Smem {
  unsigned char* x;
  unsigned char* w;
  T* qkv;         // copies × [kBM][kS]
  float* bias;    // [kN]
  uint8_t* keep;  // copies × [kBM]
  uint64_t *wbar, *full, *empty, *turn;
};
template <typename T>
__device__ __forceinline__ Smem<T> carve(unsigned char* raw_ptr, int nk, int copies) {
  const uint32_t raw = smem_u32(raw_ptr);
  unsigned char* base = raw_ptr + (((raw + 1023) & ~1023u) - raw);
  Smem<T> m;
  m.x = base;
  m.w = m.x + kStages * kXSlabBytes;
  m.qkv = reinterpret_cast<T*>(m.w + nk * kWSlabBytes);
  m.bias = reinterpret_cast<float*>(m.qkv + copies * kBM * kS);
  m.keep = reinterpret_cast<uint8_t*>(m.bias + kN);
  m.wbar = reinterpret_cast<uint64_t*>(m.keep + copies * kBM);
  m.full = m.wbar + 1;
  m.empty = m.full + kStages;
  m.turn = m.empty + kStages;
  return m;
}

struct KernelArgs {
  const void* bias;
  int bias_f32;
  const uint8_t* key_mask;
  void* out;
  int B, L, K, H;
  int spt, tile_rows, tiles, per_head;
  int M;
  float scale_log2;
};

// Keep flag of key row i (< 128) of tile `tile`: its sequence exists and the
// key mask keeps it.
__device__ __forceinline__ uint8_t key_kept(const KernelArgs& p, int tile, int i) {
  const int b = tile * p.spt + i / p.L;
  bool keep = i < p.tile_rows && b < p.B;
  if (keep && p.key_mask != nullptr) keep = __ldg(p.key_mask + static_cast<int64_t>(b) * p.L + i % p.L) != 0;
  return keep ? 1 : 0;
}

// A warp's share of a 64-row wgmma accumulator, + bias, rounded to T into
// sQKV: fragment 4j + 2hh + e is row row0 + 8hh, column 8j + 2·t4 + e
// (row0 = the block's first row + 16·(warp mod 4) + g).
template <typename T>
__device__ __forceinline__ void stage_qkv(T* sQKV, const float (&acc)[48], const float* sBias, int row0, int t4) {
  uint32_t* s32 = reinterpret_cast<uint32_t*>(sQKV);
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const int c = 8 * j + 2 * t4;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      s32[((row0 + 8 * hh) * kS + c) / 2] =
          pack2<T>(acc[4 * j + 2 * hh] + sBias[c], acc[4 * j + 2 * hh + 1] + sBias[c + 1]);
  }
}

// Attention of query rows r_lo..r_lo+15 of the staged tile (one warp), the
// result written to out's rows of tile `tile`, head h.
template <typename T>
__device__ __forceinline__ void attend16(T* sQKV, const uint8_t* sKeep, const KernelArgs& p, int tile, int h,
                                         int r_lo, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  // ldmatrix lane → (row, column) offsets: A operands and V (transposed), and K.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
  const float mul = p.scale_log2;
  // Keys of the sequences these rows belong to, as 16-key blocks.
  const int k_lo = (r_lo / p.L) * p.L;
  const int k_hi = (min(r_lo + 15, p.tile_rows - 1) / p.L + 1) * p.L;
  const int nb_lo = k_lo / 16, nb_hi = (k_hi + 15) / 16;
  int seq_lo[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) seq_lo[rr] = ((r_lo + g + 8 * rr) / p.L) * p.L;

  uint32_t qf[2][4];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) ldmatrix_x4(qf[kk], smem_u32(sQKV + (r_lo + a_row) * kS + kk * 16 + a_col));

  float sc[kMaxL / 8][4];
#pragma unroll
  for (int nb = 0; nb < kMaxL / 16; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[2 * nb][e] = sc[2 * nb + 1][e] = -INFINITY;
    if (nb < nb_lo || nb >= nb_hi) continue;
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[2 * nb][e] = sc[2 * nb + 1][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t kf[4];
      ldmatrix_x4(kf, smem_u32(sQKV + (nb * 16 + k_row) * kS + kD + kk * 16 + k_col));
      mma_16816<T>(sc[2 * nb], qf[kk], kf[0], kf[1]);
      mma_16816<T>(sc[2 * nb + 1], qf[kk], kf[2], kf[3]);
    }
#pragma unroll
    for (int jj = 0; jj < 2; ++jj)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = nb * 16 + jj * 8 + 2 * t4 + (e & 1), lo = seq_lo[e >> 1];
        if (key < lo || key >= lo + p.L || sKeep[key] == 0) sc[2 * nb + jj][e] = -INFINITY;
      }
  }

  // Softmax numerators in T, packed: pk[j][rr] holds keys 8j + 2·t4, +1 of row g + 8rr.
  uint32_t pk[kMaxL / 8][2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kMaxL / 8; ++j) mx = fmaxf(mx, fmaxf(sc[j][2 * rr], sc[j][2 * rr + 1]));
    mx = quad_max(mx);
    const float base = mx == -INFINITY ? 0.0f : mx * mul;
#pragma unroll
    for (int j = 0; j < kMaxL / 8; ++j)
      pk[j][rr] = exp2_x2<T>(fmaf(sc[j][2 * rr], mul, -base), fmaf(sc[j][2 * rr + 1], mul, -base));
  }

  float o[kD / 8][4], lsum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int dt = 0; dt < kD / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
#pragma unroll
  for (int nb = 0; nb < kMaxL / 16; ++nb) {
    if (nb < nb_lo || nb >= nb_hi) continue;
    const uint32_t pa[4] = {pk[2 * nb][0], pk[2 * nb][1], pk[2 * nb + 1][0], pk[2 * nb + 1][1]};
    mma_16816<T>(lsum, pa, kOnes2<T>, kOnes2<T>);  // every column: the row's sum
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, smem_u32(sQKV + (nb * 16 + a_row) * kS + 2 * kD + dp * 16 + a_col));
      mma_16816<T>(o[2 * dp], pa, vb[0], vb[1]);
      mma_16816<T>(o[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }

  // O / sum over the warp's own Q columns (only this warp reads them), then 16-byte stores.
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const float l = lsum[2 * rr];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    uint32_t* srow = reinterpret_cast<uint32_t*>(sQKV + (r_lo + g + 8 * rr) * kS + 2 * t4);
#pragma unroll
    for (int dt = 0; dt < kD / 8; ++dt) srow[dt * 4] = pack2<T>(o[dt][2 * rr] * inv, o[dt][2 * rr + 1] * inv);
  }
  __syncwarp();
  T* out = static_cast<T*>(p.out);
  const int64_t out_stride = static_cast<int64_t>(p.H) * kD;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = i * 32 + lane, r = r_lo + c / 4, ch = c % 4;
    const int m = tile * p.tile_rows + r;
    if (r < p.tile_rows && m < p.M)
      *reinterpret_cast<uint4*>(out + m * out_stride + h * kD + ch * 8) =
          *reinterpret_cast<const uint4*>(sQKV + r * kS + ch * 8);
  }
  __syncwarp();  // the staged rows are read before the next tile's QKV overwrites them
}

// The head's bias columns (Q | K | V) as f32.
template <typename T>
__device__ __forceinline__ void stage_bias(float* sBias, const KernelArgs& p, int h, int tid, int threads) {
  for (int c = tid; c < kN; c += threads) {
    const int i = ((c / kD) * p.H + h) * kD + c % kD;
    sBias[c] = p.bias == nullptr ? 0.0f
               : p.bias_f32      ? static_cast<const float*>(p.bias)[i]
                                 : to_f32(static_cast<const T*>(p.bias)[i]);
  }
}

// The head's W rows (Q's, K's and V's 32 each), every slab, onto `wbar`.
__device__ __forceinline__ void load_w(unsigned char* sW, const CUtensorMap* map_w, const KernelArgs& p, int h, int nk,
                                       uint64_t* wbar) {
  mbar_arrive_expect_tx(wbar, static_cast<uint32_t>(nk * kWSlabBytes));
  for (int kb = 0; kb < nk; ++kb)
    for (int part = 0; part < 3; ++part)
      tma_load_2d(sW + kb * kWSlabBytes + part * kWPartBytes, map_w, kb * kBK, (part * p.H + h) * kD, wbar);
}

// X slab q of this CTA's sequence (tile q / nk, columns (q mod nk)·64) into ring stage q mod kStages.
__device__ __forceinline__ void load_x(unsigned char* sX, const CUtensorMap* map_x, const KernelArgs& p, int c0,
                                       int nk, int q, uint64_t* full) {
  const int s = q % kStages, tile = c0 + (q / nk) * p.per_head;
  mbar_arrive_expect_tx(&full[s], kXSlabBytes);
  tma_load_2d(sX + s * kXSlabBytes, map_x, (q % nk) * kBK, tile * p.tile_rows, &full[s]);
}

// The producer warp's lane 0: the head's W, then X's slabs in order, each
// once the stage's previous slab is released (empty).
__device__ __forceinline__ void produce(unsigned char* sX, unsigned char* sW, const CUtensorMap* map_x,
                                        const CUtensorMap* map_w, const KernelArgs& p, int h, int c0, int nk,
                                        int total, uint64_t* wbar, uint64_t* full, uint64_t* empty) {
  load_w(sW, map_w, p, h, nk, wbar);
  for (int q = 0; q < total; ++q) {
    if (q >= kStages) mbar_wait(&empty[q % kStages], static_cast<uint32_t>(q / kStages - 1) & 1);
    load_x(sX, map_x, p, c0, nk, q, full);
  }
}

// Both warpgroups compute each tile's GEMM (64 rows each), then every warp
// 16 query rows; a ninth warp keeps the ring filled.
template <typename T>
__global__ void __launch_bounds__(kCtaThreads, 1)
    qkv_attention_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         const KernelArgs p) {
  extern __shared__ unsigned char smem_raw[];
  const int nk = (p.K + kBK - 1) / kBK;
  const Smem<T> sm = carve<T>(smem_raw, nk, 1);
  unsigned char* sX = sm.x;
  unsigned char* sW = sm.w;
  T* sQKV = sm.qkv;
  float* sBias = sm.bias;
  uint8_t* sKeep = sm.keep;
  uint64_t* wbar = sm.wbar;
  uint64_t* full = sm.full;
  uint64_t* empty = sm.empty;

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int h = static_cast<int>(blockIdx.x) % p.H, c0 = static_cast<int>(blockIdx.x) / p.H;
  const int my_tiles = c0 < p.tiles ? (p.tiles - c0 + p.per_head - 1) / p.per_head : 0;
  const int total = my_tiles * nk;  // X slabs this CTA consumes, in order

  if (tid == 0) {
    mbar_init(wbar, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();
  pdl_begin();  // X, W, bias and the key mask may be earlier kernels' outputs
  stage_bias<T>(sBias, p, h, tid, kCtaThreads);
  __syncthreads();
  if (wg == 2) {  // the producer warp
    if (lane == 0) produce(sX, sW, &map_x, &map_w, p, h, c0, nk, total, wbar, full, empty);
    return;
  }
  mbar_wait(wbar, 0);

  for (int it = 0; it < my_tiles; ++it) {
    const int tile = c0 + it * p.per_head;
    float acc[48];
#pragma unroll
    for (int i = 0; i < 48; ++i) acc[i] = 0.0f;
    for (int kb = 0; kb < nk; ++kb) {
      const int q = it * nk + kb, s = q % kStages;
      mbar_wait(&full[s], static_cast<uint32_t>(q / kStages) & 1);
      const uint64_t da = wgmma_desc(smem_u32(sX + s * kXSlabBytes) + static_cast<uint32_t>(wg * 64 * 128));
      const uint64_t db = wgmma_desc(smem_u32(sW + kb * kWSlabBytes));
      wgmma_fence();
      pin(acc);
#pragma unroll
      for (int k = 0; k < kBK / 16; ++k)  // +32 bytes per k16 step = +2 in the descriptor's address field
        wgmma_m64n96k16<T>(acc, da + 2 * k, db + 2 * k, kb > 0 || k > 0);
      wgmma_commit();
      wgmma_wait<1>();
      pin(acc);
      if (kb > 0 && lane == 0) mbar_arrive(&empty[(q - 1) % kStages]);
    }
    wgmma_wait<0>();
    pin(acc);
    if (lane == 0) mbar_arrive(&empty[(it * nk + nk - 1) % kStages]);

    named_barrier_sync(1, kThreads);  // every consumer warp is done with the previous tile's sQKV
    if (tid < kBM) sKeep[tid] = key_kept(p, tile, tid);
    stage_qkv<T>(sQKV, acc, sBias, wg * 64 + (warp & 3) * 16 + g, t4);
    named_barrier_sync(1, kThreads);  // Q, K, V and the keep flags are staged
    if (warp * 16 < p.tile_rows) attend16<T>(sQKV, sKeep, p, tile, h, warp * 16, lane);
  }
}

// Ping-pong: warpgroup c computes every other tile (it ≡ c mod 2) whole (two
// 64-row wgmmas per step) into its own sQKV, then attends its 128 rows (each
// warp 2 × 16), so one warpgroup's attention runs while the other's GEMM
// holds the tensor cores; a ninth warp keeps the ring filled.
template <typename T>
__global__ void __launch_bounds__(kCtaThreads, 1)
    qkv_attention_pingpong_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                                  const KernelArgs p) {
  extern __shared__ unsigned char smem_raw[];
  const int nk = (p.K + kBK - 1) / kBK;
  const Smem<T> sm = carve<T>(smem_raw, nk, 2);
  unsigned char* sX = sm.x;
  unsigned char* sW = sm.w;
  float* sBias = sm.bias;
  uint64_t* wbar = sm.wbar;
  uint64_t* full = sm.full;
  uint64_t* empty = sm.empty;
  // turn[c]: the other warpgroup finished a main loop, so warpgroup c may start
  // its next. The main loops take turns so the ring's slabs are waited for in
  // order: a warpgroup waiting for a stage's next fill while the previous one
  // is still pending would see that earlier phase as complete.
  uint64_t* turn = sm.turn;

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int h = static_cast<int>(blockIdx.x) % p.H, c0 = static_cast<int>(blockIdx.x) / p.H;
  const int my_tiles = c0 < p.tiles ? (p.tiles - c0 + p.per_head - 1) / p.per_head : 0;
  const int total = my_tiles * nk;

  if (tid == 0) {
    mbar_init(wbar, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4);  // the consuming warpgroup's warps
    }
    mbar_init(&turn[0], 4);
    mbar_init(&turn[1], 4);
    mbar_fence_init();
  }
  __syncthreads();
  pdl_begin();  // X, W, bias and the key mask may be earlier kernels' outputs
  stage_bias<T>(sBias, p, h, tid, kCtaThreads);
  __syncthreads();
  if (wg == 2) {  // the producer warp
    if (lane == 0) produce(sX, sW, &map_x, &map_w, p, h, c0, nk, total, wbar, full, empty);
    return;
  }
  T* sQKV = sm.qkv + wg * kBM * kS;
  uint8_t* sKeep = sm.keep + wg * kBM;
  const int wtid = tid & 127;
  mbar_wait(wbar, 0);

  for (int it = wg; it < my_tiles; it += 2) {
    const int tile = c0 + it * p.per_head, j = it / 2;  // j: this warpgroup's j-th tile
    float acc[2][48];
#pragma unroll
    for (int i = 0; i < 48; ++i) acc[0][i] = acc[1][i] = 0.0f;
    if (wg == 1) mbar_wait(&turn[1], static_cast<uint32_t>(j) & 1);              // warpgroup 0's main loop j
    else if (j > 0) mbar_wait(&turn[0], static_cast<uint32_t>(j - 1) & 1);     // warpgroup 1's main loop j - 1
    for (int kb = 0; kb < nk; ++kb) {
      const int q = it * nk + kb, s = q % kStages;
      mbar_wait(&full[s], static_cast<uint32_t>(q / kStages) & 1);
      const uint32_t xs = smem_u32(sX + s * kXSlabBytes);
      const uint64_t da0 = wgmma_desc(xs), da1 = wgmma_desc(xs + 64 * 128);
      const uint64_t db = wgmma_desc(smem_u32(sW + kb * kWSlabBytes));
      wgmma_fence();
      pin(acc[0]);
      pin(acc[1]);
#pragma unroll
      for (int k = 0; k < kBK / 16; ++k) {
        wgmma_m64n96k16<T>(acc[0], da0 + 2 * k, db + 2 * k, kb > 0 || k > 0);
        wgmma_m64n96k16<T>(acc[1], da1 + 2 * k, db + 2 * k, kb > 0 || k > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();
      pin(acc[0]);
      pin(acc[1]);
      if (kb > 0 && lane == 0) mbar_arrive(&empty[(q - 1) % kStages]);
    }
    if (lane == 0) mbar_arrive(&turn[1 - wg]);
    wgmma_wait<0>();
    pin(acc[0]);
    pin(acc[1]);
    if (lane == 0) mbar_arrive(&empty[(it * nk + nk - 1) % kStages]);

    named_barrier_sync(1 + wg, 128);  // this warpgroup's warps are done with its previous tile's sQKV
    sKeep[wtid] = key_kept(p, tile, wtid);
    stage_qkv<T>(sQKV, acc[0], sBias, (warp & 3) * 16 + g, t4);
    stage_qkv<T>(sQKV, acc[1], sBias, 64 + (warp & 3) * 16 + g, t4);
    named_barrier_sync(1 + wg, 128);
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      const int r_lo = (warp & 3) * 32 + half * 16;
      if (r_lo < p.tile_rows) attend16<T>(sQKV, sKeep, p, tile, h, r_lo, lane);
    }
  }
}

// Which of the two kernels runs: the ping-pong form only when asked
// (RLX_CUDA_QKV_PINGPONG, an experiment until it is timed against the other).
bool pingpong() { return env_bool("RLX_CUDA_QKV_PINGPONG"); }
int launch_smem_bytes(bool pp, int64_t K) { return smem_bytes(K, pp ? 2 : 1); }

const void* kernel_for(DType t, bool pp) {
  static const void* const kernels[2][2] = {
      {reinterpret_cast<const void*>(qkv_attention_kernel<__half>),
       reinterpret_cast<const void*>(qkv_attention_kernel<__nv_bfloat16>)},
      {reinterpret_cast<const void*>(qkv_attention_pingpong_kernel<__half>),
       reinterpret_cast<const void*>(qkv_attention_pingpong_kernel<__nv_bfloat16>)}};
  return kernels[pp ? 1 : 0][t == DType::F16 ? 0 : 1];
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

const char* sm90_qkv_attention_unsupported(const QkvAttentionArgs& a) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) return "dtype is not f16/bf16";
  if (a.D != kD) return "head dim is not 32";
  if (a.H < 1 || a.B < 1) return "empty";
  if (a.L < 1 || a.L > kMaxL) return "sequences are longer than 128 tokens";
  if (a.K < 8 || a.K > kMaxK || a.K % 8 != 0) return "K is not a multiple of 8 in [8, 512]";
  if (!(a.scale > 0.0f) || !std::isfinite(a.scale)) return "the score scale is not positive";
  if (a.B * a.L > (int64_t{1} << 30) || int64_t{a.H} * kN > (int64_t{1} << 20)) return "too large";
  if (a.X == nullptr || a.W == nullptr || a.out == nullptr) return "a required operand is null";
  if (!aligned16(a.X) || !aligned16(a.W) || !aligned16(a.out)) return "X, W or out is not 16-byte aligned";
  if (a.bias != nullptr && (reinterpret_cast<uintptr_t>(a.bias) & (a.bias_f32 ? 3 : 1)) != 0)
    return "bias is misaligned";
  return nullptr;
}

bool sm90_qkv_attention_available(int device) {
  static Sm90Availability known;
  return known(device, [] {
    bool ok = true;
    for (DType t : {DType::F16, DType::BF16})
      for (bool pp : {false, true})
        ok = ok && sm90_kernel_loads(kernel_for(t, pp), launch_smem_bytes(pp, kMaxK), kCtaThreads);
    return ok;
  });
}

void launch_sm90_qkv_attention(const QkvAttentionArgs& a, int sm_count, cudaStream_t stream) {
  const std::string what = str("sm90 qkv projection + attention ", dtype_name(a.dtype), " B=", a.B, " L=", a.L,
                               " H=", a.H, " K=", a.K);
  if (const char* why = sm90_qkv_attention_unsupported(a)) throw Unsupported(str(what, ": ", why));
  const int64_t M = a.B * a.L;
  KernelArgs k{};
  k.bias = a.bias;
  k.bias_f32 = a.bias_f32 ? 1 : 0;
  k.key_mask = a.key_mask;
  k.out = a.out;
  k.B = static_cast<int>(a.B);
  k.L = static_cast<int>(a.L);
  k.K = static_cast<int>(a.K);
  k.H = a.H;
  k.spt = static_cast<int>(kBM / a.L);
  k.tile_rows = k.spt * k.L;
  k.tiles = static_cast<int>((a.B + k.spt - 1) / k.spt);
  k.per_head = std::max(1, std::min(k.tiles, sm_count / a.H));
  k.M = static_cast<int>(M);
  k.scale_log2 = a.scale * 1.4426950408889634f;
  CUtensorMap map_x = sm90_slab_map(a.dtype, a.X, M, a.K, a.K, kBM, what);
  CUtensorMap map_w = sm90_slab_map(a.dtype, a.W, int64_t{3} * a.H * kD, a.K, a.K, kD, what);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(k.per_head * a.H));
  const bool pp = pingpong();
  cfg.blockDim = dim3(kCtaThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(launch_smem_bytes(pp, a.K));
  cfg.stream = stream;
  void* args[] = {&map_x, &map_w, &k};
  const cudaError_t err = cudaLaunchKernelExC(&cfg, kernel_for(a.dtype, pp), args);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw DeviceError(str(what, ": launch failed: ", cudaGetErrorString(err)));
  }
}

}  // namespace rlx::cuda
