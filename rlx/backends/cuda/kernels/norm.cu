// LayerNorm / RmsNorm (optionally residual-fused) over the last axis.
//
// Algorithm: the row is held in registers. Each thread loads NV 16-byte
// vectors of x (and residual) — all loads issued before the first use — so
// x is read from DRAM exactly once; s = x + residual is formed in f32, the
// mean is reduced, then the centered sum of squares (two-pass over registers:
// exact, no Welford drift), then each thread normalizes and stores the same
// vectors it loaded (so y may alias x). gamma/beta are read in the store pass;
// they are shared by every row and stay in L1/L2.
//
// Memory plan: row r, thread t, vector j covers columns (j·tpr + t)·V .. +V
// (V = 16 / sizeof(T)); consecutive threads touch consecutive 16-byte chunks,
// so every warp access is fully coalesced.
//   cols ≤ 1024  : one warp per row (NV ≤ 32/V), 4 rows per 128-thread block;
//                  a half-warp per row, 8 per block, when a warp would leave
//                  lanes idle (small_row_layout).
//   ≤ 16384      : one block per row, tpr = cols/(4·V) threads (NV = 4).
// Rows whose length is not a multiple of V, misaligned pointers, param dtypes
// other than f32 or x's dtype (or beta's differing from gamma's), or rows too
// long for registers use a scalar block-per-row kernel that reads the row
// three times (the re-reads hit L1/L2).
//
// Embedding sum + LayerNorm (BERT's embedding layer): the same register
// layout, the row formed as the f32 sum of up to 4 table rows picked by their
// indices (word [B, L], position [L] repeated over B, token type [B, L]).
// Every term's index is loaded first, then the terms' row vectors together,
// so the latencies overlap; only y is written. A bad index adds zeros and sets the
// term's error flag. Shapes the vector path cannot take use a scalar
// block-per-row kernel that re-reads the rows.
//
// Post-norm residual (x + rms(a)·w1, then optionally rms of that ·w2): one
// block per row holding it in registers (w1, w2 fetched before pdl_wait):
// Σa²; y = x + a·rstd·w1 stored (and Σy² of the rounded y); h = y·rstd2·w2.
// Rows past 16 columns per thread take a three-pass loop instead. Decode rows
// are short (a few thousand columns), so the launch and the latency chain, not
// the bytes, are the cost: two norms and an add become one kernel.
#include "rlx/backends/cuda/kernels/norm.h"

#include <type_traits>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/device/vec.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"
#include "rlx/backends/cuda/kernels/movement.h"  // kErrIndexOutOfRange

namespace rlx::cuda {
namespace {

using dev::from_f32;
using dev::to_f32;

using dev::Vec;
using dev::load_f32;
using dev::store_f32;

struct NormArgs {
  const void* x;
  const void* res;
  const void* gamma;
  const void* beta;
  void* y;
  void* sum;
  int64_t rows;
  int cols;
  float eps;
  DType beta_dtype;  // beta's storage type (only the scalar kernel reads a beta unlike gamma)
};

// Sum over the threads of one row: a warp or a half-warp (blockDim.x ≤ 32;
// xor offsets below blockDim.x never cross into the other row of a warp) or
// the whole block.
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  if (blockDim.x <= 32) {
    for (int o = blockDim.x >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
  return dev::block_sum(v, scratch);
}

// Rows of up to 1024 columns: threads per row (a warp, or a half-warp when
// that leaves no lane idle, e.g. 48 vectors = 384 f16 columns: 3 per lane
// instead of 2 with half the lanes idle on the second) and vectors per
// thread; 128-thread blocks of 128 / tpr rows.
struct RowLayout {
  int tpr, nv;
};
inline RowLayout small_row_layout(int64_t nvec) {
  const int tpr = nvec <= 64 && nvec % 32 != 0 && nvec % 16 == 0 ? 16 : 32;
  const int64_t need = (nvec + tpr - 1) / tpr;
  return {tpr, need <= 1 ? 1 : need <= 2 ? 2 : need <= 3 ? 3 : need <= 4 ? 4 : 8};
}

// Register budget: ≤ 16 floats of row per thread → 64 registers (1024 threads), else 128.
constexpr int max_threads_for(int elems_per_thread) { return elems_per_thread <= 16 ? 1024 : 512; }
// Packed 16-bit rows (bandwidth-bound, 64 bytes in flight per thread): blocks
// of up to 256 threads, 5 of them resident per SM (≤ 48 registers; at 40 they spilled).
constexpr int kPackedThreads = 256, kPackedMinBlocks = 5;

// Mean (0 for RMS) and 1/σ of a row held in registers by its tpr threads,
// two passes over the registers (exact, no Welford drift). Columns past the
// row hold zeros: the mean counts them as nothing, the centered pass skips them.
template <bool RMS, int NV, int V, typename Row>
__device__ __forceinline__ float2 row_mean_rstd(Row& v, int tpr, int t, int cols, float eps, float* scratch) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float mean = 0.0f;
  if constexpr (!RMS) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
      for (int i = 0; i < V; ++i) s += v.at(j, i);
    mean = row_sum(s, scratch) * inv_cols;
    v.reload();
  }
  float q = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if ((j * tpr + t) * V < cols) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = v.at(j, i) - mean;
        q = fmaf(d, d, q);
      }
    }
  return make_float2(mean, rsqrtf(row_sum(q, scratch) * inv_cols + eps));
}

