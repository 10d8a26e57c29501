#include "rlx/backends/cuda/device.h"

#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

namespace rlx::cuda {

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver / no device: not an error for callers
      return 0;
    }
    return n;
  }();
  return count;
}

std::string version_string(int v) { return str(v / 1000, ".", (v % 1000) / 10); }

int current_sm_count() {
  int dev = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&dev));
  return device_props(dev).sm_count;
}

const DeviceProps& device_props(int index) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<DeviceProps>> cache;
  std::lock_guard lock(mu);
  RLX_CHECK(index >= 0 && index < device_count(), "cuda device ", index, " does not exist (", device_count(),
            " found)");
  if (cache.empty()) cache.resize(static_cast<size_t>(device_count()));
  auto& slot = cache[static_cast<size_t>(index)];
  if (!slot) {
    cudaDeviceProp p{};
    RLX_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    auto d = std::make_unique<DeviceProps>();
    d->index = index;
    d->name = p.name;
    char uuid[64];
    const auto* b = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
    std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                  b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    d->uuid = uuid;
    d->sm_count = p.multiProcessorCount;
    d->cc_major = p.major;
    d->cc_minor = p.minor;
    d->total_memory = p.totalGlobalMem;
    d->l2_bytes = static_cast<size_t>(p.l2CacheSize);
    d->smem_per_block_optin = p.sharedMemPerBlockOptin;
    RLX_CUDA_CHECK(cudaDriverGetVersion(&d->driver_version));
    RLX_CUDA_CHECK(cudaRuntimeGetVersion(&d->runtime_version));
    slot = std::move(d);
  }
  return *slot;
}

DeviceGuard::DeviceGuard(int index) {
  RLX_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != index) RLX_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::~DeviceGuard() { cudaSetDevice(prev_); }

Stream::Stream() { RLX_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
void Stream::synchronize() const { RLX_CUDA_CHECK(cudaStreamSynchronize(s_)); }

void settle_default_stream() { RLX_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy)); }

Event::Event(bool timing) {
  RLX_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
void Event::record(cudaStream_t s) { RLX_CUDA_CHECK(cudaEventRecord(e_, s)); }
void Event::synchronize() const { RLX_CUDA_CHECK(cudaEventSynchronize(e_)); }
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  RLX_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

GraphExec::GraphExec(cudaGraph_t graph) { RLX_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0)); }
GraphExec::~GraphExec() {
  if (exec_) cudaGraphExecDestroy(exec_);
}
GraphExec& GraphExec::operator=(GraphExec&& o) noexcept {
  if (this != &o) {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = o.exec_;
    o.exec_ = nullptr;
  }
  return *this;
}
void GraphExec::launch(cudaStream_t s) const { RLX_CUDA_CHECK(cudaGraphLaunch(exec_, s)); }

}  // namespace rlx::cuda
