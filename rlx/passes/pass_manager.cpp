#include "rlx/passes/pass_manager.h"

#include <iostream>

#include "rlx/core/env.h"
#include "rlx/core/error.h"

namespace rlx {

NodeId GraphRewriter::mapped(NodeId old) const {
  NodeId n = map_[static_cast<size_t>(old)];
  RLX_ASSERT(n >= 0);
  return n;
}

NodeId GraphRewriter::copy(NodeId old) {
  const Node& n = src_.node(old);
  std::vector<NodeId> ins;
  for (NodeId in : n.inputs) ins.push_back(mapped(in));
  NodeId id = dst_.add_typed(n.op, n.attrs, std::move(ins), n.type, n.name);
  set(old, id);
  return id;
}

Graph GraphRewriter::finish() {
  for (const auto& [name, id] : src_.outputs()) dst_.set_output(name, mapped(id));
  return std::move(dst_);
}

Graph PassManager::run(Graph g, const PassContext& ctx) const {
#ifdef NDEBUG
  const bool check = env_bool("RLX_VERIFY");
#else
  const bool check = true;
#endif
  const bool dump = env_bool("RLX_IR_DUMP");
  if (dump) std::cerr << "=== IR: input ===\n" << print_graph(g);
  for (const auto& p : passes_) {
    g = p.run(g, ctx);
    if (check) {
      try {
        verify(g);
      } catch (const Error& e) {
        throw Error(str("after pass '", p.name, "': ", e.what()));
      }
    }
    if (dump) std::cerr << "=== IR: after " << p.name << " ===\n" << print_graph(g);
  }
  return g;
}

PassManager default_pipeline() {
  PassManager pm;
  pm.add({"fusion", apply_fusion_rules});
  pm.add({"precision", apply_precision_policy});
  pm.add({"legalize", legalize});
  pm.add({"dce", [](const Graph& g, const PassContext&) { return eliminate_dead_code(g); }});
  return pm;
}

}  // namespace rlx
