// The streaming m = 1 GEMV for large quantized matrices (launch_quant_gemv_stream
// in quant.h).
//
// Why: the unit kernels (gemv.cu, gemv_q8.cu) split a block into 16/32-weight
// units over consecutive lanes. Their SASS for Q4_K runs ~370 instructions
// per 64 weights: each unit decodes its block's scales again, and rows of a
// group carry liveness predicates; at 4096² they reached 19-49% of the copy
// bandwidth. Here a thread owns whole 256-element chunks of one row (one
// K-quant block, or 8 blocks of 32): it decodes the scales once per chunk and
// its loop has no row predicates, 340 instructions per Q4_K chunk (1.33 per
// weight). Measured: quant_gemv_stream_applies and docs/performance.md.
//
// Layout: a CTA of 256 threads per SM owns a balanced, contiguous share of
// the rows and walks it in tiles of `tr` whole rows, each row at a pitch ≡ 16
// (mod 128) bytes so that the 32 lanes of a warp, reading the same chunk of
// 32 rows with 16-byte loads, hit every bank once. Thread t takes row t mod tr
// of a tile and the chunks c ≡ t / tr (mod 256 / tr); the 256 / tr threads of
// a row meet in shared memory.
//
// The chain of GEMVs in a decode graph (programmatic launches): what stands
// between a GEMV and the copy rate is the part after griddepcontrol.wait
// (x, the dots, the store), which no weight traffic can overlap within one
// kernel. So the kernel lets the next one in at once (launch_dependents on
// entry), a CTA fits twice in an SM's shared memory (kSmemBudget), and every
// stage is requested before the wait: the next GEMV's weights stream in while
// this one computes. The tiles come by bulk copies (cp.async.bulk, one per
// row, counted on the stage's mbarrier) rather than 16-byte cp.async, whose
// requests queued x's loads behind the weights. H200, CUDA graph of 4096²
// GEMVs, each change undone alone (docs/performance.md, session 24): Q4_K
// 4.64 µs against 5.84 (cp.async), 5.47 (trigger after x) and 5.43 (only the
// first stage before the wait). Rows too long for two stages of 8 rows in
// that budget take one CTA per SM (kSmemMax) and a ring refilled as tiles
// are done.
//
// Types: Q4_0, Q5_0, Q8_0, Q4_K, Q5_K (chunks of 144, 176, 272 bytes: 16-byte
// loads), IQ4_XS (136 bytes: chunks 8-byte aligned, 8-byte loads; K a
// multiple of 512) and Q6_K (210 bytes: chunks only 2-byte aligned, read
// through the aligned 8-byte words around them with a word select and a
// funnel shift; K a multiple of 2048). K is what makes a row a whole number
// of 16-byte granules for the tile copies. With 8-byte loads the 32 rows a
// warp reads at a 16 (mod 128) pitch meet two to a bank: twice the
// wavefronts of a 16-byte read per byte.
//
// Activations: every CTA copies x into shared memory (one bulk copy,
// x_bulk_fetch, where x is 16-byte aligned, at most kXCopyMax bytes and its
// room leaves the tiles as they were; else every thread loads its part),
// then quantizes it there as gemv_q8.cu does
// (two int8 levels per 32 elements), adding each block's level sum for the
// bias and "− min" terms. All lanes of a warp read the same
// activations (broadcast). Error bound: as quant_gemv_uses_q8 states.
#include <algorithm>
#include <string>

#include "rlx/backends/cuda/kernels/quant.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/stream_chunk.cuh"
#include "rlx/backends/cuda/kernels/gemv_common.cuh"
#include "rlx/backends/cuda/kernels/gemv_q8.h"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

using namespace quant_detail;
using dev::IqTables;
using namespace dev::stream;  // the chunk decoders