// y = (v − mean)·rstd·gamma (+ beta), each thread storing the vectors it
// loaded; `so`, when set, also gets the row itself (rows held as floats only).
template <typename T, typename P, bool RMS, int NV, int V, bool kPacked, typename Row>
__device__ __forceinline__ void store_row_norm(const Row& v, float2 stats, const P* g, const P* b, T* y, T* so, int tpr,
                                               int t, int cols) {
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = (j * tpr + t) * V;
    if (c >= cols) continue;
    if constexpr (!kPacked) {
      if (so) store_f32<T, V>(so + c, v.f[j]);
    }
    float gv[V], bv[V], o[V];
    load_f32<P, V>(g + c, gv);
    if (!RMS && b) {
      load_f32<P, V>(b + c, bv);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) bv[i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = fmaf((v.at(j, i) - stats.x) * stats.y, gv[i], bv[i]);
    store_f32<T, V>(y + c, o);
  }
}

// kPacked: the row stays in its 16-bit vectors (dev::RowRegs); no residual;
// at most 256 threads, registers capped so that 1280 threads fit per SM.
template <typename T, typename P, bool RMS, int NV, bool kPacked = false>
__global__ void __launch_bounds__(kPacked ? kPackedThreads : max_threads_for(NV * 16 / sizeof(T)),
                                  kPacked ? kPackedMinBlocks : 1) norm_reg_kernel(NormArgs a) {
  dev::pdl_begin();
  constexpr int V = 16 / sizeof(T);
  __shared__ float scratch[32];
  // Rows past the end (only with several rows per block) compute on the last
  // row and store nothing: their lanes may share a warp, hence the shuffles,
  // with a real row.
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < a.rows;
  const int tpr = blockDim.x, t = threadIdx.x, cols = a.cols;
  const size_t base = static_cast<size_t>(live ? row : a.rows - 1) * cols;
  const T* x = static_cast<const T*>(a.x) + base;
  const T* r = a.res ? static_cast<const T*>(a.res) + base : nullptr;

  dev::RowRegs<T, V, NV, kPacked> v;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = (j * tpr + t) * V;
    if (c < cols) {
      v.load(j, x + c);
      if constexpr (!kPacked) {
        if (r) {
          float w[V];
          load_f32<T, V>(r + c, w);
#pragma unroll
          for (int i = 0; i < V; ++i) v.f[j][i] += w[i];
        }
      }
    } else {
      v.fill(j, 0.0f);
    }
  }

  const float2 stats = row_mean_rstd<RMS, NV, V>(v, tpr, t, cols, a.eps, scratch);
  if (!live) return;
  v.reload();
  T* so = a.sum ? static_cast<T*>(a.sum) + base : nullptr;
  store_row_norm<T, P, RMS, NV, V, kPacked>(v, stats, static_cast<const P*>(a.gamma), static_cast<const P*>(a.beta),
                                            static_cast<T*>(a.y) + base, so, tpr, t, cols);
}

