// Qwen3 (llama.cpp's "qwen3"): pre-norm layers, GQA, per-head RMS norm on Q
// and K before NeoX RoPE, SwiGLU FFN; output tied to token_embd unless the
// file has output.weight.
#include <cmath>

#include "rlx/models/llm/blocks.h"

namespace rlx::llm::detail {

const std::vector<LayerWeight> kQwen3Weights = {
    {"attn_norm.weight", true},   {"attn_q.weight", true},      {"attn_k.weight", true},
    {"attn_v.weight", true},      {"attn_q_norm.weight", true}, {"attn_k_norm.weight", true},
    {"attn_output.weight", true}, {"ffn_norm.weight", true},    {"ffn_gate.weight", true},
    {"ffn_up.weight", true},      {"ffn_down.weight", true},
};

Graph build_qwen3(const LlmConfig& c, const GgufFile& f, const BuildOptions& o) {
  Graph g;
  Blocks b(g, c, f, o);
  b.check_weights();
  const int64_t H = c.hidden, QW = c.n_heads * c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  Value x = b.embed();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    auto w = [&](const char* s) { return names::blk(i, s); };
    Value h = b.rms(x, w("attn_norm.weight"), H);
    const Blocks::Qkv p = b.qkv(h, i);
    const Blocks::RopeSpec r{c.rope_base, RopePairing::NeoX, w("attn_q_norm.weight"), w("attn_k_norm.weight")};
    x = x + b.linear(b.attend(i, p, r, false, scale), w("attn_output.weight"), H, QW);
    x = x + b.gated_ffn(b.rms(x, w("ffn_norm.weight"), H), i, /*gelu_tanh=*/false);
  }
  b.head(x);
  return g;
}

}  // namespace rlx::llm::detail
