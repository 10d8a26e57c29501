// The 32-bit shared-state-space address of a shared-memory pointer, as the
// PTX wrappers (cp.async, ldmatrix, mbarrier, bulk copies) take it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace rlx::cuda::dev {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace rlx::cuda::dev
