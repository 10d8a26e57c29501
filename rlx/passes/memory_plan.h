// Memory planning for a static graph: every intermediate gets an offset in
// one arena. Liveness is computed over node order; a block is reused, first
// fit, once every reader of it (views included) has run. Graph inputs and
// outputs are never reused; views alias their source; params, states and
// constants live outside the arena.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

enum class Placement : uint8_t { Arena, Param, State, Constant, View };

struct BufferSlot {
  Placement placement = Placement::Arena;
  int64_t offset = 0;   // Arena: byte offset; View: byte offset inside `root`
  int64_t bytes = 0;
  NodeId root = -1;     // the node that owns the storage (itself unless a view)
};

struct MemoryPlan {
  std::vector<BufferSlot> slots;  // one per node
  int64_t arena_bytes = 0;
  int64_t unplanned_bytes = 0;    // sum of all arena tensors without reuse
  std::string to_string(const Graph& g) const;
};

// Whether `n`'s result can share its first input's storage (contiguous layout).
// Reshape, WriteSlice, and a Narrow that selects a contiguous run (every dim
// before its axis is 1).
bool is_view_op(const Node& n);
// Byte offset of such a view inside its source (non-zero only for Narrow).
int64_t view_op_offset(const Node& n);

// `also_view` lets a backend mark more nodes as views of their first input
// (e.g. a strided Narrow that its only consumer reads in place); the view's
// offset is then `view_offset(id)` bytes into the source.
// `also_reads(id)` names nodes whose storage node `id`'s kernel reads besides
// its inputs (a fusion found at lowering time that runs there), so their
// blocks stay live until it.
struct ExtraViews {
  std::function<bool(NodeId)> is_view;
  std::function<int64_t(NodeId)> offset;
  std::function<std::vector<NodeId>(NodeId)> also_reads;
};
// reuse = false gives every tensor its own block (the arena is then the
// unplanned sum): for programs whose kernels may run ops of several nodes at
// once, where a reused block would be written while still being read.
MemoryPlan plan_memory(const Graph& g, int64_t alignment = 256, const ExtraViews& extra = {}, bool reuse = true);

}  // namespace rlx
