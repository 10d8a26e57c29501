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
//
// Then the same for one thread-block cluster of 2-16 CTAs (sm_90): the
// hardware cluster barrier, and a phase whose vector travels through
// distributed shared memory (each CTA stores its slice into every CTA's copy).
// And how fast C CTAs (one per SM) stream weights from HBM: whether a decode
// step could run on one cluster, layer after layer, with cluster barriers
// instead of grid-wide ones (session 40: a cross-CTA handshake through L2 cost
// more than a launch boundary).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/wgmma.cuh"

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

// The sum of q over the block, for every thread (part: 32 floats of shared memory).
__device__ __forceinline__ float block_total(float q, float* part) {
  for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = q;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) part[0] = t;
  }
  __syncthreads();
  return part[0];
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
    const float total = block_total(q, part);
    acc += total;
    const int c0 = blockIdx.x * per;
    for (int c = c0 + threadIdx.x; c < min(width, c0 + per); c += blockDim.x) dst[c] = total * 1e-6f + c;
    __syncthreads();
  }
  finish<kCount>(s);
  if (threadIdx.x == 0) sink[blockIdx.x] = acc;
}

// The cluster kernels run as one cluster (grid = cluster), sm_90a.
using rlx::cuda::dev::cluster_map;
using rlx::cuda::dev::cluster_rank;
using rlx::cuda::dev::cluster_store4;
using rlx::cuda::dev::cluster_sync;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Stores values derived from `total` into words [c0, c0 + per) of the vector
// at `dst` (shared memory) in every CTA of the cluster, four floats at a time
// (per is a multiple of 4).
__device__ __forceinline__ void broadcast_slice(float* dst, int c0, int per, float total) {
  const uint32_t base = smem_addr(dst);
  for (uint32_t r = 0; r < gridDim.x; ++r) {
    const uint32_t remote = cluster_map(base, r);
    for (int c = c0 + 4 * static_cast<int>(threadIdx.x); c < c0 + per; c += 4 * blockDim.x)
      cluster_store4(remote + 4u * static_cast<uint32_t>(c), total * 1e-6f + c, total * 1e-6f + c + 1,
                     total * 1e-6f + c + 2, total * 1e-6f + c + 3);
  }
}

__global__ void cluster_barriers_kernel(int n) {
  for (int i = 0; i < n; ++i) cluster_sync();
}

// n phases through distributed shared memory: fold the local copy of the
// vector (width floats, a multiple of 4 · the cluster's CTAs), store my slice
// of the next vector into every CTA's copy, cluster barrier. The two copies
// alternate, so a barrier per phase separates every store from the reads of
// the same words.
__global__ void cluster_phases_kernel(int width, int n, float* sink) {
  extern __shared__ float vec[];  // 2 · width
  __shared__ float part[32];
  const int rank = static_cast<int>(cluster_rank()), size = static_cast<int>(gridDim.x);
  const int per = width / size;
  for (int c = threadIdx.x; c < 2 * width; c += blockDim.x) vec[c] = 0.0f;
  cluster_sync();
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float* src = vec + (i & 1) * width;
    float q = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) q += src[c];
    const float total = block_total(q, part);
    acc += total;
    broadcast_slice(vec + ((i + 1) & 1) * width, rank * per, per, total);
    cluster_sync();
  }
  if (threadIdx.x == 0) sink[rank] = acc;
}

// The sum of src[first], src[first + stride], ... below n4, eight loads in
// flight per thread: a streaming read the compiler cannot drop.
__device__ __forceinline__ float stream_sum(const float4* __restrict__ src, int64_t n4, int64_t first, int64_t stride) {
  constexpr int kInFlight = 8;
  float acc = 0.0f;
  for (int64_t i0 = first; i0 < n4; i0 += kInFlight * stride) {
    float4 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int64_t i = i0 + j * stride;
      v[j] = i < n4 ? __ldcs(src + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) acc += v[j].x + v[j].y + v[j].z + v[j].w;
  }
  return acc;
}

// `ctas` CTAs (one per SM) read n4 float4s from src.
__global__ void __launch_bounds__(512) stream_kernel(const float4* __restrict__ src, int64_t n4, float* sink) {
  const float acc = stream_sum(src, n4, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                               static_cast<int64_t>(gridDim.x) * blockDim.x);
  if (acc == 1234.5f) sink[blockIdx.x] = acc;  // never true for the zeroed input; keeps the loads
}

// One decode step's dependent phases on one cluster: per layer and phase,
// every CTA streams its slice of that phase's weight bytes (`bytes[p]`, read
// from `w` at a moving offset so the step reads all of its bytes once),
// folds them, stores a 640-float vector's slice into every CTA's copy and
// meets the others at the cluster barrier. No weight is fetched ahead of its
// phase, so this bounds from above what a one-cluster decode kernel's layer
// chain would take (without the arithmetic).
__global__ void __launch_bounds__(512)
    cluster_step_kernel(const float4* __restrict__ w, const int64_t* __restrict__ bytes, int phases, int layers,
                        float* sink) {
  __shared__ __align__(16) float vec[2][640];
  __shared__ float part[32];
  const int rank = static_cast<int>(cluster_rank()), size = static_cast<int>(gridDim.x);
  for (int c = threadIdx.x; c < 2 * 640; c += blockDim.x) vec[c / 640][c % 640] = 0.0f;
  cluster_sync();  // every CTA of the cluster runs before any stores into its shared memory
  const int64_t tid = static_cast<int64_t>(rank) * blockDim.x + threadIdx.x, stride = int64_t{size} * blockDim.x;
  int64_t at = 0;  // float4s of w read so far
  float acc = 0.0f;
  for (int i = 0; i < layers * phases; ++i) {
    const int64_t n4 = bytes[i % phases] / 16;
    const float q = vec[i & 1][threadIdx.x % 640] + stream_sum(w + at, n4, tid, stride);
    at += n4;
    const float total = block_total(q, part);
    acc += total;
    const int per = 640 / size;
    broadcast_slice(&vec[(i + 1) & 1][0], rank * per, per, total);
    cluster_sync();
  }
  if (threadIdx.x == 0) sink[rank] = acc;
}

