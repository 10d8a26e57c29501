// A queued run's input and output copies as kernels (cuda_backend.cpp,
// CudaProgram::launch). Copies launched as stream operations around a graph
// cost ~5 µs of idle GPU each on an H100 (memcpy → graph → memcpy, traced in
// session 38); these kernels are captured in the run's graph instead, so a
// decode step is one graph and the device goes from one step's kernels to the
// next. They read and write pinned host memory directly (mapped: unified
// addressing).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace rlx::cuda {

// An input taken from device memory instead of the staging: bytes
// [dst, dst + bytes) of the input block come from `src`.
struct IoFeedCopy {
  const void* src;
  uint32_t dst, bytes;
};
constexpr int kMaxIoFeeds = 7;
// Leads a queued run's pinned input staging; the inputs follow at kIoStageHeaderBytes.
struct IoStageHeader {
  uint32_t feeds;
  uint32_t pad[3];
  IoFeedCopy feed[kMaxIoFeeds];
};
constexpr size_t kIoStageHeaderBytes = 256;
static_assert(sizeof(IoStageHeader) <= kIoStageHeaderBytes, "io stage header");

// dst[0, bytes) = the staging's inputs (host memory at `stage`, header first),
// the header's feeds taken from device memory. bytes is a multiple of 16.
// The kernel never triggers its dependents early: a kernel after it may read
// program inputs before its own griddepcontrol.wait (pdl.cuh), and the
// encoder keeps the edge out of it a full dependency.
void launch_io_stage_in(const void* stage, void* dst, size_t bytes, cudaStream_t stream);

// One output copy: bytes from device `src` to host offset `dst`.
struct IoOutCopy {
  const void* src;
  uint64_t dst, bytes;
};
// host[c.dst, c.dst + c.bytes) = c.src for each of the n copies (a device
// array), the largest of max_bytes. Waits for the kernel before it (pdl_begin).
void launch_io_stage_out(const IoOutCopy* copies, int n, size_t max_bytes, void* host, cudaStream_t stream);

// The kernel name the encoder looks for (its edges stay full dependencies).
constexpr const char* kIoStageInKernelName = "io_stage_in_kernel";

}  // namespace rlx::cuda
