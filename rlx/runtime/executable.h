// Executable: a graph compiled for one backend. It owns the params and state
// buffers; each distinct binding of the graph's symbolic dims (shape bucket)
// is specialized, planned and compiled once, then cached (LRU, RLX_COMPILE_CACHE).
#pragma once
#include <deque>
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
  ~Executable();  // waits for queued runs first
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

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

  // Queued runs, for loops whose next run does not need this one's outputs on
  // the host (decode): launch() starts a run and returns at once; finish()
  // waits for the oldest queued run and returns its outputs. Runs execute in
  // launch order. Each Feed gives an input the value an output had at the end
  // of the previous run, on the device; that run must have had the same input
  // shapes, and the fed input's tensor gives only its shape. While runs are
  // queued they must share their input shapes, and run(), the state accessors
  // and set_param are errors. Backends without a queue (the CPU) run at
  // launch(); CUDA queues up to 2 runs.
  void launch(const std::vector<Tensor>& inputs, const std::vector<Feed>& feeds = {});
  std::vector<Tensor> finish();
  size_t queued() const { return queued_.size(); }
  // Whether launch() returns before the run is done (else it runs the graph),
  // and how many runs may be queued at once.
  bool can_queue() const { return backend_->can_queue(); }
  size_t queue_depth() const { return backend_->queue_depth(); }
  // Waits for every queued run and drops its outputs and errors.
  void discard_queued() noexcept;

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
  void check_params_set() const;
  void check_not_queued(const char* what) const;

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
  Program* last_ = nullptr;      // the program of the most recent run
  Program* fed_from_ = nullptr;  // the same, once that run was launched without error
  // Queued runs, oldest first; a program that cannot queue ran at launch()
  // and its outputs wait here.
  struct Queued {
    Program* program;
    bool ran;
    std::vector<Tensor> outputs;
  };
  std::deque<Queued> queued_;
  SymbolBinding queued_binding_;
  // The last run's outputs when its program cannot queue: feeds read them on the host.
  std::vector<Tensor> host_last_outputs_;
};

}  // namespace rlx
