// The CUDA backend (thunk path): device, one arena per program laid out by
// the memory plan, weights in their own buffers, cuBLASLt for GEMM, and the
// encoder that captures and replays CUDA graphs.
#pragma once
#include <memory>

#include "rlx/runtime/backend.h"

namespace rlx::cuda {

int device_count();
std::shared_ptr<Backend> make_cuda_backend(int index);

}  // namespace rlx::cuda
