#include "rlx/backends/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "rlx/backends/cpu/buffer_pool.h"
#include "rlx/backends/cpu/kernel.h"
#include "rlx/core/log.h"
#include "rlx/passes/memory_plan.h"

namespace rlx::cpu {
namespace {

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(size_t bytes) : bytes_(bytes) {
    const size_t alloc = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, alloc);
    RLX_CHECK_AS(OutOfMemory, data_, "cpu: allocating ", bytes, " bytes failed");
  }
  ~CpuBuffer() override { std::free(data_); }
  size_t size() const override { return bytes_; }
  void* data() override { return data_; }
  void upload(const void* src, size_t bytes, size_t offset) override {
    RLX_CHECK(offset + bytes <= bytes_, "cpu buffer upload of ", bytes, " bytes at ", offset, " overflows ", bytes_);
    cache_.clear();
    if (bytes) std::memcpy(static_cast<char*>(data_) + offset, src, bytes);
  }
  void download(void* dst, size_t bytes, size_t offset) const override {
    RLX_CHECK(offset + bytes <= bytes_, "cpu buffer download of ", bytes, " bytes at ", offset, " overflows ", bytes_);
    if (bytes) std::memcpy(dst, static_cast<const char*>(data_) + offset, bytes);
  }
  void fill_zero() override {
    cache_.clear();
    std::memset(data_, 0, bytes_);
  }
  // Derived from a param's value; params are written only through upload and fill_zero.
  ParamCache& cache() { return cache_; }

 private:
  size_t bytes_;
  void* data_;
  ParamCache cache_;
};

// A program's arena holds one run's intermediates only, so programs borrow one
// for the length of a run. An Executable specialized for many shapes (text
// embedded at its exact lengths) would otherwise keep an arena per cached
// specialization, each first touched page by page: 700 MB resident and 9% of
// the time in page faults for 2,000 sentences of MiniLM.
// Arenas kept for reuse: concurrent runs of different programs each hold one.
BufferPool<CpuBuffer>& arena_pool() {
  static BufferPool<CpuBuffer> pool(4);
  return pool;
}

struct Step {
  NodeId id;
  const KernelEntry* kernel;
  std::vector<ParamCache*> param_caches;  // per input; empty when no input is a param
};

