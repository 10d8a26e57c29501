// rlx's Hopper GEMMs: C[M, N] = act(A[M, K]·B[N, K]ᵀ + bias[N]), f16/bf16 in and
// out, f32 accumulation in registers (wgmma). Two kernels: the classic one
// (below; activation and bias applied to the f32 accumulator before the one
// rounding to the output dtype) and the persistent ping-pong kernel (further
// down, its own description; the activation applied to the rounded sum, as
// cuBLASLt plus a separate activation kernel would, except that f16 GELU-erf
// runs in f16x2 arithmetic unless RLX_CUDA_GELU_F16X2=0: dev::gelu_erf_f16x2).
//
// Classic tiling. A CTA of two warpgroups owns a 128 × 128 tile of C; warpgroup w
// computes rows 64w..64w+63 with wgmma m64n128k16, both reading the same B
// tile from shared memory. K advances in slabs of 64 (128 bytes of a row: one
// 128-byte swizzle atom), four k16 steps each. Three stages of 32 KB: two
// CTAs share an SM, so one CTA's epilogue (the activation math and the
// stores) can overlap the other's MMAs. (Measured on the H200 and dropped:
// 128 × 256 tiles, 4 stages, one CTA per SM: 20-40% slower on BERT's shapes;
// a persistent grid storing straight from registers, with or without every
// other CTA starting late: 20-45% slower.)
//
// Loads. Thread 0 issues each slab as two TMA tile copies (tensor maps made
// on the host: 128-byte swizzle, out-of-bounds rows and columns zero-filled)
// that count their bytes off on the stage's `full` mbarrier. Every warp
// arrives on the stage's `empty` mbarrier once its wgmmas reading the stage
// have completed; thread 0 waits for all eight before refilling the stage
// with the slab three ahead. One wgmma group stays in flight (wait_group 1),
// so the tensor cores do not wait for the issue of the next.
//
// Shared layout. The tiles are K-major with the 128-byte swizzle the wgmma
// descriptors name: 8-row groups 1024 bytes apart (the stride byte offset),
// the k16 step advancing the start address by 32 bytes (the hardware XORs
// absolute address bits, hence 1024-byte-aligned stages).
//
// Epilogue. Accumulators (+ bias, activation) are rounded in pairs and
// staged through shared memory (rows padded by 16 bytes: conflict-free
// fragment writes), then written with coalesced 16-byte stores, rows past M
// and columns past N skipped.
#include "rlx/backends/cuda/kernels/gemm_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/activation.cuh"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/device/wgmma.cuh"
#include "rlx/core/env.h"
#include "rlx/core/error.h"

namespace rlx::cuda {
namespace {

using namespace dev;  // the wgmma helpers (device/wgmma.cuh)

constexpr int kBM = kWgmmaTileM, kBN = kWgmmaTileN, kBK = kWgmmaSlabK, kThreads = 256, kWarps = kThreads / 32;
constexpr int kStages = 3;
constexpr int kTileBytes = kBM * kBK * 2;  // one operand's slab: 16 KB (kBM == kBN)
constexpr int kStageBytes = 2 * kTileBytes;
constexpr int kOutStride = kWgmmaOutStride;
// Stages, their 2·kStages mbarriers, and slack to align the stages to 1024 bytes.
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;
static_assert(kBM * kOutStride * 2 <= kStages * kStageBytes, "the staged C tile reuses the stages");

template <typename T, Activation A>
__device__ __forceinline__ float epilogue_act(float x) {
  if constexpr (A == Activation::GeluErf) return dev::gelu_erf_16bit<T>(x);
  else if constexpr (A == Activation::GeluTanh) return dev::gelu_tanh_f32(x);
  else if constexpr (A == Activation::Relu) return x < 0.0f ? 0.0f : x;  // NaN passes, as the unary kernel
  else if constexpr (A == Activation::Silu) return x * dev::sigmoid_f32(x);
  else return x;
}

template <typename T, Activation kAct>
__global__ void __launch_bounds__(kThreads, 2)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     T* __restrict__ C, int64_t ldc, const T* __restrict__ bias, int M, int N, int K) {
  // Built for every target so its helpers are referenced; the PTX helpers
  // are empty off sm_90a, where sm90_gemm_available() keeps it from running.
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = dev::smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int n0 = static_cast<int>(blockIdx.x) * kBN, m0 = static_cast<int>(blockIdx.y) * kBM;
  const int nk = (K + kBK - 1) / kBK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      dev::mbar_init(&full[s], 1);
      dev::mbar_init(&empty[s], kWarps);
    }
    dev::mbar_fence_init();
  }
  __syncthreads();
  dev::pdl_begin();  // A may be the previous kernel's output

  auto issue = [&](int kb) {
    const int s = kb % kStages;
    unsigned char* st = smem + s * kStageBytes;
    dev::mbar_arrive_expect_tx(&full[s], kStageBytes);
    tma_load_2d(st, &map_a, kb * kBK, m0, &full[s]);
    tma_load_2d(st + kTileBytes, &map_b, kb * kBK, n0, &full[s]);
  };
  if (tid == 0)
    for (int kb = 0; kb < kStages && kb < nk; ++kb) issue(kb);

  float acc[kBN / 2];
