// Quantized weights: dequantization and the quantized-table gather (the
// fused GEMV is in gemv.cu).
//
// Every kernel is a template over one decoder from device/quant_blocks.cuh,
// which turns (block, chunk) into kChunk consecutive floats (32 for block
// types), so the kernels share one implementation of each layout.
//   dequantize: each warp decodes tiles of 2048 contiguous elements into
//     shared memory and stores them with 512-byte warp stores (see below).
//   gather: one block per looked-up row, threads over the row's units.
#include "rlx/backends/cuda/kernels/quant.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/vec.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"
#include "rlx/backends/cuda/kernels/movement.h"
#include "rlx/backends/cuda/kernels/quant_common.cuh"
#include "rlx/core/error.h"
#include "rlx/formats/quant_tables.h"

namespace rlx::cuda {
namespace quant_detail {

// ---- IQ tables, one copy per device -----------------------------------------

template <typename T, size_t N>
void append(std::vector<uint8_t>& blob, const T (&table)[N], size_t* offset) {
  *offset = (blob.size() + 15) / 16 * 16;
  blob.resize(*offset + sizeof table);
  std::memcpy(blob.data() + *offset, table, sizeof table);
}

dev::IqTables tables_for_current_device() {
  static std::mutex mu;
  static std::map<int, dev::IqTables> staged;
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mu);
  if (auto it = staged.find(device); it != staged.end()) return it->second;

  namespace g = ggml_tables;
  std::vector<uint8_t> blob;
  size_t o[9];
  append(blob, g::iq2xxs_grid, &o[0]);
  append(blob, g::iq2xs_grid, &o[1]);
  append(blob, g::iq2s_grid, &o[2]);
  append(blob, g::iq3xxs_grid, &o[3]);
  append(blob, g::iq3s_grid, &o[4]);
  append(blob, g::iq1s_grid, &o[5]);
  append(blob, g::ksigns_iq2xs, &o[6]);
  append(blob, g::kvalues_iq4nl, &o[7]);
  append(blob, g::kvalues_mxfp4, &o[8]);
  // Lives as long as the process (like a module's __device__ globals).
  uint8_t* d = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&d, blob.size()));
  RLX_CUDA_CHECK(cudaMemcpy(d, blob.data(), blob.size(), cudaMemcpyHostToDevice));
  settle_default_stream();  // the decode kernels read the tables from rlx's streams
  dev::IqTables t;
  t.iq2xxs_grid = reinterpret_cast<const uint64_t*>(d + o[0]);
  t.iq2xs_grid = reinterpret_cast<const uint64_t*>(d + o[1]);
  t.iq2s_grid = reinterpret_cast<const uint64_t*>(d + o[2]);
  t.iq3xxs_grid = reinterpret_cast<const uint32_t*>(d + o[3]);
  t.iq3s_grid = reinterpret_cast<const uint32_t*>(d + o[4]);
  t.iq1s_grid = reinterpret_cast<const uint64_t*>(d + o[5]);
  t.ksigns_iq2xs = d + o[6];
  t.kvalues_iq4nl = reinterpret_cast<const int8_t*>(d + o[7]);
  t.kvalues_mxfp4 = reinterpret_cast<const int8_t*>(d + o[8]);
  staged.emplace(device, t);
  return t;
}

}  // namespace quant_detail

