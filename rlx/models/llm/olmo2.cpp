// OLMo 2 (llama.cpp's "olmo2"): no norm before attention or FFN; instead an
// RMS norm on each branch's output before its residual add (post-norm, as
// Gemma's), and RMS norms on the whole Q and K rows (one weight over all
// heads, not per head) before NeoX RoPE; SwiGLU FFN; a separate output head.
// OLMo 3's sliding-window layers (olmo2 files with attention.sliding_window)
// are refused by the config.
#include <cmath>

#include "rlx/models/llm/blocks.h"

namespace rlx::llm::detail {

const std::vector<LayerWeight> kOlmo2Weights = {
    {"attn_q.weight", true},        {"attn_k.weight", true},      {"attn_v.weight", true},
    {"attn_q_norm.weight", true},   {"attn_k_norm.weight", true}, {"attn_output.weight", true},
    {"post_attention_norm.weight", true}, {"ffn_gate.weight", true}, {"ffn_up.weight", true},
    {"ffn_down.weight", true},      {"post_ffw_norm.weight", true},
};

Graph build_olmo2(const LlmConfig& c, const GgufFile& f, const BuildOptions& o) {
  Graph g;
  Blocks b(g, c, f, o);
  b.check_weights();
  const int64_t H = c.hidden, QW = c.n_heads * c.head_dim, KW = c.n_kv_heads * c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  Value x = b.embed();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    auto w = [&](const char* s) { return names::blk(i, s); };
    Blocks::Qkv p = b.qkv(x, i);
    // The norms span every head's values, so q and k leave the stacked row first.
    p.q = b.rms(narrow(p.q, 2, p.q_col, QW), w("attn_q_norm.weight"), QW);
    p.k = b.rms(narrow(p.k, 2, p.k_col, KW), w("attn_k_norm.weight"), KW);
    p.q_col = p.k_col = 0;
    Value attn = b.linear(b.attend(i, p, {c.rope_base, RopePairing::NeoX, {}, {}}, false, scale),
                          w("attn_output.weight"), H, QW);
    x = b.post_norm(x, attn, w("post_attention_norm.weight"), H);
    x = b.post_norm(x, b.gated_ffn(x, i, /*gelu_tanh=*/false), w("post_ffw_norm.weight"), H);
  }
  b.head(x);
  return g;
}

}  // namespace rlx::llm::detail