#pragma unroll
  for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;

  for (int kb = 0; kb < nk; ++kb) {
    const int s = kb % kStages;
    dev::mbar_wait(&full[s], static_cast<uint32_t>(kb / kStages) & 1);
    const uint32_t st = dev::smem_u32(smem + s * kStageBytes);
    const uint64_t da = wgmma_desc(st + static_cast<uint32_t>(wg * 64 * 128));
    const uint64_t db = wgmma_desc(st + kTileBytes);
    wgmma_fence();
    pin(acc);
#pragma unroll
    for (int k = 0; k < kBK / 16; ++k)  // +32 bytes per k16 step = +2 in the descriptor's address field
      wgmma_m64n128k16<T>(acc, da + 2 * k, db + 2 * k, kb > 0 || k > 0);
    wgmma_commit();
    wgmma_wait<1>();  // the previous slab's group is done: release its stage
    pin(acc);
    if (kb > 0) {
      const int ps = (kb - 1) % kStages;
      if (lane == 0) dev::mbar_arrive(&empty[ps]);
      if (tid == 0 && kb - 1 + kStages < nk) {
        dev::mbar_wait(&empty[ps], static_cast<uint32_t>((kb - 1) / kStages) & 1);
        issue(kb - 1 + kStages);
      }
    }
  }
  wgmma_wait<0>();
  pin(acc);
  __syncthreads();  // every warpgroup is done reading the stages: reuse them for C

  uint32_t* sC = reinterpret_cast<uint32_t*>(smem);
  stage_c_tile<T>(acc, sC, wg, warp, lane, [&](float v, int col) {
    const float b = bias != nullptr && n0 + col < N ? to_f32(bias[n0 + col]) : 0.0f;
    return epilogue_act<T, kAct>(v + b);
  });
  __syncthreads();
  store_c_tile(reinterpret_cast<const T*>(smem), C, ldc, m0, n0, M, N, tid, kThreads);
}

// ---- Ping-pong kernel: persistent, warp-specialized -----------------------
//
// One CTA per SM (384 threads) walks a strided share of the C tiles. Warpgroup
// 0 is the producer: one thread issues every slab's TMA copies into a ring of
// kPpStages stages, running ahead across tiles; the warpgroup gives its
// registers to the consumers (setmaxnreg: 24 against 240). Warpgroups 1 and 2 are consumers
// that take the CTA's tiles in turn (tile j to consumer j mod 2), each
// computing a whole 128 × 128 tile (two wgmma m64n128k16 per k16 step, 128
// accumulators per thread). An order barrier hands the tensor cores from one
// consumer to the other once it has issued its tile's last wgmma, so one
// consumer's epilogue runs while the other's MMAs do. Because main loops
// strictly alternate, slabs are consumed in the order the producer issued
// them, and one ring with parity waits is safe (tile j's slabs are ring
// positions j·nk .. j·nk + nk − 1).
//
// Epilogue: accumulators plus bias rounded in pairs, the activation on those,
// written by stmatrix into the consumer's own staging tile (two 64-column
// halves, 128-byte swizzle: conflict-free) and stored by TMA, which clips
// rows past M and columns past N and runs while the consumer goes on. (Stores
// straight from the fragments, 4 bytes per lane over 8 rows, cost 0.61-0.85×
// cuBLASLt's time on BERT's shapes against 0.95× at K = 3072, H200.)
constexpr int kPpThreads = 384, kPpTile = 128;
constexpr int kPpSlabBytes = kPpTile * kBK * 2;  // one operand's slab, or a 64-column half of C: 16 KB
constexpr int kPpStageBytes = 2 * kPpSlabBytes;
constexpr int kPpStages = 5;
constexpr int kPpStagingBytes = 2 * kPpSlabBytes;  // one consumer's C tile
constexpr int kPpProducerRegs = 24, kPpConsumerRegs = 240;  // 128·24 + 256·240 ≤ 65,536
// Stages, two staging tiles, 2·kPpStages + 2 mbarriers, slack to align to 1024 bytes.
constexpr int kPpSmemBytes = kPpStages * kPpStageBytes + 2 * kPpStagingBytes + (2 * kPpStages + 4) * 8 + 1024;

// The ping-pong kernel's epilogues: bias (+ activation); a row scale from
// A's row statistics (LayerNorm folded into B, Sm90LnFold::a_stats); or the
// residual with its own deferred LayerNorm added, C's row statistics out.
enum class PpEpi { Bias, RowScale, Residual };

struct PpFold {
  const float2* a_stats;  // RowScale: A's rows, ceil(K / 128) partials a row
  const float2* r_stats;  // Residual: R's rows, ceil(N / 128) partials a row, or null (R as it is)
  const void* gamma;      // Residual with r_stats: [N]
  const void* beta;
  float2* c_stats;  // Residual: C's partials, or null
  float eps;
};

// (mean, 1/sqrt(var + eps)) of the thread's four rows (row0 + 0, 8, 64, 72)
// from their partials, (mean, M2) over each 128-column block of `cols` (the
// last one partial), combined as Chan et al. Four blocks of all four rows are
// requested at once: one round trip for cols ≤ 512.
__device__ __forceinline__ void row_norms(const float2* stats, int M, int row0, int cols, float eps,
                                          float2 (&out)[4]) {
  float n[4] = {}, mean[4] = {}, m2[4] = {};
  for (int b0 = 0; b0 * 128 < cols; b0 += 4) {
    float2 p[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + 8 * (r & 1) + 64 * (r >> 1), b = b0 + i;
        p[r][i] = row < M && b * 128 < cols ? stats[static_cast<int64_t>(b) * M + row] : make_float2(0.0f, 0.0f);
      }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int b = b0 + i;
      if (b * 128 >= cols) break;
      const float nb = static_cast<float>(min(128, cols - b * 128));
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float t = n[r] + nb, w = __fdividef(nb, t), d = p[r][i].x - mean[r];
        mean[r] = fmaf(d, w, mean[r]);
        m2[r] += fmaf(d * d, n[r] * w, p[r][i].y);
        n[r] = t;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) out[r] = make_float2(mean[r], rsqrtf(__fdividef(m2[r], static_cast<float>(cols)) + eps));
}

