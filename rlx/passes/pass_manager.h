// Passes are named graph → graph functions run in order by a PassManager,
// which verifies the IR between passes (debug builds, or RLX_VERIFY=1) and
// prints it when RLX_IR_DUMP=1.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

// What a pass may ask of the backend it prepares a graph for.
struct PassContext {
  DType precision = DType::F32;  // f32 | f16 | bf16 policy
  bool fuse = true;
  // Whether the target backend has a kernel for node `id` (null = assume yes).
  std::function<bool(const Graph&, NodeId, std::string*)> supports;
};

struct Pass {
  std::string name;
  std::function<Graph(const Graph&, const PassContext&)> run;
};

class PassManager {
 public:
  void add(Pass p) { passes_.push_back(std::move(p)); }
  Graph run(Graph g, const PassContext& ctx) const;

 private:
  std::vector<Pass> passes_;
};

// Copies a graph node by node while a pass rewrites some of them. Node ids in
// the old graph map to ids in the new one.
class GraphRewriter {
 public:
  explicit GraphRewriter(const Graph& src) : src_(src), map_(static_cast<size_t>(src.size()), -1) {}
  const Graph& src() const { return src_; }
  Graph& dst() { return dst_; }
  NodeId mapped(NodeId old) const;
  void set(NodeId old, NodeId now) { map_[static_cast<size_t>(old)] = now; }
  // Copies node `old` with its inputs remapped.
  NodeId copy(NodeId old);
  // Finish: copy outputs (remapped) and return the new graph.
  Graph finish();

 private:
  const Graph& src_;
  Graph dst_;
  std::vector<NodeId> map_;
};

// The standard passes (one per file).
Graph eliminate_dead_code(const Graph& g);                              // dce.cpp
Graph apply_fusion_rules(const Graph& g, const PassContext& ctx);       // fusion.cpp
Graph apply_precision_policy(const Graph& g, const PassContext& ctx);   // mixed_precision.cpp
Graph legalize(const Graph& g, const PassContext& ctx);                 // legalize.cpp

// The pipeline a backend gets: fusion, precision policy, legalization, DCE.
PassManager default_pipeline();

}  // namespace rlx
