// Hopper (sm_90+) 1-D bulk asynchronous copies global → shared memory, and the
// shared-memory mbarriers that count their bytes, as small inline-PTX helpers.
//
//   mbar_init(bar, n)              a barrier whose phase completes after n arrivals
//                                  and once every byte announced by expect_tx landed;
//   mbar_arrive_expect_tx(bar, b)  one arrival that also announces b bytes to come;
//   bulk_copy_g2s(dst, src, b, bar) copies b bytes (dst, src 16-byte aligned, b a
//                                  multiple of 16) and counts them off on `bar`;
//   mbar_wait(bar, parity)         spins until the phase of that parity completed.
//
// A barrier's phases alternate parity 0, 1, 0, ...: the k-th use of a ring
// stage waits for parity k & 1. Visibility: the copied bytes, and the plain
// shared-memory stores a thread made before its own arrive, are visible to a
// thread once its wait returned (the arrive releases, the wait acquires).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/backends/cuda/device/smem.cuh"

namespace rlx::cuda::dev {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
#endif
}

// After the inits, before any other thread or the copy engine uses the barriers.
__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
#else
  return true;
#endif
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// Orders this thread's earlier plain shared-memory accesses before later
// accesses of the async proxy (bulk copies) to the same bytes.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#else
  __trap();
#endif
}

}  // namespace rlx::cuda::dev