// Scalar fallback: one block per row, three passes over the row.
template <typename T, typename P, bool RMS>
__global__ void __launch_bounds__(256) norm_generic_kernel(NormArgs a) {
  dev::pdl_begin();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int cols = a.cols;
  const size_t base = static_cast<size_t>(row) * cols;
  const T* x = static_cast<const T*>(a.x) + base;
  const T* r = a.res ? static_cast<const T*>(a.res) + base : nullptr;
  auto at = [&](int c) { return r ? to_f32(x[c]) + to_f32(r[c]) : to_f32(x[c]); };
  auto beta_at = [&](int c) {
    switch (a.beta_dtype) {
      case DType::F16: return to_f32(static_cast<const __half*>(a.beta)[c]);
      case DType::BF16: return to_f32(static_cast<const __nv_bfloat16*>(a.beta)[c]);
      default: return static_cast<const float*>(a.beta)[c];
    }
  };
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float mean = 0.0f;
  if constexpr (!RMS) {
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += at(c);
    mean = dev::block_sum(s, scratch) * inv_cols;
  }
  float q = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = at(c) - mean;
    q = fmaf(d, d, q);
  }
  const float rstd = rsqrtf(dev::block_sum(q, scratch) * inv_cols + a.eps);
  T* y = static_cast<T*>(a.y) + base;
  T* so = a.sum ? static_cast<T*>(a.sum) + base : nullptr;
  const P* g = static_cast<const P*>(a.gamma);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float s = at(c);  // read x and residual before writing (in-place safe)
    const float bias = (!RMS && a.beta) ? beta_at(c) : 0.0f;
    const float o = fmaf((s - mean) * rstd, to_f32(g[c]), bias);
    if (so) so[c] = from_f32<T>(s);
    y[c] = from_f32<T>(o);
  }
}

template <typename P>
constexpr DType dtype_of_storage() {
  if constexpr (std::is_same_v<P, __half>) return DType::F16;
  else if constexpr (std::is_same_v<P, __nv_bfloat16>) return DType::BF16;
  else return DType::F32;
}

inline bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

template <typename T, typename P, bool RMS>
void launch_norm_t(const NormArgs& a, cudaStream_t stream, const char* op) {
  constexpr int V = 16 / sizeof(T);
  constexpr bool kRegParams = std::is_same_v<P, float> || std::is_same_v<P, T>;
  const bool same_beta = !a.beta || a.beta_dtype == dtype_of_storage<P>();
  bool reg = kRegParams && same_beta && a.cols % V == 0 && aligned(a.x, 16) && aligned(a.y, 16) &&
             (!a.res || aligned(a.res, 16)) && (!a.sum || aligned(a.sum, 16)) &&
             aligned(a.gamma, sizeof(P) * V) && (!a.beta || aligned(a.beta, sizeof(P) * V));
  int nv = 0;
  bool packed = false;
  dim3 block, grid;
  if (reg) {
    const int nvec = a.cols / V;
    if (a.cols <= 1024) {  // a warp or half-warp per row (NV·V ≤ 32 floats per lane)
      const RowLayout l = small_row_layout(nvec);
      nv = l.nv;
      block = dim3(l.tpr, 128 / l.tpr);
      grid = dim3(static_cast<unsigned>((a.rows + block.y - 1) / block.y));
    } else {  // one block per row, 16 floats of it per thread, or 4 packed vectors
      // Bandwidth needs both enough bytes in flight per thread and few
      // enough registers for many resident threads. f32 rows take NV = 4 as
      // floats; 16-bit rows without a residual, up to 8192 columns, take
      // NV = 4 packed (as 32 floats they held too many registers: 76-81% of
      // the copy bandwidth at 4096 columns; NV = 2 as floats moved too few
      // bytes: 70-86%); 16-bit rows with a residual read two inputs, so
      // NV = 2 as floats keeps enough in flight (94-99%).
      packed = sizeof(T) == 2 && !a.res && !a.sum && nvec <= 4 * kPackedThreads;
      nv = packed ? 4 : 16 / V;
      const int tpr = ((nvec + nv * 32 - 1) / (nv * 32)) * 32;
      if (tpr > max_threads_for(16)) reg = false;  // > 16384 cols: scalar kernel
      block = dim3(tpr);
      grid = dim3(static_cast<unsigned>(a.rows));
    }
  }
  if constexpr (kRegParams) {
    if (reg) {
      if constexpr (sizeof(T) == 2) {
        if (packed) {
          norm_reg_kernel<T, P, RMS, 4, true><<<grid, block, 0, stream>>>(a);
          RLX_CUDA_CHECK_LAUNCH(op);
          return;
        }
      }
      switch (nv) {
        case 1: norm_reg_kernel<T, P, RMS, 1><<<grid, block, 0, stream>>>(a); break;
        case 2: norm_reg_kernel<T, P, RMS, 2><<<grid, block, 0, stream>>>(a); break;
        case 3: norm_reg_kernel<T, P, RMS, 3><<<grid, block, 0, stream>>>(a); break;
        case 4: norm_reg_kernel<T, P, RMS, 4><<<grid, block, 0, stream>>>(a); break;
        default:
          if constexpr (V == 4) norm_reg_kernel<T, P, RMS, 8><<<grid, block, 0, stream>>>(a);
          break;
      }
      RLX_CUDA_CHECK_LAUNCH(op);
      return;
    }
  }
  const int threads = a.cols >= 256 ? 256 : a.cols > 64 ? 128 : 32;
  norm_generic_kernel<T, P, RMS><<<static_cast<unsigned>(a.rows), threads, 0, stream>>>(a);
  RLX_CUDA_CHECK_LAUNCH(op);
}