constexpr int kThreads = 256;
constexpr int kChunk = 256;      // elements of a row a thread takes at a time
constexpr int kMaxStages = 4;
// Two CTAs fit in an SM's 228 KB (each also reserves 1 KB).
constexpr int64_t kSmemBudget = 112 * 1024;
constexpr int64_t kSmemMax = 200 * 1024;  // of the 227 KB an sm_90 CTA may opt into: one CTA per SM
constexpr int64_t kTileMax = 96 * 1024;
constexpr int64_t kXCopyMax = 16 * 1024;  // x's bulk copy (f32 K = 4096) in shared memory; longer x: thread loads

// x by one bulk copy into shared memory. After griddepcontrol.wait, every
// thread's loads of x queued behind the weights then in flight (with
// programmatic launch, the next GEMV's too); one bulk request is served
// sooner. H100, 4096² in a CUDA graph, same call (docs/performance.md,
// session 42): Q4_0 5.17 → 4.23 µs, Q4_K 5.18 → 4.31, Q5_K 6.02 → 5.01,
// IQ4_XS 6.34 → 5.39, Q6_K 8.65 → 7.91. (The unit kernels, gemv.cu and
// gemv_q8.cu, measured slower with it: Gemma 3 270M decode 1,836 against
// 1,915 tok/s. They keep their loads.) Before the wait, x_bulk_arm (thread 0)
// prepares `bar` for `bytes`, and a __syncthreads must follow before any
// thread waits on it; after the wait, x_bulk_fetch issues the copy into dst
// and every thread waits until it landed. dst, x and bytes: 16-byte multiples.
__device__ __forceinline__ void x_bulk_arm(uint64_t* bar, uint32_t bytes) {
  if (threadIdx.x != 0) return;
  dev::mbar_init(bar, 1);
  dev::mbar_fence_init();
  dev::mbar_arrive_expect_tx(bar, bytes);
}
__device__ __forceinline__ void x_bulk_fetch(void* dst, const void* x, uint32_t bytes, uint64_t* bar) {
  if (threadIdx.x == 0) dev::bulk_copy_g2s(dst, x, bytes, bar);
  dev::mbar_wait(bar, 0);
}

struct StreamPlan {
  int tr = 0, stages = 0, pitch = 0, grid = 0;
  int64_t x_copy = 0;  // bytes of x bulk-copied into shared memory; 0: every thread loads its part from L2
  size_t smem = 0;
};

// Shared memory: the mbarriers (the stages', then x's at kMaxStages), the
// stages, x quantized, the reduction scratch, then x's copy.
constexpr int kBarBytes = 128;

