#include "rlx/ir/graph.h"

#include <set>
#include <sstream>

#include "rlx/core/error.h"

namespace rlx {

bool Node::is_leaf() const {
  return op == OpKind::Input || op == OpKind::Param || op == OpKind::Constant || op == OpKind::State;
}

void Graph::check_id(NodeId id, const char* what) const {
  RLX_CHECK(id >= 0 && id < size(), what, ": node id ", id, " does not exist (graph has ", size(), " nodes)");
}

NodeId Graph::add(OpKind op, Attrs attrs, std::vector<NodeId> inputs, std::string name) {
  std::string where = str("node %", size(), " (", op_name(op), name.empty() ? "" : " '", name, name.empty() ? "" : "'", ")");
  for (NodeId in : inputs) check_id(in, where.c_str());
  TensorType t = infer_type(*this, op, attrs, inputs, where);
  return add_typed(op, std::move(attrs), std::move(inputs), std::move(t), std::move(name));
}

NodeId Graph::add_typed(OpKind op, Attrs attrs, std::vector<NodeId> inputs, TensorType type, std::string name) {
  nodes_.push_back(Node{op, std::move(attrs), std::move(inputs), std::move(type), std::move(name)});
  return size() - 1;
}

NodeId Graph::add_input(std::string name, DType dtype, Shape shape) {
  RLX_CHECK(find_leaf(OpKind::Input, name) < 0, "graph input '", name, "' declared twice");
  return add_typed(OpKind::Input, LeafAttrs{name}, {}, TensorType{dtype, std::move(shape)}, name);
}

NodeId Graph::add_param(std::string name, DType dtype, Shape shape) {
  RLX_CHECK(find_leaf(OpKind::Param, name) < 0, "param '", name, "' declared twice");
  RLX_SHAPE_CHECK(is_static(shape), "param '", name, "' must have a static shape, got ", shape_to_string(shape));
  return add_typed(OpKind::Param, LeafAttrs{name}, {}, TensorType{dtype, std::move(shape)}, name);
}

NodeId Graph::add_state(std::string name, DType dtype, Shape shape) {
  RLX_CHECK(find_leaf(OpKind::State, name) < 0, "state '", name, "' declared twice");
  RLX_SHAPE_CHECK(is_static(shape), "state '", name, "' must have a static shape, got ", shape_to_string(shape));
  return add_typed(OpKind::State, LeafAttrs{name}, {}, TensorType{dtype, std::move(shape)}, name);
}

NodeId Graph::add_constant(Tensor value, std::string name) {
  TensorType t{value.dtype(), make_shape(value.shape())};
  return add_typed(OpKind::Constant, ConstantAttrs{std::move(value)}, {}, std::move(t), std::move(name));
}

void Graph::set_output(std::string name, NodeId id) {
  check_id(id, "set_output");
  for (const auto& [n, _] : outputs_) RLX_CHECK(n != name, "graph output '", name, "' set twice");
  outputs_.emplace_back(std::move(name), id);
}

const Node& Graph::node(NodeId id) const {
  check_id(id, "Graph::node");
  return nodes_[static_cast<size_t>(id)];
}

Node& Graph::mutable_node(NodeId id) {
  check_id(id, "Graph::mutable_node");
  return nodes_[static_cast<size_t>(id)];
}

std::vector<NodeId> Graph::leaves(OpKind kind) const {
  std::vector<NodeId> out;
  for (NodeId i = 0; i < size(); ++i)
    if (nodes_[static_cast<size_t>(i)].op == kind) out.push_back(i);
  return out;
}

NodeId Graph::find_leaf(OpKind kind, const std::string& name) const {
  for (NodeId i = 0; i < size(); ++i) {
    const Node& n = nodes_[static_cast<size_t>(i)];
    if (n.op == kind && n.attr<LeafAttrs>().name == name) return i;
  }
  return -1;
}

std::string Graph::describe(NodeId id) const {
  const Node& n = node(id);
  return str("node %", id, " (", op_name(n.op), n.name.empty() ? "" : " '", n.name, n.name.empty() ? "" : "'", ")");
}

std::vector<std::vector<NodeId>> Graph::users() const {
  std::vector<std::vector<NodeId>> u(nodes_.size());
  for (NodeId i = 0; i < size(); ++i)
    for (NodeId in : nodes_[static_cast<size_t>(i)].inputs) u[static_cast<size_t>(in)].push_back(i);
  return u;
}

namespace {
// FNV-1a over bytes: stable across runs and platforms (unlike std::hash).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void text(const std::string& s) { bytes(s.data(), s.size() + 1); }
};
}  // namespace