// The epilogue in two steps. First the accumulators plus bias are rounded to
// T in pairs (pre[p]: fragment values 2p, 2p + 1, at row g (+8 for odd p),
// columns 8·(p / 2) + 2·t4 and +1 of the warp's 16 rows), which frees half of
// the registers: the activation then runs with room for many independent
// chains (with it applied to the f32 accumulators in place, a warp per
// scheduler latency-bound on the Horner chains, GELU-erf added 0.6× a MiniLM
// FFN GEMM's time, H200). Rounding first also makes the fused result the one
// cuBLASLt plus the separate activation kernel gives. (Applying it to all 64
// pairs at once, before the staging barrier, for more independent chains,
// measured slower: MiniLM FFN up + GELU-erf 175.1 against 166.5 µs, H200,
// session 24. Nsight Compute on the form kept here, f16 GELU-erf at MiniLM's
// FFN up: 0.44 instructions per cycle and scheduler, ~5 cycles per issued
// instruction, fixed-latency dependencies the largest named stall.)
// rs: the scales of the thread's two rows (RowScale; else 1).
template <typename T>
__device__ __forceinline__ void pp_round_pre(const float (&acc)[64], uint32_t (&pre)[32], const uint32_t (&bias2)[16],
                                             float2 rs = make_float2(1.0f, 1.0f)) {
#pragma unroll
  for (int p = 0; p < 32; ++p) {
    const float2 b = unpack2<T>(bias2[p / 2]);
    const float r = p & 1 ? rs.y : rs.x;
    pre[p] = pack2<T>(fmaf(r, acc[2 * p], b.x), fmaf(r, acc[2 * p + 1], b.y));
  }
}

// kF16x2: GELU-erf of f16 in f16x2 arithmetic (dev::gelu_erf_f16x2).
template <typename T, Activation kAct, bool kF16x2>
__device__ __forceinline__ uint32_t pp_act2(uint32_t v) {
  if constexpr (kAct == Activation::None) {
    return v;
  } else if constexpr (kF16x2) {
    static_assert(kAct == Activation::GeluErf && std::is_same_v<T, __half>, "f16x2 GELU-erf only");
    return dev::gelu_erf_f16x2(v);
  } else {
    const float2 x = unpack2<T>(v);
    return pack2<T>(epilogue_act<T, kAct>(x.x), epilogue_act<T, kAct>(x.y));
  }
}

// One 64-row half of a consumer's tile (rows 64·half + 16·warp + ...) into the
// staging tile at `stage` (shared address) by stmatrix: two 64-column halves
// of 128 rows × 128 bytes, 16-byte chunk c of row r at c ^ (r mod 8).
template <typename T, Activation kAct, bool kF16x2>
__device__ __forceinline__ void pp_stage_half(uint32_t (&pre)[32], uint32_t stage, int half, int warp, int lane) {
  const int m = lane >> 3, i = lane & 7;
  const int row = 64 * half + 16 * warp + i + 8 * (m & 1);  // the row this lane addresses for stmatrix
#pragma unroll
  for (int j = 0; j < kPpTile / 8; j += 2) {  // column groups j and j + 1: four 8 × 8 matrices
    // Keeps the compiler from starting this group's activations before the
    // previous stmatrix (ptxas may still reorder; its spill report, 0-452
    // bytes per instance, was the same without it).
    asm volatile("" : "+r"(pre[2 * j]), "+r"(pre[2 * j + 1]), "+r"(pre[2 * j + 2]), "+r"(pre[2 * j + 3]));
    const int cb = j + (m >> 1);              // this lane's matrix: its column group = 16-byte chunk
    const uint32_t addr =
        stage + static_cast<uint32_t>((cb >> 3) * kPpSlabBytes + row * 128 + (((cb & 7) ^ (row & 7)) << 4));
    stmatrix_x4(addr, pp_act2<T, kAct, kF16x2>(pre[2 * j]), pp_act2<T, kAct, kF16x2>(pre[2 * j + 1]),
                pp_act2<T, kAct, kF16x2>(pre[2 * j + 2]), pp_act2<T, kAct, kF16x2>(pre[2 * j + 3]));
  }
}