template <class C>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_stream_kernel(const uint8_t* __restrict__ w, const void* __restrict__ x, void* __restrict__ y, int64_t n,
                       int64_t k, int64_t row_bytes, int tr, int stages, int pitch, FloatKind io, bool x_vec,
                       uint32_t x_copy, IqTables tables) {
  extern __shared__ int4 stream_smem[];
  auto* bars = reinterpret_cast<uint64_t*>(stream_smem);
  auto* smem = reinterpret_cast<uint8_t*>(stream_smem) + kBarBytes;
  const int64_t stage_bytes = int64_t{tr} * pitch;
  auto* xa = reinterpret_cast<int8_t*>(smem + stages * stage_bytes);
  int8_t* xb = xa + k;
  auto* dx = reinterpret_cast<float*>(xb + k);
  float* xs = dx + k / 32;
  float* red = xs + k / 32;  // [kThreads]
  uint8_t* x_smem = reinterpret_cast<uint8_t*>(red + kThreads);  // [x_copy]
  uint64_t* x_bar = &bars[kMaxStages];

  dev::pdl_trigger();  // the next GEMV's CTAs may become resident and request their weights now
  const int64_t r_begin = n * blockIdx.x / gridDim.x, r_end = n * (blockIdx.x + 1) / gridDim.x;
  const int tiles = static_cast<int>((r_end - r_begin + tr - 1) / tr);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) dev::mbar_init(&bars[s], 1);
    dev::mbar_fence_init();
  }
  if (x_copy) x_bulk_arm(x_bar, x_copy);
  __syncthreads();
  // Tile t's rows into stage t mod stages: warp 0 requests a copy per row,
  // counted on the stage's mbarrier. Nothing past the last tile.
  auto issue = [&](int t) {
    if (threadIdx.x >= 32 || t >= tiles) return;
    const int64_t r0 = r_begin + int64_t{t} * tr;
    const int rows = static_cast<int>(std::min<int64_t>(tr, r_end - r0));
    uint8_t* st = smem + (t % stages) * stage_bytes;
    const uint8_t* src = w + r0 * row_bytes;
    if (threadIdx.x == 0) dev::mbar_arrive_expect_tx(&bars[t % stages], static_cast<uint32_t>(rows * row_bytes));
    __syncwarp();
    for (int row = threadIdx.x; row < rows; row += 32)
      dev::bulk_copy_g2s(st + row * pitch, src + int64_t{row} * row_bytes, static_cast<uint32_t>(row_bytes),
                         &bars[t % stages]);
  };
  for (int t = 0; t < stages; ++t) issue(t);  // weights: no kernel writes them
  const typename C::Ctx ctx = C::context(tables);  // staged once per device, never written by a kernel
  dev::pdl_wait();
  if (x_copy) {
    x_bulk_fetch(x_smem, x, x_copy, x_bar);
    quantize_x<2, true>(x_smem, 1, k, io, true, xa, xb, dx, xs);
  } else {
    quantize_x<2>(x, 1, k, io, x_vec, xa, xb, dx, xs);
  }

  const int chunks = static_cast<int>(k / kChunk);
  const int slots = kThreads / tr;
  const int my_row = threadIdx.x % tr, my_slot = threadIdx.x / tr;
  for (int t = 0; t < tiles; ++t) {
    __syncthreads();  // x, the first time; red is free again after
    dev::mbar_wait(&bars[t % stages], static_cast<uint32_t>((t / stages) & 1));
    const int64_t r0 = r_begin + int64_t{t} * tr;
    const int rows = static_cast<int>(std::min<int64_t>(tr, r_end - r0));
    const uint8_t* row = smem + (t % stages) * stage_bytes + my_row * pitch;
    float acc = 0.0f;
    if (my_row < rows) {
#pragma unroll 1
      for (int c = my_slot; c < chunks; c += slots) {
        const int e = c * kChunk;
        acc += C::dot(row + c * C::kBytes, XChunk{xa + e, xb + e, dx + e / 32, xs + e / 32}, ctx);
      }
    }
    red[threadIdx.x] = acc;
    __syncthreads();  // every thread is done with the stage and its partial sum is in red
    issue(t + stages);  // every thread is done with stage t mod stages
    if (threadIdx.x < rows) {
      float s = 0.0f;
      for (int v = 0; v < slots; ++v) s += red[v * tr + threadIdx.x];
      store_from_f32(y, r0 + threadIdx.x, s, io);
    }
  }
}

