// A sentence encoder's tail in one kernel: weighted sum pooling over the
// tokens, RMS-normalized (launcher only; kernel in pool_norm.cu). For each
// row b of [rows, tokens, cols]:
//   s[c] = Σ_l w[b, l] · x[b, l, c]            (f32, never rounded)
//   y[b, c] = s[c] · rsqrt(Σ_c s² / cols + eps) · gamma[c]
// BERT's mean pooling followed by the L2 normalization is exactly this with
// w the attention mask (models/bert: the matmul, the reshape, the RmsNorm and
// the casts around them; lower_pool_norm.cpp finds them).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

struct PoolNormArgs {
  DType x_dtype = DType::F16;      // f32, f16 or bf16: x's dtype
  const void* x = nullptr;         // [rows, tokens, cols], contiguous, 16-byte aligned
  DType w_dtype = DType::F16;      // x_dtype, or i32/i64 (converted to x_dtype first, as a Cast would)
  const void* w = nullptr;         // [rows, tokens]
  DType gamma_dtype = DType::F32;  // f32, f16 or bf16
  const void* gamma = nullptr;     // [cols]
  DType y_dtype = DType::F32;      // f32, f16 or bf16
  void* y = nullptr;               // [rows, cols]; must not overlap x
  int64_t rows = 0, tokens = 0, cols = 0;
  float eps = 0.0f;
};

// Why the kernel cannot take these arguments (nullptr: it can): dtypes, cols
// not a multiple of one 16-byte vector or above kPoolNormMaxCols, alignment.
inline constexpr int64_t kPoolNormMaxCols = 1024;
const char* pool_norm_unsupported(const PoolNormArgs& a);

void launch_pool_norm(const PoolNormArgs& a, cudaStream_t stream);

}  // namespace rlx::cuda
