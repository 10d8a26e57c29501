// Shared by the tests of the CUDA lowering's fusion patterns: a graph as the
// CUDA backend sees it, after the compile passes (bias/activation fusion,
// the precision policy). No GPU.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

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

// `g` lowered at `precision`, and `pattern(lowered, users, node)` (the node a
// fusion pairs it with, or -1) tried at every node: how many nodes it matched,
// and how many nodes of the `targets` kinds the lowered graph has. Every match
// must be of a target kind; `check(lowered, node, match)` may assert more.
template <typename Pattern, typename Check>
std::pair<int, int> pattern_matches(const Graph& g, DType precision, Pattern pattern, std::vector<OpKind> targets,
                                    Check check) {
  const Graph lowered = lowered_at(g, precision);
  const auto users = lowered.users();
  auto is_target = [&](NodeId i) {
    return std::find(targets.begin(), targets.end(), lowered.node(i).op) != targets.end();
  };
  int hits = 0, found = 0;
  for (NodeId i = 0; i < lowered.size(); ++i) {
    found += is_target(i);
    const NodeId m = pattern(lowered, users, i);
    if (m < 0) continue;
    ++hits;
    EXPECT_TRUE(is_target(m)) << "node " << i << " matched node " << m << ", not a target";
    check(lowered, i, m);
  }
  return {hits, found};
}
template <typename Pattern>
std::pair<int, int> pattern_matches(const Graph& g, DType precision, Pattern pattern, std::vector<OpKind> targets) {
  return pattern_matches(g, precision, pattern, std::move(targets), [](const Graph&, NodeId, NodeId) {});
}

}  // namespace rlx::test