// The Residual epilogue of one 64-row half: R's tile, loaded into the
// staging tile by TMA, read back by ldmatrix in the fragments' layout;
// C = round(acc + bias + LN(R)) with LN(R) = (R − mean)·rstd·gamma + beta
// (kDeferred; else R itself), written by stmatrix where R was. Per column
// pair g of the thread: gam[g] (gamma) and bb[g] (bias + beta, or bias);
// per row (g, g + 8): nr = (rstd, −mean·rstd). sum / sq: the rows' sums of
// C's values (before their rounding, which moves a statistic by ~2^-12 of
// itself) and squares over the tile's columns below N (kFull: all 128 are).
template <typename T, bool kDeferred, bool kFull>
__device__ __forceinline__ void pp_residual_half(const float (&acc)[64], const float2 (&gam)[16],
                                                 const float2 (&bb)[16], float2 nr0, float2 nr1, uint32_t stage,
                                                 int half, int warp, int lane, int cols, float2& sum, float2& sq) {
  const int m = lane >> 3, i = lane & 7, t4 = lane & 3;
  const int row = 64 * half + 16 * warp + i + 8 * (m & 1);
#pragma unroll
  for (int j = 0; j < kPpTile / 8; j += 2) {
    const int cb = j + (m >> 1);
    const uint32_t addr =
        stage + static_cast<uint32_t>((cb >> 3) * kPpSlabBytes + row * 128 + (((cb & 7) ^ (row & 7)) << 4));
    uint32_t r[4], out[4];
    ldmatrix_x4(addr, r);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int p = 2 * j + q, g = p / 2;  // fragment pair p: row g (+8 for odd p), column group g
      const float2 h = unpack2<T>(r[q]);
      float vx = acc[2 * p] + bb[g].x, vy = acc[2 * p + 1] + bb[g].y;
      if constexpr (kDeferred) {
        const float2 nr = q & 1 ? nr1 : nr0;
        vx = fmaf(fmaf(h.x, nr.x, nr.y), gam[g].x, vx);
        vy = fmaf(fmaf(h.y, nr.x, nr.y), gam[g].y, vy);
      } else {
        vx += h.x;
        vy += h.y;
      }
      out[q] = pack2<T>(vx, vy);
      const bool in = kFull || 8 * g + 2 * t4 < cols;  // N % 8 == 0: the pair is in or out together
      const float s = in ? vx + vy : 0.0f, s2 = in ? fmaf(vx, vx, vy * vy) : 0.0f;
      if (q & 1) sum.y += s, sq.y += s2;
      else sum.x += s, sq.x += s2;
    }
    stmatrix_x4(addr, out[0], out[1], out[2], out[3]);
  }
}

// Both halves of a consumer's tile (pp_residual_half).
template <typename T, bool kDeferred, bool kFull>
__device__ __forceinline__ void pp_residual_tile(const float (&acc0)[64], const float (&acc1)[64],
                                                 const float2 (&gam)[16], const float2 (&bb)[16],
                                                 const float2 (&nr)[4], uint32_t stage, int warp, int lane, int cols,
                                                 float2 (&sum)[2], float2 (&sq)[2]) {
  pp_residual_half<T, kDeferred, kFull>(acc0, gam, bb, nr[0], nr[1], stage, 0, warp, lane, cols, sum[0], sq[0]);
  pp_residual_half<T, kDeferred, kFull>(acc1, gam, bb, nr[2], nr[3], stage, 1, warp, lane, cols, sum[1], sq[1]);
}

// The partials (mean, M2) of the thread's two rows over the tile's `cols`
// columns from their sums, reduced over the quad that holds each row.
__device__ __forceinline__ void pp_write_stats(float2 sum, float2 sq, float2* c_stats, int64_t M, int tile_n, int row0,
                                               int cols, int lane) {
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    sum.x += __shfl_xor_sync(0xffffffffu, sum.x, o);
    sum.y += __shfl_xor_sync(0xffffffffu, sum.y, o);
    sq.x += __shfl_xor_sync(0xffffffffu, sq.x, o);
    sq.y += __shfl_xor_sync(0xffffffffu, sq.y, o);
  }
  if ((lane & 3) != 0) return;
  const float n = static_cast<float>(cols);
  const float m0 = sum.x / n, m1 = sum.y / n;
  if (row0 < M) c_stats[tile_n * M + row0] = make_float2(m0, fmaxf(sq.x - sum.x * m0, 0.0f));
  if (row0 + 8 < M) c_stats[tile_n * M + row0 + 8] = make_float2(m1, fmaxf(sq.y - sum.y * m1, 0.0f));
}

