// The 32-bit shared-state-space address of a shared-memory pointer, as the
// PTX wrappers (cp.async, ldmatrix, mbarrier, bulk copies) take it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace rlx::cuda::dev {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One 32-bit store at a shared-state-space address.
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

}  // namespace rlx::cuda::dev
