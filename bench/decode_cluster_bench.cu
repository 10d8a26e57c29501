// A Gemma 3 270M decode step's 18 layers as ONE kernel launch, in two forms:
// on one 16-CTA thread-block cluster (cluster barriers, vectors through
// distributed shared memory) and on every SM (grid-wide barriers, vectors
// through L2). The prototype that decides whether a fused decode kernel is
// worth building (docs/performance.md, session 41: it is not, as it stands).
//
//   rlx_decode_cluster_bench [--steps N] [--keys T]
//
// Why: the decode step is a chain of ~150 dependent launches whose cost is
// latency, not bytes (layers ~23 µs each for 3.7 MB of weights). One launch
// can walk the layers with barriers instead of launch boundaries, keep the
// activations in shared memory (every CTA holds the whole 640-2048-wide
// vector, so norms, rope and GeGLU need no phase of their own) and stream the
// weights through a shared-memory ring by bulk copies requested phases ahead
// (weights depend on no data; so do the norm weights, a layer ahead).
//
// What runs: per layer, with the file's types and shapes (Q5_0 q/k/gate/up,
// Q8_0 or Q5_0 v, Q4_K o, Q6_K or Q4_K down; random bytes with sane scales):
// RMS norm; q|k|v GEMV; q/k head norms and rope; attention over T cached
// keys split over 16 CTAs, their rows through the ring too (partials to the
// CTA owning each 64 output dims, a barrier, the merge, a barrier); o GEMV;
// post-norm + residual + pre-norm; gate|up GEMV with GeGLU; down GEMV;
// post-norm + residual: six barriers a layer. The GEMVs run on activations
// quantized to two int8 levels, as main's decode GEMVs do: on the cluster by
// the streaming GEMV's 128-256-element chunk decoders
// (device/stream_chunk.cuh), on every SM (few rows a CTA) by GemvUnit's
// 16-32-weight units read from shared memory (device/unit_smem.cuh), so no
// thread runs a long dependent chain. Between timed steps a kernel reads 178 MB (the
// output head's bytes), so every step starts with the layers' weights out of
// L2, as in decode. Printed per form: the step's median time, the same with
// the GEMVs' or the attention's arithmetic left out, and CTA 0's clock at
// each phase boundary averaged over the layers. Checked: layer 0's four GEMV
// phases against a float64 host reference from the same inputs, and the two
// forms' outputs after 18 layers against each other (the attention and rope
// arithmetic is timed, not checked against a reference: a prototype).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/stream_chunk.cuh"
#include "rlx/backends/cuda/device/unit_smem.cuh"
#include "rlx/backends/cuda/device/wgmma.cuh"
#include "rlx/core/dtype.h"
#include "rlx/formats/quant.h"

namespace {

using rlx::DType;
using namespace rlx::cuda::dev::stream;
using rlx::cuda::dev::cluster_map;
using rlx::cuda::dev::cluster_rank;
using rlx::cuda::dev::cluster_sync;

constexpr int kCtas = 16, kThreads = 512, kWarps = kThreads / 32;
constexpr int kLayers = 18, kHidden = 640, kFfn = 2048, kHeads = 4, kHeadDim = 256, kQkv = 1536, kAtt = 1024;
constexpr int kStages = 9, kStageBytes = 16 * 1024;
constexpr int kMaxPhaseTiles = 9, kMaxItems = 1280, kMaxKeys = 1024;
constexpr int kNormFloats = 4 * 640, kHeadNormFloats = 2 * 256;  // a layer's norm weights
constexpr int kMaxCachedTiles = 168;  // a CTA's tiles held in shared memory when they fit
constexpr int kDimsPerOwner = kAtt / kCtas;  // 64: one head's slice
enum Route : int { kQ, kK, kV, kO, kGate, kUp, kDown, kKeys, kValues };
// A layer's phases in the tile stream: the attention's are its cached keys and values (the first 16 CTAs).
enum Phase : int { kPhaseQkv, kPhaseAttn, kPhaseO, kPhaseGateUp, kPhaseDown, kPhases };

// One bulk copy of whole rows of one tensor into one ring stage.
struct Tile {
  const uint8_t* src;
  int bytes, rows, row0;  // row0: the tensor row of the tile's first row
  int row_bytes, type, route;
};
struct Plan {
  const Tile* tiles;        // every CTA's tiles, in consumption order
  const int* tile_begin;    // [ctas + 1]: CTA c's tiles are [tile_begin[c], tile_begin[c + 1])
  const int* phase_first;   // [ctas][kLayers · kPhases + 1]: each phase's first tile (CTA-relative)
};
// CTA c of `ctas` owns rows [split(n, c), split(n, c + 1)) of an n-row tensor, in
// pairs (two Q5_0 or Q8_0 rows are a whole number of 16-byte granules).
__host__ __device__ inline int split(int n, int c, int ctas) { return 2 * (n / 2 * c / ctas); }
struct Weights {
  const float* norms;       // [kLayers][4][kHidden]: attn, post-attn, ffn, post-ffw
  const float* head_norms;  // [kLayers][2][kHeadDim]: q, k
  const __nv_bfloat16* kv;  // [kLayers][2][kMaxKeys][kHeadDim]
};
struct Dump {  // layer 0's GEMV inputs and outputs (CTA 0), for the host check
  float *xin, *qkv, *att, *o, *xin2, *act, *down;
};

struct Smem {
  uint64_t bars[kStages];
  alignas(128) uint8_t ring[kStages][kStageBytes];
  alignas(16) float h[kHidden], xin[kFfn], qkv[kQkv], q[kAtt], att[kAtt], o[kHidden], act[kFfn], down[kHidden];
  alignas(16) float gate[kFfn / kCtas], up[kFfn / kCtas];
  alignas(16) int8_t xa[kFfn], xb[kFfn];
  float dx[kFfn / 32], xs[kFfn / 32];
  float red[kMaxItems];
  float part[kCtas][kDimsPerOwner], part_m[kCtas], part_l[kCtas];
  float scores[kHeads][kStageBytes / (kHeadDim * 2)];  // a CTA's keys: one ring stage of rows
  float sum[kWarps];
  Tile tiles[kMaxPhaseTiles];
  // Two layers' norm weights (attn, post-attn, ffn, post-ffw, then q and k head norms), by bulk copy a layer ahead.
  uint64_t meta_bars[2];
  alignas(16) float meta[2][kNormFloats + kHeadNormFloats];
  Tile cached[kMaxCachedTiles];
  int cached_pf[kLayers * kPhases + 1];
  int tile_row[kMaxPhaseTiles + 1];
};

// Phase timestamps of CTA 0 (thread 0): where a layer's time goes.
constexpr int kSlots = 18;
struct Stamps {
  unsigned long long* at;  // [kLayers][kSlots], or null
  int layer;
  __device__ void operator()(int slot) const {
    if (at != nullptr && threadIdx.x == 0 && blockIdx.x == 0) {
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      at[layer * kSlots + slot] = t;
    }
  }
};

__device__ __forceinline__ void remote_store(float* local, uint32_t rank, float v) {
#ifdef RLX_SM90A_DEVICE
  const uint32_t a = cluster_map(static_cast<uint32_t>(__cvta_generic_to_shared(local)), rank);
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory");
#endif
}
__device__ __forceinline__ void broadcast(float* local, float v) {
  for (uint32_t r = 0; r < kCtas; ++r) remote_store(local, r, v);
}

__device__ float block_sum(float v, float* sum) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // sum is free
  if ((threadIdx.x & 31) == 0) sum[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < kWarps; ++w) t += sum[w];
  return t;
}

