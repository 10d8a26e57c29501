#include "rlx/backends/cuda/encoder.h"

#include "rlx/core/env.h"

namespace rlx::cuda {

Encoder::Encoder(bool use_graphs, std::function<std::string(NodeId)> describe)
    : use_graphs_(use_graphs && env_bool("RLX_CUDA_GRAPHS") && !env_bool("RLX_CUDA_SYNC_DEBUG")),
      sync_debug_(env_bool("RLX_CUDA_SYNC_DEBUG")),
      describe_(std::move(describe)) {}

void Encoder::launch_range(const ThunkSchedule& s, size_t begin, size_t end, cudaStream_t stream, bool sync_each) {
  for (size_t i = begin; i < end; ++i) {
    const Thunk& t = s.thunks[i];
    try {
      t.launch(stream);
      if (sync_each) RLX_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (const Error& e) {
      const std::string who = t.node >= 0 ? describe_(t.node) : std::string("program");
      throw DeviceError(str("cuda: ", who, " [", t.kernel, "]: ", e.what()));
    }
  }
}

void Encoder::run(const ThunkSchedule& s, cudaStream_t stream) {
  size_t begin = 0;
  if (!use_graphs_) {
    launch_range(s, 0, s.thunks.size(), stream, sync_debug_);
    return;
  }
  if (graphs_.size() != s.segment_ends.size()) graphs_.resize(s.segment_ends.size());
  for (size_t seg = 0; seg < s.segment_ends.size(); ++seg) {
    const size_t end = s.segment_ends[seg];
    if (!graphs_[seg]) {
      RLX_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      cudaGraph_t graph = nullptr;
      try {
        launch_range(s, begin, end, stream, false);
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);  // leave the stream usable
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
      }
      RLX_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      try {
        graphs_[seg] = GraphExec(graph);
      } catch (...) {
        cudaGraphDestroy(graph);
        throw;
      }
      cudaGraphDestroy(graph);
      ++captures_;
    }
    graphs_[seg].launch(stream);
    begin = end;
  }
}

}  // namespace rlx::cuda
