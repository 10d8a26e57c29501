// Data-movement CPU kernels: Reshape, Transpose, Narrow, Concat, Expand,
// Gather, WriteSlice. All are byte copies, generic over the element size of
// the non-quant dtypes (kPlainDTypes); Reshape also moves quant blocks.
//
// - Reshape is a view (the memory planner aliases it to its input), so the
//   kernel only copies when the two pointers differ.
// - WriteSlice also aliases: its result is the state it writes into.
//   offset + update length must fit in the state dim; otherwise it throws
//   InvalidArgument naming the node, before writing anything.
// - Gather validates every index first: an index outside [0, V) (negative
//   indices do not wrap) throws InvalidArgument naming the node, the index,
//   its position and V. Packed quant tables have no kernel here yet.
#include <cstring>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/strided.h"
#include "rlx/core/half.h"

namespace rlx::cpu {
namespace {

int64_t prod(const std::vector<int64_t>& d, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= d[i];
  return p;
}

// Copies `rows` independent blocks in parallel; bytes_per_row sets the grain.
template <typename F>
void parallel_blocks(ThreadPool& pool, int64_t rows, int64_t bytes_per_row, F&& f) {
  const int64_t grain = std::max<int64_t>(1, (kGrainElems * 4) / std::max<int64_t>(1, bytes_per_row));
  pool.parallel_for(rows, grain, f);
}

void reshape_kernel(KernelArgs& a) {
  if (a.in_raw(0) == a.out_raw()) return;
  const int64_t bytes = dtype_bytes(a.out_dtype(), a.out_numel());
  if (bytes > 0) std::memcpy(a.out_raw(), a.in_raw(0), static_cast<size_t>(bytes));
}

// Copies a strided view of the input into the contiguous output. Rows whose
// innermost stride is 1 are memcpy'd and stride-0 rows filled; other rows
// (a transpose that moves the innermost dim) are copied 16 rows × 16 columns
// at a time, so the strided reads of neighbouring rows share cache lines.
void strided_copy(KernelArgs& a, const StridedPlan<1>& plan) {
  if (plan.numel == 0) return;
  const int64_t esz = dtype_size(a.out_dtype());
  const int64_t stride = plan.inner_strides()[0];
  const int64_t inner = plan.inner();
  constexpr int kTile = 16;
  with_elem_size(esz, [&](auto tag) {
    using E = typename decltype(tag)::type;
    const E* x = a.in<E>(0);
    E* y = a.out<E>();
    const int64_t grain = std::max<int64_t>(kTile, kGrainElems / inner);
    a.pool.parallel_for(plan.rows(), grain, [&](int64_t b, int64_t e) {
      int64_t out_off[kTile], in_off[kTile];
      int rows = 0;
      auto flush = [&] {
        for (int64_t j0 = 0; j0 < inner; j0 += kTile) {
          const int64_t j1 = std::min(inner, j0 + kTile);
          for (int t = 0; t < rows; ++t) {
            const E* src = x + in_off[t];
            E* dst = y + out_off[t];
            for (int64_t j = j0; j < j1; ++j) dst[j] = src[j * stride];
          }
        }
        rows = 0;
      };
      for_each_row(plan, b, e, [&](int64_t oo, const std::array<int64_t, 1>& off) {
        if (stride == 1) {
          std::memcpy(y + oo, x + off[0], static_cast<size_t>(inner) * sizeof(E));
        } else if (stride == 0) {
          std::fill(y + oo, y + oo + inner, x[off[0]]);
        } else {
          out_off[rows] = oo;
          in_off[rows] = off[0];
          if (++rows == kTile) flush();
        }
      });
      flush();
    });
  });
}

void transpose_kernel(KernelArgs& a) {
  const auto& perm = a.attrs<TransposeAttrs>().perm;
  const auto& in = a.in_dims(0);
  std::vector<int64_t> in_strides(in.size(), 1);
  for (size_t i = in.size(); i-- > 1;) in_strides[i - 1] = in_strides[i] * in[i];
  std::vector<std::array<int64_t, 1>> st(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) st[i][0] = in_strides[static_cast<size_t>(perm[i])];
  strided_copy(a, make_strided_plan<1>(a.out_dims(), st));
}

void expand_kernel(KernelArgs& a) { strided_copy(a, plan_broadcast<1>(a.out_dims(), {&a.in_dims(0)})); }

void narrow_kernel(KernelArgs& a) {
  const auto& at = a.attrs<NarrowAttrs>();
  const auto& in = a.in_dims(0);
  const int rank = static_cast<int>(in.size());
  const auto ax = static_cast<size_t>(at.axis < 0 ? at.axis + rank : at.axis);
  const int64_t esz = dtype_size(a.out_dtype());
  const int64_t outer = prod(in, 0, ax);
  const int64_t inner_bytes = prod(in, ax + 1, in.size()) * esz;
  const int64_t src_row = in[ax] * inner_bytes, dst_row = at.length * inner_bytes;
  RLX_CHECK(at.start >= 0 && at.start + at.length <= in[ax], a.where(), ": narrow [", at.start, ", ",
            at.start + at.length, ") exceeds dim ", in[ax]);
  const auto* x = static_cast<const char*>(a.in_raw(0)) + at.start * inner_bytes;
  auto* y = static_cast<char*>(a.out_raw());
  if (dst_row == 0 || (outer == 1 && y == x)) return;  // a contiguous run the planner made a view
  parallel_blocks(a.pool, outer, dst_row, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) std::memcpy(y + o * dst_row, x + o * src_row, static_cast<size_t>(dst_row));
  });
}