// out = x / rms(x) · w over n elements (every CTA, redundantly).
__device__ void rms_norm(const float* x, const float* w, float* out, int n, float* sum) {
  float s = 0.0f;
  for (int i = threadIdx.x; i < n; i += kThreads) s += x[i] * x[i];
  const float inv = rsqrtf(block_sum(s, sum) / n + 1e-6f);
  for (int i = threadIdx.x; i < n; i += kThreads) out[i] = x[i] * inv * w[i];
  __syncthreads();
}

// x (k floats in shared memory) into two int8 levels per 32 elements, as
// gemv_common.cuh's quantize_x (which reads global memory) does.
__device__ void quantize(const float* x, int k, Smem& s) {
  constexpr float kMagic = 12582912.0f;
  constexpr int kMagicBits = 0x4B400000;
  const int tasks = k / 8;
  for (int t = threadIdx.x; t < (tasks + 31) / 32 * 32; t += kThreads) {
    const bool on = t < tasks;
    float v[8];
    for (int i = 0; i < 8; ++i) v[i] = on ? x[8 * t + i] : 0.0f;
    float amax = 0.0f;
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float d = amax / (127.0f * rlx::cuda::dev::kQ8Ratio);
    const float inv_a = amax >= 1e-30f ? 127.0f / amax : 0.0f;
    const float da = d * rlx::cuda::dev::kQ8Ratio, inv_b = inv_a * rlx::cuda::dev::kQ8Ratio;
    int level_sum = 0;
    for (int i = 0; i < 8; ++i) {
      const float ra = fmaf(v[i], inv_a, kMagic);
      const float rem = fmaf(-(ra - kMagic), da, v[i]);
      const int a = static_cast<int>(__float_as_uint(ra)) - kMagicBits;
      const int b = static_cast<int>(__float_as_uint(fmaf(rem, inv_b, kMagic))) - kMagicBits;
      level_sum += rlx::cuda::dev::kQ8Ratio * a + b;
      if (on) s.xa[8 * t + i] = static_cast<int8_t>(a), s.xb[8 * t + i] = static_cast<int8_t>(b);
    }
    level_sum += __shfl_xor_sync(0xffffffffu, level_sum, 1);
    level_sum += __shfl_xor_sync(0xffffffffu, level_sum, 2);
    if (on && (t & 3) == 0) s.dx[t / 4] = d, s.xs[t / 4] = static_cast<float>(level_sum);
  }
  __syncthreads();
}

// Σ w·x̃ over chunk c of a row (elements from e): 4-block chunks (128
// elements, 8-byte loads: rows of 440 and 680 bytes) for the 32-element-block
// types, whole 256-element blocks for the K-quants.
__device__ float chunk_dot(int type, const uint8_t* row, int c, const Smem& s) {
  const auto x_at = [&](int e) { return XChunk{s.xa + e, s.xb + e, s.dx + e / 32, s.xs + e / 32}; };
  switch (static_cast<DType>(type)) {
    case DType::Q5_0: return StreamChunk<DType::Q5_0>::dot<4, 8>(row + 88 * c, x_at(128 * c), {});
    case DType::Q8_0: return StreamChunk<DType::Q8_0>::dot<4, 8>(row + 136 * c, x_at(128 * c), {});
    case DType::Q4_K: return StreamChunk<DType::Q4_K>::dot(row + 144 * c, x_at(256 * c), {});
    case DType::Q6_K: return StreamChunk<DType::Q6_K>::dot(row + 210 * c, x_at(256 * c), {});
    default: return 0.0f;
  }
}

// Σ w·x̃ over unit u of a row (16-32 weights: GemvUnit, as gemv_q8.cu): many
// short items, for CTAs with few rows (the whole-GPU form).
template <DType T>
__device__ float unit_dot(const uint8_t* row, int u, const Smem& s) {
  using U = rlx::cuda::dev::GemvUnit<T>;
  constexpr int kRuns = U::kRuns, kWords = U::kRunLen / 4;
  const int b = u / U::kUnits, j = u % U::kUnits;
  const typename U::Raw raw = rlx::cuda::dev::lds_raw(U{}, row + b * U::kBlockBytes, j);
  int wa[kRuns][kWords], wb[kRuns][kWords], sa[kRuns], sb[kRuns];
  float xd[kRuns];
#pragma unroll
  for (int q = 0; q < kRuns; ++q) {
    const int at = b * U::kBlockElems + U::run_start(j, q);
#pragma unroll
    for (int e = 0; e < kWords; ++e)
      wa[q][e] = reinterpret_cast<const int*>(s.xa + at)[e], wb[q][e] = reinterpret_cast<const int*>(s.xb + at)[e];
    xd[q] = s.dx[at / 32];
    sa[q] = sb[q] = 0;
    if constexpr (U::kQ8Sums) {
#pragma unroll
      for (int e = 0; e < kWords; ++e)
        sa[q] = rlx::cuda::dev::dp4a(0x01010101u, wa[q][e], sa[q]),
        sb[q] = rlx::cuda::dev::dp4a(0x01010101u, wb[q][e], sb[q]);
    }
  }
  return U::dot_q8(raw, U::context(rlx::cuda::dev::IqTables{}), wa, wb, xd, sa, sb);
}
__device__ int units_per_row(int type, int k) {
  switch (static_cast<DType>(type)) {
    case DType::Q5_0: case DType::Q8_0: return k / 32 * 2;
    default: return k / 256 * 8;  // Q4_K, Q6_K
  }
}
__device__ float unit_dot_any(int type, const uint8_t* row, int u, const Smem& s) {
  switch (static_cast<DType>(type)) {
    case DType::Q5_0: return unit_dot<DType::Q5_0>(row, u, s);
    case DType::Q8_0: return unit_dot<DType::Q8_0>(row, u, s);
    case DType::Q4_K: return unit_dot<DType::Q4_K>(row, u, s);
    case DType::Q6_K: return unit_dot<DType::Q6_K>(row, u, s);
    default: return 0.0f;
  }
}

__device__ float* route_out(Smem& s, int route, int row, int row_begin) {
  switch (route) {
    case kQ: return s.qkv + row;
    case kK: return s.qkv + kAtt + row;
    case kV: return s.qkv + kAtt + kHeadDim + row;
    case kO: return s.o + row;
    case kGate: return s.gate + (row - row_begin);
    case kUp: return s.up + (row - row_begin);
    default: return s.down + row;
  }
}

// The producer (thread 0): tiles up to `limit` requested, each into stage i mod kStages.
__device__ void issue_tiles(Smem& s, const Tile* my, int& issued, int limit) {
  for (; issued < limit; ++issued) {
    const Tile& t = my[issued];
    uint64_t* bar = &s.bars[issued % kStages];
    rlx::cuda::dev::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(t.bytes));
    rlx::cuda::dev::bulk_copy_g2s(s.ring[issued % kStages], t.src, static_cast<uint32_t>(t.bytes), bar);
  }
}

