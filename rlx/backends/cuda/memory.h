// Device and pinned host allocations. Allocation failure throws OutOfMemory
// naming the requested size and what the device has free.
#pragma once
#include <cstddef>
#include <cstdint>

#include "rlx/runtime/backend.h"

namespace rlx::cuda {

class DeviceBuffer final : public Buffer {
 public:
  DeviceBuffer(int device, size_t bytes, const char* what = "buffer");
  ~DeviceBuffer() override;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  size_t size() const override { return bytes_; }
  void* data() override { return ptr_; }
  const void* data() const { return ptr_; }
  void upload(const void* src, size_t bytes, size_t offset = 0) override;
  void download(void* dst, size_t bytes, size_t offset = 0) const override;
  void fill_zero() override;

 private:
  int device_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

// Page-locked host memory for staging inputs and outputs (fast, async copies).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_ = 0;
  void* ptr_ = nullptr;
};

struct MemoryStats {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  size_t rlx_live_bytes = 0;   // bytes rlx holds right now
  size_t rlx_peak_bytes = 0;
};
MemoryStats memory_stats(int device);

}  // namespace rlx::cuda
