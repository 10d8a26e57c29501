// Private to the CPU backend: quantized weight rows dotted with one f32
// activation row without an f32 copy of the rows (the decode GEMV's inner
// loop; the method and its error bounds are in quant_dot.cpp's header).
#pragma once
#include <cstdint>
#include <vector>

#include "rlx/core/dtype.h"

namespace rlx::cpu {

// Whether quant_dot takes `type` on this CPU: every GGUF quant type, given
// AVX2 + FMA.
bool quant_dot_supported(DType type);
// Whether its int8 path sums byte products with AVX512-VNNI (the CPU has it
// with AVX512VL, and RLX_CPU_GEMV_VNNI is on).
bool quant_dot_vnni();

// The rows of x [M, K] (M ≤ kMaxRows) prepared for quant_dot_rows with
// weights of `type`, once per GEMV: Σx per 32 (the mins of q4_1, q5_1, q4_k,
// q5_k) or per 16 (q2_k's) and, on the int8 path (every type but q8_0, q8_1
// and q8_k), x re-quantized to two int8 levels per 32.
struct QuantDotX {
  static constexpr int64_t kMaxRows = 8;
  QuantDotX(DType type, const float* x, int64_t M, int64_t K);
  const float* x;
  int64_t M, K;
  bool int8 = false;           // the int8 path applies (type, RLX_CPU_GEMV_Q8, every row finite)
  std::vector<float> xsum;     // [M, K / 32]
  std::vector<float> xsum16;   // [M, K / 16] (q2_k)
  std::vector<int8_t> a, b;    // [M, K]: x ≈ dx·(256·a + b)
  std::vector<float> dx;       // [M, K / 32]
  std::vector<int32_t> sums4;  // [M, K / 4]: 256·Σa + Σb over each four consecutive elements
};

// y[m·ldy + r] = Σ_k x[m, k]·w_r[k] for m < x.M and the rows w_r = w +
// r·row_bytes, r < rows, each of x.K elements of `type` (a multiple of its
// block size). Each weight row is read once for all M rows of x.
void quant_dot_rows(DType type, const uint8_t* w, int64_t row_bytes, const QuantDotX& x, int64_t rows, float* y,
                    int64_t ldy);

// One row of weights and one of x.
float quant_dot(DType type, const uint8_t* w, const float* x, int64_t K);

// rows × K weights of `type` (rows row_bytes apart) to f32 y [rows, K]: the
// same bits as the reference dequantize_row (rlx/formats/quant.h), decoded
// as quant_dot decodes them where it takes the type, else by the reference.
void dequantize_rows(DType type, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t K, float* y);

}  // namespace rlx::cpu