// Layer `layer`'s norm weights into meta[layer % 2] (thread 0; the buffer's previous layer is done).
__device__ void issue_meta(Smem& s, const Weights& wt, int layer) {
  if (layer >= kLayers) return;
  uint64_t* bar = &s.meta_bars[layer % 2];
  rlx::cuda::dev::mbar_arrive_expect_tx(bar, (kNormFloats + kHeadNormFloats) * 4);
  rlx::cuda::dev::bulk_copy_g2s(s.meta[layer % 2], wt.norms + layer * kNormFloats, kNormFloats * 4, bar);
  rlx::cuda::dev::bulk_copy_g2s(s.meta[layer % 2] + kNormFloats, wt.head_norms + layer * kHeadNormFloats,
                                kHeadNormFloats * 4, bar);
}

// The CTA's tiles and phase table: into shared memory when they fit (one load each, not one per phase).
__device__ void cache_plan(Smem& s, const Plan& plan, int rank, const Tile*& my, int& my_tiles, const int*& pf) {
  my = plan.tiles + plan.tile_begin[rank];
  my_tiles = plan.tile_begin[rank + 1] - plan.tile_begin[rank];
  pf = plan.phase_first + rank * (kLayers * kPhases + 1);
  if (my_tiles <= kMaxCachedTiles) {
    for (int i = threadIdx.x; i < my_tiles; i += blockDim.x) s.cached[i] = my[i];
    for (int i = threadIdx.x; i < kLayers * kPhases + 1; i += blockDim.x) s.cached_pf[i] = pf[i];
    my = s.cached;
    pf = s.cached_pf;
  }
}

// One GEMV phase: every tile of it landed, one pass over (row, chunk) items,
// the rows' sums routed (broadcast to every CTA, or kept for the GeGLU).
template <class Publish>
__device__ void gemv_phase(Smem& s, const Tile* my, int my_tiles, int first, int last, int k, int& issued,
                           const Stamps& stamp, int slot, bool compute, bool units, Publish publish) {
  const int n = last - first;
  if (threadIdx.x < n) s.tiles[threadIdx.x] = my[first + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    int r = 0;
    for (int i = 0; i < n; ++i) s.tile_row[i] = r, r += s.tiles[i].rows;
    s.tile_row[n] = r;
  }
  __syncthreads();
  for (int i = 0; i < n; ++i)
    rlx::cuda::dev::mbar_wait(&s.bars[(first + i) % kStages], static_cast<uint32_t>(((first + i) / kStages) & 1));
  stamp(slot);
  const int rows = s.tile_row[n];
  // Items: (row, chunk of 128-256 elements), or with `units` and room in red, (row, GemvUnit unit).
  const bool kquant =
      s.tiles[0].type == static_cast<int>(DType::Q4_K) || s.tiles[0].type == static_cast<int>(DType::Q6_K);
  const bool by_unit = units && n > 0 && rows * units_per_row(s.tiles[0].type, k) <= kMaxItems;
  const int cpr = by_unit ? units_per_row(s.tiles[0].type, k) : kquant ? k / 256 : k / 128;
  for (int item = threadIdx.x; item < (compute ? rows * cpr : 0); item += kThreads) {
    const int r = item / cpr, c = item % cpr;
    int t = 0;
    while (r >= s.tile_row[t + 1]) ++t;
    const Tile& tl = s.tiles[t];
    const uint8_t* row = s.ring[(first + t) % kStages] + (r - s.tile_row[t]) * tl.row_bytes;
    s.red[item] = by_unit ? unit_dot_any(tl.type, row, c, s) : chunk_dot(tl.type, row, c, s);
  }
  __syncthreads();  // every stage of the phase read; red complete
  stamp(slot + 1);
  if (threadIdx.x == 0) issue_tiles(s, my, issued, min(last + kStages, my_tiles));
  // The tile loop's rows: the first row of each tensor slice is row0 of its first tile.
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    int t = 0;
    while (r >= s.tile_row[t + 1]) ++t;
    const Tile& tl = s.tiles[t];
    float sum = 0.0f;
    for (int c = 0; c < cpr; ++c) sum += s.red[r * cpr + c];
    const int row = tl.row0 + (r - s.tile_row[t]);
    if (tl.route == kGate || tl.route == kUp) {
      int begin = tl.row0;  // the CTA's first row of this tensor: the first tile of the same route
      for (int u = 0; u < t; ++u)
        if (s.tiles[u].route == tl.route) {
          begin = s.tiles[u].row0;
          break;
        }
      *route_out(s, tl.route, row, begin) = sum;
    } else {
      publish(tl.route, row, sum);
    }
  }
  __syncthreads();
}

// After o: h += post_norm(o), then the FFN's input xin = pre_norm(h) (every CTA).
__device__ void attention_residual(Smem& s, const float* norms) {
  rms_norm(s.o, norms + kHidden, s.o, kHidden, s.sum);
  for (int i = threadIdx.x; i < kHidden; i += kThreads) s.h[i] += s.o[i];
  __syncthreads();
  rms_norm(s.h, norms + 2 * kHidden, s.xin, kHidden, s.sum);
}
// After down: h += post_norm(down).
__device__ void ffn_residual(Smem& s, const float* norms) {
  rms_norm(s.down, norms + 3 * kHidden, s.down, kHidden, s.sum);
  for (int i = threadIdx.x; i < kHidden; i += kThreads) s.h[i] += s.down[i];
  __syncthreads();
}

__device__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

// q's and k's head norms and rope (NeoX halves): q into s.q, k in place (warps 0-3: q heads, warp 4: k).
__device__ void head_norm_rope(Smem& s, const float* head_norms, int layer, int pos) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp <= kHeads) {
    float* v = warp < kHeads ? s.qkv + warp * kHeadDim : s.qkv + kAtt;
    const float* hw = head_norms + (warp < kHeads ? 0 : kHeadDim);
    float e[8], ss = 0.0f;
    for (int i = 0; i < 8; ++i) e[i] = v[lane + 32 * i], ss += e[i] * e[i];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / kHeadDim + 1e-6f);
    for (int i = 0; i < 8; ++i) e[i] *= inv * hw[lane + 32 * i];
    const float base = (layer % 6 == 5) ? 1e6f : 1e4f;
    float* outv = warp < kHeads ? s.q + warp * kHeadDim : s.qkv + kAtt;
    for (int i = 0; i < 4; ++i) {  // pairs (j, j + 128), j = lane + 32 i
      const int j = lane + 32 * i;
      float sn, cs;
      sincosf(pos * powf(base, -2.0f * j / kHeadDim), &sn, &cs);
      const float a = e[i], b = e[i + 4];
      outv[j] = a * cs - b * sn, outv[j + 128] = b * cs + a * sn;
    }
  }
  __syncthreads();
}

