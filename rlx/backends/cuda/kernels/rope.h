// Rotary position embedding launchers (kernels in rope.cu). Asynchronous on
// `stream`, no allocation; launch failures throw rlx::DeviceError naming the op.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "rlx/core/dtype.h"
#include "rlx/ir/ops.h"

namespace rlx::cuda {

inline constexpr int kMaxRopeDims = 512;  // n_rot ≤ 512 (the inverse frequencies travel as kernel parameters)
inline constexpr int kMaxRopeNormHeads = 4096;  // per-head norm factors live in shared memory

// RopeAttrs semantics exactly (see rlx/ir/ops.h): x [B, L, W] (row stride W
// elements), head h reads x[b, l, src_offset + h·head_dim + d]; positions are
// i32 [L] (positions_batched = false) or [B, L], read from device memory so a
// captured graph replays with new positions. Output y [B, L, H·head_dim]
// contiguous. For i < n_rot/2:
//   θ_i = (pos · freq_scale) · freq_base^(−2i/n_rot)   — in f64, as the CPU
//   NeoX pairs (d, d + n_rot/2), Interleaved pairs (2i, 2i+1):
//   y0 = x0·cos θ − x1·sin θ,  y1 = x1·cos θ + x0·sin θ   (f32 math)
// dims ≥ n_rot pass through. dtype f32/f16/bf16; y must not alias x.
// attrs.head_norm needs norm_weight ([head_dim], dtype norm_dtype f32/f16/bf16):
// each head is first x·rsqrt(mean(x²) + attrs.norm_eps)·w (f32, not rounded).
void launch_rope(DType dtype, const void* x, int64_t W, const int32_t* positions, bool positions_batched, void* y,
                 int64_t B, int64_t L, const RopeAttrs& attrs, cudaStream_t stream, const void* norm_weight = nullptr,
                 DType norm_dtype = DType::F32);

// LLM decode helper, one kernel: rope K and copy V straight into a KV cache.
// k: [B, L, k_stride] read like launch_rope's x (attrs.num_heads = KV heads,
// attrs.src_offset = K's column offset); v: [B, L, v_stride] with V at column
// v_offset (num_heads·head_dim wide). Caches [B, capacity, num_heads·head_dim];
// row l goes to slot *cache_pos + l (device i32). Positions come from
// `positions` ([L] or [B, L]) or, when null, are *cache_pos + l.
// If *cache_pos < 0 or *cache_pos + L > capacity nothing is written and
// kErrSliceOutOfRange (movement.h) is ORed into *error_flag (nullable).
void launch_rope_kv_write(DType dtype, const void* k, int64_t k_stride, const void* v, int64_t v_stride,
                          int64_t v_offset, const int32_t* positions, bool positions_batched,
                          const int32_t* cache_pos, void* k_cache, void* v_cache, int64_t B, int64_t L,
                          int64_t capacity, const RopeAttrs& attrs, int32_t* error_flag, cudaStream_t stream);

// WriteSlice with rope (WriteSliceAttrs::rope): rope (after the per-head
// norm when attrs.head_norm, as launch_rope) of k's rows, stored into
// k_cache [B, capacity, num_heads·head_dim] of cache_dtype at slot
// *cache_pos + l, computed in f32 and rounded once. Positions are [L] or
// [B, L]. A bad *cache_pos writes nothing and sets kErrSliceOutOfRange.
void launch_rope_write(DType k_dtype, const void* k, int64_t k_stride, const int32_t* positions,
                       bool positions_batched, const int32_t* cache_pos, DType cache_dtype, void* k_cache, int64_t B,
                       int64_t L, int64_t capacity, const RopeAttrs& attrs, const void* norm_weight, DType norm_dtype,
                       int32_t* error_flag, cudaStream_t stream);

// The angle table of the rope launches that share positions and rope
// parameters (rope.cu: the first writes it, the later ones read it):
// cos/sin of pair i of position row r at cs[r · n_rot/2 + i].
struct RopeAngles {
  float2* cs = nullptr;
  bool write = false, read = false;
};

// One decode step's three per-layer writes in one launch (the CUDA lowering
// fuses a Rope of Q with the WriteSlice-with-rope of K and the WriteSlice of
// V that read the same projection and positions): y = launch_rope(q), and
// launch_rope_write(k) and a V copy into the caches, as those three calls
// would do them. q, k and v rows are [B, L, *_stride] with their heads at
// the attrs' src_offset (V: v_offset, k_attrs' head count and head_dim);
// q, k, v and y share `dtype`, both caches `cache_dtype`. A bad *cache_pos
// writes no cache row (y is still written) and sets kErrSliceOutOfRange.
// y is of `dtype`, or of `cache_dtype` with y_in_cache_dtype.
struct RopeQkvWrite {
  DType dtype = DType::F32, cache_dtype = DType::F32;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, v_offset = 0;
  RopeAttrs q_attrs, k_attrs;
  const void* q_norm = nullptr;  // [head_dim] when q_attrs.head_norm
  const void* k_norm = nullptr;
  DType q_norm_dtype = DType::F32, k_norm_dtype = DType::F32;
  const int32_t* positions = nullptr;
  bool positions_batched = false;
  const int32_t* cache_pos = nullptr;
  void* y = nullptr;
  // y holds Q in cache_dtype, rounded to dtype first: the bits of a Cast of
  // the rope's output to the cache dtype, which the lowering folds in.
  bool y_in_cache_dtype = false;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t B = 0, L = 0, capacity = 0;
  int32_t* error_flag = nullptr;
  // positions and cache_pos are written by no kernel of the program (program
  // inputs): the kernel reads them, and forms the angles, before pdl_wait.
  bool inputs_ready = false;
  RopeAngles angles;  // none by default: every launch evaluates its angles
};
void launch_rope_qkv_write(const RopeQkvWrite& w, cudaStream_t stream);

// Whether Q and K turn by the same angles (one table serves both: the
// lowering gives a table only where they do), the key
// of the launches that may share a table (same positions and angles), and
// the table's size.
bool rope_angles_shared(const RopeQkvWrite& w);
std::string rope_angles_key(const RopeQkvWrite& w);
size_t rope_angles_bytes(const RopeQkvWrite& w);

}  // namespace rlx::cuda
