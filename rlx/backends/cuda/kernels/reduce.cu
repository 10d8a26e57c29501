// Reduce (sum/mean/max/min), ArgMax and TopK.
//
// Reduce and ArgMax see x as [outer, reduce, inner].
//   Row mode (inner == 1): a warp per row (8 rows per 256-thread block) for
//     short rows, a 256-thread block per row for long rows or few rows. Each
//     thread strides over 16-byte vectors of the row (consecutive threads on
//     consecutive vectors: coalesced), accumulates in registers, then the row
//     is combined by warp shuffles (+ shared memory across warps).
//   Column mode (inner > 1): a 32 × 8 block covers 32 adjacent columns; the 8
//     thread rows split the reduced axis, every warp access reads 32 adjacent
//     columns of one reduced row, and the 8 partials are combined in shared
//     memory in a fixed order (results are deterministic).
// Float Sum/Mean accumulate in f64 like the CPU reference, Max/Min in the
// compute type with NaN sticky. ArgMax carries (value, index) pairs and keeps
// the lower index on ties; NaN ranks above everything. A few very long rows
// (LLM logits) split across CTAs; the last CTA of a row merges (argmax_plan).
//
// TopK (k ≤ 64, last axis): one block per row. Each thread scans its strided
// slice of the row and keeps a sorted list of its best K ≥ k candidates in
// registers (unrolled insertion, compile-time indices only, so no local
// memory); then k rounds of a block-wide arg-best over the list heads pop the
// winners in order (value descending, NaN first, ties by lower index).
#include "rlx/backends/cuda/kernels/reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"

namespace rlx::cuda {
namespace {

using dev::compute_t;
using dev::from_c;
using dev::to_c;

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

inline bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

// ------------------------------------------------------------ Reduce

enum class RKind { Sum, Max, Min };

template <typename T, RKind K>
struct Reducer {
  using C = compute_t<T>;
  static constexpr bool kFloat = std::is_floating_point_v<C>;
  using Acc = std::conditional_t<K == RKind::Sum, std::conditional_t<kFloat, double, unsigned long long>, C>;

