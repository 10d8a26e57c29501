// The bandwidth-oriented fused quantized GEMV for large weight matrices
// (launch_quant_gemv_staged in quant.h), Hopper (sm_90+) only.
//
// Why another GEMV: gemv.cu's kernels have every thread load its own few
// bytes at a stride, which keeps too few bytes in flight to saturate HBM on a
// multi-megabyte matrix. Here the weights are streamed by the copy engine
// instead: 1-D bulk asynchronous copies (cp.async.bulk) fill a ring of 2-4
// shared-memory stages of ~20-64 KB, and the threads decode from shared memory.
//
// A CTA (256 threads; one per SM, two for the m = 1 unit kernels) owns a
// contiguous, balanced share of the rows, [n·b/G, n·(b+1)/G), walked in tiles:
//   - tiles of whole rows are one copy of the 16-byte-aligned range that
//     covers them (rows are no 16-byte multiples in general); large single
//     copies matter: on an H200 a copy-only kernel streamed ~3.5 TB/s with
//     24-32 KB copies but ~1.6 TB/s with 8 KB ones and ~0.7 TB/s with 256 B
//     ones, whatever the number of stages;
//   - rows too long for that are cut into slabs of blocks along K, 4 rows a
//     tile (one copy per row, each at its own 16-byte-aligned pitch), the sums
//     carried in registers from slab to slab.
// Each stage has a "full" mbarrier (bytes landed, complete_tx) and an
// "empty" one (all 8 warps done). Warp 0 also produces: it requests the first
// stages before griddepcontrol.wait (weights are written by no kernel) and
// refills a stage once every warp has left it; there is no block-wide
// barrier in the main loop. Shared addresses equal the global ones mod 16,
// so the decoders see the alignment they would see in global memory, and the
// bytes of a partial 16-byte granule at either end of the matrix are loaded
// with plain loads: nothing outside the weights is read.
//
// Compute: a group of `lq` threads (8 … 256) owns a quad of 4 rows and
// strides over their decode units. Per unit a thread decodes the unit for the
// 4 rows, then streams the unit's activations from shared memory once per x
// row and applies them to all 4 rows: one activation load feeds 4 rows' FMAs,
// which keeps the shared-memory traffic for x (4·m bytes per weight and row
// otherwise) near the FMA rate. m = 1 with a unit decoder keeps the unit's
// activations in registers and calls the unit's dot(), which factors the
// block scales out; for the types RLX_CUDA_GEMV_Q8 gives int8 activations
// (Q8_0, Q4_K, Q5_K, IQ4_XS) the unit's integer dot_q8 against x quantized
// once per CTA (kQ8). A finished quad's sums are reduce-scattered by shuffles
// within a warp, and across the group's warps through shared memory.
//
// Decoders: the types with a dev::GemvUnit (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K,
// Q6_K, IQ4_XS; aligned as the unit requires) use its I2F-free values() and
// dot() on raw bytes read from shared memory (integer → float conversions
// run at a quarter of the FMA rate on Hopper); every other type uses the
// generic dev::QuantBlock decoder, 32 elements a call.
//
// x lives in shared memory as f32 with its 16-byte slots XOR-swizzled within
// each 128-byte line (slot ^ line % 8), so the lanes of a warp, which read the
// same slot of consecutive 32-element runs, hit different banks.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "rlx/backends/cuda/kernels/quant.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/unit_smem.cuh"
#include "rlx/backends/cuda/kernels/gemv_common.cuh"
#include "rlx/backends/cuda/kernels/gemv_q8.h"
#include "rlx/backends/cuda/kernels/quant_common.cuh"
#include "rlx/core/env.h"
#include "rlx/core/error.h"

