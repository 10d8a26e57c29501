// Session: the entry point. Picks a backend for a device and compiles graphs
// for it. Lowered graphs are cached per (graph fingerprint, options), and
// each Executable caches its specializations per shape binding.
//
//   rlx::Session s("cpu");                 // or "cuda", "cuda:1", "auto"
//   auto exe = s.compile(graph);
//   exe->set_param("w", weights);
//   auto outs = exe->run({x});
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "rlx/runtime/executable.h"

namespace rlx {

class Session {
 public:
  // "auto" uses the first GPU when one is present, and then chooses per
  // compiled graph between it and the CPU with the cost model (a static graph
  // whose predicted CPU time is lower runs on the CPU; graphs with symbolic
  // dims stay on the GPU, their sizes being unknown until run).
  explicit Session(const std::string& device = "auto");
  std::shared_ptr<Executable> compile(const Graph& g, const CompileOptions& options = {});
  // Runs the backend's pass pipeline only (for inspection and tests).
  Graph lower(const Graph& g, const CompileOptions& options = {});
  DeviceInfo device() const { return backend_->device_info(); }
  const std::shared_ptr<Backend>& backend() const { return backend_; }
  // The line explaining the last "auto" device choice (empty otherwise).
  std::string last_device_choice() const;

 private:
  Graph lower_for(Backend& b, const Graph& g, const CompileOptions& options);
  std::shared_ptr<Executable> compile_on(const std::shared_ptr<Backend>& b, const Graph& g,
                                         const CompileOptions& options);

  std::shared_ptr<Backend> backend_;
  std::shared_ptr<Backend> cpu_;  // "auto" with a GPU: the alternative the cost model may choose
  mutable std::mutex mu_;
  std::map<std::tuple<uint64_t, std::string, std::string>, Graph> lowered_;  // (graph, options, backend)
  std::string last_choice_;
};

// Registers the built-in backends (cpu, cuda when built); idempotent.
// Session calls it; defined with the backends (rlx/backends/builtin.cpp).
void register_builtin_backends();

}  // namespace rlx
