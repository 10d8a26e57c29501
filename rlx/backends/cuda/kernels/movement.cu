// Data movement: transpose, narrow, concat, expand, gather, write_slice.
//
// Everything here moves opaque elements; the launchers widen them to the
// largest 1/2/4/8/16-byte word that the row lengths, pitches and pointer
// alignments allow, so most copies run as 16-byte loads and stores.
//   copy2d (narrow, concat, write_slice): rows of contiguous bytes between two
//     pitched buffers; blockIdx.y strides over rows, threads over the words of
//     a row (coalesced on both sides). Concat copies up to 8 inputs per launch
//     (blockIdx.z picks the input).
//   strided gather (general transpose, expand): one output word per thread-
//     iteration, the output index decomposed over ≤ 6 merged dims with 32-bit
//     multiply-shift division; the source offset is Σ index·stride (stride 0 =
//     broadcast). Dims that stay adjacent are merged first, and the innermost
//     run (input stride 1) is folded into wider words.
//   tiled transpose ([B, M, N] → [B, N, M], what swapping the last two dims
//     reduces to): a 32 × 33 shared-memory tile; reads walk input rows and
//     writes walk output rows, both coalesced; the pad column avoids bank
//     conflicts.
//   gather: one output row per (outer, index) pair; the index is read once per
//     row, checked, and the row copied in words (zeros + error bit if invalid).
#include "rlx/backends/cuda/kernels/movement.h"

#include <algorithm>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/fastdiv.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"
#include "rlx/core/error.h"

namespace rlx::cuda {
namespace {

struct alignas(16) W16 {
  uint4 v;
};

using dev::FastDiv;

inline bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

// Largest word ≤ 16 bytes dividing every value and address.
size_t word_for(std::initializer_list<int64_t> sizes, std::initializer_list<const void*> ptrs) {
  size_t w = 16;
  while (w > 1) {
    bool ok = true;
    for (int64_t s : sizes) ok = ok && s % static_cast<int64_t>(w) == 0;
    for (const void* p : ptrs) ok = ok && aligned(p, w);
    if (ok) break;
    w /= 2;
  }
  return w;
}

template <typename F>
void with_word(size_t w, F&& f) {
  switch (w) {
    case 16: return f(W16{});
    case 8: return f(uint64_t{});
    case 4: return f(uint32_t{});
    case 2: return f(uint16_t{});
    default: return f(uint8_t{});
  }
}

dim3 rows_grid(int64_t rows, int64_t words, int threads) {
  const int64_t bx = (words + threads - 1) / threads;
  return dim3(static_cast<unsigned>(std::clamp<int64_t>(bx, 1, 1024)),
              static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 65535)));
}

// ------------------------------------------------------------ copy2d

constexpr int kMaxBatch = 8;

struct Copy2dBatch {
  int n = 0;
  int64_t rows = 0;
  const char* src[kMaxBatch];
  char* dst[kMaxBatch];
  int64_t src_pitch[kMaxBatch], dst_pitch[kMaxBatch], row_bytes[kMaxBatch];
};

template <typename E>
__global__ void __launch_bounds__(256) copy2d_kernel(Copy2dBatch b) {
  dev::pdl_begin();
  const int k = blockIdx.z;
  const int64_t words = b.row_bytes[k] / static_cast<int64_t>(sizeof(E));
  for (int64_t r = blockIdx.y; r < b.rows; r += gridDim.y) {
    const E* s = reinterpret_cast<const E*>(b.src[k] + r * b.src_pitch[k]);
    E* d = reinterpret_cast<E*>(b.dst[k] + r * b.dst_pitch[k]);
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < words;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      d[j] = s[j];
  }
}

void launch_copy2d(const Copy2dBatch& b, cudaStream_t stream, const char* op) {
  if (b.n == 0 || b.rows == 0) return;
  size_t w = 16;
  int64_t max_row = 0;
  for (int k = 0; k < b.n; ++k) {
    w = std::min(w, word_for({b.src_pitch[k], b.dst_pitch[k], b.row_bytes[k]}, {b.src[k], b.dst[k]}));
    max_row = std::max(max_row, b.row_bytes[k]);
  }
  if (max_row == 0) return;
  with_word(w, [&](auto tag) {
    using E = decltype(tag);
    dim3 grid = rows_grid(b.rows, max_row / static_cast<int64_t>(sizeof(E)), 256);
    grid.z = static_cast<unsigned>(b.n);
    copy2d_kernel<E><<<grid, 256, 0, stream>>>(b);
  });
  RLX_CUDA_CHECK_LAUNCH(op);
}

