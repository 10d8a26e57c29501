// The encoder is the only path that launches work. A ThunkSchedule is the
// ordered list of launches of one compiled program, split into segments at
// host synchronization points; the encoder captures each segment into a
// CUDA graph the first time it runs and replays it afterwards (the ICB
// analogue). Every pointer a captured thunk uses is fixed for the program's
// life and per-run values (inputs, positions, lengths) are read from device
// memory, so replays never need re-capture; run_direct() launches the few
// thunks whose pointers do change (the copy of outputs into host memory;
// the program launches the copy of its inputs itself).
// RLX_CUDA_GRAPHS=0 launches thunks directly; RLX_CUDA_SYNC_DEBUG=1 also synchronizes after each thunk so an
// asynchronous fault is reported with the thunk that caused it. On Hopper and
// newer, edges into rlx kernels inside the captured graphs are programmatic
// (device/pdl.cuh; RLX_CUDA_PDL=0 turns that off).
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rlx/backends/cuda/device.h"
#include "rlx/ir/graph.h"

namespace rlx::cuda {

struct PersistentOp;  // persistent.h

struct Thunk {
  NodeId node = -1;          // the IR node it implements (-1: program plumbing)
  std::string kernel;        // what runs, for the dispatch report
  std::function<void(cudaStream_t)> launch;
  // The same work as ops of the persistent decode kernel, when the lowering
  // can express it so (persistent.h); null otherwise.
  std::shared_ptr<const std::vector<PersistentOp>> persistent;
};

struct ThunkSchedule {
  std::vector<Thunk> thunks;
  std::vector<size_t> segment_ends;  // exclusive ends; the last equals thunks.size()
  void add(Thunk t) { thunks.push_back(std::move(t)); }
  void end_segment() { segment_ends.push_back(thunks.size()); }
};

class Encoder {
 public:
  // `describe(node)` names a node in errors ("node %4 (LayerNorm 'ln')").
  Encoder(bool use_graphs, std::function<std::string(NodeId)> describe);
  // Runs the whole schedule on `stream` (asynchronously, unless sync-debug is on).
  void run(const ThunkSchedule& s, cudaStream_t stream);
  // Launches `s` directly, never captured: for work whose pointers change
  // from run to run (a program's copy back into the run's output block).
  void run_direct(const ThunkSchedule& s, cudaStream_t stream) {
    launch_range(s, 0, s.thunks.size(), stream, sync_debug_);
  }
  bool uses_graphs() const { return use_graphs_; }
  int captures() const { return captures_; }
  // Kernel → rlx-kernel edges made programmatic in the graphs captured so far.
  int programmatic_edges() const { return programmatic_edges_; }

 private:
  void launch_range(const ThunkSchedule& s, size_t begin, size_t end, cudaStream_t stream, bool sync_each);
  bool use_graphs_;
  bool pdl_;  // programmatic kernel edges in the captured graphs (RLX_CUDA_PDL)
  bool sync_debug_;
  std::function<std::string(NodeId)> describe_;
  std::vector<GraphExec> graphs_;
  int captures_ = 0;
  int programmatic_edges_ = 0;
};

}  // namespace rlx::cuda