template <bool RMS>
void launch_norm(DType x_dtype, DType param_dtype, const NormArgs& a, cudaStream_t stream, const char* op) {
  RLX_CHECK(a.cols > 0, op, ": cols must be positive");
  if (a.rows == 0) return;
  RLX_CHECK(a.rows < (int64_t{1} << 31), op, ": ", a.rows, " rows exceeds the grid limit");
  RLX_CHECK_AS(Unsupported, is_compute_float(a.beta_dtype), op, ": beta of dtype ", dtype_name(a.beta_dtype));
  dispatch_float(x_dtype, op, [&](auto xt) {
    using T = decltype(xt);
    dispatch_float(param_dtype, op, [&](auto pt) {
      using P = decltype(pt);
      launch_norm_t<T, P, RMS>(a, stream, op);
    });
  });
}

NormArgs make_args(const void* x, const void* residual, const void* gamma, const void* beta, void* y,
                   void* sum_out, int64_t rows, int64_t cols, float eps, DType beta_dtype, const char* op) {
  RLX_CHECK(cols < (int64_t{1} << 31), op, ": row length ", cols, " too large");
  RLX_CHECK(x && gamma && y, op, ": null x, gamma or y");
  return NormArgs{x, residual, gamma, beta, y, sum_out, rows, static_cast<int>(cols), eps, beta_dtype};
}

struct PostNormArgs {
  const void* x;
  const void* a;
  const void* w1;
  const void* w2;  // null: y only
  void* y;
  void* h;
  int cols;
  float eps;
};

