// ModernBERT (answerdotai/ModernBERT-base and the embedding models built on
// it: nomic-ai/modernbert-embed-base, Alibaba-NLP/gte-modernbert-base): a
// pre-LN encoder with rotary positions, a GeGLU FFN and no token types.
// Follows transformers' modeling_modernbert.py:
//   x = LN(tok_emb[ids])                                            (embeddings.norm)
//   per layer i:
//     h = i == 0 ? x : LN(x)                                        (attn_norm; layer 0 has none)
//     q, k, v = split(h · Wqkvᵀ); q, k = rope(q), rope(k)           (NeoX halves)
//     x = x + attention(q, k, v) · Woᵀ
//     x = x + (act(u) · g) · Woᵀ, [u; g] = LN(x) · Wiᵀ              (mlp_norm, mlp.Wi, mlp.Wo)
//   x = LN(x)                                                        (final_norm)
// Layer i is global when i % global_attn_every_n_layers == 0 (rotary base
// global_rope_theta); the others are local: query i sees key j only when
// |i − j| ≤ local_attention / 2 (local_rope_theta). Norms and linear layers
// have biases only where norm_bias / attention_bias / mlp_bias say.
//
// The local band enters as an additive bias (one Bias input of the attention
// op, [B, 1, L, L] with the key mask folded in), built from the graph input
// "local_attention_bias" [L, L] the embedder passes per length; the global
// layers take the key mask as is. The attention op has no two-sided window
// of its own yet, so a local layer scores every key and the bias costs L²
// elements per sequence (the embedder bounds its batches by it).
#include <cmath>

#include "rlx/formats/hf_config.h"
#include "rlx/models/bert/bert_internal.h"

namespace rlx::bert::detail {

namespace {

std::string layer(int64_t i, const char* suffix) { return str("layers.", i, ".", suffix); }
constexpr const char* kEmbNorm = "embeddings.norm";
constexpr const char* kFinalNorm = "final_norm";
constexpr float kMasked = -30000.0f;  // finite in f16 and bf16; twice it (band + key mask) too

}  // namespace

BertConfig modernbert_config_from_json(const nlohmann::json& j, const std::string& path) {
  BertConfig c;
  c.arch = Arch::ModernBert;
  c.vocab_size = json_get<int64_t>(j, "vocab_size", path);
  c.hidden = json_get<int64_t>(j, "hidden_size", path);
  c.layers = json_get<int64_t>(j, "num_hidden_layers", path);
  c.heads = json_get<int64_t>(j, "num_attention_heads", path);
  c.intermediate = json_get<int64_t>(j, "intermediate_size", path);
  c.max_position = json_get_or<int64_t>(j, "max_position_embeddings", 8192, path);
  c.type_vocab = 0;
  c.layer_norm_eps = static_cast<float>(json_get_or<double>(j, "norm_eps", 1e-5, path));
  c.norm_bias = json_get_or<bool>(j, "norm_bias", false, path);
  c.attention_bias = json_get_or<bool>(j, "attention_bias", false, path);
  c.mlp_bias = json_get_or<bool>(j, "mlp_bias", false, path);
  check_sizes(c, path);

  auto unsupported = [&](const std::string& key, const std::string& got, const char* supported) {
    return Unsupported(str(path, ": ", key, " = ", got, " is not supported (", supported, ")"));
  };
  const auto act = json_get_or<std::string>(j, "hidden_activation", "gelu", path);
  if (act == "gelu") c.gelu_tanh = false;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh") c.gelu_tanh = true;
  else throw unsupported("hidden_activation", "'" + act + "'", "gelu, gelu_new, gelu_pytorch_tanh");

  const int64_t local_attention = json_get_or<int64_t>(j, "local_attention", 128, path);
  RLX_FORMAT_CHECK(local_attention >= 0, path, ": local_attention must not be negative, got ", local_attention);
  c.local_window = local_attention / 2;
  c.global_every = json_get_or<int64_t>(j, "global_attn_every_n_layers", 3, path);
  RLX_FORMAT_CHECK(c.global_every >= 1, path, ": global_attn_every_n_layers must be positive, got ", c.global_every);
  // transformers 5 writes the pattern out as layer_types; it must be the one
  // global_attn_every_n_layers describes (rlx derives it from that).
  if (const auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    RLX_FORMAT_CHECK(it->is_array() && static_cast<int64_t>(it->size()) == c.layers, path,
                     ": layer_types must list one type per layer (", c.layers, ")");
    for (int64_t i = 0; i < c.layers; ++i) {
      const auto& t = (*it)[static_cast<size_t>(i)];
      const std::string want = i % c.global_every == 0 ? "full_attention" : "sliding_attention";
      if (!t.is_string() || t.get<std::string>() != want)
        throw unsupported(str("layer_types[", i, "]"), t.dump(),
                          "every global_attn_every_n_layers-th layer full_attention, the others sliding_attention");
    }
  }

  const int64_t D = c.hidden / c.heads;
  RLX_FORMAT_CHECK(D % 2 == 0, path, ": head size ", D, " must be even for the rotary embedding");
  c.rope_dims = D;
  c.rope_interleaved = false;
  c.rope_base = static_cast<float>(json_get_or<double>(j, "global_rope_theta", 160000.0, path));
  c.rope_base_local = static_cast<float>(json_get_or<double>(j, "local_rope_theta", 10000.0, path));
  if (const auto it = j.find("rope_scaling"); it != j.end() && !it->is_null())
    throw unsupported("rope_scaling", it->dump().substr(0, 64), "null");
  // transformers 5: rope_parameters per layer type, default rotation only.
  if (const auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    const std::string where = path + ": rope_parameters";
    RLX_FORMAT_CHECK(it->is_object(), where, " must be an object");
    for (auto [type, base] :
         {std::pair{"full_attention", &c.rope_base}, std::pair{"sliding_attention", &c.rope_base_local}}) {
      const auto p = it->find(type);
      if (p == it->end() || p->is_null()) continue;
      const std::string at = str(where, ".", type);
      const auto rope_type = json_get_or<std::string>(*p, "rope_type", "default", at);
      if (rope_type != "default") throw unsupported(at + ".rope_type", "'" + rope_type + "'", "default");
      *base = static_cast<float>(json_get_or<double>(*p, "rope_theta", *base, at));
    }
  }
  RLX_FORMAT_CHECK(c.rope_base > 0 && c.rope_base_local > 0, path, ": rotary bases must be positive");
  return c;
}

Tensor modernbert_local_band(const BertConfig& c, int64_t L) {
  Tensor t = Tensor::empty(DType::F32, {L, L});
  float* p = t.data<float>();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) p[i * L + j] = std::abs(i - j) <= c.local_window ? 0.0f : kMasked;
  return t;
}

