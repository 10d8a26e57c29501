#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace rlx::cuda {

// y[i] *= scale for i < n (f32; a complex tensor is 2n floats).
void launch_fft_scale(float* y, int64_t n, float scale, cudaStream_t stream);

}  // namespace rlx::cuda
