// A post-LN transformer's projection and residual LayerNorm in one Hopper
// (sm_90a, wgmma) kernel:
//   Y[M, N] = LayerNorm(A[M, K]·W[N, K]ᵀ + bias[N] + R[M, N])·gamma[N] + beta[N]
// for N = 128, 256 or 384 (a small encoder's hidden size; all-MiniLM-L6's is
// 384): a CTA owns 128 whole rows of Y, so the row statistics are taken from
// the accumulators and the projection never goes to memory. Separately, the
// GEMM writes [M, N] and the norm reads it back with R (MiniLM 256 × 128:
// 47 µs per attention-out projection + norm on an H200, of which the norm is
// 24).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

struct GemmLnArgs {
  DType dtype = DType::F16;        // A, W, bias, R, Y: f16 or bf16
  DType param_dtype = DType::F16;  // gamma, beta: dtype or F32
  const void* A = nullptr;         // [M, K] row-major, contiguous
  const void* W = nullptr;         // [N, K] row-major (a Linear layer's weight)
  const void* bias = nullptr;      // [N] or null
  const void* R = nullptr;         // [M, N] residual, contiguous
  const void* gamma = nullptr;     // [N]
  const void* beta = nullptr;      // [N]
  void* Y = nullptr;               // [M, N], contiguous; may be R itself
  int64_t M = 0, N = 0, K = 0;
  float eps = 1e-12f;
};

// Why the kernel cannot run `a` (nullptr: it can): dtypes, N not 128/256/384,
// K not a multiple of 8, misaligned pointers, or too many rows.
const char* sm90_gemm_ln_unsupported(const GemmLnArgs& a);

// Whether `device` runs it (compute capability 9.0 and an sm_90a image);
// raises its shared-memory limit. Host side, cached per device.
bool sm90_gemm_ln_available(int device);

// Asynchronous on `stream`. Throws Unsupported for what
// sm90_gemm_ln_unsupported refuses and DeviceError if the launch fails.
void launch_sm90_gemm_ln(const GemmLnArgs& a, cudaStream_t stream);

}  // namespace rlx::cuda
