// CUDA side of the public custom-kernel registry (rlx/runtime/custom_kernels.h):
// each registration becomes a CudaLowering for OpKind::Custom under the op's
// name. Callers (rlx/backends/custom_kernels.cpp) have already checked that
// the op is defined and the signature fits it.
#pragma once
#include <string>
#include <vector>

#include "rlx/runtime/custom_kernels.h"

namespace rlx::cuda {

void register_custom_launcher(const std::string& op, std::vector<DType> signature, CudaLauncher launcher,
                              std::string description);
void register_custom_source(const std::string& op, std::vector<DType> signature, CudaSourceKernel kernel,
                            std::string description);

}  // namespace rlx::cuda