// Keys [k0, k1) of the layer's cache for every head: per output element c
// (head c / 256), store(c, Σ p·v, max score, Σ p) with p = exp(score − max).
// The keys' and values' rows came through the ring as the attention phase's
// two tiles (first, first + 1); released to the producer when done.
template <class Store>
__device__ void attention_partial(Smem& s, const Tile* my, int my_tiles, int first, int last, int& issued, bool attend,
                                  Store store) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = first; i < last; ++i)
    rlx::cuda::dev::mbar_wait(&s.bars[i % kStages], static_cast<uint32_t>((i / kStages) & 1));
  const auto* kc = reinterpret_cast<const __nv_bfloat16*>(s.ring[first % kStages]);
  const auto* vc = reinterpret_cast<const __nv_bfloat16*>(s.ring[(first + 1) % kStages]);
  const int nk = attend ? my[first].rows : 1, k0 = 0;
  for (int p = warp; p < kHeads * nk; p += kWarps) {
    const int hd = p / nk, j = k0 + p % nk;
    float acc = 0.0f;
    for (int i = 0; i < 8; ++i)
      acc += s.q[hd * kHeadDim + lane + 32 * i] * __bfloat162float(kc[j * kHeadDim + lane + 32 * i]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) s.scores[hd][p % nk] = acc * 0.0625f;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < kAtt; c += kThreads) {
    const int hd = c / kHeadDim, d = c % kHeadDim;
    float m = -INFINITY;
    for (int j = 0; j < nk; ++j) m = fmaxf(m, s.scores[hd][j]);
    float l = 0.0f, acc = 0.0f;
    for (int j = 0; j < nk; ++j) {
      const float p = __expf(s.scores[hd][j] - m);
      l += p, acc += p * __bfloat162float(vc[(k0 + j) * kHeadDim + d]);
    }
    store(c, acc, m, l);
  }
  __syncthreads();  // both tiles read
  if (threadIdx.x == 0) issue_tiles(s, my, issued, min(last + kStages, my_tiles));
}

__global__ void __launch_bounds__(kThreads, 1)
    decode_cluster_kernel(Plan plan, Weights wt, const float* h_in, float* h_out, int pos, Dump dump,
                          unsigned long long* stamps, int skip) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int rank = static_cast<int>(cluster_rank());
  const Tile* my;
  int my_tiles;
  const int* pf;
  cache_plan(s, plan, rank, my, my_tiles, pf);
  const auto publish = [&](int route, int row, float v) { broadcast(route_out(s, route, row, 0), v); };
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) rlx::cuda::dev::mbar_init(&s.bars[i], 1);
    for (int i = 0; i < 2; ++i) rlx::cuda::dev::mbar_init(&s.meta_bars[i], 1);
    rlx::cuda::dev::mbar_fence_init();
  }
  __syncthreads();
  int issued = 0;
  if (threadIdx.x == 0) {
    issue_meta(s, wt, 0), issue_meta(s, wt, 1);
    issue_tiles(s, my, issued, min(kStages, my_tiles));
  }
  for (int i = threadIdx.x; i < kHidden; i += kThreads) s.h[i] = h_in[i];
  cluster_sync();  // every CTA runs before any DSMEM store
  const bool dumping = dump.xin != nullptr && rank == 0;
  auto save = [&](float* dst, const float* src, int n) {
    if (dumping)
      for (int i = threadIdx.x; i < n; i += kThreads) dst[i] = src[i];
  };

  for (int layer = 0; layer < kLayers; ++layer) {
    rlx::cuda::dev::mbar_wait(&s.meta_bars[layer % 2], static_cast<uint32_t>((layer / 2) & 1));
    const float* norms = s.meta[layer % 2];
    const int* ph = pf + layer * kPhases;
    const bool d0 = dumping && layer == 0;
    const Stamps stamp{stamps, layer};
    const bool gemv = !(skip & 1), attend = !(skip & 2);
    stamp(0);
    // q|k|v
    rms_norm(s.h, norms, s.xin, kHidden, s.sum);
    if (d0) save(dump.xin, s.xin, kHidden);
    quantize(s.xin, kHidden, s);
    gemv_phase(s, my, my_tiles, ph[kPhaseQkv], ph[kPhaseQkv + 1], kHidden, issued, stamp, 1, gemv, false, publish);
    cluster_sync();
    stamp(3);
    if (d0) save(dump.qkv, s.qkv, kQkv);
    head_norm_rope(s, norms + kNormFloats, layer, pos);
    stamp(4);
    // Attention: this CTA's keys for every head; partials to the owners of the output dims.
    attention_partial(s, my, my_tiles, ph[kPhaseAttn], ph[kPhaseAttn + 1], issued, attend,
                      [&](int c, float acc, float m, float l) {
                        const int owner = c / kDimsPerOwner;
                        remote_store(&s.part[rank][c % kDimsPerOwner], owner, acc);
                        if (c % kDimsPerOwner == 0)
                          remote_store(&s.part_m[rank], owner, m), remote_store(&s.part_l[rank], owner, l);
                      });
    cluster_sync();
    stamp(5);
    if (threadIdx.x < kDimsPerOwner) {
      float mx = -INFINITY;
      for (int r = 0; r < kCtas; ++r) mx = fmaxf(mx, s.part_m[r]);
      float l = 0.0f, acc = 0.0f;
      for (int r = 0; r < kCtas; ++r) {
        const float w = s.part_l[r] > 0.0f ? __expf(s.part_m[r] - mx) : 0.0f;
        l += w * s.part_l[r], acc += w * s.part[r][threadIdx.x];
      }
      broadcast(&s.att[rank * kDimsPerOwner + threadIdx.x], acc / l);
    }
    cluster_sync();
    stamp(6);
    if (d0) save(dump.att, s.att, kAtt);
    // o, then post-norm + residual and the FFN's pre-norm
    quantize(s.att, kAtt, s);
    gemv_phase(s, my, my_tiles, ph[kPhaseO], ph[kPhaseO + 1], kAtt, issued, stamp, 7, gemv, false, publish);
    cluster_sync();
    stamp(9);
    if (d0) save(dump.o, s.o, kHidden);
    attention_residual(s, norms);
    if (d0) save(dump.xin2, s.xin, kHidden);
    stamp(10);
    // gate|up with GeGLU: this CTA's outputs broadcast
    quantize(s.xin, kHidden, s);
    gemv_phase(s, my, my_tiles, ph[kPhaseGateUp], ph[kPhaseGateUp + 1], kHidden, issued, stamp, 11, gemv, false,
               publish);
    for (int i = threadIdx.x; i < kFfn / kCtas; i += kThreads)
      broadcast(&s.act[rank * (kFfn / kCtas) + i], gelu_tanh(s.gate[i]) * s.up[i]);
    cluster_sync();
    stamp(13);
    if (d0) save(dump.act, s.act, kFfn);
    // down, post-norm + residual
    quantize(s.act, kFfn, s);
    gemv_phase(s, my, my_tiles, ph[kPhaseDown], ph[kPhaseDown + 1], kFfn, issued, stamp, 14, gemv, false, publish);
    cluster_sync();
    stamp(16);
    if (d0) save(dump.down, s.down, kHidden);
    ffn_residual(s, norms);
    if (threadIdx.x == 0) issue_meta(s, wt, layer + 2);  // every thread is done with this layer's norms
    stamp(17);
  }
  if (rank == 0)
    for (int i = threadIdx.x; i < kHidden; i += kThreads) h_out[i] = s.h[i];
}

