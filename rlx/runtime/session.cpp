#include "rlx/runtime/session.h"

#include "rlx/core/log.h"
#include "rlx/passes/pass_manager.h"
#include "rlx/runtime/backend_registry.h"

namespace rlx {

Session::Session(const std::string& device) {
  register_builtin_backends();
  if (device == "auto") backend_ = create_backend(backend_available("cuda") ? "cuda" : "cpu");
  else backend_ = create_backend(device);
  log_verbose("session on ", backend_->device_info().name);
}

Graph Session::lower(const Graph& g, const CompileOptions& options) {
  verify(g);
  RLX_CHECK(!g.outputs().empty(), "compile: the graph has no outputs");
  PassContext ctx;
  ctx.precision = options.precision;
  ctx.fuse = options.fuse;
  Backend* b = backend_.get();
  ctx.supports = [b](const Graph& gg, NodeId id, std::string* why) { return b->supports(gg, id, why); };
  return default_pipeline().run(g, ctx);
}

std::shared_ptr<Executable> Session::compile(const Graph& g, const CompileOptions& options) {
  const auto key = std::make_pair(g.fingerprint(), options.key());
  Graph lowered;
  {
    std::lock_guard lock(mu_);
    auto it = lowered_.find(key);
    if (it != lowered_.end()) {
      log_verbose("compile cache hit for graph ", std::hex, key.first);
      lowered = it->second;
    }
  }
  if (lowered.size() == 0) {
    lowered = lower(g, options);
    std::lock_guard lock(mu_);
    lowered_.emplace(key, lowered);
  }
  return std::make_shared<Executable>(backend_, std::move(lowered), options);
}

}  // namespace rlx
