#include "rlx/backends/cuda/encoder.h"

#include <cuda.h>

#include <string_view>
#include <unordered_map>

#include "rlx/backends/cuda/kernels/io_stage.h"
#include "rlx/core/env.h"
#include "rlx/core/log.h"

namespace rlx::cuda {
namespace {

bool is_kernel(cudaGraphNode_t node) {
  cudaGraphNodeType type;
  return cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel;
}

// Driver entry points (the library does not link libcuda): a kernel node's
// parameters and a kernel's name. The runtime's cudaGraphKernelNodeGetParams
// fails with "invalid device function" for kernels it did not load (cuBLAS,
// cuDNN, NVRTC), an API error that compute-sanitizer reports; the driver's
// returns their CUfunction or CUkernel.
struct DriverNames {
  using NodeParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using FuncName = CUresult (*)(const char**, CUfunction);
  using KernelName = CUresult (*)(const char**, CUkernel);
  NodeParams node_params = nullptr;
  FuncName func_name = nullptr;
  KernelName kernel_name = nullptr;

  static const DriverNames& get() {
    static const DriverNames d = [] {
      DriverNames r;
      auto entry = [](const char* sym, int version) -> void* {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion(sym, &p, version, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
          (void)cudaGetLastError();
          return nullptr;
        }
        return p;
      };
      r.node_params = reinterpret_cast<NodeParams>(entry("cuGraphKernelNodeGetParams", 12000));
      r.func_name = reinterpret_cast<FuncName>(entry("cuFuncGetName", 12030));
      r.kernel_name = reinterpret_cast<KernelName>(entry("cuKernelGetName", 12030));
      return r;
    }();
    return d;
  }
};

// The mangled name of a kernel node's function, or null.
const char* kernel_node_name(cudaGraphNode_t node) {
  const DriverNames& d = DriverNames::get();
  if (!d.node_params || !d.func_name || !d.kernel_name) return nullptr;
  CUDA_KERNEL_NODE_PARAMS p{};
  const char* name = nullptr;
  if (d.node_params(node, &p) != CUDA_SUCCESS) return nullptr;
  if (p.func) return d.func_name(&name, p.func) == CUDA_SUCCESS ? name : nullptr;
  if (p.kern) return d.kernel_name(&name, p.kern) == CUDA_SUCCESS ? name : nullptr;
  return nullptr;
}

// An rlx kernel (namespace rlx::cuda): it starts with dev::pdl_begin()
// (device/pdl.cuh), so an edge into it may be programmatic. cuBLAS, cuDNN,
// CUB and custom-op kernels are not, and keep full dependencies.
bool is_rlx_kernel(cudaGraphNode_t node) {
  if (!is_kernel(node)) return false;
  const char* name = kernel_node_name(node);
  if (!name) return false;
  const std::string_view n(name);
  return n.find("3rlx4cuda") != std::string_view::npos || n.find("rlx::cuda::") != std::string_view::npos;
}

// A queued run's input copy (kernels/io_stage.h): the kernels after it may
// read program inputs before their griddepcontrol.wait, so its edges stay full.
bool is_io_stage_in(cudaGraphNode_t node) {
  const char* name = kernel_node_name(node);
  return name && std::string_view(name).find(kIoStageInKernelName) != std::string_view::npos;
}

// Programmatic dependent launch: every kernel → rlx-kernel edge of `graph`
// becomes programmatic, so the dependent kernel is launched while the one
// before it still runs and waits on the device (griddepcontrol.wait) instead
// of after a full launch round trip. Returns the number of edges changed.
int make_kernel_edges_programmatic(cudaGraph_t graph) {
  size_t n = 0;
  RLX_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  RLX_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n));
  std::unordered_map<cudaGraphNode_t, bool> ours;
  int changed = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i].type != cudaGraphDependencyTypeDefault || !is_kernel(from[i]) || is_io_stage_in(from[i])) continue;
    auto it = ours.find(to[i]);
    if (it == ours.end()) it = ours.emplace(to[i], is_rlx_kernel(to[i])).first;
    if (!it->second) continue;
    cudaGraphEdgeData e{};
    e.from_port = cudaGraphKernelNodePortProgrammatic;
    e.type = cudaGraphDependencyTypeProgrammatic;
    RLX_CUDA_CHECK(cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1));
    if (cudaGraphAddDependencies(graph, &from[i], &to[i], &e, 1) != cudaSuccess) {
      cudaGetLastError();
      RLX_CUDA_CHECK(cudaGraphAddDependencies(graph, &from[i], &to[i], &data[i], 1));  // put it back
      continue;
    }
    ++changed;
  }
  return changed;
}

bool pdl_supported() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major >= 9;
}

}  // namespace

Encoder::Encoder(bool use_graphs, std::function<std::string(NodeId)> describe)
    : use_graphs_(use_graphs && env_bool("RLX_CUDA_GRAPHS") && !env_bool("RLX_CUDA_SYNC_DEBUG")),
      pdl_(use_graphs_ && env_bool("RLX_CUDA_PDL") && pdl_supported()),
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
        if (pdl_) {
          const int edges = make_kernel_edges_programmatic(graph);
          programmatic_edges_ += edges;
          log_verbose("cuda graph segment ", seg, ": ", edges, " programmatic kernel edges");
        }
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
