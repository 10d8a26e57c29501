// Programmatic dependent launch (Hopper): inside a CUDA graph, an edge into an
// rlx kernel is made programmatic (encoder.cpp), so the kernel's CTAs may be
// scheduled while the kernel before it is still running. Every rlx kernel
// therefore starts with pdl_begin():
//   griddepcontrol.wait  blocks until every grid it depends on has completed
//                        and its writes are visible (a no-op when the kernel
//                        was launched normally), before this kernel reads or
//                        writes any global memory;
//   launch_dependents    lets the next kernel be scheduled now, so its launch
//                        latency hides behind this kernel's run. Only for
//                        grids of at most one wave of CTAs: with more, early
//                        dependents would hold SM slots that this grid's later
//                        CTAs need.
// A kernel that skips pdl_begin() must never be the target of such an edge:
// encoder.cpp only converts edges into kernels named in rlx::cuda.
#pragma once
#include <cuda_runtime.h>

namespace rlx::cuda::dev {

__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned sms;
  asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
  if (gridDim.x * gridDim.y * gridDim.z <= sms) asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

}  // namespace rlx::cuda::dev
