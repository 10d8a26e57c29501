// Private to the CPU backend: one quantized weight row dotted with an f32
// vector without an f32 copy of the row (the decode GEMV's inner loop).
#pragma once
#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cpu {

// Whether quant_dot takes `type` on this CPU (AVX2; Q4_0, Q5_0, Q8_0, Q4_K,
// Q5_K, Q6_K).
bool quant_dot_supported(DType type);

// Σ x[i]·w[i] over a row of K elements of `type` (K a multiple of its block
// size). Bit-identical to dequantize_row followed by dot8(x, row, K): each
// weight is formed as the reference dequantizer forms it, and the products
// are summed in dot8's eight lanes, in its order.
float quant_dot(DType type, const uint8_t* w, const float* x, int64_t K);

// y[r] = quant_dot(type, w + r·row_bytes, x, K) for r < rows, several rows at
// a time (the same bits as one by one).
void quant_dot_rows(DType type, const uint8_t* w, int64_t row_bytes, const float* x, int64_t K, int64_t rows,
                    float* y);

}  // namespace rlx::cpu
