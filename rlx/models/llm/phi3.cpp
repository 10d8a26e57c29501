// Phi-3 family (llama.cpp's "phi3": Phi-3, Phi-3.5, Phi-4-mini): pre-norm
// layers with Q|K|V and gate|up each stored as one tensor, SwiGLU, NeoX RoPE
// over rope.dimension_count dims of each head, output tied to token_embd
// unless the file has output.weight.
//
// LongRoPE files (Phi-3.5, Phi-4-mini) carry two sets of frequency divisors;
// as in llama.cpp, the long set applies when the KV cache (--ctx) is longer
// than rope.scaling.original_context_length, and the rotated dims of q and k
// are scaled by rope.scaling.attn_factor. The attention window in the file
// is ignored, as llama.cpp ignores it.
#include <cmath>
#include <map>

#include "rlx/models/llm/blocks.h"

namespace rlx::llm::detail {

const std::vector<LayerWeight> kPhi3Weights = {
    {"attn_norm.weight", true}, {"attn_qkv.weight", false}, {"attn_q.weight", false},
    {"attn_k.weight", false},   {"attn_v.weight", false},   {"attn_output.weight", true},
    {"ffn_norm.weight", true},  {"ffn_up.weight", true},    {"ffn_down.weight", true},
};

Graph build_phi3(const LlmConfig& file_cfg, const GgufFile& f, const BuildOptions& o) {
  LlmConfig c = file_cfg;
  if (c.rope_freq_factors.empty() && !c.rope_factors_long.empty())
    c.rope_freq_factors = o.ctx > c.rope_orig_ctx ? c.rope_factors_long : c.rope_factors_short;
  Graph g;
  Blocks b(g, c, f, o);
  b.check_weights();
  const int64_t H = c.hidden, D = c.head_dim, QW = c.n_heads * D;
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const bool stacked = b.has(names::blk(i, "attn_qkv.weight"));
    for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_v.weight"})
      RLX_FORMAT_CHECK(stacked || b.has(names::blk(i, part)), f.source(), ": layer ", i,
                       " has neither attn_qkv.weight nor ", part);
  }
  // Every score sums the rotated dims' products, each side scaled by the
  // attention factor m: with all dims rotated that is the scale times m²;
  // otherwise q's rotated dims are multiplied by m² before they rotate.
  const float m2 = c.rope_attn_factor * c.rope_attn_factor;
  const bool all_rotated = c.n_rot == D;
  const float scale = (all_rotated ? m2 : 1.0f) / std::sqrt(static_cast<float>(D));
  std::map<int64_t, Value> q_scales;  // by the width of the row q is read from
  auto q_scale = [&](int64_t width) {
    if (auto it = q_scales.find(width); it != q_scales.end()) return it->second;
    std::vector<float> s(static_cast<size_t>(width), 1.0f);
    for (int64_t j = 0; j < QW; ++j)
      if (j % D < c.n_rot) s[static_cast<size_t>(j)] = m2;
    return q_scales[width] = constant(g, Tensor::from(s, {width}), "rope_attn_factor");
  };
  Value x = b.embed();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    auto w = [&](const char* s) { return names::blk(i, s); };
    Blocks::Qkv p = b.qkv(b.rms(x, w("attn_norm.weight"), H), i);
    if (m2 != 1.0f && !all_rotated) p.q = p.q * q_scale(p.q.shape().back().value);
    x = x + b.linear(b.attend(i, p, {c.rope_base, RopePairing::NeoX, {}, {}}, false, scale), w("attn_output.weight"), H,
                     QW);
    x = x + b.stacked_swiglu_ffn(b.rms(x, w("ffn_norm.weight"), H), i);
  }
  b.head(x);
  return g;
}

}  // namespace rlx::llm::detail
