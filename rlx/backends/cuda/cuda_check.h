// One checking macro per CUDA library. A failed call throws rlx::DeviceError
// (OutOfMemory for allocation failures) carrying the call, file:line and the
// library's error string. `RLX_CUDA_CHECK_LAUNCH(op)` checks a kernel launch
// and names the op that launched it.
#pragma once
#include <cuda_runtime.h>

#include "rlx/core/error.h"

namespace rlx::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_launch_error(cudaError_t err, const char* op, const char* file, int line);

}  // namespace rlx::cuda

#define RLX_CUDA_CHECK(call)                                                   \
  do {                                                                         \
    cudaError_t rlx_err_ = (call);                                             \
    if (rlx_err_ != cudaSuccess) [[unlikely]]                                  \
      ::rlx::cuda::throw_cuda_error(rlx_err_, #call, __FILE__, __LINE__);      \
  } while (0)

#define RLX_CUDA_CHECK_LAUNCH(op_name)                                         \
  do {                                                                         \
    cudaError_t rlx_err_ = cudaGetLastError();                                 \
    if (rlx_err_ != cudaSuccess) [[unlikely]]                                  \
      ::rlx::cuda::throw_launch_error(rlx_err_, op_name, __FILE__, __LINE__);  \
  } while (0)