template <class Kernel, class... Args>
void launch_cluster(Kernel kernel, int cluster, int threads, size_t smem, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  RLX_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
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
  int major = 0;
  RLX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < 9) {
    std::printf("\nno thread-block clusters before sm_90: the cluster rows are skipped\n");
    RLX_CUDA_CHECK(cudaFree(words));
    RLX_CUDA_CHECK(cudaFree(v));
    RLX_CUDA_CHECK(cudaFree(sink));
    return 0;
  }
  // One cluster: its barrier and a DSMEM phase (us), then streaming by C CTAs (GB/s, cold: each
  // launch reads the next 64 MB window of a 512 MB buffer, past the L2).
  RLX_CUDA_CHECK(cudaFuncSetAttribute(cluster_barriers_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  RLX_CUDA_CHECK(cudaFuncSetAttribute(cluster_phases_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  constexpr int64_t kWindow = int64_t{64} << 20, kBuffer = int64_t{512} << 20;
  float4* big = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&big, kBuffer));
  RLX_CUDA_CHECK(cudaMemset(big, 0, kBuffer));
  std::printf("\n%-28s %10s %12s %12s %14s\n", "one cluster / C CTAs", "barrier", "phase 640", "phase 4096",
              "stream GB/s");
  for (int c : {2, 4, 8, 16}) {
    const int threads = 512;
    const float bar = median_ms([&] { launch_cluster(cluster_barriers_kernel, c, threads, 0, iters); });
    const float p640 = median_ms(
        [&] { launch_cluster(cluster_phases_kernel, c, threads, 2 * 640 * sizeof(float), 640, iters, sink); });
    const float p4k = median_ms(
        [&] { launch_cluster(cluster_phases_kernel, c, threads, 2 * 4096 * sizeof(float), 4096, iters, sink); });
    int64_t at = 0;
    const float ms = median_ms([&] {
      stream_kernel<<<c, threads>>>(big + at / 16, kWindow / 16, sink);
      at = (at + kWindow) % kBuffer;
    });
    RLX_CUDA_CHECK(cudaGetLastError());
    char name[64];
    std::snprintf(name, sizeof name, "%d CTAs x %d threads", c, threads);
    std::printf("%-28s %10.3f %12.3f %12.3f %14.1f\n", name, bar * 1e3 / iters, p640 * 1e3 / iters,
                p4k * 1e3 / iters, static_cast<double>(kWindow) / (ms * 1e-3) / 1e9);
  }
  // A Gemma 3 270M decode step's layer weights as phases (q|k|v, the attention's ~128 KB of cache,
  // o, gate|up, down; the file's types: ~4.4 MB a layer) over 18 layers on one cluster, each step from
  // the next window of the buffer.
  RLX_CUDA_CHECK(cudaFuncSetAttribute(cluster_step_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const std::vector<int64_t> phase_bytes = {1044480, 131072, 450560, 1802240, 1075200};
  int64_t* d_bytes = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&d_bytes, phase_bytes.size() * sizeof(int64_t)));
  RLX_CUDA_CHECK(
      cudaMemcpy(d_bytes, phase_bytes.data(), phase_bytes.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  int64_t step_bytes = 0;
  for (int64_t b : phase_bytes) step_bytes += 18 * b;
  for (int c : {8, 16}) {
    int64_t at = 0;
    const float ms = median_ms([&] {
      launch_cluster(cluster_step_kernel, c, 512, 0, big + at / 16, static_cast<const int64_t*>(d_bytes),
                     static_cast<int>(phase_bytes.size()), 18, sink);
      at = (at + kWindow * 2) % kBuffer;  // 2 windows (128 MB) a step: the next step starts cold
    });
    RLX_CUDA_CHECK(cudaGetLastError());
    std::printf("decode step on one cluster of %2d CTAs: %.1f us for 90 phases, %.1f MB (%.0f GB/s)\n", c,
                ms * 1e3, static_cast<double>(step_bytes) / 1e6, static_cast<double>(step_bytes) / (ms * 1e-3) / 1e9);
  }
  RLX_CUDA_CHECK(cudaFree(d_bytes));
  for (int c : {32, 66, sms}) {
    int64_t at = 0;
    const float ms = median_ms([&] {
      stream_kernel<<<c, 512>>>(big + at / 16, kWindow / 16, sink);
      at = (at + kWindow) % kBuffer;
    });
    RLX_CUDA_CHECK(cudaGetLastError());
    std::printf("%-28s %10s %12s %12s %14.1f\n", (std::to_string(c) + " CTAs x 512 threads").c_str(), "-", "-", "-",
                static_cast<double>(kWindow) / (ms * 1e-3) / 1e9);
  }
  RLX_CUDA_CHECK(cudaFree(big));
  RLX_CUDA_CHECK(cudaFree(words));
  RLX_CUDA_CHECK(cudaFree(v));
  RLX_CUDA_CHECK(cudaFree(sink));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