  __device__ static Acc init() {
    if constexpr (K == RKind::Sum) return Acc(0);
    else if constexpr (kFloat) return K == RKind::Max ? Acc(-INFINITY) : Acc(INFINITY);
    else if constexpr (std::is_same_v<C, int32_t>) return K == RKind::Max ? INT_MIN : INT_MAX;
    else return K == RKind::Max ? LLONG_MIN : LLONG_MAX;
  }
  __device__ static Acc combine(Acc a, Acc b) {
    if constexpr (K == RKind::Sum) return a + b;  // unsigned: wraps
    else if constexpr (K == RKind::Max) return (b > a || b != b) ? b : a;  // NaN sticks
    else return (b < a || b != b) ? b : a;
  }
  __device__ static Acc lift(T v) {
    if constexpr (K == RKind::Sum && kFloat) return static_cast<double>(to_c(v));
    else if constexpr (K == RKind::Sum) return static_cast<unsigned long long>(static_cast<long long>(v));
    else return to_c(v);
  }
  __device__ static T finish(Acc a, ReduceFn fn, int64_t count) {
    if constexpr (K == RKind::Sum) {
      if constexpr (kFloat) {
        const double r = fn == ReduceFn::Mean ? a / static_cast<double>(count) : a;
        return from_c<T>(static_cast<C>(r));
      } else {
        if (fn == ReduceFn::Mean) return static_cast<T>(static_cast<long long>(a) / count);
        return static_cast<T>(a);
      }
    } else {
      return from_c<T>(a);
    }
  }
  __device__ static Acc warp_combine(Acc v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
  }
};

// One row per warp (blockDim.x == 32) or per block. V elements per load.
template <typename T, RKind K, int V>
__global__ void __launch_bounds__(256) reduce_rows_kernel(const T* x, T* y, int64_t rows, int64_t n, ReduceFn fn) {
  dev::pdl_begin();
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  __shared__ Acc scratch[32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * n;
  Acc acc = R::init();
  const int64_t nv = n / V;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    const Vec<T, V> t = reinterpret_cast<const Vec<T, V>*>(xr)[j];
#pragma unroll
    for (int i = 0; i < V; ++i) acc = R::combine(acc, R::lift(t.v[i]));
  }
  acc = R::warp_combine(acc);
  if (blockDim.x > 32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = acc;
    __syncthreads();
    acc = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : R::init();
    acc = R::warp_combine(acc);
  }
  if (threadIdx.x == 0) y[row] = R::finish(acc, fn, n);
}

// 32 columns × 8 slices of the reduced axis per block.
template <typename T, RKind K>
__global__ void __launch_bounds__(256)
    reduce_cols_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, ReduceFn fn) {
  dev::pdl_begin();
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  __shared__ Acc part[8][33];
  const int64_t col_blocks = (inner + 31) / 32;
  const int64_t o = blockIdx.x / col_blocks;
  const int64_t c = (blockIdx.x - o * col_blocks) * 32 + threadIdx.x;
  Acc acc = R::init();
  if (c < inner) {
    const T* base = x + o * n * inner + c;
    for (int64_t r = threadIdx.y; r < n; r += 8) acc = R::combine(acc, R::lift(base[r * inner]));
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < inner) {
#pragma unroll
    for (int s = 1; s < 8; ++s) acc = R::combine(acc, part[s][threadIdx.x]);
    y[o * inner + c] = R::finish(acc, fn, n);
  }
}

template <typename T, RKind K>
void launch_reduce_t(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, ReduceFn fn, cudaStream_t stream) {
  if (inner == 1) {
    constexpr int V = static_cast<int>(16 / sizeof(T));
    const bool block_mode = n >= 2048 || outer < 264;
    const dim3 block = block_mode ? dim3(256) : dim3(32, 8);
    const auto grid = static_cast<unsigned>(block_mode ? outer : (outer + 7) / 8);
    if (n % V == 0 && aligned(x, 16)) reduce_rows_kernel<T, K, V><<<grid, block, 0, stream>>>(x, y, outer, n, fn);
    else reduce_rows_kernel<T, K, 1><<<grid, block, 0, stream>>>(x, y, outer, n, fn);
  } else {
    const auto grid = static_cast<unsigned>(outer * ((inner + 31) / 32));
    reduce_cols_kernel<T, K><<<grid, dim3(32, 8), 0, stream>>>(x, y, outer, n, inner, fn);
  }
  RLX_CUDA_CHECK_LAUNCH("Reduce");
}

template <typename T>
__global__ void fill_kernel(T* y, int64_t n, T v) {
  dev::pdl_begin();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = v;
}

// Runtime dtype → storage type for Reduce/ArgMax.
template <typename F>
void dispatch_reduce_type(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    default: throw Unsupported(str(op, ": cuda kernel has no ", dtype_name(t), " variant"));
  }
}

// ------------------------------------------------------------ ArgMax

// (v, i) ranks above (w, j): NaN above every number, then larger value, then lower index.
template <typename C>
__device__ __forceinline__ bool better(C v, int i, C w, int j) {
  if constexpr (std::is_floating_point_v<C>) {
    const bool vn = v != v, wn = w != w;
    if (vn || wn) return vn && (!wn || i < j);
  }
  return v > w || (v == w && i < j);
}

template <typename C>
__device__ __forceinline__ void warp_best(C& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const C w = __shfl_xor_sync(0xffffffffu, v, o);
    const int j = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(w, j, v, i)) v = w, i = j;
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(256) argmax_rows_kernel(const T* x, int32_t* y, int64_t rows, int n) {
  dev::pdl_begin();
  using C = compute_t<T>;
  __shared__ C sv[32];
  __shared__ int si[32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * n;
  C best = to_c(xr[0]);
  int bi = INT_MAX;
  for (int j = threadIdx.x; j < n / V; j += blockDim.x) {
    const Vec<T, V> t = reinterpret_cast<const Vec<T, V>*>(xr)[j];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const C v = to_c(t.v[k]);
      if (better(v, j * V + k, best, bi)) best = v, bi = j * V + k;
    }
  }
  warp_best(best, bi);
  if (blockDim.x > 32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sv[warp] = best, si[warp] = bi;
    __syncthreads();
    if (lane < static_cast<int>(blockDim.x >> 5)) best = sv[lane], bi = si[lane];
    else bi = INT_MAX;
    warp_best(best, bi);
  }
  if (threadIdx.x == 0) y[row] = bi;
}