// Rows per tile: 256 / tr threads share a row, enough that each takes one
// chunk where K allows (up to 32 per row); tiles small enough for two stages
// where 8 rows allow it. Where a CTA's rows would take two such tiles and
// twice the rows fit in one stage, it takes them as one tile instead, two
// chunks a thread: one block-wide reduction fewer after the wait (H200, 4096²
// in a CUDA graph: Q4_0 4.39 → 4.08 µs, Q4_K 4.51 → 4.27, Q5_K 5.06 → 4.72,
// IQ4_XS 5.78 → 5.42; Q6_K's and Q8_0's rows are too long for it, and where a
// CTA has fewer rows than a tile, 1024 × 3072, the doubled tile measured
// 0.1-0.6 µs slower). Stages: as many as fit the budget with x, up to 4 and
// the tiles a CTA has. Within kSmemBudget a CTA fits twice in an SM, so the
// next GEMV's CTA can be resident, its weights in flight, while this one
// computes; rows too long for two stages there take the larger budget.
StreamPlan plan_stream(int64_t n, int64_t k, int64_t row_bytes, int64_t x_copy, int64_t budget = kSmemBudget) {
  StreamPlan p;
  p.x_copy = x_copy;
  const int64_t chunks = k / kChunk;
  int slots = 1;
  while (slots < 32 && slots < chunks) slots *= 2;
  p.tr = kThreads / slots;
  p.pitch = static_cast<int>((row_bytes + 127) / 128 * 128 + 16);
  const size_t x_bytes = static_cast<size_t>(2 * k + 2 * (k / 32) * 4 + kThreads * 4 + x_copy);
  const int64_t room = budget - kBarBytes - static_cast<int64_t>(x_bytes);
  p.grid = static_cast<int>(std::min<int64_t>(sm_count(), n));
  const int64_t rows_per_cta = (n + p.grid - 1) / p.grid;
  if (p.tr < kThreads && rows_per_cta > p.tr && rows_per_cta <= 2 * p.tr &&
      2 * int64_t{p.tr} * p.pitch <= std::min(kTileMax, room))
    p.tr *= 2;
  else
    while (p.tr > 8 && int64_t{p.tr} * p.pitch > std::min(kTileMax, room / 2)) p.tr /= 2;
  const int64_t tiles = (rows_per_cta + p.tr - 1) / p.tr;
  const int64_t tile_bytes = int64_t{p.tr} * p.pitch;
  p.stages = static_cast<int>(std::clamp<int64_t>(room / tile_bytes, 0, std::min<int64_t>(kMaxStages, tiles)));
  p.smem = static_cast<size_t>(kBarBytes + p.stages * tile_bytes) + x_bytes;
  // (Taking the larger budget also where 8-row tiles leave threads without a
  // chunk, K = 4096 for Q8_0 and Q6_K, measured 7.74 / 8.29 µs against
  // 7.81 / 7.80 on the H200: not done.)
  if (budget == kSmemBudget && p.stages < std::min<int64_t>(2, tiles))
    return plan_stream(n, k, row_bytes, x_copy, kSmemMax);
  return p;
}

bool device_has_bulk_copies() {
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  return device_props(device).cc_major >= 9;  // cached per device
}

}  // namespace

const char* quant_gemv_stream_unsupported(DType w_type, const void* w, int64_t m, int64_t n, int64_t k) {
  if (m != 1) return "m is not 1";
  if (!device_has_bulk_copies()) return "needs sm_90 or newer (bulk copies)";
  bool known = false;
  visit_stream_chunk(w_type, [&](auto) { known = true; });
  if (!known) return "no streaming chunk decoder for this type";
  if (k % kChunk != 0) return "K is not a multiple of 256";
  // Rows must be whole 16-byte granules (the tile copies): 8 Q6_K blocks
  // (1,680 bytes) and 2 IQ4_XS blocks (272 bytes) are the fewest that are.
  if (w_type == DType::Q6_K && k % 2048 != 0)
    return "rows are not 16-byte aligned: Q6_K needs K a multiple of 2048 (8 blocks of 210 bytes)";
  if (w_type == DType::IQ4_XS && k % 512 != 0)
    return "rows are not 16-byte aligned: IQ4_XS needs K a multiple of 512 (2 blocks of 136 bytes)";
  const int64_t row_bytes = dtype_bytes(w_type, k);
  if (row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0) return "rows are not 16-byte aligned";
  if (n < 1 || n >= (int64_t{1} << 31) || row_bytes / 16 * 256 >= (int64_t{1} << 31)) return "too many rows";
  if (plan_stream(n, k, row_bytes, 0).stages < 1) return "a tile of rows and x do not fit in shared memory";
  return nullptr;
}

