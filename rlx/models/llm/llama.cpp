// Llama family (llama.cpp's "llama", "smollm3"), Qwen2 ("qwen2") and Granite ("granite"):
// pre-norm layers, GQA, optional Q/K/V biases (Qwen2 has them), SwiGLU FFN;
// output tied to token_embd unless the file has output.weight. llama.cpp's
// converter permutes Llama's and Granite's Q/K rows for pairwise ("normal")
// RoPE; Qwen2 keeps NeoX halves. Granite adds four multipliers (config.h);
// SmolLM3 leaves every fourth layer unrotated.
#include <cmath>

#include "rlx/models/llm/blocks.h"

namespace rlx::llm::detail {

const std::vector<LayerWeight> kLlamaWeights = {
    {"attn_norm.weight", true}, {"attn_q.weight", true},   {"attn_k.weight", true},  {"attn_v.weight", true},
    {"attn_q.bias", false},     {"attn_k.bias", false},    {"attn_v.bias", false},   {"attn_output.weight", true},
    {"ffn_norm.weight", true},  {"ffn_gate.weight", true}, {"ffn_up.weight", true},  {"ffn_down.weight", true},
};

Graph build_llama(const LlmConfig& c, const GgufFile& f, const BuildOptions& o) {
  Graph g;
  Blocks b(g, c, f, o);
  b.check_weights();
  const int64_t H = c.hidden, QW = c.n_heads * c.head_dim;
  const float scale = c.attention_scale > 0 ? c.attention_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const RopePairing pairing = c.arch == Arch::Qwen2 ? RopePairing::NeoX : RopePairing::Interleaved;
  // Granite scales the embeddings and each residual branch (0: not at all).
  auto scaled = [&](Value v, float s) { return s > 0 ? v * scalar(g, s) : v; };
  Value x = scaled(b.embed(), c.embedding_scale);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    auto w = [&](const char* s) { return names::blk(i, s); };
    Value h = b.rms(x, w("attn_norm.weight"), H);
    const Blocks::Qkv p = b.qkv(h, i);
    Value attn = b.linear(b.attend(i, p, {c.rope_base, pairing, {}, {}, c.rotates(i)}, false, scale),
                          w("attn_output.weight"), H, QW);
    x = x + scaled(attn, c.residual_scale);
    x = x + scaled(b.gated_ffn(b.rms(x, w("ffn_norm.weight"), H), i, /*gelu_tanh=*/false), c.residual_scale);
  }
  b.head(x);
  return g;
}

}  // namespace rlx::llm::detail
