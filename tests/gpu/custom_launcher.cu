// A precompiled (nvcc-built) custom kernel and its launcher, as a downstream
// project would ship one; registered by test_custom_kernels_gpu.cpp.
//   y = scale · relu(x + b)², b broadcast over x's last dim.
#include <cuda_runtime.h>

#include "rlx/runtime/custom_kernels.h"

namespace {

__global__ void bias_sq_relu_kernel(const float* x, const float* b, float* y, long long n, int cols, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const float v = fmaxf(x[i] + b[i % cols], 0.0f);
    y[i] = scale * v * v;
  }
}

}  // namespace

void launch_bias_sq_relu_precompiled(const rlx::CudaKernelArgs& a, cudaStream_t stream) {
  const long long n = a.output.numel();
  if (n == 0) return;
  const int threads = 128;
  const unsigned blocks = static_cast<unsigned>(n / threads + 1 < 4096 ? n / threads + 1 : 4096);
  const float scale = static_cast<float>(rlx::custom_attr_number(a.attrs, "scale", 1.0));
  bias_sq_relu_kernel<<<blocks, threads, 0, stream>>>(static_cast<const float*>(a.inputs[0].data),
                                                      static_cast<const float*>(a.inputs[1].data),
                                                      static_cast<float*>(a.output.data), n,
                                                      static_cast<int>(a.inputs[1].dims[0]), scale);
}
