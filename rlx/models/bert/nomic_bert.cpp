// Nomic BERT (nomic-ai/nomic-embed-text-v1, v1.5): a post-LN BERT encoder with
// rotary position embeddings instead of learned ones, a SwiGLU FFN and no
// biases in the linear layers. Follows nomic-ai's modeling_hf_nomic_bert.py
// (NomicBertBlock with prenorm = false):
//   x   = LN(word_emb[ids] + type_emb[types])                       (emb_ln)
//   per layer:
//     q, k, v = split(x · Wqkvᵀ); q, k = rope(q), rope(k)
//     x = LN(x + attention(q, k, v) · Woᵀ)                           (norm1)
//     x = LN(x + (fc11(x) · silu(fc12(x))) · W2ᵀ)                    (norm2)
// The layer runs on fused ops: Rope reads Q and K straight out of the QKV
// projection (src_offset 0 and H), and one projection by [fc12; fc11] feeds
// FusedSwiGLU, whose gate is the first half.
#include <cmath>

#include "rlx/formats/hf_config.h"
#include "rlx/models/bert/bert_internal.h"

namespace rlx::bert {

std::string nomic_names::layer(int64_t i, const char* suffix) { return str("encoder.layers.", i, ".", suffix); }

namespace detail {

BertConfig nomic_config_from_json(const nlohmann::json& j, const std::string& path) {
  BertConfig c;
  c.arch = Arch::NomicBert;
  c.hidden = json_get<int64_t>(j, "n_embd", path);
  c.layers = json_get<int64_t>(j, "n_layer", path);
  c.heads = json_get<int64_t>(j, "n_head", path);
  c.intermediate = json_get<int64_t>(j, "n_inner", path);
  c.type_vocab = json_get_or<int64_t>(j, "type_vocab_size", 2, path);
  c.layer_norm_eps = static_cast<float>(json_get_or<double>(j, "layer_norm_epsilon", 1e-12, path));
  // The embedding table is padded to a multiple of pad_vocab_size_multiple, as the model does.
  c.vocab_size = json_get<int64_t>(j, "vocab_size", path);
  const int64_t pad = json_get_or<int64_t>(j, "pad_vocab_size_multiple", 1, path);
  RLX_FORMAT_CHECK(pad > 0, path, ": pad_vocab_size_multiple must be positive, got ", pad);
  c.vocab_size = (c.vocab_size + pad - 1) / pad * pad;
  RLX_FORMAT_CHECK(c.hidden > 0 && c.heads > 0 && c.hidden % c.heads == 0, path, ": n_embd ", c.hidden,
                   " is not a multiple of n_head ", c.heads);
  RLX_FORMAT_CHECK(c.layers > 0 && c.layers < 1000 && c.vocab_size > 0 && c.intermediate > 0 && c.type_vocab >= 0,
                   path, ": implausible sizes");

  auto require = [&](bool ok, const char* key, const std::string& got, const char* supported) {
    if (!ok) throw Unsupported(str(path, ": ", key, " = ", got, " is not supported (", supported, ")"));
  };
  const auto act = json_get_or<std::string>(j, "activation_function", "swiglu", path);
  require(act == "swiglu", "activation_function", act, "swiglu");
  const bool prenorm = json_get_or<bool>(j, "prenorm", false, path);
  require(!prenorm, "prenorm", "true", "false: post-LN");
  for (const char* key : {"qkv_proj_bias", "mlp_fc1_bias", "mlp_fc2_bias"})
    require(!json_get_or<bool>(j, key, false, path), key, "true", "false: nomic-embed-text has no biases");
  require(!json_get_or<bool>(j, "causal", false, path), "causal", "true", "false");
  require(!j.contains("rotary_emb_scale_base") || j["rotary_emb_scale_base"].is_null(), "rotary_emb_scale_base",
          j.value("rotary_emb_scale_base", nlohmann::json()).dump(), "null");

  const int64_t D = c.hidden / c.heads;
  const double fraction = json_get_or<double>(j, "rotary_emb_fraction", 1.0, path);
  c.rope_dims = static_cast<int64_t>(std::llround(fraction * static_cast<double>(D)));
  require(c.rope_dims > 0 && c.rope_dims <= D && c.rope_dims % 2 == 0, "rotary_emb_fraction", std::to_string(fraction),
          "a fraction of the head size giving an even, positive number of dims; learned positions are BERT's");
  c.rope_base = static_cast<float>(json_get_or<double>(j, "rotary_emb_base", 10000.0, path));
  c.rope_interleaved = json_get_or<bool>(j, "rotary_emb_interleaved", false, path);
  // With rotary_scaling_factor set the model switches to dynamic NTK scaling
  // past max_trained_positions; below it the plain rotation is exact, so that
  // is the length limit then. Otherwise n_positions is.
  c.max_position = json_get_or<int64_t>(j, "n_positions", 2048, path);
  if (j.contains("rotary_scaling_factor") && !j["rotary_scaling_factor"].is_null())
    c.max_position = std::min(c.max_position, json_get_or<int64_t>(j, "max_trained_positions", 2048, path));
  RLX_FORMAT_CHECK(c.max_position > 0, path, ": n_positions must be positive");
  return c;
}

Graph build_nomic_graph(const BertConfig& c) {
  Graph g;
  const DType f = DType::F32;
  const int64_t H = c.hidden, D = c.hidden / c.heads, I = c.intermediate;
  const EncoderInputs in = encoder_inputs(g);
  const Value ids = in.ids, types = in.types, mask = in.mask, pos = in.positions;

  auto emb = gather(param(g, names::kWordEmb, f, {c.vocab_size, H}), ids);
  if (c.type_vocab > 0) emb = emb + gather(param(g, names::kTypeEmb, f, {c.type_vocab, H}), types);
  Value x = layer_norm(emb, param(g, nomic_names::kEmbLnW, f, {H}), param(g, nomic_names::kEmbLnB, f, {H}),
                       c.layer_norm_eps);

  RopeAttrs rope_q;
  rope_q.num_heads = static_cast<int>(c.heads);
  rope_q.head_dim = static_cast<int>(D);
  rope_q.n_rot = static_cast<int>(c.rope_dims);
  rope_q.pairing = c.rope_interleaved ? RopePairing::Interleaved : RopePairing::NeoX;
  rope_q.freq_base = c.rope_base;
  RopeAttrs rope_k = rope_q;
  rope_k.src_offset = H;  // K follows Q in each fused QKV row
  AttentionAttrs a{static_cast<int>(c.heads), static_cast<int>(c.heads), static_cast<int>(D)};
  a.mask = MaskKind::Custom;

  auto norm = [&](Value v, int64_t i, const char* which) {
    return layer_norm(v, param(g, nomic_names::layer(i, str(which, ".weight").c_str()), f, {H}),
                      param(g, nomic_names::layer(i, str(which, ".bias").c_str()), f, {H}), c.layer_norm_eps);
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    auto qkv = project(g, x, nomic_names::layer(i, "attn.Wqkv.weight"), 3 * H, H, c);
    auto q = rope(qkv, pos, rope_q);
    auto k = rope(qkv, pos, rope_k);
    auto ctx = attention(q, k, narrow(qkv, 2, 2 * H, H), a, mask);
    x = norm(project(g, ctx, nomic_names::layer(i, "attn.out_proj.weight"), H, H, c) + x, i, "norm1");
    auto h = swiglu(project(g, x, nomic_names::layer(i, "mlp.gate_up.weight"), 2 * I, H, c));
    x = norm(project(g, h, nomic_names::layer(i, "mlp.fc2.weight"), H, I, c) + x, i, "norm2");
  }
  add_pooling_output(g, x, mask, c);
  return g;
}

std::map<std::string, Tensor> load_nomic_weights(const BertConfig& c, const WeightSource& src) {
  const int64_t H = c.hidden, I = c.intermediate;
  std::map<std::string, Tensor> w;
  w[names::kWordEmb] = src.get(names::kWordEmb, {c.vocab_size, H});
  if (c.type_vocab > 0) w[names::kTypeEmb] = src.get(names::kTypeEmb, {c.type_vocab, H});
  w[nomic_names::kEmbLnW] = src.get(nomic_names::kEmbLnW, {H});
  w[nomic_names::kEmbLnB] = src.get(nomic_names::kEmbLnB, {H});
  for (int64_t i = 0; i < c.layers; ++i) {
    auto name = [&](const char* s) { return nomic_names::layer(i, s); };
    auto linear = [&](const char* s, std::vector<int64_t> shape) { return src.get_linear(name(s), shape, c); };
    w[name("attn.Wqkv.weight")] = linear("attn.Wqkv.weight", {3 * H, H});
    w[name("attn.out_proj.weight")] = linear("attn.out_proj.weight", {H, H});
    // y = fc11(x) · silu(fc12(x)): fc12 is the gate, so its rows go first.
    w[name("mlp.gate_up.weight")] = concat_rows({linear("mlp.fc12.weight", {I, H}), linear("mlp.fc11.weight", {I, H})});
    w[name("mlp.fc2.weight")] = linear("mlp.fc2.weight", {H, I});
    for (const char* s : {"norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}) w[name(s)] = src.get(name(s), {H});
  }
  return w;
}

}  // namespace detail
}  // namespace rlx::bert
