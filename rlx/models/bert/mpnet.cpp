// MPNet (microsoft/mpnet-base; sentence-transformers' all-mpnet-base-v2): a
// post-LN BERT encoder whose attention adds a learned per-head bias looked up
// by the bucketed distance between query and key, one table shared by every
// layer; no token types; learned positions counted from pad_token_id + 1, as
// RoBERTa's. Follows transformers' modeling_mpnet.py:
//   x = LN(word_emb[ids] + pos_emb[2 + l])
//   bias[h, i, j] = rel_bias[bucket(j − i), h]      (MPNetEncoder.compute_position_bias)
//   per layer:
//     x = LN(x + attention(q, k, v; scores·scale + bias + key mask) · Woᵀ)
//     x = LN(x + gelu(x · W1ᵀ) · W2ᵀ)
// Positions: right-padded rows give their tokens 2..len+1 as transformers'
// create_position_ids_from_input_ids does; the pads' own rows differ (it
// gives them the pad position) but no kept token or pooled value reads them.
// The key mask enters as part of the additive bias (one Bias input of the
// attention op): [B, H, L, L], shared by the layers.
#include <cmath>

#include "rlx/formats/hf_config.h"
#include "rlx/models/bert/bert_internal.h"

namespace rlx::bert::detail {

namespace {

const char* kRelBias = "encoder.relative_attention_bias.weight";
// transformers' MPNetEncoder.compute_position_bias buckets with its default
// num_buckets = 32 whatever the config says; the table has the config's rows.
constexpr int64_t kBucketCount = 32;

}  // namespace

BertConfig mpnet_config_from_json(const nlohmann::json& j, const std::string& path) {
  BertConfig c;
  c.arch = Arch::MPNet;
  c.vocab_size = json_get<int64_t>(j, "vocab_size", path);
  c.hidden = json_get<int64_t>(j, "hidden_size", path);
  c.layers = json_get<int64_t>(j, "num_hidden_layers", path);
  c.heads = json_get<int64_t>(j, "num_attention_heads", path);
  c.intermediate = json_get<int64_t>(j, "intermediate_size", path);
  c.layer_norm_eps = static_cast<float>(json_get_or<double>(j, "layer_norm_eps", 1e-5, path));
  c.type_vocab = 0;
  const int64_t table_rows = json_get<int64_t>(j, "max_position_embeddings", path);
  c.position_offset = json_get_or<int64_t>(j, "pad_token_id", 1, path) + 1;
  c.max_position = table_rows - c.position_offset;
  c.relative_buckets = json_get_or<int64_t>(j, "relative_attention_num_buckets", 32, path);
  const auto act = json_get_or<std::string>(j, "hidden_act", "gelu", path);
  if (act == "gelu") c.gelu_tanh = false;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh") c.gelu_tanh = true;
  else throw Unsupported(str(path, ": hidden_act '", act, "' is not supported (gelu, gelu_new, gelu_pytorch_tanh)"));
  RLX_FORMAT_CHECK(c.hidden > 0 && c.heads > 0 && c.hidden % c.heads == 0, path, ": hidden_size ", c.hidden,
                   " is not a multiple of num_attention_heads ", c.heads);
  RLX_FORMAT_CHECK(c.layers > 0 && c.layers < 1000 && c.vocab_size > 0 && c.intermediate > 0, path,
                   ": implausible sizes");
  RLX_FORMAT_CHECK(c.position_offset >= 1 && c.max_position >= 2, path, ": max_position_embeddings ", table_rows,
                   " leaves no positions after pad_token_id + 1 = ", c.position_offset);
  RLX_FORMAT_CHECK(c.relative_buckets >= kBucketCount && c.relative_buckets <= 4096, path,
                   ": relative_attention_num_buckets ", c.relative_buckets, " must be in [", kBucketCount,
                   ", 4096] (positions are put in ", kBucketCount, " buckets)");
  return c;
}

// transformers' MPNetEncoder.relative_position_bucket for relative position
// j − i, in its float32 arithmetic (the bucket edges are truncations of
// float32 logarithms, which a float64 evaluation would move).
Tensor mpnet_relative_buckets(const BertConfig& c, int64_t L) {
  const int64_t half = kBucketCount / 2, exact = half / 2;
  const float log_span = static_cast<float>(std::log(static_cast<double>(c.relative_max_distance) / exact));
  std::vector<int32_t> bucket_of(static_cast<size_t>(2 * L - 1));  // by i − j + L − 1
  for (int64_t d = -(L - 1); d <= L - 1; ++d) {
    const int64_t n = d;  // −relative_position = i − j
    int64_t b = n < 0 ? half : 0;
    const int64_t a = std::abs(n);
    if (a < exact) {
      b += a;
    } else {
      const float r = std::log(static_cast<float>(a) / static_cast<float>(exact)) / log_span *
                      static_cast<float>(half - exact);
      b += std::min<int64_t>(exact + static_cast<int64_t>(r), half - 1);
    }
    bucket_of[static_cast<size_t>(d + L - 1)] = static_cast<int32_t>(b);
  }
  Tensor t = Tensor::empty(DType::I32, {L, L});
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) p[i * L + j] = bucket_of[static_cast<size_t>(i - j + L - 1)];
  return t;
}