template <typename T, Activation kAct, bool kF16x2 = false, PpEpi kEpi = PpEpi::Bias>
__global__ void __launch_bounds__(kPpThreads, 1)
    gemm_pp_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, const T* __restrict__ bias, int M, int N, int K,
                   const __grid_constant__ CUtensorMap map_r, const PpFold fold) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = dev::smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  unsigned char* staging = smem + kPpStages * kPpStageBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + 2 * kPpStagingBytes);
  uint64_t* empty = full + kPpStages;
  uint64_t* order = empty + kPpStages;  // order[c]: consumer c may start its next main loop
  uint64_t* rfull = order + 2;           // rfull[c]: R's tile is in consumer c's staging tile (Residual)

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7;
  const int tiles_n = (N + kPpTile - 1) / kPpTile, tiles = (M + kPpTile - 1) / kPpTile * tiles_n;
  const int nk = (K + kBK - 1) / kBK, ctas = static_cast<int>(gridDim.x);
  if (tid == 0) {
    for (int s = 0; s < kPpStages; ++s) {
      dev::mbar_init(&full[s], 1);
      dev::mbar_init(&empty[s], 4);  // the consuming warpgroup's warps
    }
    dev::mbar_init(&order[0], 1);
    dev::mbar_init(&order[1], 1);
    dev::mbar_init(&rfull[0], 1);
    dev::mbar_init(&rfull[1], 1);
    dev::mbar_fence_init();
  }
  __syncthreads();
  dev::pdl_begin();  // A may be the previous kernel's output

  if (wg == 0) {
    regs_dec<kPpProducerRegs>();
    if (tid == 0) {
      int it = 0;
      for (int t = static_cast<int>(blockIdx.x); t < tiles; t += ctas) {
        const int n0 = t % tiles_n * kPpTile, m0 = t / tiles_n * kPpTile;  // column block fastest
        for (int kb = 0; kb < nk; ++kb, ++it) {
          const int s = it % kPpStages;
          dev::mbar_wait(&empty[s], ((it / kPpStages) & 1) ^ 1);
          unsigned char* st = smem + s * kPpStageBytes;
          dev::mbar_arrive_expect_tx(&full[s], kPpStageBytes);
          tma_load_2d(st, &map_a, kb * kBK, m0, &full[s]);
          tma_load_2d(st + kPpSlabBytes, &map_b, kb * kBK, n0, &full[s]);
        }
      }
    }
  } else {
    regs_inc<kPpConsumerRegs>();
    const int c = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31;
    const bool leader = (tid & 127) == 0;
    const uint32_t stage_c = dev::smem_u32(staging + c * kPpStagingBytes);
    float acc0[64], acc1[64];
    int done = 0;  // tiles this consumer finished
    for (int t = static_cast<int>(blockIdx.x) + c * ctas, j = c; t < tiles; t += 2 * ctas, j += 2, ++done) {
      const int n0 = t % tiles_n * kPpTile, m0 = t / tiles_n * kPpTile;
      if constexpr (kEpi == PpEpi::Residual) {
        if (leader) {  // R's tile into the staging tile, once the last store has read it
          bulk_wait_read_all();
          dev::mbar_arrive_expect_tx(&rfull[c], kPpStagingBytes);
          tma_load_2d(staging + c * kPpStagingBytes, &map_r, n0, m0, &rfull[c]);
          tma_load_2d(staging + c * kPpStagingBytes + kPpSlabBytes, &map_r, n0 + kBK, m0, &rfull[c]);
        }
      }
      // The rows' norms, before the wait for the tensor cores: their loads' latency hides there.
      const int row0 = m0 + 16 * ((tid >> 5) & 3) + ((tid & 31) >> 2);  // the thread's first row; then +8, +64, +72
      float2 nrm[4] = {};
      if constexpr (kEpi == PpEpi::RowScale) row_norms(fold.a_stats, M, row0, K, fold.eps, nrm);
      if constexpr (kEpi == PpEpi::Residual)
        if (fold.r_stats != nullptr) row_norms(fold.r_stats, M, row0, N, fold.eps, nrm);
      if (c == 1 || done > 0) dev::mbar_wait(&order[c], static_cast<uint32_t>((c == 0 ? done - 1 : done) & 1));
      const int it0 = j * nk;
      for (int kb = 0; kb < nk; ++kb) {
        const int it = it0 + kb, s = it % kPpStages;
        dev::mbar_wait(&full[s], static_cast<uint32_t>(it / kPpStages) & 1);
        const uint32_t st = dev::smem_u32(smem + s * kPpStageBytes);
        const uint64_t da0 = wgmma_desc(st), da1 = wgmma_desc(st + kPpSlabBytes / 2);
        const uint64_t db = wgmma_desc(st + kPpSlabBytes);
        wgmma_fence();
        pin(acc0);
        pin(acc1);
#pragma unroll
        for (int k = 0; k < kBK / 16; ++k) {  // +32 bytes per k16 step = +2 in the descriptor
          wgmma_m64n128k16<T>(acc0, da0 + 2 * k, db + 2 * k, kb > 0 || k > 0);
          wgmma_m64n128k16<T>(acc1, da1 + 2 * k, db + 2 * k, kb > 0 || k > 0);
        }
        wgmma_commit();
        wgmma_wait<1>();  // the previous slab's wgmmas are done: release its stage
        pin(acc0);
        pin(acc1);
        if (kb > 0 && lane == 0) dev::mbar_arrive(&empty[(it - 1) % kPpStages]);
      }
      if (leader) dev::mbar_arrive(&order[c ^ 1]);  // the other consumer's MMAs may start
      wgmma_wait<0>();
      pin(acc0);
      pin(acc1);
      if (lane == 0) dev::mbar_arrive(&empty[(it0 + nk - 1) % kPpStages]);

      uint32_t bias2[16] = {};  // bias pairs at columns n0 + 8j + 2·t4
      if (bias != nullptr)
#pragma unroll
        for (int jb = 0; jb < 16; ++jb) {
          const int col = n0 + 8 * jb + 2 * (lane & 3);
          if (col < N) bias2[jb] = *reinterpret_cast<const uint32_t*>(bias + col);  // N % 8 == 0: col + 1 < N
        }
      if constexpr (kEpi == PpEpi::Residual) {
        const bool deferred = fold.r_stats != nullptr;
        float2 gam[16], bb[16];  // per column pair: gamma; bias + beta (deferred) or bias
#pragma unroll
        for (int jb = 0; jb < 16; ++jb) {
          const int col = n0 + 8 * jb + 2 * (lane & 3);
          uint32_t g2 = 0, b2 = 0;
          if (deferred && col < N) {
            g2 = *reinterpret_cast<const uint32_t*>(static_cast<const T*>(fold.gamma) + col);
            b2 = *reinterpret_cast<const uint32_t*>(static_cast<const T*>(fold.beta) + col);
          }
          gam[jb] = unpack2<T>(g2);
          const float2 be = unpack2<T>(b2), bi = unpack2<T>(bias2[jb]);
          bb[jb] = make_float2(bi.x + be.x, bi.y + be.y);
        }
        float2 nr[4];  // per row: (rstd, −mean·rstd)
#pragma unroll
        for (int r = 0; r < 4; ++r) nr[r] = make_float2(nrm[r].y, -nrm[r].x * nrm[r].y);
        const int cols = min(kPpTile, N - n0);
        float2 sum[2] = {}, sq[2] = {};
        dev::mbar_wait(&rfull[c], static_cast<uint32_t>(done & 1));
        auto tile = [&](auto deferred_c, auto full_c) {
          pp_residual_tile<T, deferred_c.value, full_c.value>(acc0, acc1, gam, bb, nr, stage_c, warp, lane, cols, sum,
                                                              sq);
        };
        using Yes = std::true_type;
        using No = std::false_type;
        if (deferred) cols == kPpTile ? tile(Yes{}, Yes{}) : tile(Yes{}, No{});
        else cols == kPpTile ? tile(No{}, Yes{}) : tile(No{}, No{});
        if (fold.c_stats != nullptr) {
          pp_write_stats(sum[0], sq[0], fold.c_stats, M, n0 / kPpTile, row0, cols, lane);
          pp_write_stats(sum[1], sq[1], fold.c_stats, M, n0 / kPpTile, row0 + 64, cols, lane);
        }
      } else {
        uint32_t pre0[32], pre1[32];
        if constexpr (kEpi == PpEpi::RowScale) {
          pp_round_pre<T>(acc0, pre0, bias2, make_float2(nrm[0].y, nrm[1].y));
          pp_round_pre<T>(acc1, pre1, bias2, make_float2(nrm[2].y, nrm[3].y));
        } else {
          pp_round_pre<T>(acc0, pre0, bias2);
          pp_round_pre<T>(acc1, pre1, bias2);
        }
        if (leader) bulk_wait_read_all();  // the staging tile's previous store has read it
        named_barrier_sync(1 + c, 128);
        pp_stage_half<T, kAct, kF16x2>(pre0, stage_c, 0, warp, lane);
        pp_stage_half<T, kAct, kF16x2>(pre1, stage_c, 1, warp, lane);
      }
      dev::fence_proxy_async_smem();  // the stmatrix writes, before the TMA engine reads them
      named_barrier_sync(1 + c, 128);
      if (leader) {
        tma_store_2d(&map_c, staging + c * kPpStagingBytes, n0, m0);
        tma_store_2d(&map_c, staging + c * kPpStagingBytes + kPpSlabBytes, n0 + kBK, m0);
        bulk_commit();
      }
    }
    if (leader) bulk_wait_all();  // C is written before the grid completes
  }
}

