// The CPU backend: the numerical reference and the fallback without a GPU.
// A program runs its nodes in order on one arena laid out by the memory plan;
// each node calls the kernel the registry holds for its dtypes.
#pragma once
#include <memory>

#include "rlx/runtime/backend.h"

namespace rlx::cpu {

std::shared_ptr<Backend> make_cpu_backend();

}  // namespace rlx::cpu