namespace {

using namespace quant_detail;
using dev::IqTables;
using dev::QuantBlock;

// ---- dequantize ----------------------------------------------------------------
//
// The output is 2-4 bytes per element against 0.2-1.1 read, so the stores set the
// speed, and HBM only reaches copy bandwidth when each warp store instruction
// writes whole 32-byte sectors, ideally whole 128-byte lines. A decoder yields runs
// of 8-32 consecutive values, and the runs of neighbouring lanes interleave (a Q4_K
// unit holds elements 16..31 and 48..63 of its group), so stores straight from
// registers write half sectors here and there. Instead each warp decodes a tile of
// kTileElems contiguous elements into its own slice of shared memory, then copies
// the tile out with lane i storing 16 bytes at 16·i: one store instruction is 512
// contiguous bytes.
//
// The grid is at most one wave of resident CTAs and each warp loops over tiles: no
// CTA per few thousand elements to launch and retire, and per-CTA setup (the IQ
// tables) is paid once. A warp issues the loads of its next tile before it decodes
// and stores the current one, so its reads stay in flight while it works.

constexpr int kDqWarps = 8, kDqThreads = 32 * kDqWarps;
constexpr int kTileElems = 2048;  // per warp tile: 4 KB of f16; 8 K-quant blocks, 64 Q4_0 blocks

// A warp's buffer of one tile of TO values, in 16-byte chunks.
template <int kBlockElems, typename TO>
struct Staging {
  static constexpr int kVec = 16 / sizeof(TO);  // values per chunk
  static constexpr int kChunks = kTileElems / kVec;
  static constexpr int kBlockChunks = kBlockElems / kVec;
  static constexpr int kRow = kBlockChunks > 8 ? kBlockChunks : 8;
  static_assert(kBlockElems % kVec == 0 && kTileElems % kBlockElems == 0);

  // Chunk q lives at q ^ ((q / kRow) % 8). Shared memory serves a 16-byte access 8
  // lanes at a time, without conflict when the 8 hit distinct 16-byte columns of
  // the 128-byte rows. The decoding lanes of such a group write the same offset of
  // 8 consecutive blocks, a power of two of chunks apart, so all in one column; the
  // XOR with the block's row group spreads them over the 8 columns (blocks of 4
  // chunks: two per row, offsets 0-3 and 4-7, XORed with 4 distinct values). The
  // copy-out's 8 consecutive chunks stay one row, permuted.
  __device__ static int slot(int q) { return q ^ ((q / kRow) & 7); }

  // Converts the run v of tile elements e .. e + R - 1 (e a multiple of kVec) into buf.
  template <int R>
  __device__ static void put(uint4* buf, int e, const float (&v)[R]) {
    static_assert(R % kVec == 0);
#pragma unroll
    for (int i = 0; i < R; i += kVec) {
      float part[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) part[k] = v[i + k];
      dev::store_f32<TO, kVec>(reinterpret_cast<TO*>(buf + slot((e + i) / kVec)), part);
    }
  }

  // out[0 .. elems) = the buffer's first elems values; out is 16-byte aligned when vec_ok.
  __device__ static void copy_out(const uint4* buf, TO* out, int elems, bool vec_ok, int lane) {
    if (vec_ok) {
#pragma unroll 4
      for (int q = lane; q < elems / kVec; q += 32) reinterpret_cast<uint4*>(out)[q] = buf[slot(q)];
    } else {  // element stores: slower, still contiguous across the warp
      const TO* s = reinterpret_cast<const TO*>(buf);
      for (int e = lane; e < elems; e += 32) out[e] = s[slot(e / kVec) * kVec + e % kVec];
    }
  }
};

// The tiles of warp w of CTA c: c + G·w, then every G·kDqWarps (G = gridDim.x), so
// that a grid smaller than tiles × warps still spreads its tiles over all CTAs.
__device__ __forceinline__ int64_t first_tile() {
  return blockIdx.x + static_cast<int64_t>(gridDim.x) * (threadIdx.x / 32);
}
__device__ __forceinline__ int64_t tile_stride() { return static_cast<int64_t>(gridDim.x) * kDqWarps; }

// The types with a dev::GemvUnit load their units straight from global memory
// with wide loads (weights kAlign-aligned). Unit i = lane + 32k of a tile is unit
// i / kT of block i % kT, so the 8 lanes of a shared-memory phase hold the same
// unit of 8 consecutive blocks (see Staging::slot), and a K-quant's branch on the
// sub-block (j < 4) is uniform across the warp; together the warp's loads still
// read all of the tile's bytes, each as wide as its layout allows.
template <class U, typename TO>
__global__ void __launch_bounds__(kDqThreads)
    dequant_unit_kernel(const uint8_t* __restrict__ src, TO* __restrict__ dst, int64_t blocks, bool vec_ok,
                        IqTables t) {
  dev::pdl_begin();
  using S = Staging<U::kBlockElems, TO>;
  constexpr int kT = kTileElems / U::kBlockElems;  // blocks per tile
  constexpr int kN = kT * U::kUnits / 32;           // units per lane
  static_assert(kT % 8 == 0 && kN * 32 == kT * U::kUnits);
  extern __shared__ uint4 smem[];
  uint4* buf = smem + threadIdx.x / 32 * S::kChunks;
  const int lane = threadIdx.x % 32;
  const typename U::Ctx ctx = U::context(t);
  const int64_t tiles = (blocks + kT - 1) / kT;

  // Blocks in tile `tile` (kT but in the last one).
  auto blocks_in = [&](int64_t tile) { return static_cast<int>(blocks - tile * kT < kT ? blocks - tile * kT : kT); };
  typename U::Raw raw[kN];
  auto load = [&](int64_t tile) {
    const int nb = blocks_in(tile);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const int i = lane + 32 * k;
      const int b = min(i % kT, nb - 1);  // past the last block: a harmless reload, not stored
      raw[k] = U::load(src + (tile * kT + b) * U::kBlockBytes, i / kT);
    }
  };
  int64_t tile = first_tile();
  if (tile < tiles) load(tile);
  for (; tile < tiles; tile += tile_stride()) {
    const int nb = blocks_in(tile);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const int i = lane + 32 * k, b = i % kT, j = i / kT;
      if (b >= nb) continue;
      float v[U::kRuns][U::kRunLen];
      U::values(raw[k], ctx, v);
#pragma unroll
      for (int r = 0; r < U::kRuns; ++r) S::put(buf, b * U::kBlockElems + U::run_start(j, r), v[r]);
    }
    if (tile + tile_stride() < tiles) load(tile + tile_stride());
    __syncwarp();
    S::copy_out(buf, dst + tile * kTileElems, nb * U::kBlockElems, vec_ok, lane);
    __syncwarp();
  }
}