// One chunk of a long row per CTA (blockIdx.x: split, blockIdx.y: row); the
// winners go to `parts`, and the last CTA of the row to arrive reduces them
// and re-zeroes the row's counter. Ties and NaN follow better(), whose order
// is total (value, then index), so the merge order does not matter.
template <typename C>
struct ArgmaxPart {
  C v;
  int i;
};

template <typename T, int V>
__global__ void __launch_bounds__(256)
    argmax_split_kernel(const T* x, int32_t* y, int n, int chunk, ArgmaxPart<compute_t<T>>* parts, int32_t* counters) {
  dev::pdl_begin();
  using C = compute_t<T>;
  __shared__ C sv[32];
  __shared__ int si[32];
  __shared__ bool last;
  const int64_t row = blockIdx.y;
  const int split = blockIdx.x, splits = gridDim.x;
  const T* xr = x + row * n;
  const int begin = split * chunk, end = min(n, begin + chunk);  // chunk is a multiple of V
  C best = to_c(xr[begin]);
  int bi = INT_MAX;
  for (int j = begin / V + threadIdx.x; j < end / V; j += blockDim.x) {
    const Vec<T, V> t = reinterpret_cast<const Vec<T, V>*>(xr)[j];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const C v = to_c(t.v[k]);
      if (better(v, j * V + k, best, bi)) best = v, bi = j * V + k;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_best(best, bi);
  if (lane == 0) sv[warp] = best, si[warp] = bi;
  __syncthreads();
  if (warp != 0) return;
  best = sv[0];
  bi = INT_MAX;
  if (lane < static_cast<int>(blockDim.x >> 5)) best = sv[lane], bi = si[lane];
  warp_best(best, bi);
  ArgmaxPart<C>* pr = parts + row * splits;
  if (lane == 0) {
    pr[split] = {best, bi};
    __threadfence();  // publish the part before arriving
    last = atomicAdd(counters + row, 1) == splits - 1;
  }
  __syncwarp();
  if (!last) return;
  __threadfence();
  C b = __ldcg(&pr[0].v);
  int i = INT_MAX;
  for (int s = lane; s < splits; s += 32) {
    const C v = __ldcg(&pr[s].v);
    const int j = __ldcg(&pr[s].i);
    if (better(v, j, b, i)) b = v, i = j;
  }
  warp_best(b, i);
  if (lane == 0) {
    y[row] = i;
    counters[row] = 0;  // every split has arrived: ready for the next launch
  }
}

template <typename T>
__global__ void __launch_bounds__(256) argmax_cols_kernel(const T* x, int32_t* y, int64_t n, int64_t inner) {
  dev::pdl_begin();
  using C = compute_t<T>;
  __shared__ C pv[8][33];
  __shared__ int pi[8][33];
  const int64_t col_blocks = (inner + 31) / 32;
  const int64_t o = blockIdx.x / col_blocks;
  const int64_t c = (blockIdx.x - o * col_blocks) * 32 + threadIdx.x;
  C best = C(0);
  int bi = INT_MAX;
  if (c < inner) {
    const T* base = x + o * n * inner + c;
    best = to_c(base[0]);
    for (int64_t r = threadIdx.y; r < n; r += 8) {
      const C v = to_c(base[r * inner]);
      if (better(v, static_cast<int>(r), best, bi)) best = v, bi = static_cast<int>(r);
    }
  }
  pv[threadIdx.y][threadIdx.x] = best;
  pi[threadIdx.y][threadIdx.x] = bi;
  __syncthreads();
  if (threadIdx.y == 0 && c < inner) {
#pragma unroll
    for (int s = 1; s < 8; ++s)
      if (better(pv[s][threadIdx.x], pi[s][threadIdx.x], best, bi)) best = pv[s][threadIdx.x], bi = pi[s][threadIdx.x];
    y[o * inner + c] = bi;
  }
}

// ------------------------------------------------------------ TopK

template <typename T, int K>
__global__ void __launch_bounds__(K <= 16 ? 128 : 64) topk_kernel(const T* x, void* out, int n, int k, bool indices) {
  dev::pdl_begin();
  __shared__ float sv[32];
  __shared__ int si[32];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float lv[K];
  int li[K];
#pragma unroll
  for (int j = 0; j < K; ++j) lv[j] = -INFINITY, li[j] = INT_MAX;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = to_c(xr[c]);
    if (!better(v, c, lv[K - 1], li[K - 1])) continue;
    bool placed = false;
#pragma unroll
    for (int j = K - 1; j > 0; --j) {
      if (!placed) {
        if (better(v, c, lv[j - 1], li[j - 1])) {
          lv[j] = lv[j - 1], li[j] = li[j - 1];
        } else {
          lv[j] = v, li[j] = c;
          placed = true;
        }
      }
    }
    if (!placed) lv[0] = v, li[0] = c;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int r = 0; r < k; ++r) {
    float bv = lv[0];
    int bi = li[0];
    warp_best(bv, bi);
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    bv = lane < nwarps ? sv[lane] : -INFINITY;
    bi = lane < nwarps ? si[lane] : INT_MAX;
    warp_best(bv, bi);
    if (li[0] == bi) {  // the owner pops its head
#pragma unroll
      for (int j = 0; j < K - 1; ++j) lv[j] = lv[j + 1], li[j] = li[j + 1];
      lv[K - 1] = -INFINITY, li[K - 1] = INT_MAX;
    }
    if (threadIdx.x == 0) {
      const int64_t o = static_cast<int64_t>(blockIdx.x) * k + r;
      if (indices) static_cast<int32_t*>(out)[o] = bi;
      else static_cast<T*>(out)[o] = from_c<T>(bv);
    }
    __syncthreads();
  }
}

}  // namespace

