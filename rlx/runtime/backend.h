// The backend interface: a backend owns a device, allocates Buffers on it and
// compiles fully static graphs into Programs. Adding a backend means
// implementing these three classes and registering a factory
// (rlx/runtime/backend_registry.h); no op or pass changes.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlx/core/tensor.h"
#include "rlx/ir/graph.h"
#include "rlx/runtime/options.h"

namespace rlx {

struct DeviceInfo {
  std::string backend;      // "cpu", "cuda"
  int index = 0;
  std::string name;         // "NVIDIA H200", "x86_64 (16 threads)"
  int64_t memory_bytes = 0;
  std::string details;      // one line: SMs, compute capability, driver, ...
};

// Memory on a backend's device. For the CPU backend data() is a host pointer.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual size_t size() const = 0;
  virtual void* data() = 0;
  virtual void upload(const void* src, size_t bytes, size_t offset = 0) = 0;
  virtual void download(void* dst, size_t bytes, size_t offset = 0) const = 0;
  virtual void fill_zero() = 0;
};

// Params and states of one Executable, shared by all its specializations.
// Each entry's dtype and shape equal the (lowered) graph's leaf type.
struct BoundBuffers {
  std::map<std::string, std::shared_ptr<Buffer>> params;
  std::map<std::string, std::shared_ptr<Buffer>> states;
};

// An input of a queued run that takes, on the device, the value an output of
// the program's previous run had (decode: the sampled token becomes the next
// step's input without a trip through the host).
struct Feed {
  size_t input = 0;   // index among the graph's inputs
  size_t output = 0;  // index among the graph's outputs
};

// One specialization (fully static graph) compiled for a backend.
class Program {
 public:
  virtual ~Program() = default;
  // `inputs` follow the graph's Input leaves in node order, already checked
  // against their types; returns one host tensor per graph output.
  virtual std::vector<Tensor> run(const std::vector<Tensor>& inputs) = 0;
  // Queued runs, where the backend can_queue(): launch() starts a run and
  // returns without waiting; finish() waits for the oldest queued run and
  // returns its outputs. A fed input's tensor gives only its shape.
  // Executable checks shapes, order and that the previous run was this
  // program's; launch() checks the feeds' sizes and its queue depth.
  virtual void launch(const std::vector<Tensor>& inputs, const std::vector<Feed>& feeds);
  virtual std::vector<Tensor> finish();
  // One line per node: the kernel (or lowering) chosen and, when measured, its time.
  virtual std::string dispatch_report() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual DeviceInfo device_info() const = 0;
  virtual std::shared_ptr<Buffer> allocate(size_t bytes) = 0;
  // How many runs of one program may be queued (Program::launch) while the
  // device works: 0 where programs run synchronously.
  virtual size_t queue_depth() const { return 0; }
  bool can_queue() const { return queue_depth() > 0; }
  // Whether a kernel exists for this node; `why` explains a refusal.
  virtual bool supports(const Graph& g, NodeId id, std::string* why) const = 0;
  // `g` is static, verified, and lowered to ops this backend supports.
  virtual std::unique_ptr<Program> compile(const Graph& g, const CompileOptions& opts,
                                           const BoundBuffers& buffers) = 0;
};

}  // namespace rlx
