// FusedSwiGLU / FusedGeGLU launchers (kernels in glu.cu). Asynchronous on
// `stream`, no allocation; launch failures throw rlx::DeviceError naming the op.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

enum class GluKind : uint8_t { SwiGLU, GeGLUErf, GeGLUTanh };

// x [rows, 2n] → y [rows, n]: y = act(x[:, :n]) · x[:, n:] — the gate is the
// FIRST half (one convention everywhere). act: silu(g) = g / (1 + exp(−g)),
// gelu erf, or gelu tanh (distinct functions). dtype f32/f16/bf16, f32 math
// with full-precision exp/erf/tanh.
void launch_glu(GluKind kind, DType dtype, const void* x, void* y, int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace rlx::cuda
