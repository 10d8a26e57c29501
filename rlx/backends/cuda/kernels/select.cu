// Sample: one token per row of logits [B, V], matching the CPU kernel's rule.
//
// temperature 0: the ArgMax kernel of reduce.cu (same NaN-above ranking).
// Otherwise, four steps over the workspace (no host sync, graph-capturable):
//   1. keys: every logit becomes a 64-bit key (row << 32 | descending-order
//      bits of the value; NaNs canonicalized so they sort first), value = index.
//      Grid-stride, coalesced.
//   2. CUB DeviceRadixSort::SortPairs over all B·V keys, bits [0, 32 + ⌈log2 B⌉):
//      rows stay apart, each row ends up sorted descending, and the sort is
//      stable, so equal logits keep ascending index order — the CPU's
//      tie-break.
//   3. probs: for the first K sorted entries of each row, p = exp((l − l_top)/T)
//      in f64 (the logit is decoded back from its key), written over the spare
//      key buffer. Grid-stride over B·K, so the f64 exps spread over the GPU.
//   4. pick: one 512-thread block per row scans p in place into cumulative
//      sums (f64; each thread sums 8 consecutive entries, then a block
//      exclusive scan carries the running total across tiles), then thread 0
//      binary-searches the nondecreasing cum for the top-p cut and for
//      u · cum_last, and writes the token. A row whose top logit is not finite
//      is greedy: its first sorted index.
// With 0 < top_k ≤ kSelectMaxK (the usual 20-100), steps 1-3 are a selection
// instead of the sort: every 4096 logits of a row (one CTA) keep their K
// smallest composite keys (descending-order bits << 32 | index, ascending =
// the stable sort's order) by a radix select; one CTA per row selects the K
// smallest of those, sorts them (bitonic, in shared memory) and writes them,
// and their p_j, where the sort's first K entries would be, then runs step 4
// as the pick kernel does. So the token is the sort path's bit for bit, in two
// launches instead of six to eight over every logit (RLX_CUDA_SAMPLE_SELECT).
#include "rlx/backends/cuda/kernels/select.h"

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "rlx/backends/cpu/kernels/sampling_rng.h"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"
#include "rlx/backends/cuda/kernels/reduce.h"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

constexpr int kScanThreads = 512;
constexpr int kScanItems = 8;

// Descending order on floats: larger values get smaller keys; NaN smallest of all.
__device__ __forceinline__ uint32_t desc_key(float v) {
  uint32_t u = __float_as_uint(v);
  if (v != v) u = 0x7fffffffu;
  if (v == 0.0f) u = 0;  // −0 ties with +0 (the CPU compares values)
  const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending order
  return ~ord;
}
__device__ __forceinline__ float key_value(uint64_t key) {
  const uint32_t ord = ~static_cast<uint32_t>(key);
  return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7fffffffu) : ~ord);
}

template <typename T>
__global__ void __launch_bounds__(256) keys_kernel(const T* logits, uint64_t* keys, int32_t* idx, int64_t B, int V) {
  dev::pdl_begin();
  const int64_t n = B * V;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / V;
    keys[i] = (static_cast<uint64_t>(r) << 32) | desc_key(dev::to_f32(logits[i]));
    idx[i] = static_cast<int32_t>(i - r * V);
  }
}

// p_j of a sorted entry against the row's top logit (both paths).
__device__ __forceinline__ double prob_of(uint64_t key, double top, double temperature) {
  return exp((static_cast<double>(key_value(key)) - top) / temperature);
}

__global__ void __launch_bounds__(256) probs_kernel(const uint64_t* keys, double* p, int64_t B, int V, int K,
                                                    double temperature) {
  dev::pdl_begin();
  const int64_t n = B * K;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, j = i - r * K;
    const double top = key_value(keys[r * V]);
    if (!isfinite(top)) continue;  // greedy row
    p[r * V + j] = prob_of(keys[r * V + j], top, temperature);
  }
}

