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

#include "rlx/runtime/executable.h"

namespace rlx {

class Session {
 public:
  // "auto" picks the first GPU when one is present, else the CPU.
  explicit Session(const std::string& device = "auto");
  std::shared_ptr<Executable> compile(const Graph& g, const CompileOptions& options = {});
  // Runs the backend's pass pipeline only (for inspection and tests).
  Graph lower(const Graph& g, const CompileOptions& options = {});
  DeviceInfo device() const { return backend_->device_info(); }
  const std::shared_ptr<Backend>& backend() const { return backend_; }

 private:
  std::shared_ptr<Backend> backend_;
  std::mutex mu_;
  std::map<std::pair<uint64_t, std::string>, Graph> lowered_;
};

// Registers the built-in backends (cpu, cuda when built); idempotent.
// Session calls it; defined with the backends (rlx/backends/builtin.cpp).
void register_builtin_backends();

}  // namespace rlx