template <typename T, typename P>
__global__ void __launch_bounds__(256) post_rms_norm_kernel(PostNormArgs p) {
  dev::pdl_begin();
  __shared__ float scratch[32];
  const size_t base = static_cast<size_t>(blockIdx.x) * p.cols;
  const T* x = static_cast<const T*>(p.x) + base;
  const T* a = static_cast<const T*>(p.a) + base;
  T* y = static_cast<T*>(p.y) + base;
  const P* w1 = static_cast<const P*>(p.w1);
  const float inv_cols = 1.0f / static_cast<float>(p.cols);
  float q = 0.0f;
  for (int c = threadIdx.x; c < p.cols; c += blockDim.x) {
    const float v = to_f32(a[c]);
    q = fmaf(v, v, q);
  }
  const float rstd = rsqrtf(dev::block_sum(q, scratch) * inv_cols + p.eps);
  float q2 = 0.0f;
  for (int c = threadIdx.x; c < p.cols; c += blockDim.x) {
    const T yv = from_f32<T>(to_f32(x[c]) + to_f32(a[c]) * rstd * to_f32(w1[c]));
    y[c] = yv;
    const float f = to_f32(yv);
    q2 = fmaf(f, f, q2);
  }
  if (!p.w2) return;  // uniform over the block
  const float rstd2 = rsqrtf(dev::block_sum(q2, scratch) * inv_cols + p.eps);
  const P* w2 = static_cast<const P*>(p.w2);
  T* h = static_cast<T*>(p.h) + base;
  for (int c = threadIdx.x; c < p.cols; c += blockDim.x) h[c] = from_f32<T>(to_f32(y[c]) * rstd2 * to_f32(w2[c]));
}

// The same with the row in registers (N columns per thread, column t + i·threads),
// for rows up to 16 per thread: the weights are fetched before pdl_wait() (no
// kernel writes them), so in a decode step their DRAM latency overlaps the
// kernel before, and x and a are read once, all loads issued together. In
// decode this one-CTA kernel beats computing the pair in every CTA of the GEMV
// that reads it (1,820 against 1,735 tok/s on Gemma 3 270M; branch
// gemv-post-norm, docs/performance.md, eighteenth session).
template <typename T, typename P, int N>
__global__ void __launch_bounds__(256) post_rms_norm_reg_kernel(PostNormArgs p) {
  __shared__ float scratch[32];
  const int t = threadIdx.x, nt = blockDim.x, cols = p.cols;
  const P* w1 = static_cast<const P*>(p.w1);
  const P* w2 = static_cast<const P*>(p.w2);
  float w1v[N], w2v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = t + i * nt;
    w1v[i] = c < cols ? to_f32(w1[c]) : 0.0f;
    w2v[i] = c < cols && w2 ? to_f32(w2[c]) : 0.0f;
  }
  dev::pdl_begin();
  const size_t base = static_cast<size_t>(blockIdx.x) * cols;
  const T* x = static_cast<const T*>(p.x) + base;
  const T* a = static_cast<const T*>(p.a) + base;
  T* y = static_cast<T*>(p.y) + base;
  float xv[N], av[N];
  float q = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = t + i * nt;
    xv[i] = c < cols ? to_f32(x[c]) : 0.0f;
    av[i] = c < cols ? to_f32(a[c]) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) q = fmaf(av[i], av[i], q);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float rstd = rsqrtf(dev::block_sum(q, scratch) * inv_cols + p.eps);
  float q2 = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = t + i * nt;
    const T yv = from_f32<T>(xv[i] + av[i] * rstd * w1v[i]);
    if (c < cols) y[c] = yv;
    xv[i] = to_f32(yv);  // the rounded sum, as the next norm sees it
    q2 = fmaf(xv[i], xv[i], q2);
  }
  if (!w2) return;  // uniform over the block
  const float rstd2 = rsqrtf(dev::block_sum(q2, scratch) * inv_cols + p.eps);
  T* h = static_cast<T*>(p.h) + base;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = t + i * nt;
    if (c < cols) h[c] = from_f32<T>(xv[i] * rstd2 * w2v[i]);
  }
}

// ------------------------------------------------------------ embedding sum + layer norm

