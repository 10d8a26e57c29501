// Helpers shared by the CPU elementwise and movement kernels.
//
// StridedPlan walks an output tensor (contiguous, row-major) while tracking
// the element offset of each of N operands, given per-dim operand strides.
// Numpy broadcasting is the case where a stride is 0 (a size-1 or missing
// leading dim); Transpose is the case of permuted strides. Adjacent dims that
// every operand walks contiguously are merged first, so equal shapes become one
// flat dim and [A, B, C] + [C] becomes [A·B, C] with strides (0, 1).
// Kernels run over "rows" (runs of the innermost merged dim) with parallel_for.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rlx/backends/cpu/thread_pool.h"
#include "rlx/core/dtype.h"
#include "rlx/core/error.h"

namespace rlx::cpu {

// Non-quant scalar dtypes: what the byte-generic kernels (movement, Where) handle.
inline constexpr DType kPlainDTypes[] = {DType::F32, DType::F16,  DType::BF16, DType::F64,    DType::I8,
                                         DType::U8,  DType::I16,  DType::I32,  DType::I64,    DType::Bool,
                                         DType::C64, DType::F8E4M3, DType::F8E5M2};

// Work per parallel_for chunk, in elements; small tensors run on one thread.
inline constexpr int64_t kGrainElems = int64_t{1} << 15;

// Rank cap after merging dims (offsets live in fixed arrays inside the
// parallel loop, which must not allocate or throw).
inline constexpr size_t kMaxStridedRank = 16;

template <size_t N>
struct StridedPlan {
  std::vector<int64_t> dims;                       // merged output dims, rank >= 1
  std::vector<std::array<int64_t, N>> strides;     // per merged dim, per operand (elements)
  int64_t numel = 0;

  int64_t inner() const { return dims.back(); }
  int64_t rows() const { return numel == 0 ? 0 : numel / inner(); }
  const std::array<int64_t, N>& inner_strides() const { return strides.back(); }
};

// Builds a plan from output dims and per-dim operand strides (same rank);
// drops size-1 dims and merges dims walked contiguously by every operand.
template <size_t N>
StridedPlan<N> make_strided_plan(const std::vector<int64_t>& out, const std::vector<std::array<int64_t, N>>& st) {
  StridedPlan<N> p;
  p.numel = 1;
  for (int64_t d : out) p.numel *= d;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 1) continue;
    if (!p.dims.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k) merge = merge && p.strides.back()[k] == st[i][k] * out[i];
      if (merge) {
        p.dims.back() *= out[i];
        p.strides.back() = st[i];
        continue;
      }
    }
    p.dims.push_back(out[i]);
    p.strides.push_back(st[i]);
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    p.strides.push_back(std::array<int64_t, N>{});
  }
  RLX_CHECK_AS(Unsupported, p.dims.size() <= kMaxStridedRank, "cpu: strided loop of rank ", p.dims.size(),
               " exceeds ", kMaxStridedRank);
  return p;
}

// Numpy broadcasting of N operands to `out`: an operand dim equal to 1 (where
// the output's is not) or missing on the left gets stride 0.
template <size_t N>
StridedPlan<N> plan_broadcast(const std::vector<int64_t>& out, const std::array<const std::vector<int64_t>*, N>& ins) {
  const size_t r = out.size();
  std::vector<std::array<int64_t, N>> st(r);
  for (size_t k = 0; k < N; ++k) {
    const std::vector<int64_t>& d = *ins[k];
    RLX_ASSERT(d.size() <= r);
    const size_t lead = r - d.size();
    int64_t s = 1;
    for (size_t i = r; i-- > 0;) {
      if (i < lead) {
        st[i][k] = 0;
        continue;
      }
      const int64_t di = d[i - lead];
      RLX_ASSERT(di == out[i] || di == 1);
      st[i][k] = di == out[i] ? s : 0;
      s *= di;
    }
  }
  return make_strided_plan<N>(out, st);
}

// Calls f(out_offset, operand_offsets) for each row in [row_begin, row_end);
// a row is inner() consecutive output elements. Safe inside parallel_for.
template <size_t N, typename F>
void for_each_row(const StridedPlan<N>& p, int64_t row_begin, int64_t row_end, F&& f) {
  const size_t outer = p.dims.size() - 1;
  int64_t idx[kMaxStridedRank] = {};
  std::array<int64_t, N> off{};
  int64_t rem = row_begin;
  for (size_t i = outer; i-- > 0;) {
    idx[i] = rem % p.dims[i];
    rem /= p.dims[i];
    for (size_t k = 0; k < N; ++k) off[k] += idx[i] * p.strides[i][k];
  }
  const int64_t inner = p.inner();
  for (int64_t row = row_begin; row < row_end; ++row) {
    f(row * inner, off);
    for (size_t i = outer; i-- > 0;) {
      for (size_t k = 0; k < N; ++k) off[k] += p.strides[i][k];
      if (++idx[i] < p.dims[i]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= p.strides[i][k] * p.dims[i];
      idx[i] = 0;
    }
  }
}

// Runs f(out_offset, operand_offsets) over every row, in parallel.
template <size_t N, typename F>
void parallel_rows(ThreadPool& pool, const StridedPlan<N>& p, F&& f) {
  if (p.numel == 0) return;
  const int64_t grain = std::max<int64_t>(1, kGrainElems / p.inner());
  pool.parallel_for(p.rows(), grain, [&](int64_t b, int64_t e) { for_each_row(p, b, e, f); });
}

// Calls f(TypeTag<U>{}) with U an unsigned type of `bytes` bytes, for
// dtype-generic element copies.
template <typename T> struct TypeTag { using type = T; };
template <typename F>
void with_elem_size(int64_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(TypeTag<uint8_t>{}); return;
    case 2: f(TypeTag<uint16_t>{}); return;
    case 4: f(TypeTag<uint32_t>{}); return;
    case 8: f(TypeTag<uint64_t>{}); return;
    default: throw Unsupported(str("cpu: no element copy for ", bytes, "-byte elements"));
  }
}

}  // namespace rlx::cpu
