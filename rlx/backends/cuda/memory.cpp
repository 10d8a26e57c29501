#include "rlx/backends/cuda/memory.h"

#include <atomic>

#include "rlx/backends/cuda/device.h"

namespace rlx::cuda {
namespace {
std::atomic<size_t> g_live{0}, g_peak{0};

void track(ptrdiff_t delta) {
  size_t now = g_live.fetch_add(static_cast<size_t>(delta)) + static_cast<size_t>(delta);
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

DeviceBuffer::DeviceBuffer(int device, size_t bytes, const char* what) : device_(device), bytes_(bytes) {
  DeviceGuard guard(device);
  const size_t alloc = std::max<size_t>(bytes, 256);
  cudaError_t err = cudaMalloc(&ptr_, alloc);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemory(str("cuda:", device, ": cannot allocate ", what, " of ", bytes, " bytes (", bytes >> 20,
                          " MiB): ", free_b >> 20, " MiB free of ", total_b >> 20, " MiB (", cudaGetErrorString(err),
                          ")"));
  }
  track(static_cast<ptrdiff_t>(alloc));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) {
    cudaFree(ptr_);
    track(-static_cast<ptrdiff_t>(std::max<size_t>(bytes_, 256)));
  }
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  RLX_CHECK(offset + bytes <= bytes_, "cuda buffer upload of ", bytes, " bytes at ", offset, " overflows ", bytes_);
  DeviceGuard guard(device_);
  RLX_CUDA_CHECK(cudaMemcpy(static_cast<char*>(ptr_) + offset, src, bytes, cudaMemcpyHostToDevice));
  settle_default_stream();
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  RLX_CHECK(offset + bytes <= bytes_, "cuda buffer download of ", bytes, " bytes at ", offset, " overflows ", bytes_);
  DeviceGuard guard(device_);
  RLX_CUDA_CHECK(cudaMemcpy(dst, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::fill_zero() {
  DeviceGuard guard(device_);
  RLX_CUDA_CHECK(cudaMemset(ptr_, 0, bytes_));
  settle_default_stream();
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  cudaError_t err = cudaMallocHost(&ptr_, std::max<size_t>(bytes, 64));
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw OutOfMemory(str("cannot allocate ", bytes, " bytes of pinned host memory: ", cudaGetErrorString(err)));
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

MemoryStats memory_stats(int device) {
  DeviceGuard guard(device);
  MemoryStats s;
  RLX_CUDA_CHECK(cudaMemGetInfo(&s.free_bytes, &s.total_bytes));
  s.rlx_live_bytes = g_live.load();
  s.rlx_peak_bytes = g_peak.load();
  return s;
}

}  // namespace rlx::cuda
