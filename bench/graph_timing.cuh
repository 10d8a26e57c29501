// Launches timed as the runtime runs them: one CUDA graph captured by the
// runtime's encoder (cuda::Encoder), with programmatic edges into rlx kernels
// on Hopper (RLX_CUDA_PDL), as a decode step or a prefill is replayed.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/encoder.h"

namespace rlx::bench {

// Median milliseconds per launch of one CUDA graph of `n` launches (launch(i,
// stream) for i < n, in order, each depending on the one before): 3 warm-up
// replays, median of 15.
inline double time_per_call_graph(int n, const std::function<void(int, cudaStream_t)>& launch) {
  cuda::ThunkSchedule sched;
  for (int i = 0; i < n; ++i) sched.add(cuda::Thunk{-1, "bench", [&launch, i](cudaStream_t s) { launch(i, s); }});
  sched.end_segment();
  cuda::Encoder enc(true, [](NodeId) { return std::string("bench"); });
  cudaStream_t stream = nullptr;
  RLX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  RLX_CUDA_CHECK(cudaEventCreate(&a));
  RLX_CUDA_CHECK(cudaEventCreate(&b));
  for (int r = 0; r < 3; ++r) enc.run(sched, stream);
  std::vector<double> ms;
  for (int r = 0; r < 15; ++r) {
    RLX_CUDA_CHECK(cudaEventRecord(a, stream));
    enc.run(sched, stream);
    RLX_CUDA_CHECK(cudaEventRecord(b, stream));
    RLX_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    RLX_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / n);
  }
  RLX_CUDA_CHECK(cudaEventDestroy(a));
  RLX_CUDA_CHECK(cudaEventDestroy(b));
  RLX_CUDA_CHECK(cudaStreamDestroy(stream));
  return median(ms);
}

}  // namespace rlx::bench
