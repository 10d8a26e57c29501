// GGUF decoder-only LLMs: the typed configuration read from GGUF metadata
// ("<arch>.block_count", "<arch>.attention.head_count", ...), one struct for
// every supported architecture.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rlx/formats/gguf.h"

namespace rlx::llm {

enum class Arch { Gemma2, Gemma3, Qwen3, Qwen2, Llama, Phi3, Granite, SmolLM3, Olmo2 };
const char* arch_name(Arch a);
// The architecture a GGUF general.architecture names, when rlx builds it.
std::optional<Arch> arch_from_name(const std::string& name);

struct LlmConfig {
  Arch arch = Arch::Llama;
  std::string arch_key;          // general.architecture as written ("gemma3", "qwen3", ...)
  int64_t n_layers = 0;
  int64_t hidden = 0;            // embedding_length
  int64_t ffn = 0;               // feed_forward_length
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;          // attention.key_length (= value_length), default hidden / n_heads
  int64_t vocab = 0;             // rows of token_embd
  int64_t context_length = 0;
  float rms_eps = 1e-6f;
  float rope_base = 10000.0f;        // global layers
  float rope_base_local = 10000.0f;  // sliding-window layers (Gemma 2 and 3)
  float rope_freq_scale = 1.0f;      // linear scaling of the global layers: positions × this
  // rope_freqs.weight (Llama 3.1+): n_rot/2 divisors of the frequencies, or empty.
  std::vector<float> rope_freq_factors;
  // LongRoPE (Phi-3.5, Phi-4-mini): rope_factors_long/short.weight, n_rot/2
  // frequency divisors each; the long ones apply when the KV cache is longer
  // than rope.scaling.original_context_length (llama.cpp's rule). Rotated
  // dims are multiplied by rope_attn_factor (rope.scaling.attn_factor).
  std::vector<float> rope_factors_long, rope_factors_short;
  int64_t rope_orig_ctx = 0;         // rope.scaling.original_context_length, default context_length
  float rope_attn_factor = 1.0f;
  int64_t n_rot = 0;                 // rope.dimension_count, default head_dim
  int64_t sliding_window = 0;        // 0 = every layer global
  int64_t swa_pattern = 0;           // every swa_pattern-th layer is global (Gemma 2: 2, Gemma 3: 6)
  float attn_softcap = 0.0f;         // attention logit softcapping, 0 = off
  float final_softcap = 0.0f;        // final logit softcapping, 0 = off
  bool tied_output = true;           // no output.weight: the head is token_embd
  // Granite's multipliers, 0 = none: embeddings × embedding_scale, each
  // residual branch × residual_scale, attention_scale for 1/√head_dim, and
  // logits ÷ logit_scale.
  float embedding_scale = 0.0f, residual_scale = 0.0f, attention_scale = 0.0f, logit_scale = 0.0f;
  // Every no_rope_step-th layer attends without RoPE (SmolLM3: 4, as llama.cpp
  // hard-codes it; the file has no key); 0 = every layer rotates.
  int64_t no_rope_step = 0;
  bool rotates(int64_t layer) const { return no_rope_step == 0 || (layer + 1) % no_rope_step != 0; }

  // Reads and checks the metadata; a missing key is a FormatError naming it,
  // an architecture other than gemma2/gemma3/qwen3/qwen2/llama/phi3/granite/smollm3/olmo2 is Unsupported.
  static LlmConfig from_gguf(const GgufFile& f);
  // Gemma 3 interleaves 5 sliding-window layers with 1 global one, Gemma 2 1 with 1.
  bool is_local_layer(int64_t layer) const {
    return sliding_window > 0 && swa_pattern > 0 && (layer + 1) % swa_pattern != 0;
  }
  std::string summary() const;
};

}  // namespace rlx::llm
