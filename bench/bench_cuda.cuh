// CUDA helpers shared by the GPU benchmarks: deterministic random fills and
// event timing (median of individually timed launches after warm-up).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "bench/bench_util.h"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/core/dtype.h"

namespace rlx::bench {

// Uniform values in [-1, 1) from a hash of the index (no state, any grid).
template <typename T>
__global__ void fill_uniform_kernel(T* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += gridDim.x * static_cast<size_t>(blockDim.x)) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = static_cast<T>(2.0f * u - 1.0f);
  }
}

// Fills n elements of an f16 or bf16 device buffer.
inline void fill_uniform(void* p, size_t n, DType dt, uint64_t seed) {
  if (dt == DType::F16) fill_uniform_kernel<<<1024, 256>>>(static_cast<__half*>(p), n, seed);
  else fill_uniform_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  RLX_CUDA_CHECK(cudaGetLastError());
}

// Keeps the GPU busy for about `us` microseconds. Queued before a timed
// region's start event, it lets the host enqueue the event and the launches
// behind it before the GPU reaches them, so the timing is the kernels' own
// and not the host's launch latency (a few µs, which used to be counted in
// every figure of a short kernel).
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
inline void gpu_busy_wait(double us = 40) {
  static const int khz = [] {
    int device = 0, v = 0;
    RLX_CUDA_CHECK(cudaGetDevice(&device));
    RLX_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, device));
    return v;
  }();
  spin_kernel<<<1, 1>>>(static_cast<long long>(us * 1e-3 * khz));
  RLX_CUDA_CHECK(cudaGetLastError());
}

// Median ms of `iters` launches, each timed alone with CUDA events on the
// default stream (behind gpu_busy_wait), after `warm` untimed launches.
inline double median_event_ms(const std::function<void()>& launch, int warm = 5, int iters = 30) {
  for (int i = 0; i < warm; ++i) launch();
  RLX_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t s, e;
  RLX_CUDA_CHECK(cudaEventCreate(&s));
  RLX_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    gpu_busy_wait();
    RLX_CUDA_CHECK(cudaEventRecord(s));
    launch();
    RLX_CUDA_CHECK(cudaEventRecord(e));
    RLX_CUDA_CHECK(cudaEventSynchronize(e));
    float t = 0;
    RLX_CUDA_CHECK(cudaEventElapsedTime(&t, s, e));
    ms.push_back(t);
  }
  RLX_CUDA_CHECK(cudaEventDestroy(s));
  RLX_CUDA_CHECK(cudaEventDestroy(e));
  return median(ms);
}

// This GPU's device-to-device copy rate, TB/s of bytes read + written
// (cudaMemcpyAsync of `bytes`, median of 10), for reading "% of copy" columns
// on a GPU other than the H200 that kCopyTBps was measured on.
inline double device_copy_tbps(size_t bytes = size_t{1} << 30) {
  void *a = nullptr, *b = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&a, bytes));
  RLX_CUDA_CHECK(cudaMalloc(&b, bytes));
  RLX_CUDA_CHECK(cudaMemset(a, 1, bytes));
  const double ms =
      median_event_ms([&] { RLX_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 2, 10);
  RLX_CUDA_CHECK(cudaFree(a));
  RLX_CUDA_CHECK(cudaFree(b));
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e12;
}

}  // namespace rlx::bench
