// The passes around a cuFFT transform: numpy's `norm` as a scale (cuFFT
// leaves results unnormalized).
#include <algorithm>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/kernels/fft.h"

namespace rlx::cuda {
namespace {

__global__ void scale_kernel(float* __restrict__ y, int64_t n, float s) {
  dev::pdl_begin();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] *= s;
}

}  // namespace

void launch_fft_scale(float* y, int64_t n, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 132 * 16);
  scale_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(y, n, scale);
  RLX_CUDA_CHECK_LAUNCH("Fft scale");
}

}  // namespace rlx::cuda
