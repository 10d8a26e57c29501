// How long one grid-wide barrier of a persistent kernel takes on this GPU, and
// one "phase" of a persistent decode step: every CTA writes its slice of a
// vector, all meet at a barrier, then every CTA reads the whole vector back
// (what a GEMV followed by another GEMV costs on the critical path, without
// the arithmetic). The persistent decode kernel (kernels/decode_persistent.cu)
// is built on these numbers.
//
//   rlx_grid_sync_bench [--iters N]
//
// Barriers: "gen" (arrive on a counter, the last arrival bumps a generation
// word the others spin on) and "count" (a counter that only grows during the
// launch; each CTA spins until it reaches the barrier's target; the last CTA
// to leave resets it). Times are per barrier / per phase, from CUDA events
// around one launch of N barriers, median of 7 launches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rlx/backends/cuda/cuda_check.h"

namespace {

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

struct Sync {
  unsigned* count;
  unsigned* gen;
  unsigned* exits;
};

template <bool kCount>
__device__ __forceinline__ void barrier(const Sync& s, unsigned& epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if constexpr (kCount) {
      ++epoch;
      red_release_add(s.count, 1);
      const unsigned target = epoch * gridDim.x;
      while (ld_acquire(s.count) < target) {
      }
    } else {
      const unsigned g = ld_acquire(s.gen);
      __threadfence();
      const unsigned arrived = atomicAdd(s.count, 1);
      if (arrived == gridDim.x - 1) {
        atomicExch(s.count, 0);
        __threadfence();
        red_release_add(s.gen, 1);
      } else {
        while (ld_acquire(s.gen) == g) {
        }
      }
    }
  }
  __syncthreads();
}

template <bool kCount>
__device__ __forceinline__ void finish(const Sync& s) {
  if constexpr (kCount) {
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(s.exits, 1) == gridDim.x - 1) {
      atomicExch(s.count, 0);
      atomicExch(s.exits, 0);
    }
  }
}

// n barriers and nothing else.
template <bool kCount>
__global__ void barriers_kernel(Sync s, int n) {
  unsigned epoch = 0;
  for (int i = 0; i < n; ++i) barrier<kCount>(s, epoch);
  finish<kCount>(s);
}

// n phases: write my slice of v (width floats in all), barrier, read all of v
// and fold it into the next slice (so the reads cannot be skipped).
template <bool kCount>
__global__ void phases_kernel(Sync s, float* v0, float* v1, int width, int n, float* sink) {
  unsigned epoch = 0;
  __shared__ float part[32];
  const int per = (width + gridDim.x - 1) / gridDim.x;
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) {
    float* src = (i & 1) ? v1 : v0;
    float* dst = (i & 1) ? v0 : v1;
    barrier<kCount>(s, epoch);
    float q = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) q += src[c];
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = q;
    __syncthreads();
    if (threadIdx.x < 32) {
      float t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
      for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
      if (threadIdx.x == 0) part[0] = t;
    }
    __syncthreads();
    acc += part[0];
    const int c0 = blockIdx.x * per;
    for (int c = c0 + threadIdx.x; c < min(width, c0 + per); c += blockDim.x) dst[c] = part[0] * 1e-6f + c;
    __syncthreads();
  }
  finish<kCount>(s);
  if (threadIdx.x == 0) sink[blockIdx.x] = acc;
}

template <class Launch>
float median_ms(Launch launch) {
  cudaEvent_t a, b;
  RLX_CUDA_CHECK(cudaEventCreate(&a));
  RLX_CUDA_CHECK(cudaEventCreate(&b));
  launch();  // warm-up
  RLX_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int r = 0; r < 7; ++r) {
    RLX_CUDA_CHECK(cudaEventRecord(a));
    launch();
    RLX_CUDA_CHECK(cudaEventRecord(b));
    RLX_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    RLX_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  RLX_CUDA_CHECK(cudaEventDestroy(a));
  RLX_CUDA_CHECK(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  int iters = 2000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: rlx_grid_sync_bench [--iters N]\n");
      return 2;
    }
  }
  int sms = 0;
  RLX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned* words = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&words, 3 * sizeof(unsigned)));
  RLX_CUDA_CHECK(cudaMemset(words, 0, 3 * sizeof(unsigned)));
  const Sync s{words, words + 1, words + 2};
  float *v, *sink;
  RLX_CUDA_CHECK(cudaMalloc(&v, 2 * 8192 * sizeof(float)));
  RLX_CUDA_CHECK(cudaMemset(v, 0, 2 * 8192 * sizeof(float)));
  RLX_CUDA_CHECK(cudaMalloc(&sink, 4096 * sizeof(float)));
  std::printf("%d SMs, %d barriers per launch; us per barrier / per phase (median of 7 launches)\n", sms, iters);
  std::printf("%-28s %8s %8s %12s %12s\n", "grid", "gen", "count", "phase 640", "phase 4096");
  for (int per_sm : {1, 2}) {
    for (int threads : {256, 512}) {
      const int grid = sms * per_sm;
      const float gen = median_ms([&] { barriers_kernel<false><<<grid, threads>>>(s, iters); });
      const float cnt = median_ms([&] { barriers_kernel<true><<<grid, threads>>>(s, iters); });
      const float p640 = median_ms([&] { phases_kernel<true><<<grid, threads>>>(s, v, v + 8192, 640, iters, sink); });
      const float p4k = median_ms([&] { phases_kernel<true><<<grid, threads>>>(s, v, v + 8192, 4096, iters, sink); });
      RLX_CUDA_CHECK(cudaGetLastError());
      char name[64];
      std::snprintf(name, sizeof name, "%d CTAs x %d threads", grid, threads);
      std::printf("%-28s %8.3f %8.3f %12.3f %12.3f\n", name, gen * 1e3 / iters, cnt * 1e3 / iters,
                  p640 * 1e3 / iters, p4k * 1e3 / iters);
    }
  }
  RLX_CUDA_CHECK(cudaFree(words));
  RLX_CUDA_CHECK(cudaFree(v));
  RLX_CUDA_CHECK(cudaFree(sink));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