template <typename T, bool kPingPong>
const void* kernel_for(Activation act) {
  auto pick = [](auto kernel) -> const void* { return reinterpret_cast<const void*>(kernel); };
  switch (act) {
#define RLX_SM90_CASE(A)                                                    \
  case Activation::A:                                                       \
    if constexpr (kPingPong) return pick(&gemm_pp_kernel<T, Activation::A>); \
    else return pick(&gemm_sm90_kernel<T, Activation::A>);
    RLX_SM90_CASE(None)
    RLX_SM90_CASE(GeluErf)
    RLX_SM90_CASE(GeluTanh)
    RLX_SM90_CASE(Relu)
    RLX_SM90_CASE(Silu)
#undef RLX_SM90_CASE
  }
  return nullptr;
}

// The ping-pong kernel with f16 GELU-erf in f16x2 arithmetic.
const void* gelu_f16x2_kernel() {
  return reinterpret_cast<const void*>(&gemm_pp_kernel<__half, Activation::GeluErf, true>);
}

// The LayerNorm-folding variants: RowScale with no activation or GELU-erf
// (f16x2: its f16 form in f16x2 arithmetic), Residual with none.
template <typename T>
const void* fold_kernel(PpEpi e, Activation act, bool f16x2) {
  auto pick = [](auto kernel) -> const void* { return reinterpret_cast<const void*>(kernel); };
  if (e == PpEpi::Residual) return pick(&gemm_pp_kernel<T, Activation::None, false, PpEpi::Residual>);
  if (act == Activation::None) return pick(&gemm_pp_kernel<T, Activation::None, false, PpEpi::RowScale>);
  if constexpr (std::is_same_v<T, __half>)
    if (f16x2) return pick(&gemm_pp_kernel<__half, Activation::GeluErf, true, PpEpi::RowScale>);
  return pick(&gemm_pp_kernel<T, Activation::GeluErf, false, PpEpi::RowScale>);
}
const void* fold_kernel(DType t, PpEpi e, Activation act, bool f16x2) {
  return t == DType::F16 ? fold_kernel<__half>(e, act, f16x2) : fold_kernel<__nv_bfloat16>(e, act, f16x2);
}

const void* kernel_for(DType t, Activation act, Sm90GemmKernel k) {
  const bool f16 = t == DType::F16;
  if (k == Sm90GemmKernel::Classic) return f16 ? kernel_for<__half, false>(act) : kernel_for<__nv_bfloat16, false>(act);
  return f16 ? kernel_for<__half, true>(act) : kernel_for<__nv_bfloat16, true>(act);
}

int smem_bytes_of(Sm90GemmKernel k) { return k == Sm90GemmKernel::Classic ? kSmemBytes : kPpSmemBytes; }
int threads_of(Sm90GemmKernel k) { return k == Sm90GemmKernel::Classic ? kThreads : kPpThreads; }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

CUtensorMap tile_map(const GemmArgs& a, const void* p, int64_t rows, int64_t ld, int box_rows) {
  return sm90_slab_map(a.dtype, p, rows, a.K, ld, box_rows, str("sm90 gemm ", GemmEngine::describe(a)));
}

}  // namespace

// cuTensorMapEncodeTiled through the runtime's driver entry point (the
// library does not link libcuda; see CMakeLists.txt).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

bool sm90_device(int device) {
  int major = 0, minor = 0;
  const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                  major == 9 && minor == 0 && encode_tiled() != nullptr;
  (void)cudaGetLastError();
  return ok;
}

bool sm90_kernel_loads(const void* kernel, int smem_bytes, int threads) {
  cudaFuncAttributes attr{};
  const bool ok = cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.binaryVersion == 90 &&
                  attr.maxThreadsPerBlock >= threads &&
                  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) == cudaSuccess;
  (void)cudaGetLastError();  // a refused query is an answer, not a sticky error
  return ok;
}