// The table a decoder looks up at random, copied to shared memory once per CTA
// (at most a wave of CTAs, <= 16 KB each, from L2). From global memory a warp's
// 32 lookups into a lattice grid touch up to 32 L1 lines; from shared memory they
// cost a few bank conflicts, and the 16-entry value tables a 32-bit address and
// shared memory's shorter latency. ksigns_iq2xs (one line) stays in global memory.
template <class Q> struct SharedTable { static constexpr int kBytes = 0; };
template <auto kField, size_t kSize>
struct TableField {
  static constexpr int kBytes = static_cast<int>(kSize);
  static_assert(kSize % 16 == 0);
  __device__ static auto& ptr(IqTables& t) { return t.*kField; }
};
namespace gt = ggml_tables;
template <DType T> using QB = QuantBlock<T>;
template <> struct SharedTable<QB<DType::IQ2_XXS>> : TableField<&IqTables::iq2xxs_grid, sizeof gt::iq2xxs_grid> {};
template <> struct SharedTable<QB<DType::IQ2_XS>> : TableField<&IqTables::iq2xs_grid, sizeof gt::iq2xs_grid> {};
template <> struct SharedTable<QB<DType::IQ2_S>> : TableField<&IqTables::iq2s_grid, sizeof gt::iq2s_grid> {};
template <> struct SharedTable<QB<DType::IQ3_XXS>> : TableField<&IqTables::iq3xxs_grid, sizeof gt::iq3xxs_grid> {};
template <> struct SharedTable<QB<DType::IQ3_S>> : TableField<&IqTables::iq3s_grid, sizeof gt::iq3s_grid> {};
template <> struct SharedTable<QB<DType::IQ1_S>> : TableField<&IqTables::iq1s_grid, sizeof gt::iq1s_grid> {};
template <> struct SharedTable<QB<DType::IQ1_M>> : TableField<&IqTables::iq1s_grid, sizeof gt::iq1s_grid> {};
template <> struct SharedTable<QB<DType::IQ4_NL>> : TableField<&IqTables::kvalues_iq4nl, sizeof gt::kvalues_iq4nl> {};
template <> struct SharedTable<QB<DType::IQ4_XS>> : TableField<&IqTables::kvalues_iq4nl, sizeof gt::kvalues_iq4nl> {};
template <> struct SharedTable<QB<DType::MXFP4>> : TableField<&IqTables::kvalues_mxfp4, sizeof gt::kvalues_mxfp4> {};
template <> struct SharedTable<QB<DType::NVFP4>> : TableField<&IqTables::kvalues_mxfp4, sizeof gt::kvalues_mxfp4> {};

