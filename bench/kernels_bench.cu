// Memory-bound kernel throughput: LayerNorm, RmsNorm (plain and residual-fused)
// and Softmax over 4096-wide rows (32768 × 4096, f16 and f32), and the
// encoders' post-LN (residual + LayerNorm at 384 and 768 columns) and GELU-erf
// (1536 and 3072) at 256 × 128 tokens, from the launchers in
// rlx/backends/cuda/kernels. Peer: bench/kernels_torch.py on the
// same shapes. Inputs rotate over 3 buffer sets (each ≥ 256 MB, far beyond
// the 60 MB L2), 10 warm-up launches, then 100 launches each timed with CUDA
// events; the median is reported as GB/s (bytes = x read (+ residual read) +
// y written (+ sum written)) and as % of the measured 4.22 TB/s copy rate.
// JSON lines (bench "kernels", impl "rlx") feed bench/compare.py.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_cuda.cuh"
#include "bench/bench_util.h"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/kernels/norm.h"
#include "rlx/backends/cuda/kernels/softmax.h"
#include "rlx/core/dtype.h"

namespace {

constexpr int kSets = 3, kWarm = 10, kIters = 100;

__global__ void fill_kernel(unsigned short* p, size_t n, unsigned seed, bool f32) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    const float v = (static_cast<float>(h >> 9) / 8388608.0f) * 4.0f - 2.0f;  // [-2, 2)
    if (f32) reinterpret_cast<float*>(p)[i] = v;
    else p[i] = __half_as_ushort(__float2half(v));
  }
}

struct Set {
  void *x, *r, *y, *s;
};

