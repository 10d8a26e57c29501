// GGUF decoder-only LLMs as one rlx graph per model, serving both prefill and
// decode over a fixed-size KV cache:
//
//   inputs   tokens    i32 [1, L]   the new tokens (L = prompt length, then 1)
//            positions i32 [L]      their absolute positions (RoPE)
//            offset    i32 [1]      where their K/V rows go in the cache (= positions[0])
//            kv_len    i32 [1]      valid cache rows after the write (= offset + L)
//            step      i32 [1]      sampling step counter, mixed into the seed
//   states   cache.<layer>.k / .v   [1, ctx, n_kv_heads·head_dim] (kv dtype, f16 by default)
//   outputs  logits    f32 [1, V]   of the last position only
//            token     i32 [1]      Sample(logits) (temperature 0 = greedy)
//
// Positions and lengths are inputs, so one compiled program per L serves every
// step and a CUDA-graph replay needs no re-capture.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "rlx/formats/gguf.h"
#include "rlx/ir/builder.h"
#include "rlx/models/llm/config.h"
#include "rlx/runtime/executable.h"

namespace rlx::llm {

struct BuildOptions {
  int64_t ctx = 0;               // KV cache rows; 1 ≤ ctx
  DType kv_dtype = DType::F16;   // f16, bf16 or f32
  // The precision policy the graph will be compiled with (CompileOptions::
  // precision). When it equals kv_dtype the caches are declared f32 and the
  // policy stores them in that dtype, so no casts surround the attention.
  DType compute = DType::F32;
  bool logits = true;            // output "logits"
  bool token = true;             // output "token"
  // Output "hidden": every position's residual stream after the final norm,
  // f32 [L, hidden] (sentence embeddings from a decoder, llm/embedder.h).
  bool hidden = false;
  SampleAttrs sampling{0.0f, 0, 1.0f, 0};
};

// Graph input names, in declaration order.
inline const char* const kInputNames[] = {"tokens", "positions", "offset", "kv_len", "step"};

// GGUF tensor names (llama.cpp's convention). Per-layer names are "blk.<i>.<suffix>".
namespace names {
inline const char* kTokenEmbd = "token_embd.weight";
inline const char* kOutputNorm = "output_norm.weight";
inline const char* kOutput = "output.weight";
std::string blk(int64_t layer, const char* suffix);
// The builder's fused gate+up projection, assembled by load_weights from
// ffn_gate and ffn_up when they stack (stacked_dtype): rows [gate; up].
inline const char* kGateUpSuffix = "ffn_gate_up.weight";
// The fused attention input projections, assembled the same way: rows
// [q; k; v] when the three stack (stacked_dtype), else [q; k] when q and k
// do, with their biases stacked alike. Gemma 3 files mix Q5_0 q and k with
// Q8_0 v: the three stack as Q8_0, exactly.
inline const char* kQkvSuffix = "attn_q_k_v.weight";
inline const char* kQkvBiasSuffix = "attn_q_k_v.bias";
inline const char* kQkSuffix = "attn_q_k.weight";
inline const char* kQkBiasSuffix = "attn_q_k.bias";
}  // namespace names

// The dtype rows of these file types are stacked in (one fused projection
// instead of several): their common type; f32 when all are floats; Q8_0 when
// all are Q4_0/Q5_0/Q8_0, which convert to it exactly (rlx/formats/quant.h);
// nullopt when they do not stack.
std::optional<DType> stacked_dtype(const std::vector<DType>& types);

// One entry of an architecture's weight table: the per-layer suffix and whether
// every file of that architecture has it.
struct LayerWeight {
  const char* suffix;
  bool required;
};
// The per-layer GGUF tensors an architecture reads (besides token_embd,
// output_norm and the optional output).
const std::vector<LayerWeight>& layer_weights(Arch arch);

// Builds the graph for `cfg`; param dtypes follow the file's tensors (packed
// quant types stay packed; float tensors become f32 params). Missing or
// mis-shaped tensors are one FormatError listing them.
Graph build_graph(const LlmConfig& cfg, const GgufFile& f, const BuildOptions& options);

// Sets every param of `exe` from the file (zero-copy views; the fused gate+up
// and q/k/v projections are assembled from their parts).
void load_weights(Executable& exe, const GgufFile& f);

// KV cache rows for `requested` (0: the model's context, at most `cap`); an
// error starting with `what` ("generate: context size") when it is negative
// or past the model's context.
int64_t cache_rows(const LlmConfig& cfg, int64_t requested, int64_t cap, const char* what);

// Bytes of weights one decode step reads (every layer matrix, the norms, the
// output head; the embedding table contributes one row).
int64_t weight_bytes_per_token(const LlmConfig& cfg, const GgufFile& f);

}  // namespace rlx::llm