struct RunningTotal {
  double total;
  __device__ double operator()(double block_aggregate) {
    const double old = total;
    total += block_aggregate;
    return old;
  }
};

// Step 4 for row r, by a CTA of kScanThreads threads (keys, idx and cum as
// the sort leaves them).
__device__ __forceinline__ void pick_row(const uint64_t* keys, const int32_t* idx, double* cum, int32_t* out, int V,
                                         int K, double top_p, unsigned long long seed, const int32_t* step,
                                         int64_t r) {
  using Scan = cub::BlockScan<double, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int64_t base = r * V;
  if (!isfinite(key_value(keys[base]))) {
    if (threadIdx.x == 0) out[r] = idx[base];
    return;
  }
  double* c = cum + base;
  RunningTotal running{0.0};
  for (int t0 = 0; t0 < K; t0 += kScanThreads * kScanItems) {
    const int j0 = t0 + static_cast<int>(threadIdx.x) * kScanItems;
    double v[kScanItems];
#pragma unroll
    for (int i = 0; i < kScanItems; ++i) {
      v[i] = j0 + i < K ? c[j0 + i] : 0.0;
      if (i > 0) v[i] += v[i - 1];
    }
    double excl;
    Scan(temp).ExclusiveSum(v[kScanItems - 1], excl, running);
#pragma unroll
    for (int i = 0; i < kScanItems; ++i)
      if (j0 + i < K) c[j0 + i] = excl + v[i];
    __syncthreads();  // temp reuse; cum visible to thread 0 below
  }
  if (threadIdx.x != 0) return;
  // keep = 1 + #{j < K−1 : cum_j < need}; cum is nondecreasing, so binary search.
  int keep = K;
  if (top_p < 1.0) {
    const double need = top_p * c[K - 1];
    int lo = 0, hi = K - 1;  // first j in [0, K−1) with cum_j ≥ need, else K−1
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (c[mid] < need) lo = mid + 1;
      else hi = mid;
    }
    keep = lo + 1;
  }
  const uint32_t s = step ? static_cast<uint32_t>(*step) : 0u;
  const double target = static_cast<double>(sample_uniform(seed, s, static_cast<uint32_t>(r))) * c[keep - 1];
  int lo = 0, hi = keep - 1;  // first j < keep with cum_j > target, else keep − 1
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (c[mid] > target) hi = mid;
    else lo = mid + 1;
  }
  out[r] = idx[base + lo];
}

__global__ void __launch_bounds__(kScanThreads)
    pick_kernel(const uint64_t* keys, const int32_t* idx, double* cum, int32_t* out, int V, int K, double top_p,
                unsigned long long seed, const int32_t* step) {
  dev::pdl_begin();
  pick_row(keys, idx, cum, out, V, K, top_p, seed, step, blockIdx.x);
}

// ---- top-k by selection (0 < K ≤ kSelectMaxK) ----

constexpr int kSelectMaxK = 1024;
constexpr int kSliceThreads = 256, kSliceItems = 16, kSlice = kSliceThreads * kSliceItems;
constexpr uint64_t kNoKey = ~uint64_t{0};  // above every composite key (an index is < 2^31)

__device__ __forceinline__ uint64_t composite_key(float v, int j) {
  return (static_cast<uint64_t>(desc_key(v)) << 32) | static_cast<uint32_t>(j);
}