void launch_reduce(ReduceFn fn, DType dtype, const void* x, void* y, int64_t outer, int64_t reduce, int64_t inner,
                   cudaStream_t stream) {
  RLX_CHECK(outer >= 0 && reduce >= 0 && inner >= 0, "Reduce: bad view ", outer, "x", reduce, "x", inner);
  const int64_t n_out = outer * inner;
  if (n_out == 0) return;
  RLX_CHECK(outer * ((inner + 31) / 32) < (int64_t{1} << 31), "Reduce: ", n_out, " outputs exceed the grid limit");
  dispatch_reduce_type(dtype, "Reduce", [&](auto tag) {
    using T = decltype(tag);
    if (reduce == 0) {
      RLX_CHECK(fn == ReduceFn::Sum || fn == ReduceFn::Mean, "Reduce: ", reduce_name(fn), " over an empty axis");
      T fill{};
      if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
        const float f = fn == ReduceFn::Mean ? __builtin_nanf("") : 0.0f;
        if constexpr (std::is_same_v<T, __half>) fill = __float2half_rn(f);
        else fill = __float2bfloat16_rn(f);
      } else if constexpr (std::is_floating_point_v<T>) {
        fill = fn == ReduceFn::Mean ? static_cast<T>(__builtin_nan("")) : T(0);
      }
      fill_kernel<T><<<static_cast<unsigned>((n_out + 255) / 256 < 65536 ? (n_out + 255) / 256 : 65536), 256, 0,
                       stream>>>(static_cast<T*>(y), n_out, fill);
      RLX_CUDA_CHECK_LAUNCH("Reduce");
      return;
    }
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    switch (fn) {
      case ReduceFn::Sum:
      case ReduceFn::Mean: return launch_reduce_t<T, RKind::Sum>(xt, yt, outer, reduce, inner, fn, stream);
      case ReduceFn::Max: return launch_reduce_t<T, RKind::Max>(xt, yt, outer, reduce, inner, fn, stream);
      case ReduceFn::Min: return launch_reduce_t<T, RKind::Min>(xt, yt, outer, reduce, inner, fn, stream);
    }
  });
}