// 16-byte words holding a tile of Q blocks at any offset within the first.
template <class Q> constexpr int kInWords = (kTileElems / Q::kBlockElems * Q::kBlockBytes + 30) / 16;

// Every other block type (and the unit types at a lower alignment). The warp
// copies its tile's bytes to shared memory with 16-byte loads of the aligned
// words that hold them (any weight alignment; the words keep their offset, so
// the decoders' alignment assumptions still hold), and QuantBlock::decode reads
// them there: scattered 2- and 4-byte loads are cheap in shared memory, not in L1.
// Chunk i = lane + 32k of a tile is chunk i / kT of block i % kT (see Staging::slot).
template <class Q, typename TO>
__global__ void __launch_bounds__(kDqThreads)
    dequant_block_kernel(const uint8_t* __restrict__ src, TO* __restrict__ dst, int64_t blocks, bool vec_ok,
                         IqTables t) {
  dev::pdl_begin();
  using S = Staging<Q::kBlockElems, TO>;
  using G = SharedTable<Q>;
  constexpr int kT = kTileElems / Q::kBlockElems;       // blocks per tile
  constexpr int kN = kT * (Q::kBlockElems / 32) / 32;   // chunks per lane
  constexpr int kWords = kInWords<Q>;
  constexpr int kLoads = (kWords + 31) / 32;              // words per lane
  static_assert(Q::kChunk == 32 && kT % 8 == 0 && kN * 32 == kT * (Q::kBlockElems / 32));
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint4* buf = smem + G::kBytes / 16 + warp * S::kChunks;
  uint4* in = smem + G::kBytes / 16 + kDqWarps * S::kChunks + warp * kWords;
  const int64_t tiles = (blocks + kT - 1) / kT;

  // A tile's nb blocks, the offset of its first byte in its aligned word and the words covering it.
  struct Span {
    int nb, off, words;
    const uint4* w;
  };
  auto span = [&](int64_t tile) {
    const int nb = static_cast<int>(blocks - tile * kT < kT ? blocks - tile * kT : kT);
    const auto first = reinterpret_cast<uintptr_t>(src + tile * kT * Q::kBlockBytes);
    const int off = static_cast<int>(first % 16);
    return Span{nb, off, (off + nb * Q::kBlockBytes + 15) / 16, reinterpret_cast<const uint4*>(first - off)};
  };
  uint4 raw[kLoads] = {};
  auto load = [&](int64_t tile) {
    const Span s = span(tile);
#pragma unroll
    for (int k = 0; k < kLoads; ++k)
      if (lane + 32 * k < s.words) raw[k] = __ldg(s.w + lane + 32 * k);
  };
  int64_t tile = first_tile();
  if (tile < tiles) load(tile);  // in flight while the CTA stages its table

  if constexpr (G::kBytes > 0) {
    constexpr int kTab = G::kBytes / 16, kTabLoads = (kTab + kDqThreads - 1) / kDqThreads;
    const auto* grid = reinterpret_cast<const uint4*>(G::ptr(t));
    uint4 v[kTabLoads];
#pragma unroll
    for (int k = 0; k < kTabLoads; ++k)
      if (threadIdx.x + k * kDqThreads < kTab) v[k] = __ldg(grid + threadIdx.x + k * kDqThreads);
#pragma unroll
    for (int k = 0; k < kTabLoads; ++k)
      if (threadIdx.x + k * kDqThreads < kTab) smem[threadIdx.x + k * kDqThreads] = v[k];
    G::ptr(t) = reinterpret_cast<std::remove_reference_t<decltype(G::ptr(t))>>(smem);
    __syncthreads();
  }

  for (; tile < tiles; tile += tile_stride()) {
    const Span s = span(tile);
#pragma unroll
    for (int k = 0; k < kLoads; ++k)
      if (lane + 32 * k < s.words) in[lane + 32 * k] = raw[k];
    __syncwarp();
    if (tile + tile_stride() < tiles) load(tile + tile_stride());
    const uint8_t* blk = reinterpret_cast<const uint8_t*>(in) + s.off;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const int i = lane + 32 * k, b = i % kT, c = i / kT;
      if (b >= s.nb) continue;
      float v[32];
      Q::decode(blk + b * Q::kBlockBytes, c, t, v);
      S::put(buf, b * Q::kBlockElems + 32 * c, v);
    }
    __syncwarp();
    S::copy_out(buf, dst + tile * kTileElems, s.nb * Q::kBlockElems, vec_ok, lane);
    __syncwarp();
  }
}