bool sm90_aligned(const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }

void sm90_launch(const void* kernel, unsigned grid, int threads, int smem_bytes, cudaStream_t stream, void** args,
                 const std::string& what) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  cfg.stream = stream;
  const cudaError_t err = cudaLaunchKernelExC(&cfg, kernel, args);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw DeviceError(str(what, ": launch failed: ", cudaGetErrorString(err)));
  }
}

CUtensorMap sm90_slab_map(DType dtype, const void* p, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                          const std::string& what) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld * 2)};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)}, unit[2] = {1, 1};
  const CUresult r = encode_tiled()(
      &m, dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(p), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw DeviceError(str(what, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ")"));
  return m;
}

CUtensorMap sm90_byte_rows_map(const void* p, int64_t rows, int64_t row_bytes, int box_rows, int box_bytes,
                               const std::string& what) {
  CUtensorMap m;
  // 4-byte elements: a box's inner extent is at most 256 elements.
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes / 4), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes / 4), static_cast<cuuint32_t>(box_rows)}, unit[2] = {1, 1};
  const CUresult r = encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<void*>(p), dims, strides, box,
                                    unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw DeviceError(str(what, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ")"));
  return m;
}

const char* sm90_gemm_unsupported(const GemmArgs& a) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) return "dtype is not f16/bf16";
  if (a.trans_a || !a.trans_b) return "needs A [M, K] and B [N, K] (trans_a = false, trans_b = true)";
  if (a.batch != 1) return "batched";
  if (a.residual != nullptr) return "a residual input (cuBLASLt's C) is not supported";
  if (a.M <= 0 || a.N <= 0 || a.K <= 0) return "empty";
  if ((a.M + kBM - 1) / kBM > 65535 || a.M > (int64_t{1} << 31) - kBM || a.N > (int64_t{1} << 30) ||
      a.K > (int64_t{1} << 30))
    return "too large";
  // The persistent kernel counts tiles × K slabs in 32 bits.
  if ((a.M + kBM - 1) / kBM * ((a.N + kBN - 1) / kBN) * ((a.K + kBK - 1) / kBK) >= (int64_t{1} << 31))
    return "too large (tiles × K slabs ≥ 2^31)";
  if (a.K % 8 || a.N % 8 || a.lda % 8 || a.ldb % 8 || a.ldc % 8) return "K, N or a leading dimension not a multiple of 8";
  if (a.lda < a.K || a.ldb < a.K || a.ldc < a.N) return "a leading dimension is shorter than its row";
  if (!aligned16(a.A) || !aligned16(a.B) || !aligned16(a.C)) return "an operand is not 16-byte aligned";
  if (a.bias != nullptr && (reinterpret_cast<uintptr_t>(a.bias) & 3)) return "bias not 4-byte aligned";
  return nullptr;
}

bool Sm90Availability::operator()(int device, const std::function<bool()>& loads) {
  std::lock_guard lock(mu_);
  if (auto it = known_.find(device); it != known_.end()) return it->second;
  DeviceGuard guard(device);
  const bool ok = sm90_device(device) && loads();
  known_[device] = ok;
  return ok;
}

bool sm90_gemm_available(int device) {
  static Sm90Availability known;
  return known(device, [] {
    bool ok = true;
    for (Sm90GemmKernel k : {Sm90GemmKernel::Classic, Sm90GemmKernel::PingPong})
      for (DType t : {DType::F16, DType::BF16})
        for (Activation act :
             {Activation::None, Activation::GeluErf, Activation::GeluTanh, Activation::Relu, Activation::Silu})
          ok = ok && sm90_kernel_loads(kernel_for(t, act, k), smem_bytes_of(k), threads_of(k));
    return ok && sm90_kernel_loads(gelu_f16x2_kernel(), kPpSmemBytes, kPpThreads);
  });
}

// Apart from sm90_gemm_available, so that a fold variant the device cannot
// place never takes the plain kernels away.
bool sm90_gemm_fold_available(int device) {
  static Sm90Availability known;
  return known(device, [] {
    bool ok = true;
    for (DType t : {DType::F16, DType::BF16})
      for (PpEpi e : {PpEpi::RowScale, PpEpi::Residual})
        for (Activation act : {Activation::None, Activation::GeluErf})
          for (bool f16x2 : {false, true})
            ok = ok && sm90_kernel_loads(fold_kernel(t, e, act, f16x2), kPpSmemBytes, kPpThreads);
    return ok;
  });
}

const char* sm90_gemm_kernel_name(Sm90GemmKernel k) {
  switch (k) {
    case Sm90GemmKernel::Auto: return "auto";
    case Sm90GemmKernel::Classic: return "classic";
    case Sm90GemmKernel::PingPong: return "ping-pong";
  }
  return "?";
}

bool gelu_f16x2_on(DType t) { return t == DType::F16 && env_bool("RLX_CUDA_GELU_F16X2"); }

