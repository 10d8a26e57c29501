// Ampere-style 16-byte asynchronous copies global → shared (cp.async), per
// thread: a thread's copies form groups (commit), and wait<N> returns once at
// most N of its groups are still in flight; the bytes are then visible to that
// thread's plain shared-memory loads.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace rlx::cuda::dev {

// 16 bytes to `dst` (shared address, 16-byte aligned) from `src` (16-byte
// aligned), of which only the first src_bytes (0..16) are read; the rest are
// zero-filled.
__device__ __forceinline__ void cp_async_16_partial(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// 4 bytes to `dst` (4-byte aligned) from `src` (4-byte aligned), of which only
// the first src_bytes (0..4) are read; cached in L1, so the words of a sector
// fetched one by one cost one L2 read.
__device__ __forceinline__ void cp_async_4_partial(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// When !valid the 16 bytes are zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  cp_async_16_partial(dst, src, valid ? 16u : 0u);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace rlx::cuda::dev