// Loads every term's index first (so their latencies overlap), then resolves
// each to its table row: null for an absent term or an index outside
// [0, table_rows), which adds zeros and is flagged by the row's first thread.
template <typename T>
__device__ __forceinline__ void embedding_rows(const EmbeddingNormArgs& a, int64_t row, bool first,
                                               const T* (&src)[kMaxEmbeddingTerms]) {
  int64_t id[kMaxEmbeddingTerms];
#pragma unroll
  for (int k = 0; k < kMaxEmbeddingTerms; ++k) {
    const EmbeddingTerm& e = a.terms[k];
    id[k] = -1;
    if (k < a.n_terms) {
      // period < 2^31 and row < 2^31 (checked by the launcher): 32-bit modulo
      const int64_t j = e.period ? static_cast<uint32_t>(row) % static_cast<uint32_t>(e.period) : row;
      id[k] = e.index_dtype == DType::I64 ? static_cast<const int64_t*>(e.index)[j]
                                          : static_cast<const int32_t*>(e.index)[j];
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxEmbeddingTerms; ++k) {
    const EmbeddingTerm& e = a.terms[k];
    src[k] = nullptr;
    if (k >= a.n_terms) continue;
    if (id[k] >= 0 && id[k] < e.table_rows) src[k] = static_cast<const T*>(e.table) + id[k] * a.cols;
    else if (first && e.error_flag) atomicOr(e.error_flag, kErrIndexOutOfRange);
  }
}

// norm_reg_kernel's layout (warp or block per row, NV vectors of V per
// thread) with the row formed as the f32 sum of the terms' table rows.
template <typename T, typename P, int NV>
__global__ void __launch_bounds__(max_threads_for(NV * 16 / sizeof(T))) embedding_norm_reg_kernel(EmbeddingNormArgs a) {
  dev::pdl_begin();
  constexpr int V = 16 / sizeof(T);
  __shared__ float scratch[32];
  // Rows past the end compute on the last row and store nothing (see norm_reg_kernel).
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < a.rows;
  const int tpr = blockDim.x, t = threadIdx.x, cols = static_cast<int>(a.cols);
  const T* src[kMaxEmbeddingTerms];
  embedding_rows<T>(a, live ? row : a.rows - 1, t == 0 && live, src);

  // Straight-line predicated loads (an absent term, a bad index or a column
  // past the row loads nothing and adds zeros): with no branch between them,
  // the terms' vectors of a chunk are in flight together, and the chunks'
  // too as far as registers allow (f16, 384 columns: 4 terms × 1 chunk, twice).
  dev::RowRegs<T, V, NV, false> v;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = (j * tpr + t) * V;
    uint4 raw[kMaxEmbeddingTerms];
#pragma unroll
    for (int k = 0; k < kMaxEmbeddingTerms; ++k) {
      raw[k] = make_uint4(0, 0, 0, 0);
      if (src[k] && c < cols) raw[k] = *reinterpret_cast<const uint4*>(src[k] + c);
    }
#pragma unroll
    for (int i = 0; i < V; ++i) v.f[j][i] = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxEmbeddingTerms; ++k) {
      const auto& w = reinterpret_cast<const Vec<T, V>&>(raw[k]);
#pragma unroll
      for (int i = 0; i < V; ++i) v.f[j][i] += to_f32(w.v[i]);
    }
  }

  const float2 stats = row_mean_rstd<false, NV, V>(v, tpr, t, cols, a.eps, scratch);
  if (!live) return;
  store_row_norm<T, P, false, NV, V, false>(v, stats, static_cast<const P*>(a.gamma), static_cast<const P*>(a.beta),
                                            static_cast<T*>(a.y) + static_cast<size_t>(row) * cols, nullptr, tpr, t,
                                            cols);
}

// Scalar fallback (row length not a multiple of the vector width, misaligned
// pointers, other param dtypes, rows too long for registers): one block per
// row, three passes that re-read the table rows (the re-reads hit L1/L2).
template <typename T, typename P>
__global__ void __launch_bounds__(256) embedding_norm_generic_kernel(EmbeddingNormArgs a) {
  dev::pdl_begin();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int cols = static_cast<int>(a.cols);
  const T* src[kMaxEmbeddingTerms];
  embedding_rows<T>(a, row, threadIdx.x == 0, src);
  auto at = [&](int c) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxEmbeddingTerms; ++k)
      if (src[k]) s += to_f32(src[k][c]);
    return s;
  };
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += at(c);
  const float mean = dev::block_sum(s, scratch) * inv_cols;
  float q = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = at(c) - mean;
    q = fmaf(d, d, q);
  }
  const float rstd = rsqrtf(dev::block_sum(q, scratch) * inv_cols + a.eps);
  T* y = static_cast<T*>(a.y) + static_cast<size_t>(row) * cols;
  const P* g = static_cast<const P*>(a.gamma);
  const P* b = static_cast<const P*>(a.beta);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[c] = from_f32<T>(fmaf((at(c) - mean) * rstd, to_f32(g[c]), b ? to_f32(b[c]) : 0.0f));
}