void concat_kernel(KernelArgs& a) {
  const auto& out = a.out_dims();
  const int rank = static_cast<int>(out.size());
  const int axis = a.attrs<AxisAttrs>().axis;
  const auto ax = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  const int64_t esz = dtype_size(a.out_dtype());
  const int64_t outer = prod(out, 0, ax);
  const int64_t inner_bytes = prod(out, ax + 1, out.size()) * esz;
  const int64_t dst_row = out[ax] * inner_bytes;
  std::vector<int64_t> src_row(a.num_inputs()), dst_off(a.num_inputs());
  int64_t off = 0;
  for (size_t i = 0; i < a.num_inputs(); ++i) {
    src_row[i] = a.in_dims(i)[ax] * inner_bytes;
    dst_off[i] = off;
    off += src_row[i];
  }
  RLX_ASSERT(off == dst_row);
  auto* y = static_cast<char*>(a.out_raw());
  if (dst_row == 0) return;
  parallel_blocks(a.pool, outer, dst_row, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o)
      for (size_t i = 0; i < src_row.size(); ++i)
        if (src_row[i] > 0)
          std::memcpy(y + o * dst_row + dst_off[i], static_cast<const char*>(a.in_raw(i)) + o * src_row[i],
                      static_cast<size_t>(src_row[i]));
  });
}

template <typename I>
void gather_rows(KernelArgs& a) {
  const auto& table = a.in_dims(0);
  const int64_t vocab = table[0];
  const int64_t row = prod(table, 1, table.size()) * dtype_size(a.out_dtype());
  const int64_t n = a.in_numel(1);
  const I* idx = a.in<I>(1);
  check_row_indices(a, idx, n, vocab);
  const auto* x = static_cast<const char*>(a.in_raw(0));
  auto* y = static_cast<char*>(a.out_raw());
  if (row == 0) return;
  parallel_blocks(a.pool, n, row, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memcpy(y + i * row, x + static_cast<int64_t>(idx[i]) * row, static_cast<size_t>(row));
  });
}

void gather_kernel(KernelArgs& a) {
  if (a.in_dtype(1) == DType::I32) gather_rows<int32_t>(a);
  else gather_rows<int64_t>(a);
}

