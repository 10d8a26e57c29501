// An encoder layer's fused QKV projection and its attention in one Hopper
// (sm_90a) kernel, for sequences of at most 128 tokens:
//   Q, K, V = X·W_{q,k,v}ᵀ + b_{q,k,v}          (rounded to the dtype, as stored)
//   out     = softmax(scale · Q·Kᵀ, hidden keys masked) · V   per head
// A CTA owns ⌊128 / L⌋ whole sequences and 64 columns of every projection
// (two heads at D = 32, one at D = 64), so Q, K and V never go to memory:
// separately the projection writes [B·L, 3·H·D] and attention reads it back
// (MiniLM at 256 × 128 tokens: 52-55 µs for the projection plus 54-55 µs for
// attention per layer, H100; 150 MB of traffic the fused kernel does not
// make).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

struct QkvAttentionArgs {
  DType dtype = DType::F16;     // X, W, bias, out: f16 or bf16
  const void* X = nullptr;      // [B·L, K] row-major, contiguous: sequence b is rows b·L ..
  const void* W = nullptr;      // [w_rows, K] row-major: the fused projection's weight
  const void* bias = nullptr;   // [w_rows] or null
  int64_t w_rows = 0;
  // First row of W (and element of bias) of Q, K and V: head h's columns
  // are rows q_row + h·D .. + D − 1, and likewise for K and V.
  int64_t q_row = 0, k_row = 0, v_row = 0;
  const uint8_t* key_mask = nullptr;  // [B, L] bytes, 0 hides the key; or null
  void* out = nullptr;                // [B·L, H·D] contiguous
  int64_t B = 0;
  int L = 0, K = 0, H = 0, D = 0;
  float scale = 1.0f;  // > 0
};

// Why the kernel cannot run `a` (nullptr: it can): dtype, D not 32 or 64,
// H·D not a multiple of 64, L above 128, K not a multiple of 8, a scale
// that is not positive, misaligned pointers or rows, or too many rows.
const char* sm90_qkv_attention_unsupported(const QkvAttentionArgs& a);

// CTAs of the launch: ⌈B / ⌊128 / L⌋⌉ packs × H·D / 64 column groups.
int64_t sm90_qkv_attention_ctas(const QkvAttentionArgs& a);

// Whether `device` runs it (compute capability 9.0 and an sm_90a image);
// raises its shared-memory limit. Host side, cached per device.
bool sm90_qkv_attention_available(int device);

// Asynchronous on `stream`. Throws Unsupported for what
// sm90_qkv_attention_unsupported refuses and DeviceError if the launch fails.
void launch_sm90_qkv_attention(const QkvAttentionArgs& a, cudaStream_t stream);

}  // namespace rlx::cuda