template <typename T, typename P>
void launch_embedding_norm_t(const EmbeddingNormArgs& a, cudaStream_t stream, const char* op) {
  constexpr int V = 16 / sizeof(T);
  constexpr bool kRegParams = std::is_same_v<P, float> || std::is_same_v<P, T>;
  bool reg = kRegParams && a.cols % V == 0 && aligned(a.y, 16) && aligned(a.gamma, sizeof(P) * V) &&
             (!a.beta || aligned(a.beta, sizeof(P) * V));
  for (int k = 0; k < a.n_terms; ++k) reg = reg && aligned(a.terms[k].table, 16);  // rows then stay 16-byte aligned
  int nv = 0;
  dim3 block, grid;
  if (reg) {
    const int64_t nvec = a.cols / V;
    if (a.cols <= 1024) {  // a warp or half-warp per row
      const RowLayout l = small_row_layout(nvec);
      nv = l.nv;
      block = dim3(l.tpr, 128 / l.tpr);
      grid = dim3(static_cast<unsigned>((a.rows + block.y - 1) / block.y));
    } else {  // one block per row, 16 floats of it per thread
      nv = 16 / V;
      const int64_t tpr = (nvec + nv * 32 - 1) / (nv * 32) * 32;
      if (tpr > max_threads_for(16)) reg = false;  // > 16384 columns: scalar kernel
      block = dim3(static_cast<unsigned>(tpr));
      grid = dim3(static_cast<unsigned>(a.rows));
    }
  }
  if constexpr (kRegParams) {
    if (reg) {
      switch (nv) {
        case 1: embedding_norm_reg_kernel<T, P, 1><<<grid, block, 0, stream>>>(a); break;
        case 2: embedding_norm_reg_kernel<T, P, 2><<<grid, block, 0, stream>>>(a); break;
        case 3: embedding_norm_reg_kernel<T, P, 3><<<grid, block, 0, stream>>>(a); break;
        case 4: embedding_norm_reg_kernel<T, P, 4><<<grid, block, 0, stream>>>(a); break;
        default:
          if constexpr (V == 4) embedding_norm_reg_kernel<T, P, 8><<<grid, block, 0, stream>>>(a);
          break;
      }
      RLX_CUDA_CHECK_LAUNCH(op);
      return;
    }
  }
  const int threads = a.cols >= 256 ? 256 : a.cols > 64 ? 128 : 32;
  embedding_norm_generic_kernel<T, P><<<static_cast<unsigned>(a.rows), threads, 0, stream>>>(a);
  RLX_CUDA_CHECK_LAUNCH(op);
}

}  // namespace