void write_slice_kernel(KernelArgs& a) {
  const auto& state = a.in_dims(0);
  const auto& update = a.in_dims(1);
  const int rank = static_cast<int>(state.size());
  const int axis = a.attrs<WriteSliceAttrs>().axis;
  const auto ax = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  RLX_CHECK(a.in_numel(2) >= 1, a.where(), ": the offset input is empty");
  const int64_t offset = a.in<int32_t>(2)[0];
  const int64_t len = update[ax];
  if (offset < 0 || offset + len > state[ax])
    throw InvalidArgument(str(a.where(), ": offset ", offset, " + update length ", len, " exceeds the state's dim ",
                              ax, " of ", state[ax]));
  const int64_t esz = dtype_size(a.out_dtype());
  const int64_t outer = prod(state, 0, ax);
  const int64_t inner_bytes = prod(state, ax + 1, state.size()) * esz;
  const int64_t dst_row = state[ax] * inner_bytes, src_row = len * inner_bytes;
  auto* y = static_cast<char*>(a.out_raw());
  // The planner aliases the result to the state; copy it over when it did not.
  if (a.in_raw(0) != a.out_raw() && outer * dst_row > 0)
    std::memcpy(y, a.in_raw(0), static_cast<size_t>(outer * dst_row));
  if (src_row == 0) return;
  if (a.in_dtype(1) != a.out_dtype()) {  // a float update stored in another float type
    const float* u = a.in_f32(1);
    const int64_t row_elems = len * inner_bytes / esz, dst_elems = dst_row / esz;
    const int64_t at = offset * inner_bytes / esz;
    const DType t = a.out_dtype();
    parallel_blocks(a.pool, outer, src_row, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        for (int64_t i = 0; i < row_elems; ++i) {
          const float v = u[o * row_elems + i];
          const int64_t k = o * dst_elems + at + i;
          if (t == DType::F16) reinterpret_cast<uint16_t*>(y)[k] = f32_to_f16(v);
          else if (t == DType::BF16) reinterpret_cast<uint16_t*>(y)[k] = f32_to_bf16(v);
          else reinterpret_cast<float*>(y)[k] = v;
        }
    });
    return;
  }
  const auto* u = static_cast<const char*>(a.in_raw(1));
  parallel_blocks(a.pool, outer, src_row, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o)
      std::memcpy(y + o * dst_row + offset * inner_bytes, u + o * src_row, static_cast<size_t>(src_row));
  });
}

}  // namespace

void register_movement_kernels() {
  register_cpu_kernel(OpKind::Reshape, {kAnyDType, kAnyDType}, reshape_kernel, "cpu reshape (view)");
  register_cpu_kernel(OpKind::Bitcast, {kAnyDType, kAnyDType}, reshape_kernel, "cpu bitcast (view)");
  for (DType t : kPlainDTypes) {
    const std::string n(dtype_name(t));
    register_cpu_kernel(OpKind::Transpose, {t, t}, transpose_kernel, str("cpu transpose [", n, "]"));
    register_cpu_kernel(OpKind::Narrow, {t, t}, narrow_kernel, str("cpu narrow [", n, "]"));
    register_cpu_kernel(OpKind::Concat, {t, t}, concat_kernel, str("cpu concat [", n, "]"), /*variadic=*/true);
    register_cpu_kernel(OpKind::Expand, {t, t}, expand_kernel, str("cpu expand [", n, "]"));
    register_cpu_kernel(OpKind::Gather, {t, DType::I32, t}, gather_kernel, str("cpu gather [", n, ", i32 ids]"));
    register_cpu_kernel(OpKind::Gather, {t, DType::I64, t}, gather_kernel, str("cpu gather [", n, ", i64 ids]"));
    register_cpu_kernel(OpKind::WriteSlice, {t, t, DType::I32, t}, write_slice_kernel,
                        str("cpu write_slice [", n, "]"));
  }
  constexpr DType floats[] = {DType::F32, DType::F16, DType::BF16};
  for (DType st : floats)
    for (DType ut : floats)
      if (st != ut)
        register_cpu_kernel(OpKind::WriteSlice, {st, ut, DType::I32, st}, write_slice_kernel,
                            str("cpu write_slice [", dtype_name(ut), " -> ", dtype_name(st), "]"));
}

}  // namespace rlx::cpu