// The K smallest of the keys the CTA's threads hold (for_each(f) calls f on
// each key of the calling thread; at least K keys in all, all distinct): a
// radix select over 8-bit digits from the top, stopping once the bucket of
// the K-th key is taken whole. Returns (prefix, mask) with the K smallest
// exactly the keys k with (k & mask) ≤ prefix. Every thread calls it.
struct Selected {
  uint64_t prefix, mask;
  __device__ bool operator()(uint64_t k) const { return (k & mask) <= prefix; }
};
template <int THREADS, class ForEach>
__device__ __forceinline__ Selected radix_select(ForEach for_each, int K) {
  using Scan = cub::BlockScan<int, THREADS>;
  static_assert(THREADS >= 256, "one bin per thread");
  __shared__ typename Scan::TempStorage temp;
  __shared__ int hist[256];
  __shared__ int s_digit, s_before, s_count;
  const int tid = static_cast<int>(threadIdx.x);
  Selected sel{0, 0};
  int need = K;
  for (int shift = 56; shift >= 0; shift -= 8) {
    if (tid < 256) hist[tid] = 0;
    __syncthreads();
    for_each([&](uint64_t k) {
      if ((k & sel.mask) == sel.prefix) atomicAdd(&hist[(k >> shift) & 0xff], 1);
    });
    __syncthreads();
    const int h = tid < 256 ? hist[tid] : 0;
    int before;
    Scan(temp).ExclusiveSum(h, before);
    if (tid < 256 && before < need && need <= before + h) s_digit = tid, s_before = before, s_count = h;
    __syncthreads();
    sel.prefix |= static_cast<uint64_t>(s_digit) << shift;
    sel.mask |= uint64_t{0xff} << shift;
    need -= s_before;
    const bool whole = s_count == need;
    __syncthreads();  // s_* and temp are rewritten by the next round
    if (whole) break;
  }
  return sel;
}

// Grid (slices, B): slice s of row r keeps its K smallest keys, unordered,
// at cand[(r · slices + s) · K ..], kNoKey where the slice has fewer.
template <typename T>
__global__ void __launch_bounds__(kSliceThreads) topk_slice_kernel(const T* logits, int V, int K, int slices,
                                                                    uint64_t* cand) {
  dev::pdl_begin();
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t r = blockIdx.y;
  const int lo = static_cast<int>(blockIdx.x) * kSlice, n = min(kSlice, V - lo);
  uint64_t key[kSliceItems];
#pragma unroll
  for (int i = 0; i < kSliceItems; ++i) {
    const int j = i * kSliceThreads + tid;
    key[i] = j < n ? composite_key(dev::to_f32(logits[r * V + lo + j]), lo + j) : kNoKey;
  }
  uint64_t* out = cand + (r * slices + blockIdx.x) * K;
  if (n <= K) {
#pragma unroll
    for (int i = 0; i < kSliceItems; ++i)
      if (i * kSliceThreads + tid < n) out[i * kSliceThreads + tid] = key[i];
    for (int j = n + tid; j < K; j += kSliceThreads) out[j] = kNoKey;
    return;
  }
  const Selected sel = radix_select<kSliceThreads>(
      [&](auto f) {
#pragma unroll
        for (int i = 0; i < kSliceItems; ++i)
          if (key[i] != kNoKey) f(key[i]);
      },
      K);
  __shared__ int count;
  if (tid == 0) count = 0;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kSliceItems; ++i)
    if (key[i] != kNoKey && sel(key[i])) out[atomicAdd(&count, 1)] = key[i];
}