void launch_post_rms_norm(DType x_dtype, DType param_dtype, const void* x, const void* a, const void* w1,
                          const void* w2, void* y, void* h, int64_t rows, int64_t cols, float eps,
                          cudaStream_t stream) {
  const char* op = "FusedPostRmsNorm";
  RLX_CHECK(cols > 0 && cols < (int64_t{1} << 31), op, ": row length ", cols, " out of range");
  RLX_CHECK(x && a && w1 && y, op, ": null x, a, w1 or y");
  RLX_CHECK((w2 == nullptr) == (h == nullptr), op, ": w2 and h must be given together");
  if (rows == 0) return;
  RLX_CHECK(rows < (int64_t{1} << 31), op, ": ", rows, " rows exceeds the grid limit");
  const PostNormArgs args{x, a, w1, w2, y, h, static_cast<int>(cols), eps};
  // Registers: about 4 columns per thread up to 1024 columns (fewer threads,
  // cheaper reductions), then 256 threads with up to 16 columns each.
  const int reg_threads = cols > 1024 ? 256 : static_cast<int>((cols + 4 * 32 - 1) / (4 * 32) * 32);
  int per = static_cast<int>((cols + reg_threads - 1) / reg_threads), n_reg = 1;
  while (n_reg < per) n_reg *= 2;
  const int threads = n_reg <= 16 ? reg_threads : cols >= 256 ? 256 : cols > 64 ? 128 : 32;
  dispatch_float(x_dtype, op, [&](auto xt) {
    using T = decltype(xt);
    dispatch_float(param_dtype, op, [&](auto pt) {
      using P = decltype(pt);
      const auto grid = static_cast<unsigned>(rows);
      switch (n_reg) {
        case 1: post_rms_norm_reg_kernel<T, P, 1><<<grid, threads, 0, stream>>>(args); break;
        case 2: post_rms_norm_reg_kernel<T, P, 2><<<grid, threads, 0, stream>>>(args); break;
        case 4: post_rms_norm_reg_kernel<T, P, 4><<<grid, threads, 0, stream>>>(args); break;
        case 8: post_rms_norm_reg_kernel<T, P, 8><<<grid, threads, 0, stream>>>(args); break;
        case 16: post_rms_norm_reg_kernel<T, P, 16><<<grid, threads, 0, stream>>>(args); break;
        default: post_rms_norm_kernel<T, P><<<grid, threads, 0, stream>>>(args);
      }
      RLX_CUDA_CHECK_LAUNCH(op);
    });
  });
}

void launch_layer_norm(DType x_dtype, DType param_dtype, const void* x, const void* residual, const void* gamma,
                       const void* beta, void* y, void* sum_out, int64_t rows, int64_t cols, float eps,
                       cudaStream_t stream, DType beta_dtype) {
  const char* op = residual ? "FusedResidualLayerNorm" : "LayerNorm";
  if (beta_dtype == DType::Count_) beta_dtype = param_dtype;
  launch_norm<false>(x_dtype, param_dtype,
                     make_args(x, residual, gamma, beta, y, sum_out, rows, cols, eps, beta_dtype, op), stream, op);
}

void launch_rms_norm(DType x_dtype, DType param_dtype, const void* x, const void* residual, const void* gamma,
                     void* y, void* sum_out, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  const char* op = residual ? "FusedResidualRmsNorm" : "RmsNorm";
  launch_norm<true>(x_dtype, param_dtype,
                    make_args(x, residual, gamma, nullptr, y, sum_out, rows, cols, eps, param_dtype, op), stream, op);
}

void launch_embedding_norm(const EmbeddingNormArgs& a, cudaStream_t stream) {
  const char* op = "EmbeddingLayerNorm";
  RLX_CHECK(a.n_terms >= 1 && a.n_terms <= kMaxEmbeddingTerms, op, ": ", a.n_terms, " terms outside [1, ",
            kMaxEmbeddingTerms, "]");
  RLX_CHECK(a.cols > 0 && a.cols < (int64_t{1} << 31), op, ": row length ", a.cols, " out of range");
  RLX_CHECK(a.rows >= 0 && a.rows < (int64_t{1} << 31), op, ": ", a.rows, " rows outside the grid limit");
  for (int k = 0; k < a.n_terms; ++k) {
    const EmbeddingTerm& e = a.terms[k];
    RLX_CHECK(e.index_dtype == DType::I32 || e.index_dtype == DType::I64, op, ": term ", k, ": index dtype ",
              dtype_name(e.index_dtype), " is not i32 or i64");
    RLX_CHECK(e.period >= 0 && e.period < (int64_t{1} << 31), op, ": term ", k, ": period ", e.period, " out of range");
  }
  if (a.rows == 0) return;
  RLX_CHECK(a.gamma && a.y, op, ": null gamma or y");
  for (int k = 0; k < a.n_terms; ++k)
    RLX_CHECK(a.terms[k].index && (a.terms[k].table || a.terms[k].table_rows == 0), op, ": term ", k,
              ": null table or index");
  dispatch_float(a.dtype, op, [&](auto xt) {
    using T = decltype(xt);
    dispatch_float(a.param_dtype, op, [&](auto pt) {
      using P = decltype(pt);
      launch_embedding_norm_t<T, P>(a, stream, op);
    });
  });
}

}  // namespace rlx::cuda