// ------------------------------------------------------------ strided gather

struct StridedCopy {
  int rank;
  int64_t dims[kMaxMoveRank];
  FastDiv fdiv[kMaxMoveRank];
  int64_t strides[kMaxMoveRank];  // input stride (in words) per output dim
  int64_t numel;
  bool small;
};

template <typename E>
__global__ void __launch_bounds__(256) strided_copy_kernel(const E* x, E* y, StridedCopy p) {
  dev::pdl_begin();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off = 0;
    if (p.small) {
      uint32_t t = static_cast<uint32_t>(i);
      for (int d = p.rank - 1; d >= 0; --d) {
        const uint32_t q = p.fdiv[d].div(t);
        off += static_cast<int64_t>(t - q * p.fdiv[d].d) * p.strides[d];
        t = q;
      }
    } else {
      int64_t t = i;
      for (int d = p.rank - 1; d >= 0; --d) {
        const int64_t q = t / p.dims[d];
        off += (t - q * p.dims[d]) * p.strides[d];
        t = q;
      }
    }
    y[i] = x[off];
  }
}

// [B, M, N] → [B, N, M] through a 32 × 33 tile; block 32 × 8, 4 rows per thread.
template <typename E>
__global__ void __launch_bounds__(256) transpose_tile_kernel(const E* x, E* y, int64_t B, int64_t M, int64_t N) {
  dev::pdl_begin();
  __shared__ E tile[32][33];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 32, m0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    const E* xb = x + b * M * N;
    E* yb = y + b * M * N;
#pragma unroll
    for (int k = 0; k < 32; k += 8) {
      const int64_t m = m0 + threadIdx.y + k, n = n0 + threadIdx.x;
      if (m < M && n < N) tile[threadIdx.y + k][threadIdx.x] = xb[m * N + n];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 32; k += 8) {
      const int64_t n = n0 + threadIdx.y + k, m = m0 + threadIdx.x;
      if (m < M && n < N) yb[n * M + m] = tile[threadIdx.x][threadIdx.y + k];
    }
    __syncthreads();
  }
}

// Merged output dims with per-dim input strides (elements); size-1 dims dropped.
struct Merged {
  int rank = 0;
  int64_t dims[kMaxMoveRank];
  int64_t strides[kMaxMoveRank];
};

Merged merge_dims(const int64_t* dims, const int64_t* strides, int rank) {
  Merged m;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 1) continue;
    if (m.rank > 0 && m.strides[m.rank - 1] == strides[i] * dims[i]) {
      m.dims[m.rank - 1] *= dims[i];
      m.strides[m.rank - 1] = strides[i];
      continue;
    }
    m.dims[m.rank] = dims[i];
    m.strides[m.rank] = strides[i];
    ++m.rank;
  }
  if (m.rank == 0) m.rank = 1, m.dims[0] = 1, m.strides[0] = 1;
  return m;
}

void launch_strided(size_t esz, const void* x, void* y, Merged m, cudaStream_t stream, const char* op) {
  int64_t numel = 1;
  for (int i = 0; i < m.rank; ++i) numel *= m.dims[i];
  if (numel == 0) return;
  // Fold the innermost contiguous run into wider words.
  size_t w = esz;
  if (m.strides[m.rank - 1] == 1) {
    const int64_t run_bytes = m.dims[m.rank - 1] * static_cast<int64_t>(esz);
    w = word_for({run_bytes}, {x, y});
    for (int i = 0; i < m.rank - 1; ++i)
      while (w > esz && (m.strides[i] * static_cast<int64_t>(esz)) % static_cast<int64_t>(w) != 0) w /= 2;
    w = std::max(w, esz);
  }
  const auto f = static_cast<int64_t>(w / esz);
  if (f > 1) {
    m.dims[m.rank - 1] /= f;
    for (int i = 0; i < m.rank - 1; ++i) m.strides[i] /= f;
    numel /= f;
  }
  StridedCopy p{};
  p.rank = m.rank;
  p.numel = numel;
  p.small = numel < (int64_t{1} << 31);
  for (int i = 0; i < m.rank; ++i) {
    p.dims[i] = m.dims[i];
    p.strides[i] = m.strides[i];
    if (p.small) p.fdiv[i] = FastDiv(m.dims[i]);
  }
  with_word(w, [&](auto tag) {
    using E = decltype(tag);
    const int64_t blocks = std::min<int64_t>((numel + 255) / 256, int64_t{1} << 20);
    strided_copy_kernel<E><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(static_cast<const E*>(x),
                                                                               static_cast<E*>(y), p);
  });
  RLX_CUDA_CHECK_LAUNCH(op);
}

