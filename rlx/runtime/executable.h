// Executable: a graph compiled for one backend. It owns the params and state
// buffers; each distinct binding of the graph's symbolic dims (shape bucket)
// is specialized, planned and compiled once, then cached (LRU, RLX_COMPILE_CACHE).
#pragma once
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlx/runtime/backend.h"

namespace rlx {

class Executable {
 public:
  // `lowered` has been through the backend's pass pipeline (still symbolic).
  Executable(std::shared_ptr<Backend> backend, Graph lowered, CompileOptions options);

  // Uploads a param. Its shape must equal the declared one; float data is
  // converted to the param's storage dtype (e.g. f32 → f16 under an f16 policy);
  // any other dtype mismatch is an error.
  void set_param(const std::string& name, const Tensor& value);
  bool has_param(const std::string& name) const;
  std::vector<std::string> param_names() const;
  std::vector<std::string> missing_params() const;

  // Inputs in declaration order (or by name); outputs in graph order (or by name).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  std::map<std::string, Tensor> run_named(const std::map<std::string, Tensor>& inputs);

  // Persistent state (KV caches): zeroed at creation, kept across runs.
  Tensor read_state(const std::string& name) const;
  void write_state(const std::string& name, const Tensor& value);
  void reset_states();

  const Graph& graph() const { return graph_; }
  const Backend& backend() const { return *backend_; }
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  // The dispatch report of the most recently used specialization.
  std::string dispatch_report() const;
  size_t cached_specializations() const { return cache_.size(); }

 private:
  SymbolBinding bind(const std::vector<Tensor>& inputs) const;
  Program& program_for(const SymbolBinding& b);

  std::shared_ptr<Backend> backend_;
  Graph graph_;
  CompileOptions options_;
  BoundBuffers buffers_;
  std::map<std::string, bool> param_set_;
  std::vector<NodeId> inputs_;
  struct Entry {
    SymbolBinding binding;
    std::unique_ptr<Program> program;
  };
  std::list<Entry> cache_;  // most recently used first
  Program* last_ = nullptr;
};

}  // namespace rlx