namespace rlx::cuda {
namespace {

using namespace quant_detail;
using dev::IqTables;

constexpr int kConsumerWarps = 8;
constexpr int kThreads = kConsumerWarps * 32;
constexpr int kRowsPerQuad = 4;
// Ring slots and tile sizes. On an H200 a copy-only kernel streamed ~3.5-3.8
// TB/s in aggregate with single copies of 24-32 KB per tile, from 2 stages
// as well as from 8; ~1.6 TB/s with 8 KB copies; ~0.7 TB/s when a tile was
// 32 copies of 256 B; and two CTAs per SM streamed up to twice what one
// did with small copies. Hence few, large, single-copy tiles.
constexpr int kStages = 4;                 // ring slots; a launch uses 2 … 4
constexpr int64_t kTileTarget = 32 * 1024;  // slab tiles aim at this size
constexpr int64_t kStageMax = 64 * 1024;
constexpr int64_t kStageMin = 8 * 1024;
constexpr int kStageSlack = 16;  // word-wide reads of a 2-byte-aligned unit may touch 2 bytes past the data

template <DType T>
using GU = dev::GemvUnit<T>;
using dev::lds_raw;

// ---- decoders: one interface over both kinds --------------------------------------
// kUnits units per block; unit j's values are kRuns runs of kRunLen
// consecutive elements, run r starting at element run_start(j, r) of the block.

template <class Q>  // dev::QuantBlock<T>: every type, 32 elements a call
struct BlockDec {
  static constexpr int kBlockElems = Q::kBlockElems, kBlockBytes = Q::kBlockBytes;
  static constexpr int kUnits = Q::kBlockElems / Q::kChunk, kRuns = 1, kRunLen = Q::kChunk;
  static constexpr bool kDot = false;
  using Ctx = IqTables;
  __device__ static Ctx context(const IqTables& t) { return t; }
  __device__ static int run_start(int j, int) { return j * kRunLen; }
  __device__ __forceinline__ static void decode(const uint8_t* b, int j, const Ctx& c, float (&v)[kRuns][kRunLen]) {
    Q::decode(b, j, c, v[0]);
  }
};

template <class U>  // dev::GemvUnit<T>: wide raw loads, exact I2F-free values
struct UnitDec {
  static constexpr int kBlockElems = U::kBlockElems, kBlockBytes = U::kBlockBytes;
  static constexpr int kUnits = U::kUnits, kRuns = U::kRuns, kRunLen = U::kRunLen;
  static constexpr bool kDot = true;
  using Ctx = typename U::Ctx;
  __device__ static Ctx context(const IqTables& t) { return U::context(t); }
  __device__ static int run_start(int j, int r) { return U::run_start(j, r); }
  __device__ __forceinline__ static void decode(const uint8_t* b, int j, const Ctx& c, float (&v)[kRuns][kRunLen]) {
    U::values(lds_raw(U{}, b, j), c, v);
  }
  // Σ w·x over the unit with the block scales factored out (m = 1: fewer
  // instructions than values() + FMAs; xs[r] = Σ x over run r).
  __device__ __forceinline__ static float dot(const uint8_t* b, int j, const Ctx& c,
                                              const float (&x)[kRuns][kRunLen], const float (&xs)[kRuns]) {
    return U::dot(lds_raw(U{}, b, j), c, x, xs);
  }
  // The same against activations quantized to int8 (gemv_common.cuh).
  using Q8 = quant_detail::Q8Runs<U>;
  __device__ __forceinline__ static float dot_q8(const uint8_t* b, int j, const Ctx& c, const Q8& x) {
    return x.dot(lds_raw(U{}, b, j), c);
  }
};

// ---- kernel ---------------------------------------------------------------------

struct StagedArgs {
  const uint8_t* w;
  const void* x;
  void* y;
  int64_t n;
  int k, m, row_bytes, nb;  // nb: blocks per row
  int lq;                   // threads per quad (8 … 256, a power of two)
  int qw;                   // quads per thread group per tile
  int rows_per_tile;        // (kThreads / lq) · kRowsPerQuad · qw; kRowsPerQuad for slabs
  int slab_blocks, slabs;   // blocks per tile row; tiles per row block (1: whole rows)
  int pitch;                // slabs: shared bytes per row of a tile
  int stage_bytes;
  int stages;               // ring slots in use, 2 … kStages
  bool x_smem;              // x staged in shared memory; else read as f32 from global
  bool x_vec;               // x aligned for 4-element vector loads
  bool x_vec16;             // x 16-byte aligned (kQ8's quantize_x loads 8 f16 / bf16 at a time)
  FloatKind io;
  IqTables t;
};

// Four consecutive activations x[e .. e + 4) as f32 (e a multiple of 4).
__device__ __forceinline__ float4 load_x4(const void* x, int e, FloatKind io, bool vec) {
  if (vec) {
    if (io == FloatKind::F32) return __ldg(reinterpret_cast<const float4*>(x) + e / 4);
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(x) + e));
    const uint32_t h[4] = {v.x & 0xFFFF, v.x >> 16, v.y & 0xFFFF, v.y >> 16};
    float f[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      f[i] = io == FloatKind::F16 ? __half2float(__ushort_as_half(static_cast<uint16_t>(h[i])))
                                  : __uint_as_float(h[i] << 16);
    return make_float4(f[0], f[1], f[2], f[3]);
  }
  return make_float4(load_as_f32(x, e, io), load_as_f32(x, e + 1, io), load_as_f32(x, e + 2, io),
                     load_as_f32(x, e + 3, io));
}

// The global byte range [g_s, g_e) of the weights [w_lo, w_hi) into shared
// memory at dst, byte g at dst + (g − g_s rounded down to 16). The bulk copy
// takes the 16-byte-aligned cover of the range, clamped to the aligned part
// of the weights: the bytes of a partial 16-byte granule at either end of the
// matrix (at most 15 each) are loaded here with plain loads, so nothing
// outside the weights' own bytes is read. Returns the bulk part
// (bytes == 0: none).
struct BulkPart {
  const uint8_t* src;
  uint8_t* dst;
  uint32_t bytes;
};
__device__ __forceinline__ BulkPart stage_range(uintptr_t g_s, uintptr_t g_e, uintptr_t w_lo, uintptr_t w_hi,
                                                uint8_t* dst) {
  const uintptr_t base = g_s & ~uintptr_t{15};
  const uintptr_t lo_min = (w_lo + 15) & ~uintptr_t{15}, hi_max = w_hi & ~uintptr_t{15};
  const uintptr_t lo = base > lo_min ? base : lo_min;
  const uintptr_t up = (g_e + 15) & ~uintptr_t{15};
  const uintptr_t hi = up < hi_max ? up : hi_max;
  if (lo >= hi) {  // a tiny range inside an edge granule: all plain
    for (uintptr_t g = g_s; g < g_e; ++g) dst[g - base] = *reinterpret_cast<const uint8_t*>(g);
    return {nullptr, nullptr, 0};
  }
  for (uintptr_t g = g_s; g < lo; ++g) dst[g - base] = *reinterpret_cast<const uint8_t*>(g);
  for (uintptr_t g = hi; g < g_e; ++g) dst[g - base] = *reinterpret_cast<const uint8_t*>(g);
  return {reinterpret_cast<const uint8_t*>(lo), dst + (lo - base), static_cast<uint32_t>(hi - lo)};
}

// The tile of row block rb, slab `slab` of the CTA whose rows are
// [r_beg, r_end): its first row, row count and block range.
struct Tile {
  int64_t row0;
  int rows, b0, nblk, slab;
};
__device__ __forceinline__ Tile tile_at(const StagedArgs& a, int64_t rb, int slab, int64_t r_beg, int64_t r_end) {
  Tile tl;
  tl.slab = slab;
  tl.row0 = r_beg + rb * a.rows_per_tile;
  const int64_t left = r_end - tl.row0;
  tl.rows = static_cast<int>(left < a.rows_per_tile ? left : a.rows_per_tile);
  tl.b0 = tl.slab * a.slab_blocks;
  tl.nblk = a.nb - tl.b0 < a.slab_blocks ? a.nb - tl.b0 : a.slab_blocks;
  return tl;
}

// Warp 0's part of one tile. Every lane arrives once on `full` (its init
// count is 32), announcing the bytes of the copy it then issues: lane 0 the
// whole tile when it holds whole rows (one copy: large copies stream far
// faster than many small ones), lane r row r's slab otherwise (4 rows). The
// plain edge-byte stores come before the arrive, which releases them.
template <int kBlockBytes>
__device__ __forceinline__ void issue_tile(const StagedArgs& a, const Tile& tl, uint8_t* stage, uint64_t* full,
                                           int lane) {
  const auto w_lo = reinterpret_cast<uintptr_t>(a.w);
  const uintptr_t rb = static_cast<uintptr_t>(a.row_bytes);
  const uintptr_t w_hi = w_lo + static_cast<uintptr_t>(a.n) * rb;
  BulkPart p{nullptr, nullptr, 0};
  if (a.slabs == 1) {
    if (lane == 0) {
      const uintptr_t g_s = w_lo + static_cast<uintptr_t>(tl.row0) * rb;
      p = stage_range(g_s, g_s + static_cast<uintptr_t>(tl.rows) * rb, w_lo, w_hi, stage);
    }
  } else if (lane < tl.rows) {
    const uintptr_t g_s =
        w_lo + static_cast<uintptr_t>(tl.row0 + lane) * rb + static_cast<uintptr_t>(tl.b0) * kBlockBytes;
    p = stage_range(g_s, g_s + static_cast<uintptr_t>(tl.nblk) * kBlockBytes, w_lo, w_hi, stage + lane * a.pitch);
  }
  dev::fence_proxy_async_smem();  // plain stores (rare: matrix edges) before any later copy into those bytes
  dev::mbar_arrive_expect_tx(full, p.bytes);
  if (p.bytes) dev::bulk_copy_g2s(p.dst, p.src, p.bytes, full);
}

// Butterfly reduce-scatter of V values over aligned groups of W lanes (V, W
// powers of two): each step halves the values a lane keeps (lanes with the
// step's bit set keep the upper half) and adds its partner's other half, so
// V values cost about V shuffles instead of V·log2(W). Afterwards v[0 .. C)
// (C = max(1, V / W)) hold the group's totals of indices rs_first() + j;
// with V < W, W / V lanes hold each total (rs_owner picks one).
template <int C, int O, int V>
__device__ __forceinline__ void rs_step(float (&v)[V], int lane) {
  if constexpr (O > 0) {
    if constexpr (C > 1) {
      const bool up = (lane & O) != 0;
#pragma unroll
      for (int j = 0; j < C / 2; ++j) {
        const float send = up ? v[j] : v[j + C / 2];
        const float keep = up ? v[j + C / 2] : v[j];
        v[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
      }
      rs_step<C / 2, O / 2, V>(v, lane);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
      rs_step<1, O / 2, V>(v, lane);
    }
  }
}
template <int V, int W>
__device__ __forceinline__ int rs_first(int lane) {
  int first = 0, c = V;
#pragma unroll
  for (int o = W / 2; o > 0; o >>= 1)
    if (c > 1) {
      if (lane & o) first += c / 2;
      c /= 2;
    }
  return first;
}
template <int V, int W>
__device__ __forceinline__ bool rs_owner(int lane) {
  if constexpr (V >= W) return true;
  else return (lane & (W / V - 1)) == 0;
}

__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Tiles are walked in order, row block by row block and slab by slab within
// one (no 64-bit division per tile).
struct TileCursor {
  int64_t rb = 0;
  int slab = 0;
  __device__ void next(int slabs) {
    if (++slab == slabs) slab = 0, ++rb;
  }
};

// kCtas CTAs per SM: 2 for the m = 1 unit kernels (≤ 128 registers; the
// others need up to 255): two CTAs keep two copy streams per SM (see the
// copy-only measurement above) and 16 warps hide latency better than 8; on
// the 262144 × 640 Q8_0 head this took m = 1 from 80 to 62 µs.
// kQ8 (m = 1, unit decoders; RLX_CUDA_GEMV_STAGED_Q8): x quantized into
// shared memory as two int8 levels per 32 elements (quantize_x) and the
// units' integer dot_q8, as gemv_q8.cu does, instead of f32 x: fewer
// instructions per weight. H100, the 262144 × 640 Q8_0 head: 72.0 → 68.2 µs,
// Gemma 3 270M decode 1,925 → 1,942 tok/s (session 42).
template <class D, int M, int kCtas, bool kQ8 = false>
__global__ void __launch_bounds__(kThreads, kCtas) gemv_staged_kernel(const __grid_constant__ StagedArgs a) {
  constexpr int RT = kRowsPerQuad, V = RT * M;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kStages], empty[kStages];
  __shared__ float red[2][kConsumerWarps][V];  // cross-warp partial sums, double-buffered
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r_beg = a.n * blockIdx.x / gridDim.x, r_end = a.n * (blockIdx.x + 1) / gridDim.x;
  const int64_t row_blocks = (r_end - r_beg + a.rows_per_tile - 1) / a.rows_per_tile;
  const int64_t tiles = row_blocks * a.slabs;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      dev::mbar_init(&full[s], 32);
      dev::mbar_init(&empty[s], kConsumerWarps);
    }
    dev::mbar_fence_init();
  }
  __syncthreads();
  // Warp 0 also produces: it requests the first `stages` tiles now, before
  // waiting on the previous kernel (weights are written by no kernel, so
  // their DRAM latency may overlap its tail), and each later tile as soon as
  // every warp is done with the stage it goes to. (A separate producer warp
  // would cost a ninth warp's registers: 288 threads cap ptxas at 168.)
  TileCursor produce;  // warp 0: the next tile to request
  if (warp == 0) {
    for (int64_t t = 0; t < tiles && t < a.stages; ++t, produce.next(a.slabs))
      issue_tile<D::kBlockBytes>(a, tile_at(a, produce.rb, produce.slab, r_beg, r_end), smem + t * a.stage_bytes,
                                 &full[t], lane);
  }

  dev::pdl_begin();  // x may come from the previous kernel, y may be read by it
  float4* xs = reinterpret_cast<float4*>(smem + a.stages * a.stage_bytes);
  // kQ8: the int8 planes and scales where f32 x would be (2k + k / 8 bytes of its 4k).
  auto* q8a = reinterpret_cast<int8_t*>(xs);
  int8_t* q8b = q8a + a.k;
  auto* q8d = reinterpret_cast<float*>(q8b + a.k);
  if constexpr (kQ8) {
    quant_detail::quantize_x(a.x, 1, a.k, a.io, a.x_vec16, q8a, q8b, q8d);
    __syncthreads();
  } else if (a.x_smem) {
    // 8 loads in flight per thread before their stores: x of m = 8 rows of
    // K = 4096 is 128 slots per thread, one L2 round trip each otherwise.
    constexpr int kBatch = 8;
    const int n4 = a.m * a.k / 4;
    for (int f0 = threadIdx.x; f0 < n4; f0 += kThreads * kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (f0 + b * kThreads < n4) v[b] = load_x4(a.x, 4 * (f0 + b * kThreads), a.io, a.x_vec);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int f = f0 + b * kThreads;
        if (f < n4) xs[f ^ ((f >> 3) & 7)] = v[b];
      }
    }
    __syncthreads();
  }
  // Activations: swizzled shared f32, or (x too large) f32 straight from
  // global memory, unswizzled. One generic pointer serves both.
  const float4* xb = a.x_smem ? xs : static_cast<const float4*>(a.x);
  const int swz = a.x_smem ? 7 : 0;
  // The activation slots of run `run` of unit j of the block starting at
  // element e0, row i: a run is 8, 16 or 32 elements at a multiple of its
  // length, so its slots share one 128-byte line and one XOR serves them all.
  auto run_base = [&](int i, int e0, int j, int run) {
    const int f0 = (i * a.k + e0 + D::run_start(j, run)) >> 2;
    return f0 ^ ((f0 >> 3) & swz);
  };

  const typename D::Ctx ctx = D::context(a.t);
  const int groups = kThreads / a.lq;
  const int g = threadIdx.x / a.lq, tg = threadIdx.x % a.lq;
  int reductions = 0;
  float acc[RT][M];

  TileCursor consume;
  int s = 0, prev_s = 0;  // ring slot of tile t and of tile t − 1
  uint32_t phase = 0, prev_phase = 0;  // their barrier phase parities
  for (int64_t t = 0; t < tiles; ++t, consume.next(a.slabs)) {
    if (warp == 0 && t >= 1 && t - 1 + a.stages < tiles) {
      // Refill the slot of tile t − 1 with tile t − 1 + stages.
      dev::mbar_wait(&empty[prev_s], prev_phase);
      issue_tile<D::kBlockBytes>(a, tile_at(a, produce.rb, produce.slab, r_beg, r_end),
                                 smem + prev_s * a.stage_bytes, &full[prev_s], lane);
      produce.next(a.slabs);
    }
    const Tile tl = tile_at(a, consume.rb, consume.slab, r_beg, r_end);
    const uint8_t* stage = smem + s * a.stage_bytes;
    dev::mbar_wait(&full[s], phase);

    for (int q = 0; q < a.qw; ++q) {
      const int rq0 = (q * groups + g) * RT;  // the quad's first row in the tile
      if (tl.slab == 0) {
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int i = 0; i < M; ++i) acc[r][i] = 0.0f;
      }
      // Row bases in the stage; rows past the tile repeat its last row (their
      // sums are never stored).
      const uint8_t* rp[RT];
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        const int rr = rq0 + r < tl.rows ? rq0 + r : tl.rows - 1;
        if (a.slabs == 1) {
          rp[r] = stage + ((reinterpret_cast<uintptr_t>(a.w) + static_cast<uintptr_t>(tl.row0) * a.row_bytes) & 15) +
                  static_cast<size_t>(rr) * a.row_bytes;
        } else {
          const uintptr_t gs = reinterpret_cast<uintptr_t>(a.w) +
                               static_cast<uintptr_t>(tl.row0 + rr) * a.row_bytes +
                               static_cast<uintptr_t>(tl.b0) * D::kBlockBytes;
          rp[r] = stage + rr * a.pitch + (gs & 15);
        }
      }
      const int units = rq0 < tl.rows ? tl.nblk * D::kUnits : 0;
      // One unit of the quad's rows (u: the unit's index in the tile row).
      auto unit = [&](int u) {
        const int blk = u / D::kUnits, j = u % D::kUnits;
        const int e0 = (tl.b0 + blk) * D::kBlockElems;
        if constexpr (kQ8) {
          const typename D::Q8 xq(q8a, q8b, q8d, e0, j);
#pragma unroll
          for (int r = 0; r < RT; ++r) acc[r][0] += D::dot_q8(rp[r] + blk * D::kBlockBytes, j, ctx, xq);
        } else if constexpr (M == 1 && D::kDot) {
          // One activation row: its run values stay in registers for the
          // quad's rows and the unit's dot() factors the block scales out.
          float xv[D::kRuns][D::kRunLen], xsum[D::kRuns];
#pragma unroll
          for (int run = 0; run < D::kRuns; ++run) {
            const int fb = run_base(0, e0, j, run);
#pragma unroll
            for (int e4 = 0; e4 < D::kRunLen / 4; ++e4) {
              const float4 x4 = xb[fb ^ e4];
              xv[run][4 * e4] = x4.x, xv[run][4 * e4 + 1] = x4.y, xv[run][4 * e4 + 2] = x4.z, xv[run][4 * e4 + 3] = x4.w;
            }
            float sum = 0.0f;
#pragma unroll
            for (int e = 0; e < D::kRunLen; ++e) sum += xv[run][e];
            xsum[run] = sum;  // unused (and not computed) by units without "− min" terms
          }
#pragma unroll
          for (int r = 0; r < RT; ++r) acc[r][0] += D::dot(rp[r] + blk * D::kBlockBytes, j, ctx, xv, xsum);
        } else {
          // Decode the unit for the quad's rows once, then stream each x
          // row's activations past all of them.
          float v[RT][D::kRuns][D::kRunLen];
#pragma unroll
          for (int r = 0; r < RT; ++r) D::decode(rp[r] + blk * D::kBlockBytes, j, ctx, v[r]);
#pragma unroll
          for (int i = 0; i < M; ++i) {
            if (i >= a.m) break;
#pragma unroll
            for (int run = 0; run < D::kRuns; ++run) {
              const int fb = run_base(i, e0, j, run);
#pragma unroll
              for (int e4 = 0; e4 < D::kRunLen / 4; ++e4) {
                const float4 xv = xb[fb ^ e4];
#pragma unroll
                for (int r = 0; r < RT; ++r) {
                  float s0 = acc[r][i];
                  s0 = fmaf(v[r][run][4 * e4], xv.x, s0);
                  s0 = fmaf(v[r][run][4 * e4 + 1], xv.y, s0);
                  s0 = fmaf(v[r][run][4 * e4 + 2], xv.z, s0);
                  s0 = fmaf(v[r][run][4 * e4 + 3], xv.w, s0);
                  acc[r][i] = s0;
                }
              }
            }
          }
        }
      };
      // (Unrolling this loop by 2 for m = 1 measured no faster on an H200.)
