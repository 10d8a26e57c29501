// Shared by the tests of the CUDA lowering's fusion patterns: a graph as the
// CUDA backend sees it, after the compile passes (bias/activation fusion,
// the precision policy). No GPU.
#pragma once
#include "rlx/ir/graph.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"

namespace rlx::test {

inline Graph lowered_at(const Graph& g, DType precision) {
  register_builtin_backends();
  CompileOptions o;
  o.precision = precision;
  return Session("cpu").lower(g, o);
}

}  // namespace rlx::test
