// Shared by the quantized-weight kernels (quant.cu: dequantize, gather;
// gemv.cu: the fused GEMV): the per-device IQ tables, the f32/f16/bf16 I/O
// tag and small launch helpers. Internal to those two files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/core/dtype.h"
#include "rlx/core/error.h"

namespace rlx::cuda::quant_detail {

// The IQ grid / sign / value tables on the current device (copied once per
// device, host-synchronous the first time; quant.cu).
dev::IqTables tables_for_current_device();

template <typename F>
void visit_or_throw(DType t, const char* op, F&& f) {
  if (!dev::visit_quant_block(t, f)) throw Unsupported(str(op, ": no cuda decoder for ", dtype_name(t)));
}

// f32, f16 or bf16 as a runtime tag (x and y of the GEMV, output of dequantize).
enum class FloatKind : int { F32, F16, BF16 };
inline FloatKind float_kind(DType t, const char* op) {
  switch (t) {
    case DType::F32: return FloatKind::F32;
    case DType::F16: return FloatKind::F16;
    case DType::BF16: return FloatKind::BF16;
    default: throw Unsupported(str(op, ": activations/outputs must be f32, f16 or bf16, got ", dtype_name(t)));
  }
}

__device__ __forceinline__ float load_as_f32(const void* p, int64_t i, FloatKind k) {
  switch (k) {
    case FloatKind::F16: return __half2float(static_cast<const __half*>(p)[i]);
    case FloatKind::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_from_f32(void* p, int64_t i, float v, FloatKind k) {
  switch (k) {
    case FloatKind::F16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case FloatKind::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

inline int sm_count() {
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  return device_props(device).sm_count;  // cached per device
}

inline int grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

}  // namespace rlx::cuda::quant_detail