Graph build_modernbert_graph(const BertConfig& c) {
  Graph g;
  const DType f = DType::F32;
  const int64_t H = c.hidden, D = c.hidden / c.heads, I = c.intermediate;
  const EncoderInputs in = encoder_inputs(g);  // no token types
  const Value band = input(g, "local_attention_bias", f, {"L", "L"});

  const Value zeros = c.norm_bias ? Value{} : constant(g, Tensor::zeros(f, {H}), "modernbert.zero_bias");
  auto norm = [&](Value v, const std::string& name) {
    return layer_norm(v, param(g, name + ".weight", f, {H}), c.norm_bias ? param(g, name + ".bias", f, {H}) : zeros,
                      c.layer_norm_eps);
  };
  auto linear = [&](Value v, const std::string& name, int64_t out, int64_t width, bool bias) {
    Value y = project(g, v, name + ".weight", out, width, c);
    return bias ? y + param(g, name + ".bias", f, {out}) : y;
  };

  Value x = norm(gather(param(g, kModernBertWordEmb, f, {c.vocab_size, H}), in.ids), kEmbNorm);

  RopeAttrs rope_q;
  rope_q.num_heads = static_cast<int>(c.heads);
  rope_q.head_dim = static_cast<int>(D);
  rope_q.n_rot = static_cast<int>(D);
  rope_q.pairing = RopePairing::NeoX;
  AttentionAttrs global{static_cast<int>(c.heads), static_cast<int>(c.heads), static_cast<int>(D)};
  global.mask = MaskKind::Custom;
  AttentionAttrs local = global;
  local.mask = MaskKind::Bias;
  Value local_bias;  // [B, 1, L, L], built once if any layer is local
  for (int64_t i = 0; i < c.layers; ++i) {
    const bool is_global = i % c.global_every == 0;
    if (!is_global && local_bias.graph == nullptr) {
      const Value key_bias = (cast(in.mask, f) - scalar(g, 1.0f)) * scalar(g, -kMasked);
      local_bias = reshape(band, {1, 1, "L", "L"}) + reshape(key_bias, {"B", 1, 1, "L"});
    }
    const Value h = i == 0 ? x : norm(x, layer(i, "attn_norm"));
    const Value qkv = linear(h, layer(i, "attn.Wqkv"), 3 * H, H, c.attention_bias);
    RopeAttrs rq = rope_q;
    rq.freq_base = is_global ? c.rope_base : c.rope_base_local;
    RopeAttrs rk = rq;
    rk.src_offset = H;  // K follows Q in each fused QKV row
    const Value ctx = attention(rope(qkv, in.positions, rq), rope(qkv, in.positions, rk), narrow(qkv, 2, 2 * H, H),
                                is_global ? global : local, is_global ? in.mask : local_bias);
    x = x + linear(ctx, layer(i, "attn.Wo"), H, H, c.attention_bias);
    const Value u = linear(norm(x, layer(i, "mlp_norm")), layer(i, "mlp.Wi"), 2 * I, H, c.mlp_bias);
    x = x + linear(geglu(u, c.gelu_tanh), layer(i, "mlp.Wo"), H, I, c.mlp_bias);
  }
  add_pooling_output(g, norm(x, kFinalNorm), in.mask, c);
  return g;
}

std::map<std::string, Tensor> load_modernbert_weights(const BertConfig& c, const WeightSource& src) {
  const int64_t H = c.hidden, I = c.intermediate;
  std::map<std::string, Tensor> w;
  auto norm = [&](const std::string& name) {
    w[name + ".weight"] = src.get(name + ".weight", {H});
    if (c.norm_bias) w[name + ".bias"] = src.get(name + ".bias", {H});
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
    w[name + ".weight"] = src.get_linear(name + ".weight", {out, in}, c);
    if (bias) w[name + ".bias"] = src.get(name + ".bias", {out});
  };
  w[kModernBertWordEmb] = src.get(kModernBertWordEmb, {c.vocab_size, H});
  norm(kEmbNorm);
  for (int64_t i = 0; i < c.layers; ++i) {
    if (i > 0) norm(layer(i, "attn_norm"));
    linear(layer(i, "attn.Wqkv"), 3 * H, H, c.attention_bias);
    linear(layer(i, "attn.Wo"), H, H, c.attention_bias);
    norm(layer(i, "mlp_norm"));
    linear(layer(i, "mlp.Wi"), 2 * I, H, c.mlp_bias);
    linear(layer(i, "mlp.Wo"), H, I, c.mlp_bias);
  }
  norm(kFinalNorm);
  return w;
}

}  // namespace rlx::bert::detail
