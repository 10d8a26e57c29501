// rlx's own Hopper GEMM (sm_90a, wgmma): C = act(A·Bᵀ + bias) for row-major
// f16/bf16 A [M, K] and B [N, K] (a Linear layer's weight), f32 accumulation,
// with every Activation in its epilogue. cuBLASLt's epilogues stop at
// ReLU/GELU-tanh; BERT's FFN needs GELU-erf, which otherwise costs a separate
// pass over the [M, 4H] intermediate (60 µs per layer for MiniLM at 256×128).
// GemmEngine (cublaslt.h) decides per shape, by timing, whether this kernel or
// cuBLASLt (+ a separate activation kernel) runs a problem.
#pragma once
#include <cuda_runtime.h>

#include "rlx/backends/cuda/cublaslt.h"
#include "rlx/ir/ops.h"

namespace rlx::cuda {

// Why the kernel cannot run `a` (nullptr: it can). It takes f16/bf16,
// trans_a = false, trans_b = true, one batch, K, N and the leading dimensions
// multiples of 8, 16-byte-aligned A, B, C and a bias of the same dtype.
const char* sm90_gemm_unsupported(const GemmArgs& a);

// Whether `device` runs the kernel (compute capability 9.0 and an sm_90a
// image in this build). Call once per device before launching (host side; it
// also raises the kernel's shared-memory limit).
bool sm90_gemm_available(int device);

// Asynchronous on `stream`; a.act is ignored in favour of `act`. Throws
// Unsupported for a problem sm90_gemm_unsupported() refuses and DeviceError
// naming the problem if the launch fails.
void launch_sm90_gemm(const GemmArgs& a, Activation act, cudaStream_t stream);

}  // namespace rlx::cuda
