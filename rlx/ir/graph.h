// Graph: nodes in topological (append) order; each node has one result.
// Build graphs with rlx/ir/builder.h; passes rewrite them into new graphs.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rlx/ir/ops.h"

namespace rlx {

using NodeId = int32_t;

struct Node {
  OpKind op = OpKind::Input;
  Attrs attrs;
  std::vector<NodeId> inputs;
  TensorType type;
  std::string name;  // optional, for messages and reports

  template <typename A> const A& attr() const { return std::get<A>(attrs); }
  bool is_leaf() const;
};

class Graph {
 public:
  // Appends a node, inferring its type from the inputs (throws ShapeError
  // naming the new node when the inputs do not fit the op).
  NodeId add(OpKind op, Attrs attrs, std::vector<NodeId> inputs, std::string name = {});
  // Leaves carry their type explicitly.
  NodeId add_input(std::string name, DType dtype, Shape shape);
  NodeId add_param(std::string name, DType dtype, Shape shape);
  NodeId add_state(std::string name, DType dtype, Shape shape);
  NodeId add_constant(Tensor value, std::string name = {});
  // Appends a node with a given type (used by passes that already know it;
  // the verifier re-checks it).
  NodeId add_typed(OpKind op, Attrs attrs, std::vector<NodeId> inputs, TensorType type, std::string name = {});

  void set_output(std::string name, NodeId id);
  const std::vector<std::pair<std::string, NodeId>>& outputs() const { return outputs_; }

  const Node& node(NodeId id) const;
  Node& mutable_node(NodeId id);
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Leaves of one kind, in node order.
  std::vector<NodeId> leaves(OpKind kind) const;
  // Finds a leaf by name (-1 when absent).
  NodeId find_leaf(OpKind kind, const std::string& name) const;
  // "node %7 (LayerNorm 'enc.0.ln')" — the prefix of every error about a node.
  std::string describe(NodeId id) const;
  // Users of each node (indices into nodes()).
  std::vector<std::vector<NodeId>> users() const;
  // Stable 64-bit hash of ops, attrs (constant bytes included), edges, types, outputs.
  uint64_t fingerprint() const;

 private:
  void check_id(NodeId id, const char* what) const;
  std::vector<Node> nodes_;
  std::vector<std::pair<std::string, NodeId>> outputs_;
};

// Result type of `op` applied to `inputs` (defined in infer.cpp). `where` is
// the message prefix used in errors.
TensorType infer_type(const Graph& g, OpKind op, const Attrs& attrs, const std::vector<NodeId>& inputs,
                      const std::string& where);

// Checks every node: arity, input ids precede the node, attrs valid, stored
// type equals the inferred one, output names unique. Throws ShapeError naming
// the node and op.
void verify(const Graph& g);

// Human-readable listing, one node per line (RLX_IR_DUMP).
std::string print_graph(const Graph& g);

// Copy of `g` with symbols replaced by their sizes (types re-inferred, so an
// inconsistent binding is reported at the node where it shows).
Graph specialize(const Graph& g, const SymbolBinding& binding);

}  // namespace rlx
