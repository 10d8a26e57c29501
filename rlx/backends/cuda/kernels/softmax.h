// Softmax launchers (kernels in softmax.cu). Asynchronous on `stream`, no
// allocation; launch failures throw rlx::DeviceError naming "Softmax".
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

// y[r, :] = softmax(x[r, :]) over the last axis of contiguous [rows, cols];
// dtype f32/f16/bf16, math in f32 (max, then Σ exp(x − max)). A row whose
// elements are all −inf gives zeros. y may alias x.
void launch_softmax(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, cudaStream_t stream);

// Softmax over the middle axis of a contiguous [outer, axis, inner] view
// (any axis of any tensor: outer = Π dims before, inner = Π dims after).
// inner == 1 uses the last-axis kernel. y may alias x.
void launch_softmax_axis(DType dtype, const void* x, void* y, int64_t outer, int64_t axis, int64_t inner,
                         cudaStream_t stream);

}  // namespace rlx::cuda
