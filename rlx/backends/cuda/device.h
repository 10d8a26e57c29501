// CUDA devices and RAII handles for streams, events and graphs.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "rlx/backends/cuda/cuda_check.h"

namespace rlx::cuda {

struct DeviceProps {
  int index = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-..." as nvidia-smi prints it
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block_optin = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;
};

// Number of usable CUDA devices; 0 when there is no driver or no GPU.
int device_count();
const DeviceProps& device_props(int index);
// SMs of the calling thread's current device (cached), for sizing grids.
int current_sm_count();
std::string version_string(int v);  // 13000 -> "13.0"

// Makes `index` current for this thread for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

// Waits for the work issued on the legacy default stream of the current
// device. rlx's streams are non-blocking, so they do not wait for it: a
// cudaMemset without a stream (asynchronous for device memory) or a pageable
// host-to-device cudaMemcpy (it returns once the data is staged, before the
// DMA lands) must be settled before a stream reads what it wrote. Seen on the
// H200: a program's first run read inputs its own compile-time cudaMemset had
// not yet zeroed, and then zeroed, while another process loaded the GPU.
void settle_default_stream();

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t s);
  void synchronize() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// An instantiated CUDA graph.
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraph_t graph);
  ~GraphExec();
  GraphExec(GraphExec&& o) noexcept : exec_(o.exec_) { o.exec_ = nullptr; }
  GraphExec& operator=(GraphExec&& o) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  explicit operator bool() const { return exec_ != nullptr; }
  void launch(cudaStream_t s) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace rlx::cuda
