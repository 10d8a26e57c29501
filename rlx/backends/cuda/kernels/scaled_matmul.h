// The fp8 matmul's epilogue (ScaledMatMul) where cuBLASLt does not apply it,
// and per-row fp8 quantization (kernels in scaled_matmul.cu). Asynchronous on
// `stream`, no allocation.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

// y[m, n] = (sa · sb) · acc[m, n] + bias[n], rounded once to `out` (f32, f16
// or bf16). acc: f32 [M, N], which may be y itself when out is f32; null
// reads as zeros (K = 0). sa, sb: device f32, one value, or with *_rows one
// per row m / column n; null means 1. bias: [N] in `out`, or null.
struct ScaledEpilogue {
  const float* acc = nullptr;
  int64_t M = 0, N = 0;
  const float* sa = nullptr;
  bool sa_rows = false;
  const float* sb = nullptr;
  bool sb_rows = false;
  const void* bias = nullptr;
  DType out = DType::F32;
  void* y = nullptr;
};
void launch_scaled_epilogue(const ScaledEpilogue& e, cudaStream_t stream);

// quantize_fp8's per-row chain in one pass over x [rows, cols] (f32, f16 or
// bf16): with m = max(max_j |x[r, j]|, tiny), scale[r] = m / largest and
// q[r, j] = x[r, j] · (largest / m) rounded to `q_dtype` (f8e4m3 saturating,
// or f8e5m2) — the same f32 operations, so the same bits, as the graph's Abs,
// Reduce, Max, Div, Mul and Cast.
struct QuantizeFp8Rows {
  const void* x = nullptr;
  DType x_dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  float tiny = 0.0f, largest = 1.0f;
  float* scale = nullptr;
  void* q = nullptr;
  DType q_dtype = DType::F8E4M3;
};
// Null when the kernel takes `a`, else why not.
const char* quantize_fp8_rows_unsupported(const QuantizeFp8Rows& a);
void launch_quantize_fp8_rows(const QuantizeFp8Rows& a, cudaStream_t stream);

}  // namespace rlx::cuda