// ------------------------------------------------------------ gather / write_slice

// Block (tpr, rows): threadIdx.y picks the row, threadIdx.x the word, so
// short rows (an embedding row is a few hundred bytes) share a block instead
// of each taking a mostly idle one: one block per row ran at 0.6 TB/s, bound
// by the CTA launch rate. Each thread takes kRows rows per step, their index
// loads and row loads all in flight together.
constexpr int kGatherRows = 4;

template <typename E, typename I, int kRows = kGatherRows>
__global__ void __launch_bounds__(256) gather_kernel(const E* table, const I* idx, E* y, int64_t outer, int64_t rows,
                                                     int64_t n_idx, int64_t words, int32_t* err) {
  dev::pdl_begin();
  const int64_t total = outer * n_idx;
  const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r0 < total; r0 += kRows * step) {
    int64_t src[kRows];  // word offset of the table row, or −1 (out of range: zeros)
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t r = r0 + u * step;
      src[u] = -1;
      if (r < total) {
        const int64_t o = r / n_idx, j = r - o * n_idx;
        const int64_t id = static_cast<int64_t>(idx[j]);
        if (id >= 0 && id < rows) src[u] = (o * rows + id) * words;
        else if (err && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(err, kErrIndexOutOfRange);
      }
    }
    for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < words;
         k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      E v[kRows];
#pragma unroll
      for (int u = 0; u < kRows; ++u) v[u] = src[u] >= 0 ? table[src[u] + k] : E{};
#pragma unroll
      for (int u = 0; u < kRows; ++u)
        if (r0 + u * step < total) y[(r0 + u * step) * words + k] = v[u];
    }
  }
}

template <typename E>
__global__ void __launch_bounds__(256) write_slice_kernel(E* state, const E* update, const int32_t* offset,
                                                          int64_t outer, int64_t state_len, int64_t update_len,
                                                          int64_t inner_words, int32_t* err) {
  dev::pdl_begin();
  const int64_t off = *offset;
  if (off < 0 || off + update_len > state_len) {
    if (err && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) atomicOr(err, kErrSliceOutOfRange);
    return;
  }
  const int64_t words = update_len * inner_words;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const E* s = update + o * words;
    E* d = state + (o * state_len + off) * inner_words;
    for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < words;
         k += static_cast<int64_t>(gridDim.x) * blockDim.x)
      d[k] = s[k];
  }
}

// write_slice with a float update stored in another float type (KV cache):
// one element per thread-iteration, converted through f32.
template <typename S, typename U>
__global__ void __launch_bounds__(256) write_slice_convert_kernel(S* state, const U* update, const int32_t* offset,
                                                                  int64_t outer, int64_t state_len, int64_t update_len,
                                                                  int64_t inner, int32_t* err) {
  dev::pdl_begin();
  const int64_t off = *offset;
  if (off < 0 || off + update_len > state_len) {
    if (err && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) atomicOr(err, kErrSliceOutOfRange);
    return;
  }
  const int64_t n = update_len * inner;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const U* s = update + o * n;
    S* d = state + (o * state_len + off) * inner;
    for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += static_cast<int64_t>(gridDim.x) * blockDim.x)
      d[k] = dev::from_f32<S>(dev::to_f32(s[k]));
  }
}

void check_elem(size_t esz, const char* op) {
  RLX_CHECK(esz == 1 || esz == 2 || esz == 4 || esz == 8 || esz == 16, op, ": element size ", esz,
            " is not 1, 2, 4, 8 or 16 bytes");
}

}  // namespace

