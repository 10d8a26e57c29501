#include "rlx/passes/memory_plan.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <sstream>

#include "rlx/core/error.h"

namespace rlx {

namespace {

// A Narrow whose dims before the axis are all 1 selects one contiguous run
// of its input (e.g. a half of a stacked FusedPostRmsNorm result).
bool is_contiguous_narrow(const Node& n) {
  if (n.op != OpKind::Narrow) return false;
  const Shape& s = n.type.shape;
  const int rank = static_cast<int>(s.size());
  const int axis = n.attr<NarrowAttrs>().axis;
  const int ax = axis < 0 ? axis + rank : axis;
  for (int i = 0; i < ax; ++i)
    if (!(s[static_cast<size_t>(i)] == Dim(1))) return false;
  for (const Dim& d : s)
    if (!d.is_static()) return false;
  return true;
}

}  // namespace

bool is_view_op(const Node& n) {
  // Reshape and Bitcast keep the bytes; WriteSlice returns the state it wrote into.
  return n.op == OpKind::Reshape || n.op == OpKind::Bitcast || n.op == OpKind::WriteSlice || is_contiguous_narrow(n);
}

int64_t view_op_offset(const Node& n) {
  if (n.op != OpKind::Narrow) return 0;
  const Shape& s = n.type.shape;
  const int rank = static_cast<int>(s.size());
  const auto& a = n.attr<NarrowAttrs>();
  const int ax = a.axis < 0 ? a.axis + rank : a.axis;
  int64_t inner = 1;
  for (int i = ax + 1; i < rank; ++i) inner *= s[static_cast<size_t>(i)].value;
  return a.start * inner * dtype_size(n.type.dtype);
}

namespace {

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Free list of [offset, end) ranges kept sorted and merged.
class FreeList {
 public:
  int64_t allocate(int64_t bytes, int64_t& arena_end) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second - it->first >= bytes) {
        int64_t off = it->first;
        it->first += bytes;
        if (it->first == it->second) free_.erase(it);
        return off;
      }
    }
    // Grow the arena; a free block touching the end is extended rather than wasted.
    if (!free_.empty() && free_.back().second == arena_end) {
      int64_t off = free_.back().first;
      free_.pop_back();
      arena_end = off + bytes;
      return off;
    }
    int64_t off = arena_end;
    arena_end += bytes;
    return off;
  }
  void release(int64_t off, int64_t bytes) {
    auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(off, int64_t{0}));
    it = free_.insert(it, {off, off + bytes});
    if (auto nx = std::next(it); nx != free_.end() && nx->first == it->second) {
      it->second = nx->second;
      free_.erase(nx);
    }
    if (it != free_.begin()) {
      auto pv = std::prev(it);
      if (pv->second == it->first) {
        pv->second = it->second;
        free_.erase(it);
      }
    }
  }

 private:
  std::vector<std::pair<int64_t, int64_t>> free_;
};

}  // namespace

MemoryPlan plan_memory(const Graph& g, int64_t alignment, const ExtraViews& extra, bool reuse) {
  const auto n = static_cast<size_t>(g.size());
  MemoryPlan plan;
  plan.slots.resize(n);
  constexpr int64_t kForever = INT64_MAX;

  // Storage roots and byte sizes.
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& node = g.node(i);
    auto& s = plan.slots[static_cast<size_t>(i)];
    s.bytes = dtype_bytes(node.type.dtype, static_numel(node.type.shape));
    s.root = i;
    switch (node.op) {
      case OpKind::Param: s.placement = Placement::Param; break;
      case OpKind::State: s.placement = Placement::State; break;
      case OpKind::Constant: s.placement = Placement::Constant; break;
      default:
        if (is_view_op(node) || (extra.is_view && extra.is_view(i))) {
          const auto& src = plan.slots[static_cast<size_t>(node.inputs[0])];
          s.placement = Placement::View;
          s.root = src.root;
          s.offset = (src.placement == Placement::View ? src.offset : 0) + (is_view_op(node) ? view_op_offset(node) : extra.offset(i));
        }
    }
  }

  // Last use of each root's storage (views extend their root's life).
  std::vector<int64_t> last_use(n, -1);
  for (NodeId i = 0; i < g.size(); ++i) {
    auto root = static_cast<size_t>(plan.slots[static_cast<size_t>(i)].root);
    last_use[root] = std::max<int64_t>(last_use[root], i);
    for (NodeId in : g.node(i).inputs) {
      auto r = static_cast<size_t>(plan.slots[static_cast<size_t>(in)].root);
      last_use[r] = std::max<int64_t>(last_use[r], i);
    }
    if (extra.also_reads)
      for (NodeId in : extra.also_reads(i)) {
        auto r = static_cast<size_t>(plan.slots[static_cast<size_t>(in)].root);
        last_use[r] = std::max<int64_t>(last_use[r], i);
      }
  }
  for (const auto& [_, id] : g.outputs()) last_use[static_cast<size_t>(plan.slots[static_cast<size_t>(id)].root)] = kForever;
  for (NodeId id : g.leaves(OpKind::Input)) last_use[static_cast<size_t>(id)] = kForever;

  // Walk in order: free what died before this node, then place it.
  std::multimap<int64_t, NodeId> dying;  // last_use -> root
  FreeList free_list;
  int64_t arena_end = 0;
  for (NodeId i = 0; i < g.size(); ++i) {
    while (!dying.empty() && dying.begin()->first < i) {
      auto& s = plan.slots[static_cast<size_t>(dying.begin()->second)];
      free_list.release(s.offset, align_up(std::max<int64_t>(s.bytes, 1), alignment));
      dying.erase(dying.begin());
    }
    auto& s = plan.slots[static_cast<size_t>(i)];
    if (s.placement != Placement::Arena) continue;
    const int64_t sz = align_up(std::max<int64_t>(s.bytes, 1), alignment);
    plan.unplanned_bytes += sz;
    s.offset = free_list.allocate(sz, arena_end);
    if (reuse && last_use[static_cast<size_t>(i)] != kForever)
      dying.emplace(std::max<int64_t>(last_use[static_cast<size_t>(i)], i), i);
  }
  plan.arena_bytes = arena_end;
  return plan;
}

std::string MemoryPlan::to_string(const Graph& g) const {
  static constexpr const char* kPlace[] = {"arena", "param", "state", "const", "view"};
  std::ostringstream os;
  os << "memory plan: arena " << arena_bytes << " bytes (" << unplanned_bytes << " without reuse)\n";
  for (NodeId i = 0; i < g.size(); ++i) {
    const auto& s = slots[static_cast<size_t>(i)];
    os << "  %" << i << " " << op_name(g.node(i).op) << " " << kPlace[static_cast<int>(s.placement)] << " bytes="
       << s.bytes;
    if (s.placement == Placement::Arena) os << " offset=" << s.offset;
    if (s.placement == Placement::View) os << " of %" << s.root;
    os << "\n";
  }
  return os.str();
}

}  // namespace rlx