#pragma unroll 1
      for (int u = tg; u < units; u += a.lq) unit(u);
      if (tl.slab == a.slabs - 1) {
        // The quad is done: sum each of its V values over the group's lq
        // threads and store. Groups of ≤ 32 lanes reduce by shuffles alone;
        // wider groups reduce per warp, then across their warps through
        // shared memory (a named barrier per group).
        float (&vals)[V] = reinterpret_cast<float (&)[V]>(acc);
        auto store = [&](int idx, float val) {
          const int r = idx / M, i = idx % M;
          if (i < a.m && rq0 + r < tl.rows)
            store_from_f32(a.y, static_cast<int64_t>(i) * a.n + tl.row0 + rq0 + r, val, a.io);
        };
        auto finish = [&](auto width_tag) {
          constexpr int W = decltype(width_tag)::value;
          rs_step<V, W / 2, V>(vals, lane);
          constexpr int C = V >= W ? V / W : 1;
          const int first = rs_first<V, W>(lane);
          const bool owner = rs_owner<V, W>(lane);
          if (a.lq <= 32) {
#pragma unroll
            for (int c = 0; c < C; ++c)
              if (owner) store(first + c, vals[c]);
            return;
          }
          const int p = reductions & 1, wpg = a.lq / 32;
#pragma unroll
          for (int c = 0; c < C; ++c)
            if (owner) red[p][warp][first + c] = vals[c];
          named_barrier(1 + g, a.lq);
          if (warp % wpg == 0 && lane < V) {
            float sum = 0.0f;
            for (int w = 0; w < wpg; ++w) sum += red[p][warp + w][lane];
            store(lane, sum);
          }
        };
        if (a.lq == 8) finish(std::integral_constant<int, 8>{});
        else if (a.lq == 16) finish(std::integral_constant<int, 16>{});
        else finish(std::integral_constant<int, 32>{});
        ++reductions;
      }
    }
    __syncwarp();
    if (lane == 0) dev::mbar_arrive(&empty[s]);  // this warp is done with the stage
    prev_s = s, prev_phase = phase;
    if (++s == a.stages) s = 0, phase ^= 1;
  }
}

