// The fused quantized GEMV on int8 activations (gemv_q8.cu), the path
// launch_quant_gemv takes first for the types with a dev::GemvUnit.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/backends/cuda/kernels/glu.h"
#include "rlx/core/dtype.h"

namespace rlx::cuda {

// launch_quant_gemv's contract (y [m, n] = x [m, k] · W [n, k]ᵀ, GLU as
// there) with x re-quantized per 32 elements to two int8 levels, x̃ =
// dx·(250·a + b) with 250·dx = max|x| / 127 over the 32 (a the rounded
// quotient, b the rounded remainder), so that four weights cost two integer
// dot-product instructions instead of four float multiply-adds:
// |y − x·Wᵀ| ≤ Σ_k |W[n, k]|·dx(k)/2 plus f32 rounding, i.e. x keeps about
// 15 bits of each block's largest value (a block whose largest |x| is under
// 1e-30 counts as zeros). A NaN or infinity in a block of x makes the rows'
// results NaN. The caller has checked the shapes, that the
// unit kernels take W (aligned blocks, an 8-byte-aligned end) and
// quant_gemv_q8_applies.
void launch_quant_gemv_q8(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m, int64_t n,
                          int64_t k, cudaStream_t stream, const GluKind* glu);

// RLX_CUDA_GEMV_Q8 (read on each call) selects w_type — auto: the unit
// decoders (dev::GemvUnit) with kQ8Default, 1: every unit decoder, 0: none — and x's 2·m·k int8 values and scales fit the 40 KB of
// shared memory the kernel stages them in (m·k ≤ 19,275).
bool quant_gemv_q8_applies(DType w_type, int64_t m, int64_t k);
// Whether RLX_CUDA_GEMV_Q8 allows int8 activations at all (not 0); throws
// InvalidArgument for a value other than auto, 1 or 0.
bool quant_gemv_q8_allowed();

}  // namespace rlx::cuda