// The ping-pong kernel `kernel` on `a`: a CTA per SM at most, each walking a
// strided share of the tiles. C (and R, with `r`) as 64-column × 128-row
// boxes, the layout of a slab map.
static cudaError_t launch_pp(const GemmArgs& a, const void* kernel, const CUtensorMap* r, const PpFold& fold,
                             cudaStream_t stream) {
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t tiles = (a.M + kPpTile - 1) / kPpTile * ((a.N + kPpTile - 1) / kPpTile);
  cudaLaunchConfig_t cfg{};
  cfg.dynamicSmemBytes = static_cast<size_t>(kPpSmemBytes);
  cfg.stream = stream;
  cfg.gridDim = dim3(static_cast<unsigned>(std::min<int64_t>(tiles, device_props(device).sm_count)));
  cfg.blockDim = dim3(kPpThreads);
  const std::string what = str("sm90 gemm ", GemmEngine::describe(a));
  CUtensorMap map_a = tile_map(a, a.A, a.M, a.lda, kPpTile), map_b = tile_map(a, a.B, a.N, a.ldb, kPpTile);
  CUtensorMap map_c = sm90_slab_map(a.dtype, a.C, a.M, a.N, a.ldc, kPpTile, what);
  CUtensorMap map_r = r != nullptr ? *r : map_c;  // unread without a residual
  const void* bias = a.bias;
  int M = static_cast<int>(a.M), N = static_cast<int>(a.N), K = static_cast<int>(a.K);
  PpFold f = fold;
  // Parameters: (CUtensorMap A, B, C, const T* bias, int M, N, K, CUtensorMap R, PpFold).
  void* args[] = {&map_a, &map_b, &map_c, &bias, &M, &N, &K, &map_r, &f};
  return cudaLaunchKernelExC(&cfg, kernel, args);
}

void launch_sm90_gemm(const GemmArgs& a, Activation act, cudaStream_t stream, Sm90GemmKernel kernel) {
  if (const char* why = sm90_gemm_unsupported(a))
    throw Unsupported(str("sm90 gemm: ", GemmEngine::describe(a), ": ", why));
  if (kernel == Sm90GemmKernel::Auto) kernel = Sm90GemmKernel::PingPong;
  const void* bias = a.bias;
  int M = static_cast<int>(a.M), N = static_cast<int>(a.N), K = static_cast<int>(a.K);
  cudaLaunchConfig_t cfg{};
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes_of(kernel));
  cfg.stream = stream;
  cudaError_t err;
  if (kernel == Sm90GemmKernel::Classic) {
    cfg.gridDim = dim3(static_cast<unsigned>((a.N + kBN - 1) / kBN), static_cast<unsigned>((a.M + kBM - 1) / kBM));
    cfg.blockDim = dim3(kThreads);
    // Parameters: (CUtensorMap, CUtensorMap, T*, int64_t, const T*, int, int, int).
    CUtensorMap map_a = tile_map(a, a.A, a.M, a.lda, kBM), map_b = tile_map(a, a.B, a.N, a.ldb, kBN);
    void* C = a.C;
    int64_t ldc = a.ldc;
    void* args[] = {&map_a, &map_b, &C, &ldc, &bias, &M, &N, &K};
    err = cudaLaunchKernelExC(&cfg, kernel_for(a.dtype, act, kernel), args);
  } else {
    const bool f16x2 = act == Activation::GeluErf && gelu_f16x2_on(a.dtype);
    err = launch_pp(a, f16x2 ? gelu_f16x2_kernel() : kernel_for(a.dtype, act, kernel), nullptr, PpFold{}, stream);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw DeviceError(str("sm90 gemm ", GemmEngine::describe(a), " (", activation_name(act), ", ",
                          sm90_gemm_kernel_name(kernel), "): launch failed: ", cudaGetErrorString(err)));
  }
}

void launch_sm90_gemm_fold(const GemmArgs& a, Activation act, const Sm90LnFold& f, cudaStream_t stream) {
  const std::string what = str("sm90 gemm (layer-norm fold) ", GemmEngine::describe(a));
  if (const char* why = sm90_gemm_unsupported(a)) throw Unsupported(str(what, ": ", why));
  const bool row_scale = f.a_stats != nullptr, residual = f.R != nullptr;
  if (row_scale == residual) throw InvalidArgument(str(what, ": needs exactly one of a_stats and R"));
  if (row_scale && act != Activation::None && act != Activation::GeluErf)
    throw Unsupported(str(what, ": a row scale takes no activation or GELU-erf, not ", activation_name(act)));
  if (residual && act != Activation::None) throw Unsupported(str(what, ": a residual takes no activation"));
  if (residual && (!sm90_aligned(f.R, 16) || f.ldr % 8 || f.ldr < a.N))
    throw InvalidArgument(str(what, ": R must be 16-byte aligned with a leading dimension ≥ N, a multiple of 8"));
  if (residual && f.r_stats != nullptr &&
      (f.gamma == nullptr || f.beta == nullptr || !sm90_aligned(f.gamma, 4) || !sm90_aligned(f.beta, 4)))
    throw InvalidArgument(str(what, ": a deferred LayerNorm of R needs 4-byte-aligned gamma and beta"));
  if (!(f.eps > 0.0f)) throw InvalidArgument(str(what, ": eps must be positive"));
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  if (!sm90_gemm_fold_available(device)) throw Unsupported(str(what, ": the fold kernels do not run on this device"));
  const PpFold fold{f.a_stats, f.r_stats, f.gamma, f.beta, f.c_stats, f.eps};
  const bool f16x2 = gelu_f16x2_on(a.dtype);
  cudaError_t err;
  if (residual) {
    const CUtensorMap map_r = sm90_slab_map(a.dtype, f.R, a.M, a.N, f.ldr, kPpTile, what);
    err = launch_pp(a, fold_kernel(a.dtype, PpEpi::Residual, act, f16x2), &map_r, fold, stream);
  } else {
    err = launch_pp(a, fold_kernel(a.dtype, PpEpi::RowScale, act, f16x2), nullptr, fold, stream);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw DeviceError(str(what, ": launch failed: ", cudaGetErrorString(err)));
  }
}

}  // namespace rlx::cuda
