// LayerNorm and RmsNorm over the last axis, optionally fused with a residual
// add or with the embedding lookups that feed them. Launchers only; kernels
// in norm.cu. Every launcher is asynchronous on `stream`, allocates nothing
// and throws rlx::DeviceError naming the op when the launch fails,
// rlx::Unsupported for dtypes it has no kernel for.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

// x, residual, y, sum_out: [rows, cols] row-major, dtype `x_dtype` (f32/f16/bf16).
// gamma, beta: [cols], dtype `param_dtype` (f32/f16/bf16, may differ from x).
//
//   s    = x + residual  (residual nullable → s = x), summed in f32 and NOT
//          rounded to x_dtype before normalization (matches the CPU kernel)
//   LayerNorm: y = (s − mean(s)) · rsqrt(var(s) + eps) · gamma + beta
//              (biased variance; beta nullable → 0)
//   RmsNorm:   y = s · rsqrt(mean(s²) + eps) · gamma
//   sum_out (nullable) receives s rounded to x_dtype (pre-norm residual stream).
//
// Statistics are f32, two-pass over registers (mean, then centered sum of squares).
// y may alias x; sum_out may alias x or residual (in-place residual stream).
// beta_dtype: beta's dtype when it differs from gamma's (DType::Count_ = same).
void launch_layer_norm(DType x_dtype, DType param_dtype, const void* x, const void* residual, const void* gamma,
                       const void* beta, void* y, void* sum_out, int64_t rows, int64_t cols, float eps,
                       cudaStream_t stream, DType beta_dtype = DType::Count_);

void launch_rms_norm(DType x_dtype, DType param_dtype, const void* x, const void* residual, const void* gamma,
                     void* y, void* sum_out, int64_t rows, int64_t cols, float eps, cudaStream_t stream);

// Post-norm residual (FusedPostRmsNorm): x, a, y, h [rows, cols] in x_dtype;
// w1, w2 [cols] in param_dtype.
//   y = x + a · rsqrt(mean(a²) + eps) · w1      (stored, rounded to x_dtype)
//   h = y · rsqrt(mean(y²) + eps) · w2          (from the rounded y; only when w2 and h are given)
// f32 statistics; y and h must not alias x or a.
void launch_post_rms_norm(DType x_dtype, DType param_dtype, const void* x, const void* a, const void* w1,
                          const void* w2, void* y, void* h, int64_t rows, int64_t cols, float eps,
                          cudaStream_t stream);

// Embedding sum + LayerNorm (BERT's embedding layer) in one kernel. For each
// output row r of [rows, cols]:
//   s = Σ_k table_k[index_k[period_k ? r % period_k : r]]   (f32, not rounded)
//   y = (s − mean(s)) · rsqrt(var(s) + eps) · gamma + beta  (biased variance; beta nullable → 0)
// Tables [table_rows, cols] and y are in `dtype` (f32/f16/bf16); gamma and
// beta [cols] both in `param_dtype` (f32/f16/bf16). Indices are i32 or i64;
// period P > 0 means the index tensor covers only the last axes of the output
// rows (positions [L] under [B, L] rows: row r reads index r % P). An index
// outside [0, table_rows) makes its term contribute zeros and ORs
// kErrIndexOutOfRange (movement.h) into the term's error_flag (nullable).
// y must not alias a table or an index.
inline constexpr int kMaxEmbeddingTerms = 4;

struct EmbeddingTerm {
  const void* table = nullptr;
  int64_t table_rows = 0;
  const void* index = nullptr;
  DType index_dtype = DType::I32;
  int64_t period = 0;
  int32_t* error_flag = nullptr;
};

struct EmbeddingNormArgs {
  DType dtype = DType::F32;
  DType param_dtype = DType::F32;
  int n_terms = 0;  // 1 .. kMaxEmbeddingTerms
  EmbeddingTerm terms[kMaxEmbeddingTerms];
  const void* gamma = nullptr;
  const void* beta = nullptr;
  void* y = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  float eps = 1e-5f;
};

void launch_embedding_norm(const EmbeddingNormArgs& args, cudaStream_t stream);

}  // namespace rlx::cuda
