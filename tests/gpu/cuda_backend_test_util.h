// Skipping a GPU test where the CUDA backend is not available (no device, or
// a build without CUDA): the backend registry's own answer.
#pragma once
#include <gtest/gtest.h>

#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"  // register_builtin_backends

namespace rlx::test {

inline bool cuda_backend_here() {
  register_builtin_backends();
  return backend_available("cuda");
}

}  // namespace rlx::test

#define SKIP_WITHOUT_CUDA() \
  if (!::rlx::test::cuda_backend_here()) GTEST_SKIP() << "no CUDA device"