uint64_t Graph::fingerprint() const {
  Fnv f;
  for (const Node& n : nodes_) {
    f.text(op_name(n.op));
    f.text(attrs_to_string(n.attrs));
    if (n.op == OpKind::Constant) {
      const Tensor& v = n.attr<ConstantAttrs>().value;
      f.bytes(v.raw(), v.nbytes());
    }
    for (NodeId in : n.inputs) f.bytes(&in, sizeof in);
    f.text(n.type.to_string());
  }
  for (const auto& [name, id] : outputs_) {
    f.text(name);
    f.bytes(&id, sizeof id);
  }
  return f.h;
}

void verify(const Graph& g) {
  std::set<std::string> out_names;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    for (NodeId in : n.inputs)
      RLX_SHAPE_CHECK(in >= 0 && in < i, g.describe(i), ": input %", in, " does not precede it");
    if (n.op == OpKind::Input || n.op == OpKind::Param || n.op == OpKind::State) {
      RLX_SHAPE_CHECK(std::holds_alternative<LeafAttrs>(n.attrs) && n.inputs.empty(), g.describe(i),
                      ": malformed leaf");
      continue;
    }
    if (n.op == OpKind::Constant) {
      RLX_SHAPE_CHECK(std::holds_alternative<ConstantAttrs>(n.attrs), g.describe(i), ": constant without value");
      const Tensor& v = n.attr<ConstantAttrs>().value;
      RLX_SHAPE_CHECK(v.dtype() == n.type.dtype && make_shape(v.shape()) == n.type.shape, g.describe(i),
                      ": constant value does not match its type");
      continue;
    }
    TensorType t = infer_type(g, n.op, n.attrs, n.inputs, g.describe(i));
    RLX_SHAPE_CHECK(t == n.type, g.describe(i), ": stored type ", n.type.to_string(), " but inputs give ",
                    t.to_string());
  }
  for (const auto& [name, id] : g.outputs()) {
    RLX_SHAPE_CHECK(out_names.insert(name).second, "graph output '", name, "' appears twice");
    RLX_SHAPE_CHECK(id >= 0 && id < g.size(), "graph output '", name, "' names missing node %", id);
  }
}

std::string print_graph(const Graph& g) {
  std::ostringstream os;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    os << "%" << i << " = " << op_name(n.op);
    std::string a = attrs_to_string(n.attrs);
    if (!a.empty()) os << "{" << a << "}";
    os << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", " : "") << "%" << n.inputs[k];
    os << ") : " << n.type.to_string();
    if (!n.name.empty() && n.op != OpKind::Input && n.op != OpKind::Param && n.op != OpKind::State)
      os << "  # " << n.name;
    os << "\n";
  }
  for (const auto& [name, id] : g.outputs()) os << "output " << name << " = %" << id << "\n";
  return os.str();
}

Graph specialize(const Graph& g, const SymbolBinding& binding) {
  Graph out;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    Attrs attrs = n.attrs;
    if (auto* s = std::get_if<ShapeAttrs>(&attrs)) s->shape = bind_shape(s->shape, binding);
    if (auto* a = std::get_if<NarrowAttrs>(&attrs); a && a->start < 0) {
      const Shape& in = out.node(n.inputs[0]).type.shape;
      const int rank = static_cast<int>(in.size());
      const int ax = a->axis < 0 ? a->axis + rank : a->axis;
      if (ax >= 0 && ax < rank) a->start += in[static_cast<size_t>(ax)].value;  // add() checks the result
    }
    if (n.is_leaf()) {
      out.add_typed(n.op, std::move(attrs), {}, TensorType{n.type.dtype, bind_shape(n.type.shape, binding)}, n.name);
    } else {
      out.add(n.op, std::move(attrs), n.inputs, n.name);
    }
  }
  for (const auto& [name, id] : g.outputs()) out.set_output(name, id);
  return out;
}

}  // namespace rlx