// ---- host planning -----------------------------------------------------------------

struct Plan {
  int lq, qw, rows_per_tile, slab_blocks, slabs, pitch, stage_bytes, stages;
  double eff;  // score: useful share of thread time × share of copies overlapping arithmetic
  bool x_smem;
  size_t smem;
};

int64_t align16(int64_t v) { return (v + 15) / 16 * 16; }

// Useful share of a group's thread time on a quad of `units` units per row:
// ceil(units / lq) unit iterations per thread, plus the reduction, which
// costs about a quarter of an iteration within a warp and half of one across
// warps (shared memory and a named barrier).
double group_eff(int64_t units, int lq) {
  const double iters = static_cast<double>((units + lq - 1) / lq) + (lq > 32 ? 0.5 : 0.25);
  return static_cast<double>(units) / (static_cast<double>(lq) * iters);
}

// Tile geometry for one launch with `stages` ring slots; false when it does
// not fit. x is staged in shared memory when it fits next to the stages, else
// read as f32 from global memory (false when x is not aligned f32).
bool plan_stages(int64_t n, int64_t k, int64_t m, int64_t row_bytes, int block_elems, int block_bytes,
                 int units_per_block, bool x_f32_aligned, int64_t smem_budget, int grid, int stages, Plan& p) {
  const int64_t nb = k / block_elems;
  const int64_t x_bytes = align16(m * k * 4);
  p.x_smem = true;
  p.stages = stages;
  int64_t cap = (smem_budget - x_bytes) / stages / 16 * 16;
  if (cap < kStageMin) {
    if (!x_f32_aligned) return false;
    p.x_smem = false;
    cap = smem_budget / stages / 16 * 16;
  }
  cap = std::min<int64_t>(cap, kStageMax);
  const int64_t target = std::min<int64_t>(cap, kTileTarget);
  const int64_t rows_per_cta = (n + grid - 1) / grid;
  const int64_t units = nb * units_per_block;  // per row
  constexpr int64_t kEdge = 32 + kStageSlack;  // 16-byte rounding at both ends, word-load slack

  // Whole rows: the group width and quads per group with the best score,
  // the useful share of thread time (group_eff) times the share of copies
  // that overlap arithmetic: a CTA's first tile is waited for with nothing
  // to overlap, so with t tiles per CTA about t / (t + 1). Ties: the larger
  // tile (larger copies stream faster).
  int best = 0, best_qw = 1;
  double best_score = -1;
  for (int lq = 8; lq <= kThreads; lq *= 2) {
    const int64_t quad_rows = int64_t{kThreads / lq} * kRowsPerQuad;
    for (int qw = 1; qw <= 8; qw *= 2) {
      const int64_t rows = quad_rows * qw;
      if (rows * row_bytes + kEdge > cap || (qw > 1 && rows > rows_per_cta)) break;
      const double t = static_cast<double>((rows_per_cta + rows - 1) / rows);
      const double score = group_eff(units, lq) * t / (t + 1);
      if (score > best_score * 1.01) best = lq, best_qw = qw, best_score = score;
      else if (score > best_score * 0.99 && rows > int64_t{kThreads / best} * kRowsPerQuad * best_qw)
        best = lq, best_qw = qw, best_score = std::max(score, best_score);
    }
  }
  if (best) {
    p.lq = best;
    p.eff = best_score;
    p.qw = best_qw;
    p.rows_per_tile = kThreads / best * kRowsPerQuad * best_qw;
    p.slab_blocks = static_cast<int>(nb);
    p.slabs = 1;
    p.pitch = static_cast<int>(row_bytes);
    p.stage_bytes = static_cast<int>(align16(p.rows_per_tile * row_bytes + kEdge));
  } else {
    // Long rows: one quad per tile, all threads on it, each row a slab of
    // blocks along K at its own pitch (4 copies per tile). Slabs of a
    // multiple of kThreads units keep every thread busy when that costs little.
    p.lq = kThreads;
    p.qw = 1;
    p.rows_per_tile = kRowsPerQuad;
    int64_t sb = std::max<int64_t>(1, ((target - kStageSlack) / kRowsPerQuad - 32) / block_bytes);
    const int64_t per = std::max(1, kThreads / units_per_block);
    if (sb / per * per >= sb * 3 / 4) sb = sb / per * per;
    sb = std::min(sb, nb);
    p.slab_blocks = static_cast<int>(sb);
    p.slabs = static_cast<int>((nb + sb - 1) / sb);
    p.pitch = static_cast<int>(align16(sb * block_bytes) + 32);
    p.stage_bytes = p.rows_per_tile * p.pitch + kStageSlack;
    const double t = static_cast<double>((rows_per_cta + kRowsPerQuad - 1) / kRowsPerQuad) * p.slabs;
    p.eff = group_eff(sb * units_per_block, kThreads) * t / (t + 1) * 0.95;  // slabs: 4 copies a tile
  }
  p.smem = static_cast<size_t>(stages) * p.stage_bytes + (p.x_smem ? static_cast<size_t>(x_bytes) : 0);
  return static_cast<int64_t>(p.smem) <= smem_budget;
}

