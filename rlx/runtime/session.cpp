#include "rlx/runtime/session.h"

#include <chrono>
#include <thread>

#include "rlx/core/log.h"
#include "rlx/ir/builder.h"
#include "rlx/passes/pass_manager.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/cost_model.h"
#ifdef RLX_HAVE_CUDA
#include "rlx/backends/cuda/calibration.h"
#endif

namespace rlx {
namespace {

// The CPU's f32 GEMM rate and memory bandwidth, measured once per process on
// the CPU backend itself (a 256³ matmul and a 16 MiB add, best of three).
DeviceRates measured_cpu_rates() {
  static const DeviceRates rates = [] {
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    DeviceRates r = heuristic_cpu_rates(threads);
    auto best_us = [](Executable& exe, const std::vector<Tensor>& in) {
      double best = 1e300;
      for (int i = 0; i < 4; ++i) {  // the first run compiles the binding
        const auto t0 = std::chrono::steady_clock::now();
        exe.run(in);
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0) best = std::min(best, us);
      }
      return best;
    };
    Session cpu("cpu");
    constexpr int64_t n = 256, len = int64_t{1} << 22;
    {
      Graph g;
      output("z", matmul(input(g, "x", DType::F32, {n, n}), input(g, "y", DType::F32, {n, n})));
      auto exe = cpu.compile(g);
      const Tensor t = Tensor::from(std::vector<float>(static_cast<size_t>(n * n), 0.5f), {n, n});
      r.matmul_f32 = {2.0 * n * n * n / (best_us(*exe, {t, t}) * 1e3)};
      r.matmul_half = {0.5 * r.matmul_f32.value};  // half storage is staged through f32
    }
    {
      Graph g;
      output("z", input(g, "x", DType::F32, {len}) + input(g, "y", DType::F32, {len}));
      auto exe = cpu.compile(g);
      const Tensor t = Tensor::from(std::vector<float>(static_cast<size_t>(len), 0.5f), {len});
      const double us = best_us(*exe, {t, t});
      r.memory = {3.0 * 4.0 * len / (us * 1e3)};  // two reads and a write per element
      r.other = {static_cast<double>(len) / (us * 1e3)};
    }
    r.calibrated = true;
    log_verbose("cpu rates: matmul f32 ", r.matmul_f32.value, " GFLOP/s, memory ", r.memory.value, " GB/s");
    return r;
  }();
  return rates;
}

CostModel gpu_cost_model(const Backend& gpu) {
#ifdef RLX_HAVE_CUDA
  const int index = gpu.device_info().index;
  if (const auto& c = cuda::device_calibration(index)) return CostModel(gpu_rates_from(*c, str("cuda:", index)), *c);
#endif
  (void)gpu;
  return CostModel(heuristic_gpu_rates());
}

bool graph_is_static(const Graph& g) {
  for (const Node& n : g.nodes())
    if (!is_static(n.type.shape)) return false;
  return true;
}

}  // namespace

Session::Session(const std::string& device) {
  register_builtin_backends();
  if (device == "auto" && backend_available("cuda")) {
    backend_ = create_backend("cuda");
    cpu_ = create_backend("cpu");
  } else if (device == "auto") {
    backend_ = create_backend("cpu");
  } else {
    backend_ = create_backend(device);
  }
  log_verbose("session on ", backend_->device_info().name, cpu_ ? " (cpu chosen per graph by the cost model)" : "");
}

Graph Session::lower_for(Backend& backend, const Graph& g, const CompileOptions& options) {
  verify(g);
  RLX_CHECK(!g.outputs().empty(), "compile: the graph has no outputs");
  PassContext ctx;
  ctx.precision = options.precision;
  ctx.fuse = options.fuse;
  Backend* b = &backend;
  ctx.supports = [b](const Graph& gg, NodeId id, std::string* why) { return b->supports(gg, id, why); };
  return default_pipeline().run(g, ctx);
}

Graph Session::lower(const Graph& g, const CompileOptions& options) { return lower_for(*backend_, g, options); }

std::shared_ptr<Executable> Session::compile_on(const std::shared_ptr<Backend>& b, const Graph& g,
                                                const CompileOptions& options) {
  const auto key = std::make_tuple(g.fingerprint(), options.key(), b->name());
  Graph lowered;
  {
    std::lock_guard lock(mu_);
    auto it = lowered_.find(key);
    if (it != lowered_.end()) {
      log_verbose("compile cache hit for graph ", std::hex, std::get<0>(key));
      lowered = it->second;
    }
  }
  if (lowered.size() == 0) {
    lowered = lower_for(*b, g, options);
    std::lock_guard lock(mu_);
    lowered_.emplace(key, lowered);
  }
  return std::make_shared<Executable>(b, std::move(lowered), options);
}

std::shared_ptr<Executable> Session::compile(const Graph& g, const CompileOptions& options) {
  if (!cpu_) return compile_on(backend_, g, options);
  std::string why;
  std::shared_ptr<Backend> target = backend_;
  if (!graph_is_static(g)) {
    why = str(backend_->device_info().name, ": the graph has symbolic dims (sizes unknown until run)");
  } else {
    const Graph lowered = lower_for(*backend_, g, options);
    {
      std::lock_guard lock(mu_);  // compile_on finds it when the GPU is chosen
      lowered_.emplace(std::make_tuple(g.fingerprint(), options.key(), backend_->name()), lowered);
    }
    const DeviceChoice c = choose_device(lowered, CostModel(measured_cpu_rates()), gpu_cost_model(*backend_));
    if (!c.use_gpu) target = cpu_;
    why = c.reason;
  }
  {
    std::lock_guard lock(mu_);
    last_choice_ = str("auto device: ", why);
  }
  log_verbose("auto device: ", why);
  if (env_bool("RLX_DISPATCH_REPORT")) std::cerr << "[rlx] auto device: " << why << "\n";
  return compile_on(target, g, options);
}

std::string Session::last_device_choice() const {
  std::lock_guard lock(mu_);
  return last_choice_;
}

}  // namespace rlx