// One CTA per row: the K smallest of the row's slices' candidates, sorted,
// as the sort path's first K entries (keys: row << 32 | descending-order
// bits; idx) and their p_j (what probs_kernel writes), then the pick.
__global__ void __launch_bounds__(kScanThreads) topk_merge_kernel(const uint64_t* cand, int slices, int K, int V,
                                                                   uint64_t* keys, int32_t* idx, double* p,
                                                                   double temperature, int32_t* out, double top_p,
                                                                   unsigned long long seed, const int32_t* step) {
  dev::pdl_begin();
  __shared__ uint64_t sorted[kSelectMaxK];
  __shared__ int count;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t r = blockIdx.x;
  const uint64_t* c = cand + r * slices * K;
  const int n = slices * K;
  const Selected sel = radix_select<kScanThreads>(
      [&](auto f) {
        for (int i = tid; i < n; i += kScanThreads)
          if (const uint64_t k = __ldcg(c + i); k != kNoKey) f(k);
      },
      K);
  int size = 1;
  while (size < K) size *= 2;
  if (tid == 0) count = 0;
  for (int i = K + tid; i < size; i += kScanThreads) sorted[i] = kNoKey;
  __syncthreads();
  for (int i = tid; i < n; i += kScanThreads)
    if (const uint64_t k = __ldcg(c + i); k != kNoKey && sel(k)) sorted[atomicAdd(&count, 1)] = k;
  __syncthreads();
  for (int span = 2; span <= size; span *= 2)  // bitonic sort, ascending
    for (int stride = span / 2; stride > 0; stride /= 2) {
      for (int i = tid; i < size / 2; i += kScanThreads) {
        const int a = 2 * i - (i & (stride - 1)), b = a + stride;
        const uint64_t x = sorted[a], y = sorted[b];
        if ((x > y) == ((a & span) == 0)) sorted[a] = y, sorted[b] = x;
      }
      __syncthreads();
    }
  const double top = key_value(sorted[0] >> 32);
  for (int j = tid; j < K; j += kScanThreads) {
    const uint64_t k = (static_cast<uint64_t>(r) << 32) | (sorted[j] >> 32);
    keys[r * V + j] = k;
    idx[r * V + j] = static_cast<int32_t>(sorted[j] & 0xffffffffu);
    if (isfinite(top)) p[r * V + j] = prob_of(k, top, temperature);
  }
  __syncthreads();  // the row's entries and p_j, for every thread of the pick
  pick_row(keys, idx, p, out, V, K, top_p, seed, step, r);
}

int row_bits(int64_t B) {
  int b = 0;
  while ((int64_t{1} << b) < B) ++b;
  return b;
}

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Layout {
  size_t keys_a = 0, keys_b = 0, idx_a = 0, idx_b = 0, temp = 0, temp_bytes = 0, cand = 0, total = 0;
};

int slices_of(int64_t V) { return static_cast<int>((V + kSlice - 1) / kSlice); }

// The selection path's candidates come last: [B][slices][K ≤ kSelectMaxK].
Layout layout(int64_t B, int64_t V) {
  const auto n = static_cast<size_t>(B * V);
  Layout l;
  l.keys_b = l.keys_a + align_up(n * sizeof(uint64_t));
  l.idx_a = l.keys_b + align_up(n * sizeof(uint64_t));
  l.idx_b = l.idx_a + align_up(n * sizeof(int32_t));
  l.temp = l.idx_b + align_up(n * sizeof(int32_t));
  cub::DoubleBuffer<uint64_t> k(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> v(nullptr, nullptr);
  RLX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, l.temp_bytes, k, v, static_cast<int64_t>(n), 0,
                                                 32 + row_bits(B)));
  l.cand = l.temp + align_up(l.temp_bytes);
  l.total = l.cand + align_up(static_cast<size_t>(B) * slices_of(V) * kSelectMaxK * sizeof(uint64_t));
  return l;
}

int grid_for(int64_t work) {
  const int64_t b = (work + 255) / 256;
  return static_cast<int>(b < 1 ? 1 : b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b);
}

}  // namespace

size_t sample_workspace_bytes(int64_t batch, int64_t vocab, const SampleAttrs& attrs) {
  if (batch * vocab == 0) return 0;
  // Greedy: the split ArgMax's scratch is at most 16 bytes per split.
  if (attrs.temperature == 0.0f) return argmax_plan(DType::F64, batch, vocab, 1).workspace_bytes;
  return layout(batch, vocab).total;
}

size_t sample_counter_ints(DType dtype, int64_t batch, int64_t vocab, const SampleAttrs& attrs) {
  if (attrs.temperature != 0.0f || batch * vocab == 0) return 0;
  return argmax_plan(dtype, batch, vocab, 1).counters;
}