// The plan over 4, 3 or 2 stages with the best score (the copy engine
// streams as fast from 2 large stages as from 4 smaller ones, and fewer,
// larger stages let groups be narrower); near-ties: more stages.
bool plan_launch(int64_t n, int64_t k, int64_t m, int64_t row_bytes, int block_elems, int block_bytes,
                 int units_per_block, bool x_f32_aligned, int64_t smem_budget, int grid, Plan& p) {
  bool found = false;
  for (int stages = kStages; stages >= 2; --stages) {
    Plan q{};
    if (!plan_stages(n, k, m, row_bytes, block_elems, block_bytes, units_per_block, x_f32_aligned, smem_budget,
                     grid, stages, q))
      continue;
    if (!found || q.eff > p.eff * 1.02) p = q, found = true;
  }
  return found;
}

}  // namespace

// RLX_CUDA_GEMV_STAGED_Q8: m = 1 with int8 activations for the types that
// RLX_CUDA_GEMV_Q8 gives them (quant_gemv_q8_applies) and that have a unit
// decoder (gemv_staged_kernel's kQ8).
bool quant_gemv_staged_uses_q8(DType w_type, int64_t m, int64_t k) {
  if (m != 1 || !env_bool("RLX_CUDA_GEMV_STAGED_Q8") || !quant_gemv_q8_applies(w_type, 1, k)) return false;
  return dev::visit_gemv_unit(w_type, [](auto) {});
}

