#include "rlx/backends/cuda/cuda_check.h"

namespace rlx::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  std::string msg = str("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ", call, " at ",
                        file, ":", line);
  if (err == cudaErrorMemoryAllocation) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) msg += str(" (device has ", free_b, " of ", total_b, " bytes free)");
    throw OutOfMemory(msg);
  }
  throw DeviceError(msg);
}

void throw_launch_error(cudaError_t err, const char* op, const char* file, int line) {
  throw DeviceError(str(op, ": kernel launch failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") at ",
                        file, ":", line));
}

}  // namespace rlx::cuda
