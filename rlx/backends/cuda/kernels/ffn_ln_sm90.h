// A post-LN encoder layer's whole feed-forward block in one Hopper (sm_90a,
// wgmma) kernel:
//   H = GELU-erf(X[M, N]·W1[F, N]ᵀ + b1)        (rounded to the dtype, as stored)
//   Y = LayerNorm(H·W2[N, F]ᵀ + b2 + R[M, N])·gamma + beta
// for N = 128, 256 or 384 (all-MiniLM-L6's hidden size is 384, its F 1536).
// A CTA owns 128 whole rows: it walks F in chunks of 64, computing a chunk of
// H into registers and at once multiplying it into the 128 × N accumulators
// of the down projection, so H never goes to memory. Separately the up
// projection writes [M, F] (100 MB for MiniLM at 256 × 128 tokens) and the
// down projection reads it back (H100, session 47: 94-97 µs for up + GELU
// and 90-92 µs for down + norm per layer).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

struct FfnLnArgs {
  DType dtype = DType::F16;        // X, W1, b1, W2, b2, R, Y: f16 or bf16
  DType param_dtype = DType::F16;  // gamma, beta: dtype or F32
  const void* X = nullptr;         // [M, N] row-major, contiguous
  const void* W1 = nullptr;        // [F, N] row-major (the up projection's Linear weight)
  const void* b1 = nullptr;        // [F] or null
  const void* W2 = nullptr;        // [N, F] row-major (the down projection's)
  const void* b2 = nullptr;        // [N] or null
  const void* R = nullptr;         // [M, N] residual, contiguous (usually X)
  const void* gamma = nullptr;     // [N]
  const void* beta = nullptr;      // [N]
  void* Y = nullptr;               // [M, N], contiguous; may be R or X
  int64_t M = 0, N = 0, F = 0;
  float eps = 1e-12f;
  // The two consumer warpgroups take turns issuing their MMAs, so one's GELU
  // runs beside the other's MMAs (RLX_CUDA_FFN_ORDERED in the lowering).
  bool ordered = true;
};

// Why the kernel cannot run `a` (nullptr: it can): dtypes, N not 128/256/384,
// F not a multiple of 64 or above 4096, misaligned pointers, or too many rows.
const char* sm90_ffn_ln_unsupported(const FfnLnArgs& a);

// Whether `device` runs it (compute capability 9.0 and an sm_90a image);
// raises its shared-memory limit. Host side, cached per device.
bool sm90_ffn_ln_available(int device);

// Asynchronous on `stream`. Throws Unsupported for what
// sm90_ffn_ln_unsupported refuses and DeviceError if the launch fails.
void launch_sm90_ffn_ln(const FfnLnArgs& a, cudaStream_t stream);

}  // namespace rlx::cuda
