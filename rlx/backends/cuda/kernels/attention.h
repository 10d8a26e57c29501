// Fused scaled-dot-product attention (the Attention op, DESIGN §3). Launchers
// only; kernels in attention.cu (planner + SIMT kernel), attention_prefill.cu
// (tensor-core flash attention) and attention_decode.cu (split-KV decode).
// Every launcher is asynchronous on `stream`, allocates nothing (CUDA-graph
// capture safe) and throws rlx::DeviceError naming the op when a launch
// fails, rlx::Unsupported / rlx::InvalidArgument for inputs it cannot take.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda {

// Layouts (strides in elements):
//   Q   [B, Lq, H·D]   element (b, i, h, d) at q + b·q_batch_stride + i·q_row_stride + h·D + d
//   K,V [B, Lk, Hkv·D] element (b, j, g, d) at k + b·k_batch_stride + j·k_row_stride + g·D + d
//   out [B, Lq, H·D]   contiguous
// so Q/K/V may point into one fused QKV buffer [B, L, (H + 2·Hkv)·D]
// (row stride (H + 2·Hkv)·D, k = q + H·D, v = q + (H + Hkv)·D).
// GQA: query head h reads kv head h / (H / Hkv).
//
// Semantics, per (b, h, query i, key j), with kvlen = kv_len ? clamp(kv_len[b], 0, Lk) : Lk
// and q_pos = i + kvlen − Lq (bottom-right aligned):
//   s = scale · q·k                        (scale is the effective scale; nothing defaulted)
//   s = softcap · tanh(s / softcap)        if softcap > 0
//   s += bias[b, h, i, j]                  if bias
//   hidden if  j ≥ kvlen,
//              causal and j > q_pos,
//              causal and window > 0 and q_pos − j ≥ window,
//              key_mask and key_mask[b, j] == 0
//   out = softmax over visible keys · V;   a row with no visible key is zeros.
// The flags compose; the Attention op's MaskKind maps as
//   None → nothing; Causal → causal; SlidingWindow(w) → causal + window = w;
//   Custom → key_mask (u8, converted by the backend); Bias → bias.
struct AttentionParams {
  DType dtype = DType::F16;  // of q, k, v and out: f32, f16 or bf16
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  int64_t q_batch_stride = 0, k_batch_stride = 0, v_batch_stride = 0;
  void* out = nullptr;
  int B = 1, Lq = 0, Lk = 0, H = 1, Hkv = 1, D = 64;  // D ≤ 256
  float scale = 1.0f;
  float softcap = 0.0f;
  bool causal = false;
  int64_t window = 0;  // > 0 requires causal
  const uint8_t* key_mask = nullptr;  // device [B, Lk]-like, batch stride below (0 = shared)
  int64_t key_mask_b_stride = 0;
  const void* bias = nullptr;  // device, dtype bias_dtype (f32 or `dtype`)
  DType bias_dtype = DType::F32;
  int64_t bias_b_stride = 0, bias_h_stride = 0, bias_q_stride = 0;  // key stride is 1; 0 broadcasts
  const int32_t* kv_len = nullptr;  // device [B], or null
  bool kv_len_shared = false;       // kv_len is [1]: one length for every batch
  // Optional device scratch of ≥ key_mask_scratch_ints(B) int32. With it, a
  // key mask on the tensor-core prefill path is first checked on the device,
  // and the mask-free kernel runs every row: a batch row that keeps a prefix
  // of its keys (right padding, the usual tokenizer output) as that length,
  // skipping padded key tiles; any other row up to its last kept key, with
  // the mask applied per score. One launch whatever the data, so CUDA-graph
  // replays need no re-capture.
  int32_t* key_mask_scratch = nullptr;
  // The scratch already holds this key mask's lengths and flags (an earlier
  // attention over the same mask computed them in the same run): skip that
  // reduction. Layers of one encoder share one mask.
  bool key_mask_lengths_ready = false;
  // Optional: ≥ attention_counter_ints(*this) device int32s that are zero
  // before the launch and are left zero after it (LowerCtx::counters). With
  // them the split-KV decode needs no memset of its arrival counters, so a
  // decode step has one node per attention instead of two.
  int32_t* counters = nullptr;
  // Decode only, for kernels on the critical path of a CUDA-graph step:
  // kv_len (or its absence) is written by no kernel of the program (a program
  // input), so the key ranges are worked out before pdl_wait; and K/V rows
  // below *kv_stable (a program input, one value for every batch) are written
  // by no kernel of the program (earlier steps' cache rows), so they are
  // requested before pdl_wait too, overlapping the kernel before.
  bool kv_len_ready = false;
  const int32_t* kv_stable = nullptr;
  // Decode path only: `out` is f32 and holds each output rounded to `dtype`
  // first, the bits a Cast to f32 after the op would store (the CUDA lowering
  // folds that Cast in: one launch fewer per layer with f32 activations over
  // a 16-bit KV cache).
  bool out_f32 = false;

  // Fill the row/batch strides for separate dense Q [B, Lq, H·D], K/V
  // [B, Lk, Hkv·D], and (when bias is set) a dense bias [B, H, Lq, Lk].
  void set_dense_strides() {
    q_row_stride = int64_t{H} * D;
    k_row_stride = v_row_stride = int64_t{Hkv} * D;
    q_batch_stride = q_row_stride * Lq;
    k_batch_stride = v_batch_stride = k_row_stride * Lk;
    key_mask_b_stride = Lk;
    bias_q_stride = Lk;
    bias_h_stride = int64_t{Lq} * Lk;
    bias_b_stride = bias_h_stride * H;
  }
};

inline size_t key_mask_scratch_ints(int B) { return 2 * static_cast<size_t>(B); }

// Whether launch_attention would reduce a key mask (assumed present) to
// lengths in key_mask_scratch: the tensor-core prefill path without causal
// masking, softcap, bias or kv_len.
bool attention_uses_mask_lengths(const AttentionParams& p);

// Device scratch launch_attention needs for these params (split-KV decode
// partials); 0 when none. Depends only on the shapes and the current device.
size_t attention_workspace_bytes(const AttentionParams& p);
// Number of AttentionParams::counters the launch would use (0: none).
size_t attention_counter_ints(const AttentionParams& p);

// Runs attention. `workspace` holds at least attention_workspace_bytes(p)
// bytes (may be null when that is 0); it is 256-byte aligned by the caller.
// Path (chosen from the shapes): Lq ≤ 8 → split-KV decode kernel;
// f16/bf16 with D ∈ {32, 64, 128, 256} and 16-byte aligned rows → tensor-core
// flash attention; anything else (f32, other D, unaligned) → SIMT flash kernel.
void launch_attention(const AttentionParams& p, void* workspace, cudaStream_t stream);

// Which kernel launch_attention picks (for benchmarks, tests and the dispatch report).
enum class AttentionPath : uint8_t { Simt, Prefill, Decode };
AttentionPath attention_path(const AttentionParams& p);
const char* attention_path_name(AttentionPath path);

namespace dev { struct AttnArgs; }

// Internal: per-family launchers called by launch_attention (arguments resolved).
namespace detail {
bool attention_prefill_supported(DType dtype, int D, size_t smem_optin_bytes);
void launch_attention_prefill(DType dtype, const dev::AttnArgs& a, cudaStream_t stream);
bool attention_decode_supported(DType dtype, int D, size_t smem_optin_bytes);
int attention_decode_splits(DType dtype, const dev::AttnArgs& a);  // ≥ 1
void launch_attention_decode(DType dtype, const dev::AttnArgs& a, cudaStream_t stream);
}  // namespace detail

}  // namespace rlx::cuda
