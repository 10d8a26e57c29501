// Programmatic dependent launch (Hopper): inside a CUDA graph, an edge into an
// rlx kernel is made programmatic (encoder.cpp), so the kernel's CTAs may be
// scheduled while the kernel before it is still running. Every rlx kernel
// therefore calls pdl_begin() (or pdl_wait() then pdl_trigger()) before it
// touches memory that an earlier kernel may write:
//   griddepcontrol.wait  blocks until every grid it depends on has completed
//                        and its writes are visible (a no-op when the kernel
//                        was launched normally);
//   launch_dependents    lets the next kernel be scheduled now, so its launch
//                        latency hides behind this kernel's run. The next
//                        kernel starts only once every CTA of this grid has
//                        triggered (or exited), i.e. once all of them are
//                        resident, so early dependents never take SM slots
//                        this grid's own later CTAs still need.
// Before pdl_wait() a kernel may read only what no kernel of the program
// writes: weights, constants, its own arguments, and program inputs (the
// run's one input copy fills them before the first kernel starts; the
// lowering tells a kernel when a pointer is one, e.g. RopeQkvWrite::inputs_ready,
// AttentionParams::kv_len_ready / kv_stable). Decode kernels prefetch their
// weights (and attention its earlier cache rows) there, so the memory latency
// overlaps the kernel before them.
// A kernel that skips these must never be the target of a programmatic edge:
// encoder.cpp only converts edges into kernels named in rlx::cuda.
#pragma once
#include <cuda_runtime.h>

namespace rlx::cuda::dev {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_trigger();
}

}  // namespace rlx::cuda::dev