// ---- the same layers on every SM, with grid-wide barriers ----
// Each CTA takes its share of every GEMV's rows (split), publishes its row
// sums to a global vector, meets the others at a barrier (a counter that only
// grows during the launch) and reads the whole vector back from L2. The first
// 16 CTAs run the attention (keys split over them) and then merge the
// partials (64 output dims each), so a layer has six barriers.
struct Exchange {
  float *qkv, *att, *o, *act, *down;
  float *part, *part_m, *part_l;  // [16][kAtt], [16][kHeads], [16][kHeads]
  unsigned* count;
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ void grid_barrier(unsigned* count, unsigned& epoch) {
  __syncthreads();
  epoch += gridDim.x;
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(count, 1u);
    while (ld_acquire(count) < epoch) {
    }
  }
  __syncthreads();
}
__device__ void load_vec(float* dst, const float* src, int n) {
  for (int i = 4 * threadIdx.x; i < n; i += 4 * kThreads)
    *reinterpret_cast<float4*>(dst + i) = __ldcg(reinterpret_cast<const float4*>(src + i));
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads, 1)
    decode_grid_kernel(Plan plan, Weights wt, Exchange ex, const float* h_in, float* h_out, int pos,
                       Dump dump, unsigned long long* stamps, int skip) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int rank = static_cast<int>(blockIdx.x), ctas = static_cast<int>(gridDim.x);
  const Tile* my;
  int my_tiles;
  const int* pf;
  cache_plan(s, plan, rank, my, my_tiles, pf);
  const auto publish = [&](int route, int row, float v) {
    float* g = route == kQ   ? ex.qkv + row
               : route == kK ? ex.qkv + kAtt + row
               : route == kV ? ex.qkv + kAtt + kHeadDim + row
               : route == kO ? ex.o + row
                             : ex.down + row;
    *g = v;
  };
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) rlx::cuda::dev::mbar_init(&s.bars[i], 1);
    for (int i = 0; i < 2; ++i) rlx::cuda::dev::mbar_init(&s.meta_bars[i], 1);
    rlx::cuda::dev::mbar_fence_init();
  }
  __syncthreads();
  int issued = 0;
  if (threadIdx.x == 0) {
    issue_meta(s, wt, 0), issue_meta(s, wt, 1);
    issue_tiles(s, my, issued, min(kStages, my_tiles));
  }
  for (int i = threadIdx.x; i < kHidden; i += kThreads) s.h[i] = h_in[i];
  __syncthreads();
  unsigned epoch = 0;
  const bool dumping = dump.xin != nullptr && rank == 0;
  auto save = [&](float* dst, const float* src, int n) {
    if (dumping)
      for (int i = threadIdx.x; i < n; i += kThreads) dst[i] = src[i];
  };
  const int g0 = split(kFfn, rank, ctas), g1 = split(kFfn, rank + 1, ctas);

  for (int layer = 0; layer < kLayers; ++layer) {
    rlx::cuda::dev::mbar_wait(&s.meta_bars[layer % 2], static_cast<uint32_t>((layer / 2) & 1));
    const float* norms = s.meta[layer % 2];
    const int* ph = pf + layer * kPhases;
    const bool d0 = dumping && layer == 0;
    const Stamps stamp{stamps, layer};
    const bool gemv = !(skip & 1), attend = !(skip & 2);
    stamp(0);
    rms_norm(s.h, norms, s.xin, kHidden, s.sum);
    if (d0) save(dump.xin, s.xin, kHidden);
    quantize(s.xin, kHidden, s);
    gemv_phase(s, my, my_tiles, ph[kPhaseQkv], ph[kPhaseQkv + 1], kHidden, issued, stamp, 1, gemv, true, publish);
    grid_barrier(ex.count, epoch);
    stamp(3);
    if (rank < kCtas) {
      load_vec(s.qkv, ex.qkv, kQkv);
      if (d0) save(dump.qkv, s.qkv, kQkv);
      head_norm_rope(s, norms + kNormFloats, layer, pos);
      stamp(4);
      attention_partial(s, my, my_tiles, ph[kPhaseAttn], ph[kPhaseAttn + 1], issued, attend,
                        [&](int c, float acc, float m, float l) {
                          ex.part[rank * kAtt + c] = acc;
                          if (c % kHeadDim == 0)
                            ex.part_m[rank * kHeads + c / kHeadDim] = m, ex.part_l[rank * kHeads + c / kHeadDim] = l;
                        });
    } else {
      stamp(4);
    }
    grid_barrier(ex.count, epoch);
    stamp(5);
    // The first 16 CTAs each merge 64 output dims (one head's quarter), publish them, and all meet again.
    if (rank < kCtas && threadIdx.x < kDimsPerOwner) {
      const int c = rank * kDimsPerOwner + threadIdx.x, hd = c / kHeadDim;
      float mr[kCtas], mx = -INFINITY;
      for (int r = 0; r < kCtas; ++r) mr[r] = __ldcg(ex.part_m + r * kHeads + hd), mx = fmaxf(mx, mr[r]);
      float l = 0.0f, acc = 0.0f;
      for (int r = 0; r < kCtas; ++r) {
        const float lr = __ldcg(ex.part_l + r * kHeads + hd);
        const float w = lr > 0.0f ? __expf(mr[r] - mx) : 0.0f;
        l += w * lr, acc += w * __ldcg(ex.part + r * kAtt + c);
      }
      ex.att[c] = acc / l;
    }
    grid_barrier(ex.count, epoch);
    load_vec(s.att, ex.att, kAtt);
    stamp(6);
    if (d0) save(dump.att, s.att, kAtt);
    quantize(s.att, kAtt, s);
    gemv_phase(s, my, my_tiles, ph[kPhaseO], ph[kPhaseO + 1], kAtt, issued, stamp, 7, gemv, true, publish);
    grid_barrier(ex.count, epoch);
    stamp(9);
    load_vec(s.o, ex.o, kHidden);
    if (d0) save(dump.o, s.o, kHidden);
    attention_residual(s, norms);
    if (d0) save(dump.xin2, s.xin, kHidden);
    stamp(10);
    quantize(s.xin, kHidden, s);
    gemv_phase(s, my, my_tiles, ph[kPhaseGateUp], ph[kPhaseGateUp + 1], kHidden, issued, stamp, 11, gemv, true,
               publish);
    for (int i = threadIdx.x; i < g1 - g0; i += kThreads) ex.act[g0 + i] = gelu_tanh(s.gate[i]) * s.up[i];
    grid_barrier(ex.count, epoch);
    stamp(13);
    load_vec(s.act, ex.act, kFfn);
    if (d0) save(dump.act, s.act, kFfn);
    quantize(s.act, kFfn, s);
    gemv_phase(s, my, my_tiles, ph[kPhaseDown], ph[kPhaseDown + 1], kFfn, issued, stamp, 14, gemv, true, publish);
    grid_barrier(ex.count, epoch);
    stamp(16);
    load_vec(s.down, ex.down, kHidden);
    if (d0) save(dump.down, s.down, kHidden);
    ffn_residual(s, norms);
    if (threadIdx.x == 0) issue_meta(s, wt, layer + 2);  // every thread is done with this layer's norms
    stamp(17);
  }
  if (rank == 0)
    for (int i = threadIdx.x; i < kHidden; i += kThreads) h_out[i] = s.h[i];
}