bool quant_gemv_staged_supported(DType w_type) {
  if (!is_quant(w_type) || !dev::visit_quant_block(w_type, [](auto) {})) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  return device_props(device).cc_major >= 9;
}

void launch_quant_gemv_staged(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m,
                              int64_t n, int64_t k, cudaStream_t stream) {
  RLX_CHECK(m >= 1 && m <= kMaxGemvRows, "quantized gemv (staged): m = ", m, " rows, the fused kernel takes 1..",
            kMaxGemvRows);
  const int64_t block = dtype_info(w_type).block_elems;
  RLX_CHECK(n >= 0 && k > 0 && k % block == 0, "quantized gemv (staged): K = ", k,
            " is not a positive multiple of ", dtype_name(w_type), "'s block of ", block);
  RLX_CHECK(n < (int64_t{1} << 31), "quantized gemv (staged): N = ", n, " rows is too many");
  RLX_CHECK(m * k < (int64_t{1} << 31), "quantized gemv (staged): m·K = ", m * k, " activations is too many");
  RLX_CHECK(quant_gemv_staged_supported(w_type), "quantized gemv (staged): no kernel for ", dtype_name(w_type),
            " (needs a quantized type with a cuda decoder and an sm_90+ device)");
  if (n == 0) return;
  const FloatKind io = float_kind(x_dtype, "quantized gemv (staged)");
  const int64_t row_bytes = dtype_bytes(w_type, k);
  RLX_CHECK(row_bytes < (int64_t{1} << 30), "quantized gemv (staged): a row of ", row_bytes, " bytes is too long");
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceProps& props = device_props(device);
  int smem_per_sm = 0;
  RLX_CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  const auto xa = reinterpret_cast<uintptr_t>(x);
  const bool x_vec = io == FloatKind::F32 ? xa % 16 == 0 : xa % 8 == 0;

  bool launched = false;
  auto run = [&](auto dec, auto rows_tag) {
    using D = decltype(dec);
    constexpr int M = decltype(rows_tag)::value;
    constexpr int kCtas = M == 1 && D::kDot ? 2 : 1;
    // Dynamic shared memory per CTA: the SM's share (less the 1 KB the
    // runtime reserves per CTA) within what a block may opt into, less the
    // static part (barriers, cross-warp reduction scratch: at most 2 KB).
    const int64_t budget =
        std::min<int64_t>(props.smem_per_block_optin, (smem_per_sm - 1024 * kCtas) / kCtas) - 4096;
    const int grid = static_cast<int>(std::min<int64_t>(int64_t{props.sm_count} * kCtas, n));
    Plan p{};
    if (!plan_launch(n, k, m, row_bytes, D::kBlockElems, D::kBlockBytes, D::kUnits,
                     io == FloatKind::F32 && xa % 16 == 0, budget, grid, p))
      return;  // x too large for shared memory and not f32: the caller falls back
    StagedArgs a{};
    a.w = static_cast<const uint8_t*>(w);
    a.x = x;
    a.y = y;
    a.n = n;
    a.k = static_cast<int>(k);
    a.m = static_cast<int>(m);
    a.row_bytes = static_cast<int>(row_bytes);
    a.nb = static_cast<int>(k / D::kBlockElems);
    a.lq = p.lq;
    a.qw = p.qw;
    a.rows_per_tile = p.rows_per_tile;
    a.slab_blocks = p.slab_blocks;
    a.slabs = p.slabs;
    a.pitch = p.pitch;
    a.stage_bytes = p.stage_bytes;
    a.stages = p.stages;
    a.x_smem = p.x_smem;
    a.x_vec = x_vec;
    a.x_vec16 = xa % 16 == 0;
    a.io = io;
    a.t = tables_for_current_device();
    // Opt in to the large dynamic shared memory once per kernel and device (0..63).
    auto launch = [&](auto kernel, std::atomic<uint64_t>& opted) {
      const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
      if (!bit || !(opted.load(std::memory_order_relaxed) & bit)) {
        RLX_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(budget)));
        opted.fetch_or(bit, std::memory_order_relaxed);
      }
      kernel<<<grid, kThreads, p.smem, stream>>>(a);
    };
    static std::atomic<uint64_t> opted{0}, opted_q8{0};
    if constexpr (M == 1 && D::kDot) {
      if (p.x_smem && quant_gemv_staged_uses_q8(w_type, m, k)) launch(gemv_staged_kernel<D, M, kCtas, true>, opted_q8);
      else launch(gemv_staged_kernel<D, M, kCtas>, opted);
    } else {
      launch(gemv_staged_kernel<D, M, kCtas>, opted);
    }
    launched = true;
  };
  auto by_rows = [&](auto dec) {
    if (m == 1) run(dec, std::integral_constant<int, 1>{});
    else run(dec, std::integral_constant<int, kMaxGemvRows>{});
  };
  // The GemvUnit types when their blocks are aligned for the unit's loads
  // (GGUF weights always are); everything else through the generic decoder.
  bool unit = false;
  dev::visit_gemv_unit(w_type, [&](auto u) {
    using U = decltype(u);
    if (reinterpret_cast<uintptr_t>(w) % U::kAlign != 0 || row_bytes % U::kAlign != 0) return;
    unit = true;
    by_rows(UnitDec<U>{});
  });
  if (!unit) {
    visit_or_throw(w_type, "quantized gemv (staged)", [&](auto q) {
      using Q = decltype(q);
      if constexpr (Q::kChunk == 32) by_rows(BlockDec<Q>{});  // not the scalar storage types (refused above)
    });
  }
  RLX_CUDA_CHECK_LAUNCH("DequantMatMul (staged gemv)");
  // x (m·K f32) fits neither in shared memory next to the stages nor reads
  // as aligned f32 from global memory: the latency-tuned GEMV takes it.
  if (!launched) launch_quant_gemv(w_type, w, x_dtype, x, y, m, n, k, stream);
}

}  // namespace rlx::cuda