Graph build_mpnet_graph(const BertConfig& c) {
  Graph g;
  const EncoderInputs in = encoder_inputs(g);  // MPNet reads no token types
  auto buckets = input(g, "relative_position_buckets", DType::I32, {"L", "L"});
  Value x = bert_embeddings(g, in, c);

  // [1, heads, L, L] from the table, plus a large negative for masked keys
  // (−30000: finite in f16 and bf16, so no 0·∞; its softmax weight is 0).
  const DType f = DType::F32;
  Value rel = transpose(gather(param(g, kRelBias, f, {c.relative_buckets, c.heads}), buckets), {2, 0, 1});
  Value key_bias = (cast(in.mask, f) - scalar(g, 1.0f)) * scalar(g, 30000.0f);
  Value bias = reshape(rel, {1, c.heads, "L", "L"}) + reshape(key_bias, {"B", 1, 1, "L"});
  AttentionAttrs a{static_cast<int>(c.heads), static_cast<int>(c.heads), static_cast<int>(c.hidden / c.heads)};
  a.mask = MaskKind::Bias;
  const PostLnLayerNames names{"attention.attn.qkv", "attention.attn.o", "attention.LayerNorm",
                               "intermediate.dense", "output.dense",     "output.LayerNorm"};
  for (int64_t i = 0; i < c.layers; ++i) x = post_ln_layer(g, x, i, names, a, bias, c);
  add_pooling_output(g, x, in.mask, c);
  return g;
}

std::map<std::string, Tensor> load_mpnet_weights(const BertConfig& c, const WeightSource& src) {
  const int64_t H = c.hidden, I = c.intermediate;
  std::map<std::string, Tensor> w;
  w[names::kWordEmb] = src.get(names::kWordEmb, {c.vocab_size, H});
  w[names::kPosEmb] = src.get(names::kPosEmb, {c.position_offset + c.max_position, H});
  w[names::kEmbLnW] = src.get(names::kEmbLnW, {H});
  w[names::kEmbLnB] = src.get(names::kEmbLnB, {H});
  w[kRelBias] = src.get(kRelBias, {c.relative_buckets, c.heads});
  for (int64_t i = 0; i < c.layers; ++i) {
    auto name = [&](const char* s) { return names::layer(i, s); };
    auto get = [&](const char* s, std::vector<int64_t> shape) { return src.get(name(s), shape); };
    auto linear = [&](const char* s, std::vector<int64_t> shape) { return src.get_linear(name(s), shape, c); };
    w[name("attention.attn.qkv.weight")] = concat_rows(
        {linear("attention.attn.q.weight", {H, H}), linear("attention.attn.k.weight", {H, H}),
         linear("attention.attn.v.weight", {H, H})});
    w[name("attention.attn.qkv.bias")] =
        concat_rows({get("attention.attn.q.bias", {H}), get("attention.attn.k.bias", {H}),
                     get("attention.attn.v.bias", {H})});
    w[name("attention.attn.o.weight")] = linear("attention.attn.o.weight", {H, H});
    w[name("intermediate.dense.weight")] = linear("intermediate.dense.weight", {I, H});
    w[name("intermediate.dense.bias")] = get("intermediate.dense.bias", {I});
    w[name("output.dense.weight")] = linear("output.dense.weight", {H, I});
    for (const char* s : {"attention.attn.o.bias", "attention.LayerNorm.weight", "attention.LayerNorm.bias",
                          "output.dense.bias", "output.LayerNorm.weight", "output.LayerNorm.bias"})
      w[name(s)] = get(s, {H});
  }
  return w;
}

}  // namespace rlx::bert::detail