// f32 / f16 / bf16 storage: a plain conversion, one element per thread.
template <class Q, typename TO>
__global__ void __launch_bounds__(256)
    convert_kernel(const uint8_t* __restrict__ src, TO* __restrict__ dst, int64_t n, IqTables t) {
  dev::pdl_begin();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v[1];
    Q::decode(src + i * Q::kBlockBytes, 0, t, v);
    dst[i] = dev::from_f32<TO>(v[0]);
  }
}

// ---- gather ------------------------------------------------------------------------

// TO = f32: y = v (· s); TO 16-bit: y = round(v) (then round(round(v) · s)),
// the arithmetic of the Cast and Mul kernels the lowering folds in here.
template <typename TO>
__device__ __forceinline__ TO gathered(float v, bool scaled, float s) {
  if constexpr (std::is_same_v<TO, float>) {
    return scaled ? v * s : v;
  } else {
    const TO r = dev::from_f32<TO>(v);
    return scaled ? dev::from_f32<TO>(dev::to_f32(r) * s) : r;
  }
}

template <class Q, typename TO>
__global__ void __launch_bounds__(128)
    quant_gather_kernel(const uint8_t* __restrict__ table, int64_t rows, int64_t row_bytes, int64_t row_elems,
                        const void* __restrict__ idx, bool idx64, TO* __restrict__ y, const TO* __restrict__ scale,
                        int32_t* error_flag, IqTables t) {
  // The scale is a constant or parameter (no kernel writes it): read before the wait.
  const float s = scale ? dev::to_f32(*scale) : 1.0f;
  dev::pdl_begin();
  constexpr int kPer = Q::kBlockElems / Q::kChunk;
  const int64_t j = blockIdx.x;
  const int64_t id = idx64 ? static_cast<const int64_t*>(idx)[j] : static_cast<const int32_t*>(idx)[j];
  TO* out = y + j * row_elems;
  const int64_t units = row_elems / Q::kChunk;
  if (id < 0 || id >= rows) {
    for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) out[i] = dev::from_f32<TO>(0.0f);
    if (threadIdx.x == 0 && error_flag) atomicOr(error_flag, kErrIndexOutOfRange);
    return;
  }
  const uint8_t* src = table + id * row_bytes;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float v[Q::kChunk];
    Q::decode(src + (u / kPer) * Q::kBlockBytes, static_cast<int>(u % kPer), t, v);
#pragma unroll
    for (int i = 0; i < Q::kChunk; ++i) out[u * Q::kChunk + i] = gathered<TO>(v[i], scale != nullptr, s);
  }
}

}  // namespace

bool has_cuda_dequant_kernel(DType type) {
  return dev::visit_quant_block(type, [](auto) {});
}

void stage_quant_tables() { (void)tables_for_current_device(); }

// CTAs of `kernel` (with `smem` bytes) for `tiles` warp tiles: at most one wave.
// Q and TO key the cached occupancy (it is per kernel instantiation).
template <class Q, typename TO, typename Kernel>
int dequant_grid(Kernel kernel, size_t smem, int64_t tiles) {
  if (smem > 48 * 1024)
    RLX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  static const int per_sm = [&] {
    int ctas = 0;
    RLX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kDqThreads, smem));
    return std::max(ctas, 1);
  }();
  return static_cast<int>(std::clamp<int64_t>(tiles, 1, int64_t{sm_count()} * per_sm));
}