double time_median(const std::function<void(int)>& launch) {
  cudaEvent_t a, b;
  RLX_CUDA_CHECK(cudaEventCreate(&a));
  RLX_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarm; ++i) launch(i % kSets);
  RLX_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int i = 0; i < kIters; ++i) {
    rlx::bench::gpu_busy_wait();
    RLX_CUDA_CHECK(cudaEventRecord(a));
    launch(i % kSets);
    RLX_CUDA_CHECK(cudaEventRecord(b));
    RLX_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    RLX_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  RLX_CUDA_CHECK(cudaGetLastError());
  RLX_CUDA_CHECK(cudaEventDestroy(a));
  RLX_CUDA_CHECK(cudaEventDestroy(b));
  return rlx::bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = rlx::bench::no_options(argc, argv, "rlx_kernels_bench",
                                            "LayerNorm, RMSNorm and softmax over 32768 x 4096 rows, and the BERT "
                                            "encoders' residual LayerNorm and GELU-erf shapes, in GB/s and % of the "
                                            "4.22 TB/s copy; torch peer: bench/kernels_torch.py.");
      rc >= 0)
    return rc;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("kernels_bench: no CUDA device; skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  RLX_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("hardware limit: copy %.2f TB/s (measured, bench_util.h)\n", rlx::bench::kCopyTBps);
  const int64_t rows = 32768, cols = 4096;
  const size_t n = static_cast<size_t>(rows * cols);
  std::printf("\n%-36s %9s %9s %8s\n", "case (32768 x 4096)", "us", "GB/s", "of copy");
  for (rlx::DType dt : {rlx::DType::F16, rlx::DType::F32}) {
    const bool f32 = dt == rlx::DType::F32;
    const size_t bytes = n * (f32 ? 4 : 2);
    Set sets[kSets];
    for (int k = 0; k < kSets; ++k) {
      void** ptrs[] = {&sets[k].x, &sets[k].r, &sets[k].y, &sets[k].s};
      for (int j = 0; j < 4; ++j) {
        RLX_CUDA_CHECK(cudaMalloc(ptrs[j], bytes));
        fill_kernel<<<4096, 256>>>(static_cast<unsigned short*>(*ptrs[j]), n, 17u * k + j, f32);
      }
    }
    void *gamma, *beta;
    RLX_CUDA_CHECK(cudaMalloc(&gamma, cols * 4));
    RLX_CUDA_CHECK(cudaMalloc(&beta, cols * 4));
    fill_kernel<<<16, 256>>>(static_cast<unsigned short*>(gamma), cols, 99, f32);
    fill_kernel<<<16, 256>>>(static_cast<unsigned short*>(beta), cols, 98, f32);
    RLX_CUDA_CHECK(cudaDeviceSynchronize());
    const char* dn = f32 ? "f32" : "f16";
    struct Case {
      std::string name;
      int tensors;  // row-sized tensors moved: reads + writes
      std::function<void(int)> fn;
    };
    const float eps = 1e-5f;
    const Case cases[] = {
        {"layernorm", 2,
         [&](int k) { rlx::cuda::launch_layer_norm(dt, dt, sets[k].x, nullptr, gamma, beta, sets[k].y, nullptr, rows, cols, eps, nullptr); }},
        {"rmsnorm", 2,
         [&](int k) { rlx::cuda::launch_rms_norm(dt, dt, sets[k].x, nullptr, gamma, sets[k].y, nullptr, rows, cols, eps, nullptr); }},
        {"softmax", 2, [&](int k) { rlx::cuda::launch_softmax(dt, sets[k].x, sets[k].y, rows, cols, nullptr); }},
        {"residual+layernorm (+sum)", 4,
         [&](int k) { rlx::cuda::launch_layer_norm(dt, dt, sets[k].x, sets[k].r, gamma, beta, sets[k].y, sets[k].s, rows, cols, eps, nullptr); }},
        {"residual+rmsnorm (+sum)", 4,
         [&](int k) { rlx::cuda::launch_rms_norm(dt, dt, sets[k].x, sets[k].r, gamma, sets[k].y, sets[k].s, rows, cols, eps, nullptr); }},
    };
    for (const auto& c : cases) {
      const double ms = time_median(c.fn);
      const double gbps = static_cast<double>(c.tensors) * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
      const std::string key = c.name + " " + dn + " 32768x4096";
      std::printf("%-36s %9.1f %9.0f %7.1f%%\n", key.c_str(), ms * 1e3, gbps, 100.0 * gbps / (rlx::bench::kCopyTBps * 1e3));
      rlx::bench::json_line("kernels", key, gbps, "GB/s");
    }
    for (auto& s : sets)
      for (void* p : {s.x, s.r, s.y, s.s}) RLX_CUDA_CHECK(cudaFree(p));
    RLX_CUDA_CHECK(cudaFree(gamma));
    RLX_CUDA_CHECK(cudaFree(beta));
  }
  // The encoders' own shapes at 256 x 128 tokens (f16): the post-LN
  // residual + LayerNorm (x, residual read, y written) at MiniLM's and
  // BERT-base's widths, and the FFN's GELU-erf in place.
  {
    const int64_t rows = 32768;
    const size_t cap = static_cast<size_t>(rows) * 3072;
    Set sets[kSets];
    for (int k = 0; k < kSets; ++k) {
      void** ptrs[] = {&sets[k].x, &sets[k].r, &sets[k].y};
      for (int j = 0; j < 3; ++j) {
        RLX_CUDA_CHECK(cudaMalloc(ptrs[j], cap * 2));
        fill_kernel<<<4096, 256>>>(static_cast<unsigned short*>(*ptrs[j]), cap, 31u * k + j, false);
      }
    }
    void *gamma, *beta;
    RLX_CUDA_CHECK(cudaMalloc(&gamma, 3072 * 2));
    RLX_CUDA_CHECK(cudaMalloc(&beta, 3072 * 2));
    fill_kernel<<<16, 256>>>(static_cast<unsigned short*>(gamma), 3072, 97, false);
    fill_kernel<<<16, 256>>>(static_cast<unsigned short*>(beta), 3072, 96, false);
    RLX_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("\n%-36s %9s %9s %8s\n", "case (encoder shapes, f16)", "us", "GB/s", "of copy");
    const rlx::DType h = rlx::DType::F16;
    struct Case {
      std::string name;
      int64_t cols;
      int tensors;
      std::function<void(int)> fn;
    };
    std::vector<Case> cases;
    for (int64_t cols : {384, 768})
      cases.push_back({rlx::str("residual+layernorm f16 32768x", cols), cols, 3, [&, cols](int k) {
                         rlx::cuda::launch_layer_norm(h, h, sets[k].x, sets[k].r, gamma, beta, sets[k].y, nullptr, rows,
                                                      cols, 1e-12f, nullptr);
                       }});
    for (int64_t cols : {1536, 3072})
      cases.push_back({rlx::str("gelu_erf in place f16 32768x", cols), cols, 2, [&, cols](int k) {
                         rlx::cuda::launch_unary(rlx::UnaryFn::GeluErf, h, sets[k].y, sets[k].y, rows * cols, nullptr);
                       }});
    // A device copy moving the same bytes as each case (read + write): the
    // ceiling at these sizes, launch ramp and tail included.
    for (int64_t cols : {576, 1536})
      cases.push_back({rlx::str("copy f16 32768x", cols, " (same bytes)"), cols, 2, [&, cols](int k) {
                         RLX_CUDA_CHECK(cudaMemcpyAsync(sets[k].y, sets[k].x, static_cast<size_t>(rows * cols * 2),
                                                        cudaMemcpyDeviceToDevice, nullptr));
                       }});
    for (const auto& c : cases) {
      const double ms = time_median(c.fn);
      const double gbps = static_cast<double>(c.tensors) * static_cast<double>(rows * c.cols * 2) / (ms * 1e-3) / 1e9;
      std::printf("%-36s %9.1f %9.0f %7.1f%%\n", c.name.c_str(), ms * 1e3, gbps, 100.0 * gbps / (rlx::bench::kCopyTBps * 1e3));
      rlx::bench::json_line("kernels", c.name, gbps, "GB/s");
    }
    for (auto& s : sets)
      for (void* p : {s.x, s.r, s.y}) RLX_CUDA_CHECK(cudaFree(p));
    RLX_CUDA_CHECK(cudaFree(gamma));
    RLX_CUDA_CHECK(cudaFree(beta));
  }
  return 0;
}
