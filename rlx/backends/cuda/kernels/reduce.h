// Reductions over one axis group: Reduce (sum, mean, max, min), ArgMax and
// TopK. Kernels in reduce.cu. Asynchronous on `stream`, no allocation; launch
// failures throw rlx::DeviceError naming the op, unsupported dtypes
// rlx::Unsupported.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"
#include "rlx/ir/ops.h"

namespace rlx::cuda {

// x viewed as contiguous [outer, reduce, inner] → y [outer, inner]. (Reducing
// several non-adjacent axes: transpose them together first.)
// dtype f32/f16/bf16/f64: Sum and Mean accumulate in f64 (as the CPU), Max and
// Min propagate NaN. i32/i64: Sum wraps like the storage type (64-bit
// accumulator), Mean = 64-bit sum / count truncated toward zero.
// reduce == 0: Sum → 0, Mean → NaN (floats) / 0 (ints), Max/Min throw
// rlx::InvalidArgument.
void launch_reduce(ReduceFn fn, DType dtype, const void* x, void* y, int64_t outer, int64_t reduce, int64_t inner,
                   cudaStream_t stream);

// y[o, i] = index (i32) of the largest x[o, :, i]; the first one on ties; NaN
// ranks above every number. dtype f32/f16/bf16/f64/i32/i64; reduce ≥ 1.
//
// Few long rows (an LLM's logits: 1 × 262144) would leave one CTA per row
// reading the whole row; with scratch they are cut into `splits` chunks, one
// CTA each, and the last CTA of a row (an arrival counter) reduces the
// chunks' winners. `workspace` (≥ plan.workspace_bytes, 16-byte aligned) and
// `counters` (≥ plan.counters int32s, zero before the launch and left zero
// after it: LowerCtx::counters) enable it; without them every row takes one CTA.
struct ArgmaxPlan {
  int splits = 1;
  int64_t chunk = 0;  // elements per split
  size_t workspace_bytes = 0;
  size_t counters = 0;
};
ArgmaxPlan argmax_plan(DType dtype, int64_t outer, int64_t reduce, int64_t inner);
void launch_argmax(DType dtype, const void* x, int32_t* y, int64_t outer, int64_t reduce, int64_t inner,
                   cudaStream_t stream, void* workspace = nullptr, int32_t* counters = nullptr);

inline constexpr int kMaxTopK = 64;

// Largest k (1 ≤ k ≤ min(cols, kMaxTopK)) of each row of x [rows, cols],
// sorted descending (NaN first, ties by lower index). Writes values (x's
// dtype) or, when `indices`, i32 column indices into y [rows, k].
// dtype f32/f16/bf16.
void launch_topk(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, int k, bool indices,
                 cudaStream_t stream);

}  // namespace rlx::cuda
