// Gemma 2 and Gemma 3 (llama.cpp's "gemma2" and "gemma3"): embeddings ×
// √hidden; per layer RMS norm before and after attention and FFN, NeoX RoPE,
// GELU-tanh gated FFN; output tied to token_embd. They differ in:
//   Gemma 3: per-head RMS norm on Q and K; 5 sliding-window layers (RoPE base
//            10000) then one global layer (rope.freq_base);
//   Gemma 2: no QK-norm; sliding-window and global layers alternate (one RoPE
//            base); attention scores and final logits soft-capped
//            (attn_logit_softcapping, final_logit_softcapping).
//
// GGUF norm weights already include Gemma's "+1" (llama.cpp's converter adds
// it; transformers' GGUF loader subtracts it again), so they are used as is.
#include <cmath>

#include "rlx/models/llm/blocks.h"

namespace rlx::llm::detail {

const std::vector<LayerWeight> kGemma2Weights = {
    {"attn_norm.weight", true},     {"attn_q.weight", true},       {"attn_k.weight", true},
    {"attn_v.weight", true},        {"attn_output.weight", true},  {"post_attention_norm.weight", true},
    {"ffn_norm.weight", true},      {"ffn_gate.weight", true},     {"ffn_up.weight", true},
    {"ffn_down.weight", true},      {"post_ffw_norm.weight", true},
};

const std::vector<LayerWeight> kGemma3Weights = {
    {"attn_norm.weight", true},     {"attn_q.weight", true},       {"attn_k.weight", true},
    {"attn_v.weight", true},        {"attn_q_norm.weight", true},  {"attn_k_norm.weight", true},
    {"attn_output.weight", true},   {"post_attention_norm.weight", true}, {"ffn_norm.weight", true},
    {"ffn_gate.weight", true},      {"ffn_up.weight", true},       {"ffn_down.weight", true},
    {"post_ffw_norm.weight", true},
};

Graph build_gemma(const LlmConfig& c, const GgufFile& f, const BuildOptions& o) {
  Graph g;
  Blocks b(g, c, f, o);
  b.check_weights();
  const bool qk_norm = c.arch == Arch::Gemma3;
  const int64_t H = c.hidden, QW = c.n_heads * c.head_dim;
  // Scores are scaled by query_pre_attn_scalar^-1/2: head_dim, except the
  // 27B models (Gemma 2: 46 layers, Gemma 3: 62) which use hidden / heads
  // (as llama.cpp does).
  const int64_t layers_27b = qk_norm ? 62 : 46;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.n_layers == layers_27b ? H / c.n_heads : c.head_dim));
  Value x = b.embed() * scalar(g, std::sqrt(static_cast<float>(H)));
  // Each post-norm residual add also yields the next pre-norm: x + rms(a, w1)
  // and rms(that, w2) come from one node, so `h` for layer i > 0 is made at
  // the end of layer i − 1.
  Value h = b.rms(x, names::blk(0, "attn_norm.weight"), H);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    auto w = [&](const char* s) { return names::blk(i, s); };
    const bool local = c.is_local_layer(i);
    const float base = local ? c.rope_base_local : c.rope_base;
    const Blocks::Qkv p = b.qkv(h, i);
    const Blocks::RopeSpec r{base, RopePairing::NeoX, qk_norm ? w("attn_q_norm.weight") : std::string(),
                             qk_norm ? w("attn_k_norm.weight") : std::string()};
    Value a = b.linear(b.attend(i, p, r, local, scale), w("attn_output.weight"), H, QW);
    const PostNormPair attn = b.post_norm_pair(x, a, w("post_attention_norm.weight"), w("ffn_norm.weight"), H);
    Value m = b.gated_ffn(attn.norm, i, /*gelu_tanh=*/true);
    // The last layer's pair yields output_norm's result for the head.
    const std::string next_norm = i + 1 == c.n_layers ? names::kOutputNorm : names::blk(i + 1, "attn_norm.weight");
    const PostNormPair ffn = b.post_norm_pair(attn.sum, m, w("post_ffw_norm.weight"), next_norm, H);
    x = ffn.sum;
    h = ffn.norm;
  }
  b.head_normed(h);
  return g;
}

}  // namespace rlx::llm::detail