void launch_transpose(size_t elem_size, const void* x, void* y, const int64_t* in_dims, const int* perm, int rank,
                      cudaStream_t stream) {
  check_elem(elem_size, "Transpose");
  RLX_CHECK(rank >= 1 && rank <= kMaxMoveRank, "Transpose: rank ", rank, " outside [1, ", kMaxMoveRank, "]");
  int64_t in_strides[kMaxMoveRank], out_dims[kMaxMoveRank], st[kMaxMoveRank];
  bool seen[kMaxMoveRank] = {};
  in_strides[rank - 1] = 1;
  for (int i = rank - 1; i > 0; --i) in_strides[i - 1] = in_strides[i] * in_dims[i];
  for (int i = 0; i < rank; ++i) {
    RLX_CHECK(perm[i] >= 0 && perm[i] < rank && !seen[perm[i]], "Transpose: invalid permutation");
    seen[perm[i]] = true;
    out_dims[i] = in_dims[perm[i]];
    st[i] = in_strides[perm[i]];
  }
  const Merged m = merge_dims(out_dims, st, rank);
  int64_t numel = 1;
  for (int i = 0; i < m.rank; ++i) numel *= m.dims[i];
  if (numel == 0) return;
  // [B, N, M] out reading [B, M, N] in: the tiled kernel.
  const bool r2 = m.rank == 2 && m.strides[0] == 1 && m.strides[1] == m.dims[0];
  const bool r3 = m.rank == 3 && m.strides[1] == 1 && m.strides[2] == m.dims[1] &&
                  m.strides[0] == m.dims[1] * m.dims[2];
  if ((r2 || r3) && elem_size <= 8) {
    const int64_t B = r3 ? m.dims[0] : 1, N = m.dims[m.rank - 2], M = m.dims[m.rank - 1];
    const dim3 grid(static_cast<unsigned>((N + 31) / 32), static_cast<unsigned>((M + 31) / 32),
                    static_cast<unsigned>(std::min<int64_t>(B, 65535)));
    RLX_CHECK((M + 31) / 32 <= 65535, "Transpose: ", M, " rows exceed the tiled kernel's grid");
    with_word(elem_size, [&](auto tag) {
      using E = decltype(tag);
      transpose_tile_kernel<E><<<grid, dim3(32, 8), 0, stream>>>(static_cast<const E*>(x), static_cast<E*>(y), B, M, N);
    });
    RLX_CUDA_CHECK_LAUNCH("Transpose");
    return;
  }
  launch_strided(elem_size, x, y, m, stream, "Transpose");
}

void launch_narrow(size_t elem_size, const void* x, void* y, int64_t outer, int64_t axis_len, int64_t start,
                   int64_t length, int64_t inner, cudaStream_t stream) {
  check_elem(elem_size, "Narrow");
  RLX_CHECK(start >= 0 && length >= 0 && start + length <= axis_len, "Narrow: [", start, ", ", start + length,
            ") exceeds dim ", axis_len);
  const auto esz = static_cast<int64_t>(elem_size);
  Copy2dBatch b;
  b.n = 1;
  b.rows = outer;
  b.src[0] = static_cast<const char*>(x) + start * inner * esz;
  b.dst[0] = static_cast<char*>(y);
  b.src_pitch[0] = axis_len * inner * esz;
  b.dst_pitch[0] = b.row_bytes[0] = length * inner * esz;
  launch_copy2d(b, stream, "Narrow");
}

void launch_concat(size_t elem_size, const void* const* inputs, const int64_t* lens, int n, void* y, int64_t outer,
                   int64_t inner, cudaStream_t stream) {
  check_elem(elem_size, "Concat");
  const auto esz = static_cast<int64_t>(elem_size);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += lens[i];
  int64_t off = 0;
  for (int i0 = 0; i0 < n; i0 += kMaxBatch) {
    Copy2dBatch b;
    b.rows = outer;
    for (int i = i0; i < std::min(n, i0 + kMaxBatch); ++i) {
      const int64_t row = lens[i] * inner * esz;
      if (row > 0) {
        b.src[b.n] = static_cast<const char*>(inputs[i]);
        b.dst[b.n] = static_cast<char*>(y) + off;
        b.src_pitch[b.n] = b.row_bytes[b.n] = row;
        b.dst_pitch[b.n] = total * inner * esz;
        ++b.n;
      }
      off += row;
    }
    launch_copy2d(b, stream, "Concat");
  }
}

