// A small encoder's QKV projection and its attention in one Hopper (sm_90a)
// kernel:
//   QKV = X[M, K]·W[3·H·D, K]ᵀ + bias           (rows: Q heads, K heads, V heads)
//   out[M, H·D] = softmax(scale·Q_h·K_hᵀ, key mask)·V_h   per head h and sequence
// for head dim 32, sequences of L ≤ 128 tokens (M = B·L) and K ≤ 512: the
// shape of all-MiniLM-L6/L12, bge-small and e5-small. A CTA keeps one head's
// 96 weight rows in shared memory and walks 128-row tiles of X (whole
// sequences), so the QKV projection never goes to memory and the attention
// reads its operands from shared memory (MiniLM 256 × 128, H200: the two
// kernels took 65 + 62 µs a layer).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

struct QkvAttentionArgs {
  DType dtype = DType::F16;           // X, W, bias, out: f16 or bf16
  const void* X = nullptr;            // [M, K] row-major, contiguous
  const void* W = nullptr;            // [3·H·D, K] row-major (a Linear layer's weight)
  const void* bias = nullptr;         // [3·H·D] or null, in dtype or f32 (bias_f32)
  bool bias_f32 = false;
  const uint8_t* key_mask = nullptr;  // [B, L] bytes, nonzero = the key is kept; or null
  void* out = nullptr;                // [M, H·D], contiguous
  int64_t B = 0, L = 0, K = 0;
  int H = 0, D = 32;
  float scale = 0.0f;  // > 0
};

// Why the kernel cannot run `a` (nullptr: it can).
const char* sm90_qkv_attention_unsupported(const QkvAttentionArgs& a);

// Whether `device` runs it (compute capability 9.0, an sm_90a image, the
// shared memory it needs for K = 512); host side, cached per device.
bool sm90_qkv_attention_available(int device);

// Asynchronous on `stream`, on a grid sized for `sm_count` SMs. Throws
// Unsupported for what sm90_qkv_attention_unsupported refuses and DeviceError
// if the launch fails.
void launch_sm90_qkv_attention(const QkvAttentionArgs& a, int sm_count, cudaStream_t stream);

}  // namespace rlx::cuda