// Reads n4 float4s (the output head's bytes between steps: every step starts with cold L2).
__global__ void flush_kernel(const float4* __restrict__ src, int64_t n4, float* sink) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4; i += int64_t{gridDim.x} * blockDim.x) {
    const float4 v = src[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1234.5f) sink[0] = acc;
}

// ---- host ----

struct HostTensor {
  DType type;
  int rows, cols;
  size_t offset;  // into the weight buffer
  int row_bytes() const { return static_cast<int>(rlx::dtype_bytes(type, cols)); }
};

bool more_bits(int i) { return i < kLayers / 8 || i >= 7 * kLayers / 8 || (i - kLayers / 8) % 3 == 2; }

uint16_t f16_of(float f) {  // normal values only
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const int e = static_cast<int>((b >> 23) & 0xFF) - 127 + 15;
  return static_cast<uint16_t>(((b >> 16) & 0x8000) | (e << 10) | ((b >> 13) & 0x3FF));
}

// Random blocks with their f16 scale fields set to `d` (and Q4_K's dmin).
void fill_random(uint8_t* p, DType t, int rows, int cols, std::mt19937& rng, float d) {
  const int64_t bytes = rlx::dtype_bytes(t, cols) * rows;
  for (int64_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(rng());
  const int block_elems = (t == DType::Q4_K || t == DType::Q6_K) ? 256 : 32;
  const int64_t block_bytes = rlx::dtype_bytes(t, block_elems), blocks = bytes / block_bytes;
  const uint16_t dh = f16_of(d), mh = f16_of(d * 0.25f);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = p + b * block_bytes;
    const int at = t == DType::Q6_K ? 208 : 0;
    std::memcpy(blk + at, &dh, 2);
    if (t == DType::Q4_K) std::memcpy(blk + 2, &mh, 2);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  int steps = 100, keys = 96;
  for (int i = 1; i < argc; ++i) {
    const bool value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("usage: rlx_decode_cluster_bench [--steps N] [--keys T]\n"
                  "  --steps N  timed steps per form and variant (default 100)\n"
                  "  --keys T   cached keys each layer attends to, 16-512 (default 96)\n");
      return 0;
    } else if (value && !std::strcmp(argv[i], "--steps")) {
      steps = std::atoi(argv[++i]);
    } else if (value && !std::strcmp(argv[i], "--keys")) {
      keys = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "rlx_decode_cluster_bench: unknown or incomplete argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  if (steps < 1) throw std::runtime_error("--steps must be at least 1");
  // Each of the 16 attention CTAs takes its keys' rows as one ring stage.
  if (keys < kCtas || keys > kCtas * kStageBytes / (kHeadDim * 2))
    throw std::runtime_error("--keys must be in [16, 512]");
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "rlx_decode_cluster_bench: no usable CUDA device (%s)\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 1;
  }
  int dev = 0, major = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&dev));
  RLX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  cudaDeviceProp prop{};
  RLX_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (major < 9) {
    std::printf("skipped: thread-block clusters and bulk copies need sm_90\n");
    return 0;
  }

  // The layers' tensors, the file's types (bench/synthetic_gemma.h), in one buffer.
  std::vector<std::array<HostTensor, 7>> layers(kLayers);
  size_t total = 0;
  for (int i = 0; i < kLayers; ++i) {
    const bool more = more_bits(i);
    const HostTensor ts[7] = {{DType::Q5_0, kAtt, kHidden, 0},
                              {DType::Q5_0, kHeadDim, kHidden, 0},
                              {more ? DType::Q8_0 : DType::Q5_0, kHeadDim, kHidden, 0},
                              {DType::Q4_K, kHidden, kAtt, 0},
                              {DType::Q5_0, kFfn, kHidden, 0},
                              {DType::Q5_0, kFfn, kHidden, 0},
                              {more ? DType::Q6_K : DType::Q4_K, kHidden, kFfn, 0}};
    for (int r = 0; r < 7; ++r) {
      layers[i][r] = ts[r];
      layers[i][r].offset = total;
      total += (static_cast<size_t>(ts[r].row_bytes()) * ts[r].rows + 255) / 256 * 256;
    }
  }
  std::mt19937 rng(7);
  std::vector<uint8_t> host_w(total);
  for (auto& l : layers)
    for (auto& t : l) fill_random(host_w.data() + t.offset, t.type, t.rows, t.cols, rng, 0.004f);
  uint8_t* d_w = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&d_w, total));
  RLX_CUDA_CHECK(cudaMemcpy(d_w, host_w.data(), total, cudaMemcpyHostToDevice));

  // Each CTA's tiles: its share of every tensor's rows (split), in tiles of whole rows within a stage.
  struct DevicePlan {
    Plan plan;
    int ctas, max_tiles;
  };
  std::vector<void*> allocations;
  auto device_copy = [&](const void* src, size_t bytes) {
    void* d = nullptr;
    RLX_CUDA_CHECK(cudaMalloc(&d, bytes));
    RLX_CUDA_CHECK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    allocations.push_back(d);
    return d;
  };
  auto build_plan = [&](int ctas, const __nv_bfloat16* kv) {
    std::vector<Tile> tiles;
    std::vector<int> begin{0}, phase_first;
    int max_tiles = 0;
    for (int c = 0; c < ctas; ++c) {
      const size_t start = tiles.size();
      for (int i = 0; i < kLayers; ++i) {
        const int phase_tensors[kPhases][3] = {
            {kQ, kK, kV}, {-1, -1, -1}, {kO, -1, -1}, {kGate, kUp, -1}, {kDown, -1, -1}};
        for (int p = 0; p < kPhases; ++p) {
          const int first = static_cast<int>(tiles.size() - start);
          phase_first.push_back(first);
          if (p == kPhaseAttn && c < kCtas) {  // this CTA's share of the cached keys, then of the values
            const int k0 = keys * c / kCtas, nk = keys * (c + 1) / kCtas - k0;
            for (int half = 0; half < 2; ++half)
              tiles.push_back(Tile{reinterpret_cast<const uint8_t*>(
                                       kv + (static_cast<int64_t>(2 * i + half) * kMaxKeys + k0) * kHeadDim),
                                   nk * kHeadDim * 2, nk, k0, kHeadDim * 2, -1, half ? kValues : kKeys});
          }
          for (int route : phase_tensors[p]) {
            if (route < 0) continue;
            const HostTensor& t = layers[i][route];
            const int r0 = split(t.rows, c, ctas), r1 = split(t.rows, c + 1, ctas), rb = t.row_bytes();
            int per_tile = kStageBytes / rb;
            while (per_tile > 1 && (static_cast<int64_t>(per_tile) * rb) % 16) --per_tile;
            for (int r = r0; r < r1; r += per_tile) {
              const int rows = std::min(per_tile, r1 - r);
              if ((static_cast<int64_t>(rows) * rb) % 16 || (t.offset + static_cast<size_t>(r) * rb) % 16)
                throw std::runtime_error("a tile is not a whole number of aligned 16-byte granules");
              tiles.push_back(Tile{d_w + t.offset + static_cast<size_t>(r) * rb, rows * rb, rows, r, rb,
                                   static_cast<int>(t.type), route});
            }
          }
          if (static_cast<int>(tiles.size() - start) - first > std::min(kMaxPhaseTiles, kStages))
            throw std::runtime_error("a phase has more tiles than the ring holds");
        }
      }
      phase_first.push_back(static_cast<int>(tiles.size() - start));
      begin.push_back(static_cast<int>(tiles.size()));
      max_tiles = std::max(max_tiles, static_cast<int>(tiles.size() - start));
    }
    DevicePlan dp{};
    dp.plan.tiles = static_cast<const Tile*>(device_copy(tiles.data(), tiles.size() * sizeof(Tile)));
    dp.plan.tile_begin = static_cast<const int*>(device_copy(begin.data(), begin.size() * sizeof(int)));
    dp.plan.phase_first = static_cast<const int*>(device_copy(phase_first.data(), phase_first.size() * sizeof(int)));
    dp.ctas = ctas;
    dp.max_tiles = max_tiles;
    return dp;
  };

  // Norm weights near 1, the KV cache and the input row random.
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> norms(kLayers * 4 * kHidden), head_norms(kLayers * 2 * kHeadDim), h(kHidden);
  for (float& v : norms) v = 1.0f + 0.2f * uni(rng);
  for (float& v : head_norms) v = 1.0f + 0.2f * uni(rng);
  for (float& v : h) v = uni(rng);
  std::vector<__nv_bfloat16> kv(static_cast<size_t>(kLayers) * 2 * kMaxKeys * kHeadDim);
  for (auto& v : kv) v = __float2bfloat16(uni(rng));
  const Weights wt{static_cast<const float*>(device_copy(norms.data(), norms.size() * 4)),
                   static_cast<const float*>(device_copy(head_norms.data(), head_norms.size() * 4)),
                   static_cast<const __nv_bfloat16*>(device_copy(kv.data(), kv.size() * 2))};
  const auto* d_h = static_cast<const float*>(device_copy(h.data(), kHidden * 4));
  const DevicePlan cluster_plan = build_plan(kCtas, wt.kv), grid_plan = build_plan(prop.multiProcessorCount, wt.kv);
  auto device_zeros = [&](size_t bytes) {
    void* d = nullptr;
    RLX_CUDA_CHECK(cudaMalloc(&d, bytes));
    RLX_CUDA_CHECK(cudaMemset(d, 0, bytes));
    allocations.push_back(d);
    return d;
  };
  auto* d_out = static_cast<float*>(device_zeros(kHidden * 4));
  auto* d_sink = static_cast<float*>(device_zeros(4));
  const int dump_floats = kHidden + kQkv + kAtt + kHidden + kHidden + kFfn + kHidden;
  Dump dump{static_cast<float*>(device_zeros(dump_floats * 4))};
  dump.qkv = dump.xin + kHidden, dump.att = dump.qkv + kQkv, dump.o = dump.att + kAtt, dump.xin2 = dump.o + kHidden,
  dump.act = dump.xin2 + kHidden, dump.down = dump.act + kFfn;
  Exchange ex{};
  ex.qkv = static_cast<float*>(device_zeros(kQkv * 4));
  ex.att = static_cast<float*>(device_zeros(kAtt * 4));
  ex.o = static_cast<float*>(device_zeros(kHidden * 4));
  ex.act = static_cast<float*>(device_zeros(kFfn * 4));
  ex.down = static_cast<float*>(device_zeros(kHidden * 4));
  ex.part = static_cast<float*>(device_zeros(kCtas * kAtt * 4));
  ex.part_m = static_cast<float*>(device_zeros(kCtas * kHeads * 4));
  ex.part_l = static_cast<float*>(device_zeros(kCtas * kHeads * 4));
  ex.count = static_cast<unsigned*>(device_zeros(4));
  auto* d_stamps = static_cast<unsigned long long*>(device_zeros(kLayers * kSlots * sizeof(unsigned long long)));

  for (auto* k :
       {reinterpret_cast<const void*>(decode_cluster_kernel), reinterpret_cast<const void*>(decode_grid_kernel)})
    RLX_CUDA_CHECK(
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(Smem))));
  RLX_CUDA_CHECK(cudaFuncSetAttribute(decode_cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  // grid: one CTA per SM, all resident (a cooperative launch), the barrier counter zeroed first.
  auto launch = [&](bool grid, const Dump& dmp, unsigned long long* stamps, int skip) {
    cudaLaunchConfig_t cfg{};
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = sizeof(Smem);
    cudaLaunchAttribute attr{};
    if (grid) {
      RLX_CUDA_CHECK(cudaMemsetAsync(ex.count, 0, 4));
      cfg.gridDim = dim3(grid_plan.ctas);
      attr.id = cudaLaunchAttributeCooperative;
      attr.val.cooperative = 1;
    } else {
      cfg.gridDim = dim3(kCtas);
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = kCtas;
      attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    }
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    if (grid)
      RLX_CUDA_CHECK(cudaLaunchKernelEx(&cfg, decode_grid_kernel, grid_plan.plan, wt, ex, d_h, d_out, keys, dmp,
                                        stamps, skip));
    else
      RLX_CUDA_CHECK(cudaLaunchKernelEx(&cfg, decode_cluster_kernel, cluster_plan.plan, wt, d_h, d_out, keys,
                                        dmp, stamps, skip));
  };

  // Layer 0's GEMVs against float64 on the host from the dumped inputs.
  auto check = [&](bool grid) {
    launch(grid, dump, nullptr, 0);
    RLX_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(dump_floats);
    RLX_CUDA_CHECK(cudaMemcpy(got.data(), dump.xin, dump_floats * 4, cudaMemcpyDeviceToHost));
    const float* g_xin = got.data();
    const float* g_qkv = g_xin + kHidden;
    const float* g_att = g_qkv + kQkv;
    const float* g_o = g_att + kAtt;
    const float* g_xin2 = g_o + kHidden;
    const float* g_act = g_xin2 + kHidden;
    const float* g_down = g_act + kFfn;
    auto gemv_ref = [&](const HostTensor& t, const float* x, std::vector<double>& y) {
      std::vector<float> row(t.cols);
      y.assign(t.rows, 0.0);
      for (int r = 0; r < t.rows; ++r) {
        rlx::dequantize_row(t.type, host_w.data() + t.offset + static_cast<size_t>(r) * t.row_bytes(), row.data(),
                            t.cols);
        for (int c = 0; c < t.cols; ++c) y[r] += static_cast<double>(row[c]) * x[c];
      }
    };
    double worst = 0.0;
    auto compare = [&](const char* what, const std::vector<double>& ref, const float* gpu) {
      double amax = 0.0, err = 0.0;
      for (size_t i = 0; i < ref.size(); ++i) amax = std::max(amax, std::fabs(ref[i]));
      for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::fabs(ref[i] - gpu[i]));
      const double rel = err / std::max(amax, 1e-30);
      worst = std::max(worst, std::isfinite(rel) ? rel : 1e30);
      std::printf("  check layer 0 %-8s max |err| / max |ref| = %.2e (max |ref| %.3g)\n", what, rel, amax);
    };
    std::vector<double> ref, ref2, qkv_ref;
    const auto& l0 = layers[0];
    for (int r : {kQ, kK, kV}) {
      gemv_ref(l0[r], g_xin, ref);
      qkv_ref.insert(qkv_ref.end(), ref.begin(), ref.end());
    }
    compare("q|k|v", qkv_ref, g_qkv);
    gemv_ref(l0[kO], g_att, ref);
    compare("o", ref, g_o);
    gemv_ref(l0[kGate], g_xin2, ref);
    gemv_ref(l0[kUp], g_xin2, ref2);
    std::vector<double> act(kFfn);
    for (int i = 0; i < kFfn; ++i)
      act[i] =
          0.5 * ref[i] * (1.0 + std::tanh(0.7978845608 * (ref[i] + 0.044715 * ref[i] * ref[i] * ref[i]))) * ref2[i];
    compare("gate|up", act, g_act);
    gemv_ref(l0[kDown], g_act, ref);
    compare("down", ref, g_down);
    std::vector<float> out(kHidden);
    RLX_CUDA_CHECK(cudaMemcpy(out.data(), d_out, kHidden * 4, cudaMemcpyDeviceToHost));
    bool finite = true;
    for (float v : out) finite = finite && std::isfinite(v);
    std::printf("  output row after 18 layers finite: %s\n", finite ? "yes" : "NO");
    return std::make_pair(worst < 5e-3 && finite, out);
  };

  // Timed steps, each after the head's 178 MB have gone through L2.
  const int64_t flush_bytes = 178ll << 20;
  auto* d_flush = static_cast<float4*>(device_zeros(flush_bytes));
  cudaEvent_t a, b;
  RLX_CUDA_CHECK(cudaEventCreate(&a));
  RLX_CUDA_CHECK(cudaEventCreate(&b));
  // skip: 1 leaves out the GEMVs' arithmetic (their weights still stream), 2 the attention's.
  auto time_steps = [&](bool grid, int skip) {
    std::vector<float> ms;
    for (int s = 0; s < steps + 5; ++s) {
      flush_kernel<<<prop.multiProcessorCount * 2, 512>>>(d_flush, flush_bytes / 16, d_sink);
      RLX_CUDA_CHECK(cudaEventRecord(a));
      launch(grid, Dump{}, nullptr, skip);
      RLX_CUDA_CHECK(cudaEventRecord(b));
      RLX_CUDA_CHECK(cudaEventSynchronize(b));
      float t = 0;
      RLX_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
      if (s >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms;
  };
  const char* names[kSlots] = {"",          "qkv: tiles landed", "qkv: dots",     "qkv: barrier",  "norms + rope",
                               "attn: partials + barrier", "attn: merge (+ barrier)", "o: tiles landed", "o: dots",
                               "o: barrier", "norms", "gate|up: tiles landed", "gate|up: dots",
                               "gate|up: GeGLU + barrier", "down: tiles landed", "down: dots", "down: barrier",
                               "norm + residual"};
  bool ok = true;
  std::vector<float> outs[2];
  for (bool grid : {false, true}) {
    const DevicePlan& dp = grid ? grid_plan : cluster_plan;
    std::printf("\n%s: %d CTAs x %d threads, %zu B of shared memory each, up to %d tiles a CTA\n",
                grid ? "every SM, grid-wide barriers" : "one thread-block cluster", dp.ctas, kThreads, sizeof(Smem),
                dp.max_tiles);
    const auto [good, out] = check(grid);
    ok = ok && good;
    outs[grid] = out;
    const std::vector<float> ms = time_steps(grid, 0);
    const double med = ms[ms.size() / 2] * 1e3;
    std::printf("18 layers, %d cached keys: median %.1f us a step (min %.1f, max %.1f; %d steps), %.1f MB of weights "
                "(%.0f GB/s)\n",
                keys, med, ms.front() * 1e3, ms.back() * 1e3, steps, static_cast<double>(total) / 1e6,
                static_cast<double>(total) / (med * 1e-6) / 1e9);
    std::printf("{\"bench\": \"decode_cluster\", \"case\": \"gemma3_270m_layers_%s_keys%d_us\", \"value\": %.2f, "
                "\"unit\": \"us\", \"impl\": \"rlx\"}\n",
                grid ? "grid" : "cluster", keys, med);
    for (int skip : {1, 2, 3}) {
      const std::vector<float> v = time_steps(grid, skip);
      std::printf("without %-32s median %.1f us a step\n",
                  skip == 1 ? "the GEMVs' arithmetic:" : skip == 2 ? "the attention's arithmetic:" : "either:",
                  v[v.size() / 2] * 1e3);
    }
    // Where a layer's time goes: CTA 0's timestamps, averaged over layers 1-17 of 20 steps.
    std::vector<double> per(kSlots, 0.0);
    std::vector<unsigned long long> st(kLayers * kSlots);
    const int runs = 20;
    for (int r = 0; r < runs; ++r) {
      flush_kernel<<<prop.multiProcessorCount * 2, 512>>>(d_flush, flush_bytes / 16, d_sink);
      launch(grid, Dump{}, d_stamps, 0);
      RLX_CUDA_CHECK(cudaMemcpy(st.data(), d_stamps, st.size() * sizeof(st[0]), cudaMemcpyDeviceToHost));
      for (int l = 1; l < kLayers; ++l)
        for (int i = 1; i < kSlots; ++i)
          per[i] += static_cast<double>(st[l * kSlots + i] - st[l * kSlots + i - 1]) / (runs * (kLayers - 1));
    }
    double layer_ns = 0.0;
    for (int i = 1; i < kSlots; ++i) layer_ns += per[i];
    std::printf("a layer (CTA 0's clock, layers 1-17): %.2f us\n", layer_ns / 1e3);
    for (int i = 1; i < kSlots; ++i) std::printf("  %-28s %7.2f us\n", names[i], per[i] / 1e3);
  }
  double diff = 0.0, amax = 0.0;
  for (int i = 0; i < kHidden; ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(outs[0][i] - outs[1][i]))),
    amax = std::max(amax, static_cast<double>(std::fabs(outs[0][i])));
  std::printf("\nthe two forms' output rows after 18 layers: max |difference| / max |row| = %.2e\n", diff / amax);
  ok = ok && diff <= 1e-3 * amax;
  std::printf("main's per-op launches for the same layers: ~423 us a step (H200, session 39 trace: 18 x 23.5 us); "
              "a decode step is the layers + ~66 us (gather, head, argmax): 2,500 tok/s needs <= 334 us of layers\n");
  std::printf("check: %s\n", ok ? "passed" : "FAILED");
  for (void* p : allocations) cudaFree(p);
  cudaFree(d_w);
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