// RLX_CUDA_GEMV_STREAM=auto takes the streaming kernel for m = 1 and 1 MB or
// more of weights (H200, CUDA graphs, session 24, % of the 4.22 TB/s copy,
// against the unit kernels: 4096² Q4_0 51.1 / 19.0%, Q4_K 48.2 / 33.1, Q5_K
// 54.0 / 36.4, Q6_K 42.6 / 31.6, Q8_0 54.4 / 49.3, IQ4_XS 36.3 / 23.4;
// 1024 × 3072 Q4_0 14.7 / 5.7, Q4_K 14.2 / 11.9, Q8_0 28.5 / 12.4). Gemma 3
// 270M's layers (under 1 MB) keep the unit kernels, which were tuned on its
// decode. 1 takes it wherever it can run; 0 never, nor does
// RLX_CUDA_GEMV_Q8=0, which asks for f32 activations.
bool quant_gemv_stream_applies(DType w_type, const void* w, int64_t m, int64_t n, int64_t k) {
  const std::string mode = env_string("RLX_CUDA_GEMV_STREAM");
  RLX_CHECK_AS(InvalidArgument, mode == "auto" || mode == "1" || mode == "0", "RLX_CUDA_GEMV_STREAM='", mode,
               "' must be auto, 1 or 0");
  if (mode == "0" || !quant_gemv_q8_allowed() || quant_gemv_stream_unsupported(w_type, w, m, n, k)) return false;
  // IQ4_XS's chunk (table lookups, ~800 instructions) lost to the unit kernel
  // at 1024 x 3072 (1.7 MB: 3.71 against 3.52 µs) and won at 4096² (8.9 MB:
  // 5.83 against 9.05 µs) on the H200. Q6_K's (784 instructions) won at 4096²
  // (13.8 MB) but lost at Gemma 3 270M's 640 x 2048 ffn_down (1.08 MB): alone
  // 3.17 against 2.75 µs, and decode 1,885 against 1,915 tok/s end to end
  // (H100, sessions 39 and 41, four rounds). The others win from 1 MB.
  const int64_t min_bytes = w_type == DType::IQ4_XS ? int64_t{4} << 20
                            : w_type == DType::Q6_K ? int64_t{2} << 20
                                                    : int64_t{1} << 20;
  return mode == "1" || n * dtype_bytes(w_type, k) >= min_bytes;
}

void launch_quant_gemv_stream(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t n, int64_t k,
                              cudaStream_t stream) {
  const char* why = quant_gemv_stream_unsupported(w_type, w, 1, n, k);
  RLX_CHECK_AS(Unsupported, !why, "quantized gemv (streaming): ", dtype_name(w_type), " [", n, ", ", k, "]: ",
               why ? why : "");
  const FloatKind io = float_kind(x_dtype, "quantized gemv");
  const int64_t row_bytes = dtype_bytes(w_type, k);
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t x_bytes = k * (io == FloatKind::F32 ? 4 : 2);
  StreamPlan p = plan_stream(n, k, row_bytes, 0);
  if (x_vec && x_bytes <= kXCopyMax && env_bool("RLX_CUDA_GEMV_X_BULK")) {
    // The copy only where its room costs the weights nothing: the same tiles
    // and stages, and still two CTAs to an SM where they fitted without it.
    const StreamPlan c = plan_stream(n, k, row_bytes, x_bytes);
    const auto two = [](const StreamPlan& q) { return q.smem <= static_cast<size_t>(kSmemBudget); };
    if (c.tr == p.tr && c.stages == p.stages && two(c) == two(p)) p = c;
  }
  visit_stream_chunk(w_type, [&](auto c) {
    using C = decltype(c);
    auto kernel = gemv_stream_kernel<C>;
    IqTables tables{};
    if constexpr (C::kTables) tables = tables_for_current_device();
    RLX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kSmemMax + 16 * 1024)));
    kernel<<<p.grid, kThreads, p.smem, stream>>>(static_cast<const uint8_t*>(w), x, y, n, k, row_bytes, p.tr,
                                                  p.stages, p.pitch, io, x_vec,
                                                  static_cast<uint32_t>(p.x_copy), tables);
  });
  RLX_CUDA_CHECK_LAUNCH("DequantMatMul (streaming gemv)");
}

}  // namespace rlx::cuda