class CpuProgram final : public Program {
 public:
  CpuProgram(const Graph& g, const BoundBuffers& buffers) : graph_(g), plan_(plan_memory(g, 64)) {
    if (verbose()) std::cerr << plan_.to_string(graph_);
    ptrs_.resize(static_cast<size_t>(g.size()), nullptr);
    std::vector<ParamCache*> param_caches(static_cast<size_t>(g.size()), nullptr);
    for (NodeId i = 0; i < g.size(); ++i) {
      const Node& n = g.node(i);
      const auto& slot = plan_.slots[static_cast<size_t>(i)];
      switch (slot.placement) {
        case Placement::Arena: arena_offsets_.emplace_back(i, slot.offset); break;
        case Placement::Param: {
          Buffer& b = *buffers.params.at(n.attr<LeafAttrs>().name);
          ptrs_[static_cast<size_t>(i)] = b.data();
          if (auto* cpu = dynamic_cast<CpuBuffer*>(&b)) param_caches[static_cast<size_t>(i)] = &cpu->cache();
          break;
        }
        case Placement::State: ptrs_[static_cast<size_t>(i)] = buffers.states.at(n.attr<LeafAttrs>().name)->data(); break;
        case Placement::Constant:
          ptrs_[static_cast<size_t>(i)] = const_cast<void*>(n.attr<ConstantAttrs>().value.raw());
          break;
        case Placement::View:
          if (plan_.slots[static_cast<size_t>(slot.root)].placement == Placement::Arena)
            arena_offsets_.emplace_back(i, plan_.slots[static_cast<size_t>(slot.root)].offset + slot.offset);
          else
            ptrs_[static_cast<size_t>(i)] = static_cast<char*>(ptrs_[static_cast<size_t>(slot.root)]) + slot.offset;
          break;
      }
      if (n.is_leaf()) continue;
      const KernelEntry* k = KernelRegistry::global().find(kCpuBackend, g, i);
      if (!k) throw Unsupported(str("cpu: ", g.describe(i), ": no kernel for ",
                                    signature_to_string(KernelRegistry::signature(g, i))));
      Step step{i, k, {}};
      for (size_t j = 0; j < n.inputs.size(); ++j)
        if (ParamCache* c = param_caches[static_cast<size_t>(n.inputs[j])]) {
          step.param_caches.resize(n.inputs.size(), nullptr);
          step.param_caches[j] = c;
        }
      steps_.push_back(std::move(step));
    }
    for (NodeId id : g.leaves(OpKind::Input)) inputs_.push_back(id);
    times_us_.assign(steps_.size(), 0.0);
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    Arena arena(static_cast<size_t>(std::max<int64_t>(plan_.arena_bytes, 1)));
    for (const auto& [id, offset] : arena_offsets_)
      ptrs_[static_cast<size_t>(id)] = static_cast<char*>(arena.data()) + offset;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].nbytes() > 0)  // an empty tensor may have no storage at all
        std::memcpy(ptrs_[static_cast<size_t>(inputs_[i])], inputs[i].raw(), inputs[i].nbytes());
    const bool timing = env_bool("RLX_DISPATCH_REPORT");
    auto& pool = ThreadPool::global();
    for (size_t s = 0; s < steps_.size(); ++s) {
      const Step& step = steps_[s];
      const Node& n = graph_.node(step.id);
      std::vector<const void*> ins;
      for (NodeId in : n.inputs) ins.push_back(ptrs_[static_cast<size_t>(in)]);
      KernelArgs args(graph_, step.id, std::move(ins), ptrs_[static_cast<size_t>(step.id)], pool);
      if (!step.param_caches.empty()) args.set_param_caches(&step.param_caches);
      auto t0 = std::chrono::steady_clock::now();
      std::any_cast<const CpuKernel&>(step.kernel->impl)(args);
      args.finish();
      if (timing)
        times_us_[s] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    std::vector<Tensor> outs;
    for (const auto& [_, id] : graph_.outputs()) {
      const TensorType& t = graph_.node(id).type;
      Tensor o = Tensor::empty(t.dtype, static_dims(t.shape));
      if (o.nbytes() > 0) std::memcpy(o.raw_mut(), ptrs_[static_cast<size_t>(id)], o.nbytes());
      outs.push_back(std::move(o));
    }
    return outs;
  }

  std::string dispatch_report() const override {
    std::ostringstream os;
    os << "dispatch report (cpu, " << steps_.size() << " kernels, arena " << plan_.arena_bytes << " bytes):\n";
    for (size_t s = 0; s < steps_.size(); ++s) {
      os << "  " << graph_.describe(steps_[s].id) << " " << graph_.node(steps_[s].id).type.to_string() << " -> "
         << steps_[s].kernel->description;
      if (times_us_[s] > 0) os << "  " << times_us_[s] << " us";
      os << "\n";
    }
    return os.str();
  }

 private:
  Graph graph_;
  // The arena of one run, back to the pool however the run ends.
  class Arena {
   public:
    explicit Arena(size_t bytes) : buffer_(arena_pool().take(bytes).first) {
      if (!buffer_) buffer_ = std::make_unique<CpuBuffer>(bytes);
    }
    ~Arena() {
      const size_t bytes = buffer_->size();
      arena_pool().give(std::move(buffer_), bytes);
    }
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    void* data() { return buffer_->data(); }

   private:
    std::unique_ptr<CpuBuffer> buffer_;
  };

  MemoryPlan plan_;
  std::vector<std::pair<NodeId, int64_t>> arena_offsets_;  // nodes in the arena (views included), byte offsets
  std::vector<void*> ptrs_;  // arena nodes' pointers are set at each run
  std::vector<Step> steps_;
  std::vector<NodeId> inputs_;
  std::vector<double> times_us_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend() { register_all_kernels(); }
  std::string name() const override { return kCpuBackend; }
  DeviceInfo device_info() const override {
    DeviceInfo d;
    d.backend = kCpuBackend;
    d.name = str("CPU (", ThreadPool::global().size(), " threads)");
    d.details = str("hardware threads: ", std::thread::hardware_concurrency());
    return d;
  }
  std::shared_ptr<Buffer> allocate(size_t bytes) override { return std::make_shared<CpuBuffer>(bytes); }
  bool supports(const Graph& g, NodeId id, std::string* why) const override {
    if (g.node(id).is_leaf()) return true;
    if (KernelRegistry::global().find(kCpuBackend, g, id)) return true;
    if (why) *why = str("no cpu kernel for ", op_name(g.node(id).op), " ", signature_to_string(KernelRegistry::signature(g, id)));
    return false;
  }
  std::unique_ptr<Program> compile(const Graph& g, const CompileOptions&, const BoundBuffers& buffers) override {
    return std::make_unique<CpuProgram>(g, buffers);
  }
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend() { return std::make_shared<CpuBackend>(); }

}  // namespace rlx::cpu