void launch_sample(DType dtype, const void* logits, int32_t* out, int64_t batch, int64_t vocab,
                   const SampleAttrs& attrs, const int32_t* step, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream, int32_t* counters) {
  RLX_CHECK(vocab > 0 && vocab <= INT32_MAX, "Sample: vocabulary of ", vocab, " entries (need 1 .. 2^31-1)");
  RLX_CHECK(attrs.temperature >= 0.0f && attrs.top_k >= 0 && attrs.top_p > 0.0f && attrs.top_p <= 1.0f,
            "Sample: invalid sampling attributes");
  if (batch == 0) return;
  if (attrs.temperature == 0.0f) {
    const bool split = counters && workspace && workspace_bytes >= argmax_plan(dtype, batch, vocab, 1).workspace_bytes;
    return launch_argmax(dtype, logits, out, batch, vocab, 1, stream, split ? workspace : nullptr,
                         split ? counters : nullptr);
  }
  RLX_CHECK(batch < (int64_t{1} << 31), "Sample: batch of ", batch, " rows");
  const Layout l = layout(batch, vocab);
  RLX_CHECK(workspace && workspace_bytes >= l.total, "Sample: workspace of ", workspace_bytes, " bytes, need ",
            l.total);
  RLX_CHECK(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "Sample: workspace must be 16-byte aligned");
  char* ws = static_cast<char*>(workspace);
  auto* keys_a = reinterpret_cast<uint64_t*>(ws + l.keys_a);
  auto* keys_b = reinterpret_cast<uint64_t*>(ws + l.keys_b);
  auto* idx_a = reinterpret_cast<int32_t*>(ws + l.idx_a);
  auto* idx_b = reinterpret_cast<int32_t*>(ws + l.idx_b);
  const int64_t n = batch * vocab;
  const int V = static_cast<int>(vocab);
  const int K = attrs.top_k == 0 ? V : static_cast<int>(attrs.top_k < vocab ? attrs.top_k : vocab);
  if (attrs.top_k > 0 && K <= kSelectMaxK && batch <= 65535 && env_bool("RLX_CUDA_SAMPLE_SELECT")) {
    auto* cand = reinterpret_cast<uint64_t*>(ws + l.cand);
    auto* probs = reinterpret_cast<double*>(keys_b);
    const int slices = slices_of(vocab);
    dispatch_float(dtype, "Sample", [&](auto tag) {
      using T = decltype(tag);
      topk_slice_kernel<T><<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(batch)), kSliceThreads, 0,
                             stream>>>(static_cast<const T*>(logits), V, K, slices, cand);
    });
    RLX_CUDA_CHECK_LAUNCH("Sample");
    topk_merge_kernel<<<static_cast<unsigned>(batch), kScanThreads, 0, stream>>>(
        cand, slices, K, V, keys_a, idx_a, probs, static_cast<double>(attrs.temperature), out,
        static_cast<double>(attrs.top_p), attrs.seed, step);
    RLX_CUDA_CHECK_LAUNCH("Sample");
    return;
  }
  dispatch_float(dtype, "Sample", [&](auto tag) {
    using T = decltype(tag);
    keys_kernel<T><<<grid_for(n), 256, 0, stream>>>(static_cast<const T*>(logits), keys_a, idx_a, batch, V);
  });
  RLX_CUDA_CHECK_LAUNCH("Sample");
  cub::DoubleBuffer<uint64_t> keys(keys_a, keys_b);
  cub::DoubleBuffer<int32_t> idx(idx_a, idx_b);
  size_t temp_bytes = l.temp_bytes;
  RLX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + l.temp, temp_bytes, keys, idx, n, 0, 32 + row_bits(batch),
                                                 stream));
  auto* probs = reinterpret_cast<double*>(keys.Alternate());
  probs_kernel<<<grid_for(batch * K), 256, 0, stream>>>(keys.Current(), probs, batch, V, K,
                                                        static_cast<double>(attrs.temperature));
  RLX_CUDA_CHECK_LAUNCH("Sample");
  pick_kernel<<<static_cast<unsigned>(batch), kScanThreads, 0, stream>>>(
      keys.Current(), idx.Current(), probs, out, V, K, static_cast<double>(attrs.top_p), attrs.seed, step);
  RLX_CUDA_CHECK_LAUNCH("Sample");
}

}  // namespace rlx::cuda