ArgmaxPlan argmax_plan(DType dtype, int64_t outer, int64_t reduce, int64_t inner) {
  ArgmaxPlan plan;
  // Split only rows long enough that one CTA per row leaves most SMs idle.
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  const int sms = device_props(device).sm_count;
  if (inner != 1 || reduce < 16384 || outer <= 0 || outer * 4 > sms || reduce > INT_MAX) return plan;
  int64_t part_bytes = 0;
  dispatch_reduce_type(dtype, "ArgMax", [&](auto tag) {
    part_bytes = static_cast<int64_t>(sizeof(ArgmaxPart<compute_t<decltype(tag)>>));
  });
  // About two CTAs per SM over all rows, each with ≥ 4096 elements; chunks
  // are whole 2048-element steps so each split's vector loads stay aligned.
  const int64_t want = std::clamp<int64_t>(2 * sms / outer, 1, (reduce + 4095) / 4096);
  plan.chunk = ((reduce + want - 1) / want + 2047) / 2048 * 2048;
  plan.splits = static_cast<int>((reduce + plan.chunk - 1) / plan.chunk);
  if (plan.splits <= 1) return ArgmaxPlan{};
  plan.workspace_bytes = static_cast<size_t>(outer * plan.splits * part_bytes);
  plan.counters = static_cast<size_t>(outer);
  return plan;
}

void launch_argmax(DType dtype, const void* x, int32_t* y, int64_t outer, int64_t reduce, int64_t inner,
                   cudaStream_t stream, void* workspace, int32_t* counters) {
  RLX_CHECK(reduce > 0 && reduce <= INT_MAX, "ArgMax: axis of ", reduce, " elements (need 1 .. 2^31-1)");
  if (outer * inner == 0) return;
  const ArgmaxPlan plan = workspace && counters ? argmax_plan(dtype, outer, reduce, inner) : ArgmaxPlan{};
  dispatch_reduce_type(dtype, "ArgMax", [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const int n = static_cast<int>(reduce);
    if (plan.splits > 1) {
      RLX_CHECK(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "ArgMax: workspace must be 16-byte aligned");
      constexpr int V = static_cast<int>(16 / sizeof(T));
      auto* parts = static_cast<ArgmaxPart<compute_t<T>>*>(workspace);
      const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(outer));
      const int chunk = static_cast<int>(plan.chunk);
      if (n % V == 0 && aligned(x, 16)) argmax_split_kernel<T, V><<<grid, 256, 0, stream>>>(xt, y, n, chunk, parts, counters);
      else argmax_split_kernel<T, 1><<<grid, 256, 0, stream>>>(xt, y, n, chunk, parts, counters);
    } else if (inner == 1) {
      constexpr int V = static_cast<int>(16 / sizeof(T));
      const bool block_mode = n >= 2048 || outer < 264;
      const dim3 block = block_mode ? dim3(256) : dim3(32, 8);
      const auto grid = static_cast<unsigned>(block_mode ? outer : (outer + 7) / 8);
      if (n % V == 0 && aligned(x, 16)) argmax_rows_kernel<T, V><<<grid, block, 0, stream>>>(xt, y, outer, n);
      else argmax_rows_kernel<T, 1><<<grid, block, 0, stream>>>(xt, y, outer, n);
    } else {
      const auto grid = static_cast<unsigned>(outer * ((inner + 31) / 32));
      argmax_cols_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(xt, y, reduce, inner);
    }
    RLX_CUDA_CHECK_LAUNCH("ArgMax");
  });
}

void launch_topk(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, int k, bool indices,
                 cudaStream_t stream) {
  RLX_CHECK(cols <= INT_MAX && k >= 1 && k <= cols && k <= kMaxTopK, "TopK: k=", k, " outside [1, min(", cols,
            ", ", kMaxTopK, ")]");
  if (rows == 0) return;
  dispatch_float(dtype, "TopK", [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const auto grid = static_cast<unsigned>(rows);
    const int n = static_cast<int>(cols);
    if (k <= 8) topk_kernel<T, 8><<<grid, 128, 0, stream>>>(xt, y, n, k, indices);
    else if (k <= 16) topk_kernel<T, 16><<<grid, 128, 0, stream>>>(xt, y, n, k, indices);
    else if (k <= 32) topk_kernel<T, 32><<<grid, 64, 0, stream>>>(xt, y, n, k, indices);
    else topk_kernel<T, 64><<<grid, 64, 0, stream>>>(xt, y, n, k, indices);
    RLX_CUDA_CHECK_LAUNCH("TopK");
  });
}

}  // namespace rlx::cuda
