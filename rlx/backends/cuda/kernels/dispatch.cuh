// Runtime dtype → template dispatch for launchers. Only f32/f16/bf16 are
// instantiated; anything else throws rlx::Unsupported naming the op.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "rlx/core/dtype.h"
#include "rlx/core/error.h"

namespace rlx::cuda {

template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    default: throw Unsupported(str(op, ": cuda kernel has no ", dtype_name(t), " variant"));
  }
}

}  // namespace rlx::cuda