void launch_expand(size_t elem_size, const void* x, void* y, const int64_t* in_dims, const int64_t* out_dims,
                   int rank, cudaStream_t stream) {
  check_elem(elem_size, "Expand");
  RLX_CHECK(rank >= 1 && rank <= kMaxMoveRank, "Expand: rank ", rank, " outside [1, ", kMaxMoveRank, "]");
  int64_t st[kMaxMoveRank];
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    RLX_SHAPE_CHECK(in_dims[i] == out_dims[i] || in_dims[i] == 1, "Expand: dim ", i, " (", in_dims[i],
                    ") does not broadcast to ", out_dims[i]);
    st[i] = in_dims[i] == 1 ? 0 : s;
    s *= in_dims[i];
  }
  launch_strided(elem_size, x, y, merge_dims(out_dims, st, rank), stream, "Expand");
}

void launch_gather(size_t elem_size, const void* table, int64_t outer, int64_t rows, int64_t inner,
                   DType index_dtype, const void* idx, int64_t n_idx, void* y, int32_t* error_flag,
                   cudaStream_t stream) {
  check_elem(elem_size, "Gather");
  RLX_CHECK_AS(Unsupported, index_dtype == DType::I32 || index_dtype == DType::I64, "Gather: indices of dtype ",
               dtype_name(index_dtype), " (need i32 or i64)");
  const int64_t row_bytes = inner * static_cast<int64_t>(elem_size);
  if (outer * n_idx == 0 || row_bytes == 0) return;
  const size_t w = word_for({row_bytes}, {table, y});
  with_word(w, [&](auto tag) {
    using E = decltype(tag);
    const int64_t words = row_bytes / static_cast<int64_t>(sizeof(E));
    const int tpr = words >= 256 ? 256 : static_cast<int>((words + 31) / 32 * 32);
    const dim3 threads(tpr, 256 / tpr);
    const int64_t row_groups = (outer * n_idx + kGatherRows * threads.y - 1) / (kGatherRows * threads.y);
    const dim3 grid = rows_grid(row_groups, words, tpr);
    if (index_dtype == DType::I32)
      gather_kernel<E, int32_t><<<grid, threads, 0, stream>>>(static_cast<const E*>(table),
                                                              static_cast<const int32_t*>(idx), static_cast<E*>(y),
                                                              outer, rows, n_idx, words, error_flag);
    else
      gather_kernel<E, int64_t><<<grid, threads, 0, stream>>>(static_cast<const E*>(table),
                                                              static_cast<const int64_t*>(idx), static_cast<E*>(y),
                                                              outer, rows, n_idx, words, error_flag);
  });
  RLX_CUDA_CHECK_LAUNCH("Gather");
}

void launch_write_slice(size_t elem_size, void* state, const void* update, const int32_t* offset, int64_t outer,
                        int64_t state_len, int64_t update_len, int64_t inner, int32_t* error_flag,
                        cudaStream_t stream) {
  check_elem(elem_size, "WriteSlice");
  const int64_t inner_bytes = inner * static_cast<int64_t>(elem_size);
  if (outer == 0 || update_len == 0 || inner_bytes == 0) return;
  const size_t w = word_for({inner_bytes}, {state, update});
  with_word(w, [&](auto tag) {
    using E = decltype(tag);
    const int64_t inner_words = inner_bytes / static_cast<int64_t>(sizeof(E));
    const dim3 grid = rows_grid(outer, update_len * inner_words, 256);
    write_slice_kernel<E><<<grid, 256, 0, stream>>>(static_cast<E*>(state), static_cast<const E*>(update), offset,
                                                    outer, state_len, update_len, inner_words, error_flag);
  });
  RLX_CUDA_CHECK_LAUNCH("WriteSlice");
}

void launch_write_slice_convert(DType state_dtype, DType update_dtype, void* state, const void* update,
                                const int32_t* offset, int64_t outer, int64_t state_len, int64_t update_len,
                                int64_t inner, int32_t* error_flag, cudaStream_t stream) {
  const char* op = "WriteSlice";
  const int64_t n = update_len * inner;
  if (outer == 0 || n == 0) return;
  const unsigned blocks_x = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024));
  const unsigned blocks_y = static_cast<unsigned>(std::min<int64_t>(outer, 65535));
  dispatch_float(state_dtype, op, [&](auto st) {
    using S = decltype(st);
    dispatch_float(update_dtype, op, [&](auto ut) {
      using U = decltype(ut);
      write_slice_convert_kernel<S, U><<<dim3(blocks_x, blocks_y), 256, 0, stream>>>(
          static_cast<S*>(state), static_cast<const U*>(update), offset, outer, state_len, update_len, inner,
          error_flag);
      RLX_CUDA_CHECK_LAUNCH(op);
    });
  });
}

}  // namespace rlx::cuda
