// rlx's own Hopper GEMM (sm_90a, wgmma): C = act(A·Bᵀ + bias) for row-major
// f16/bf16 A [M, K] and B [N, K] (a Linear layer's weight), f32 accumulation,
// with every Activation in its epilogue. cuBLASLt's epilogues stop at
// ReLU/GELU-tanh; BERT's FFN needs GELU-erf, which otherwise costs a separate
// pass over the [M, 4H] intermediate (60 µs per layer for MiniLM at 256×128).
// GemmEngine (cublaslt.h) decides per shape, by timing, whether this kernel or
// cuBLASLt (+ a separate activation kernel) runs a problem.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <vector_types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

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

// The kernel variants (Sm90GemmKernel, declared in cublaslt.h) by name.
const char* sm90_gemm_kernel_name(Sm90GemmKernel k);

// Asynchronous on `stream`; a.act is ignored in favour of `act`. Throws
// Unsupported for a problem sm90_gemm_unsupported() refuses (or a kernel the
// device cannot place) and DeviceError naming the problem if the launch fails.
void launch_sm90_gemm(const GemmArgs& a, Activation act, cudaStream_t stream,
                      Sm90GemmKernel kernel = Sm90GemmKernel::Auto);

// Whether a GELU-erf epilogue writing dtype t runs in f16x2 arithmetic
// (dev::gelu_erf_f16x2): f16 with RLX_CUDA_GELU_F16X2 on (read on each call).
bool gelu_f16x2_on(DType t);

// LayerNorm folding on the ping-pong kernel. A LayerNorm y = (x − mean)·rstd·γ
// + β feeding a GEMM y·Wᵀ + b equals rstd·(x·W'ᵀ) + b' with W' = W·diag(γ),
// each row of W' less its mean (so x·W'ᵀ = (x − mean)·(W·diag γ)ᵀ), and b' =
// b + W·β (fold_layer_norm, rlx/passes/layer_norm_fold.h, computes W' and b'
// on the host): x itself is the A operand, and only its rows' statistics travel.
// They travel as partials: for 128-column block j of row r, float2 (mean,
// M2 = Σ (v − mean)²) at stats[j·M + r], the last block partial.
struct Sm90LnFold {
  // Row scale: C = act(rstd_r·(A·Bᵀ)_r + bias), rstd from A's partials
  // (ceil(K / 128) a row); act None or GeluErf.
  const float2* a_stats = nullptr;
  // Residual: C = A·Bᵀ + bias + LN(R), LN(R)_rn = (R_rn − mean_r)·rstd_r·γ_n
  // + β_n from R's partials (ceil(N / 128) a row), or R itself without them;
  // act None. c_stats (or null) gets C's partials (ceil(N / 128) a row) for
  // the next fold. R may be C.
  const void* R = nullptr;
  int64_t ldr = 0;
  const float2* r_stats = nullptr;
  const void* gamma = nullptr;  // [N], the dtype
  const void* beta = nullptr;
  float2* c_stats = nullptr;
  float eps = 1e-12f;  // the LayerNorm's, for a_stats or r_stats
};

// Whether `device` runs the fold kernels (as sm90_gemm_available).
bool sm90_gemm_fold_available(int device);

// Asynchronous on `stream`: one of the folds above (exactly one of a_stats and
// R). Throws Unsupported / InvalidArgument naming what it cannot run.
void launch_sm90_gemm_fold(const GemmArgs& a, Activation act, const Sm90LnFold& f, cudaStream_t stream);

// Shared with the quantized wgmma GEMM (qgemm_sm90.cu):
// whether `device` is compute capability 9.0 and the driver encodes tensor maps;
bool sm90_device(int device);
// whether `kernel` has an sm_90a image here, launches with `threads` threads
// (its registers allow) and may use smem_bytes of dynamic shared memory
// (raises its limit);
bool sm90_kernel_loads(const void* kernel, int smem_bytes, int threads);
// a per-device memo of whether a family of such kernels runs on `device`:
// sm90_device(device) and loads() (its kernels' sm90_kernel_loads, with the
// device current), asked once per device; thread-safe;
class Sm90Availability {
 public:
  bool operator()(int device, const std::function<bool()>& loads);

 private:
  std::mutex mu_;
  std::map<int, bool> known_;
};
// whether address p is a multiple of `bytes` (a power of two);
bool sm90_aligned(const void* p, uintptr_t bytes);
// `kernel` launched as `grid` CTAs of `threads` threads with smem_bytes of
// dynamic shared memory and `args` on `stream`; throws DeviceError naming
// `what` if the launch fails (the error is cleared, not left sticky);
void sm90_launch(const void* kernel, unsigned grid, int threads, int smem_bytes, cudaStream_t stream, void** args,
                 const std::string& what);
// the TMA map of a row-major f16/bf16 [rows, cols] operand (leading dimension
// ld elements) read as 64-column × box_rows slabs with the 128-byte swizzle,
// out-of-bounds elements zero; throws DeviceError naming `what`.
CUtensorMap sm90_slab_map(DType dtype, const void* p, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                          const std::string& what);
// the TMA map of [rows, row_bytes] raw bytes (p and row_bytes multiples of
// 16) read as box_rows × box_bytes boxes (box_bytes a multiple of 16, at
// most 1024), unswizzled, out-of-bounds bytes zero.
CUtensorMap sm90_byte_rows_map(const void* p, int64_t rows, int64_t row_bytes, int box_rows, int box_bytes,
                               const std::string& what);

}  // namespace rlx::cuda
