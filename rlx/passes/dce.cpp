// Dead-code elimination: keep what an output, or a state write, needs.
#include "rlx/passes/pass_manager.h"

namespace rlx {

Graph eliminate_dead_code(const Graph& g) {
  std::vector<bool> live(static_cast<size_t>(g.size()), false);
  for (const auto& [_, id] : g.outputs()) live[static_cast<size_t>(id)] = true;
  // WriteSlice has a side effect (the state persists), so it is a root.
  // Params, inputs and states stay so that set_param/run keep their names.
  for (NodeId i = 0; i < g.size(); ++i) {
    OpKind op = g.node(i).op;
    if (op == OpKind::WriteSlice || op == OpKind::Input || op == OpKind::Param || op == OpKind::State)
      live[static_cast<size_t>(i)] = true;
  }
  for (NodeId i = g.size() - 1; i >= 0; --i)
    if (live[static_cast<size_t>(i)])
      for (NodeId in : g.node(i).inputs) live[static_cast<size_t>(in)] = true;
  GraphRewriter rw(g);
  for (NodeId i = 0; i < g.size(); ++i)
    if (live[static_cast<size_t>(i)]) rw.copy(i);
  return rw.finish();
}

}  // namespace rlx
