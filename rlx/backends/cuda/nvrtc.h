// NVRTC for custom CUDA kernels given as source (rlx/runtime/custom_kernels.h).
// nvrtc_compile() turns source + entry into a cubin for one sm_XY, through a
// disk cache at $XDG_CACHE_HOME/rlx/nvrtc/<hash>.cubin (default ~/.cache;
// RLX_NVRTC_CACHE=0 turns it off). The hash covers source, entry, options,
// arch and the NVRTC version; each file also stores its full key and a
// checksum, so a corrupt or colliding entry is ignored (with a warning) and
// rebuilt. nvrtc_kernel() loads the cubin once per process and per device
// (never during CUDA-graph capture: callers run at program compile time).
// Compiling needs no GPU; loading does.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rlx::cuda {

struct NvrtcRequest {
  std::string op;  // the custom op's name, for errors and logs
  std::string source;
  std::string entry;  // kernel name or name expression ("k<float>")
  std::vector<std::string> options;
  int cc_major = 0, cc_minor = 0;
};

struct NvrtcBinary {
  std::string arch;          // "sm_90"
  std::string lowered_name;  // the symbol to look up in the cubin
  std::string cubin;
  bool from_disk = false;
};

// Compiles (or reads the cache). Bad source throws InvalidArgument with the op's
// name and the NVRTC log; an arch this NVRTC cannot target throws Unsupported.
// `use_disk` = false bypasses the cache (used when a cached cubin will not load).
NvrtcBinary nvrtc_compile(const NvrtcRequest& req, bool use_disk = true);

// The loaded kernel on device `device`, as a cudaKernel_t usable wherever the
// runtime takes a `const void* func` (cudaLaunchKernel, cudaFuncGetAttributes).
const void* nvrtc_kernel(const NvrtcRequest& req, int device);

// Cache location for `req` ("" when the disk cache is off or no home is known).
std::string nvrtc_cache_path(const NvrtcRequest& req);

// Process-wide counters, for tests and RLX_VERBOSE.
struct NvrtcStats {
  int64_t compiles = 0;       // NVRTC invocations that produced a cubin
  int64_t disk_hits = 0;      // cubins read from the disk cache
  int64_t disk_writes = 0;    // cubins written to it
  int64_t disk_rejected = 0;  // cache files ignored as corrupt or for another key
};
NvrtcStats nvrtc_stats();

}  // namespace rlx::cuda
