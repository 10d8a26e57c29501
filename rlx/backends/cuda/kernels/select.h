// Sample launcher (kernels in select.cu): one i32 token per row of logits,
// drawn on the device with the same rule and the same random numbers as the
// CPU kernel (rlx/backends/cpu/kernels/select.cpp, sampling_rng.h).
// Asynchronous on `stream`, no allocation (the caller passes a workspace), so
// it can be captured in a CUDA graph; launch failures throw rlx::DeviceError
// naming "Sample".
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "rlx/core/dtype.h"
#include "rlx/ir/ops.h"

namespace rlx::cuda {

// Workspace bytes launch_sample needs for logits [batch, vocab] (greedy: the
// split ArgMax's, reduce.h), and the zeroed counters greedy can use.
size_t sample_workspace_bytes(int64_t batch, int64_t vocab, const SampleAttrs& attrs);
size_t sample_counter_ints(DType dtype, int64_t batch, int64_t vocab, const SampleAttrs& attrs);

// logits [batch, vocab] (f32/f16/bf16) → out i32 [batch]. Per row, as the CPU:
//   temperature 0 → ArgMax (NaN above every number, first index on ties).
//   Else sort descending (ties: lower index first), keep K = top_k (0 = all);
//   a non-finite top logit makes the row greedy (first sorted index);
//   p_j = exp((l_j − l_top) / T) in f64; top_p < 1 keeps the shortest prefix
//   whose cumulative p reaches top_p · Σp; u = sample_uniform(seed, step, row)
//   with step = *step (device i32, nullable → 0); pick the first kept j with
//   cum_j > u · cum_last.
// Tolerance: cumulative sums are f64 block scans (the CPU sums sequentially)
// and f64 exp may differ from glibc's by 1 ulp, so a draw can differ from the
// CPU only when u · cum_last lies within ~1e-15 (relative) of a cumulative
// boundary, or top_p · Σp within ~1e-15 of one.
// Cost: with 0 < top_k ≤ 1024, a selection of each row's top K (two kernels)
// and the pick; otherwise one stable radix sort of the batch (CUB, in the
// workspace) plus three light kernels. Both give the same token. Temperature
// 0 is a single argmax kernel.
void launch_sample(DType dtype, const void* logits, int32_t* out, int64_t batch, int64_t vocab,
                   const SampleAttrs& attrs, const int32_t* step, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream, int32_t* counters = nullptr);

}  // namespace rlx::cuda