void launch_dequantize(DType type, const void* src, DType out_dtype, void* out, int64_t n, cudaStream_t stream) {
  const int64_t block = dtype_info(type).block_elems;
  RLX_CHECK(n >= 0 && n % block == 0, "dequantize (cuda): ", n, " elements of ", dtype_name(type),
            " is not a multiple of its block of ", block);
  if (n == 0) return;
  const IqTables t = tables_for_current_device();
  const auto* s = static_cast<const uint8_t*>(src);
  const bool vec_ok = reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t tiles = (n + kTileElems - 1) / kTileElems;
  bool done = false;
  dev::visit_gemv_unit(type, [&](auto u) {
    using U = decltype(u);
    if (reinterpret_cast<uintptr_t>(src) % U::kAlign != 0 || !dev::units_stay_inside(src, dtype_bytes(type, n))) return;
    dispatch_float(out_dtype, "dequantize (cuda)", [&](auto o) {
      using TO = decltype(o);
      const auto kernel = dequant_unit_kernel<U, TO>;
      const size_t smem = size_t{kDqWarps} * Staging<U::kBlockElems, TO>::kChunks * 16;
      kernel<<<dequant_grid<U, TO>(kernel, smem, tiles), kDqThreads, smem, stream>>>(
          s, static_cast<TO*>(out), n / U::kBlockElems, vec_ok, t);
    });
    done = true;
  });
  if (!done) visit_or_throw(type, "dequantize (cuda)", [&](auto q) {
    using Q = decltype(q);
    dispatch_float(out_dtype, "dequantize (cuda)", [&](auto o) {
      using TO = decltype(o);
      if constexpr (Q::kChunk == 1) {
        convert_kernel<Q, TO><<<grid_for(n, 256), 256, 0, stream>>>(s, static_cast<TO*>(out), n, t);
      } else {
        const auto kernel = dequant_block_kernel<Q, TO>;
        const size_t smem =
            SharedTable<Q>::kBytes + size_t{kDqWarps} * (Staging<Q::kBlockElems, TO>::kChunks + kInWords<Q>) * 16;
        kernel<<<dequant_grid<Q, TO>(kernel, smem, tiles), kDqThreads, smem, stream>>>(
            s, static_cast<TO*>(out), n / Q::kBlockElems, vec_ok, t);
      }
    });
  });
  RLX_CUDA_CHECK_LAUNCH("dequantize");
}

void launch_quant_gather(DType type, const void* table, int64_t rows, int64_t row_elems, DType index_dtype,
                         const void* idx, int64_t n_idx, DType y_dtype, void* y, const void* scale,
                         int32_t* error_flag, cudaStream_t stream) {
  const int64_t block = dtype_info(type).block_elems;
  RLX_CHECK(row_elems > 0 && row_elems % block == 0, "gather (cuda): rows of ", row_elems, " elements are not whole ",
            dtype_name(type), " blocks of ", block);
  RLX_CHECK(index_dtype == DType::I32 || index_dtype == DType::I64, "gather (cuda): indices must be i32 or i64, got ",
            dtype_name(index_dtype));
  RLX_CHECK(n_idx < (int64_t{1} << 31), "gather (cuda): ", n_idx, " indices is too many for one launch");
  if (n_idx == 0) return;
  const IqTables t = tables_for_current_device();
  const int64_t row_bytes = dtype_bytes(type, row_elems);
  visit_or_throw(type, "gather (cuda)", [&](auto q) {
    using Q = decltype(q);
    dispatch_float(y_dtype, "gather (cuda)", [&](auto o) {
      using TO = decltype(o);
      quant_gather_kernel<Q, TO><<<static_cast<unsigned>(n_idx), 128, 0, stream>>>(
          static_cast<const uint8_t*>(table), rows, row_bytes, row_elems, idx, index_dtype == DType::I64,
          static_cast<TO*>(y), static_cast<const TO*>(scale), error_flag, t);
    });
  });
  RLX_CUDA_CHECK_LAUNCH("Gather (quantized table)");
}

}  // namespace rlx::cuda
