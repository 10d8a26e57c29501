// Ampere-style 16-byte asynchronous copies global → shared (cp.async), per
// thread: a thread's copies form groups (commit), and wait<N> returns once at
// most N of its groups are still in flight; the bytes are then visible to that
// thread's plain shared-memory loads.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace rlx::cuda::dev {

// 16 bytes to `dst` (shared address, 16-byte aligned) from `src` (16-byte
// aligned); when !valid the 16 bytes are zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace rlx::cuda::dev
