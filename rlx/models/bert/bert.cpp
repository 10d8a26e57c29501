#include "rlx/models/bert/bert.h"

#include <cmath>

#include <cstring>
#include <filesystem>

#include "rlx/formats/hf_config.h"
#include "rlx/formats/quant.h"
#include "rlx/formats/safetensors.h"
#include "rlx/models/bert/bert_internal.h"

namespace rlx::bert {

namespace fs = std::filesystem;
using namespace detail;

std::string names::layer(int64_t i, const char* suffix) { return str("encoder.layer.", i, ".", suffix); }

BertConfig BertConfig::from_dir(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  RLX_FORMAT_CHECK(fs::exists(path), dir, ": no config.json (is this a Hugging Face model folder?)");
  const auto j = load_json_file(path);
  const auto type = json_get_or<std::string>(j, "model_type", "", path);
  if (type == "nomic_bert" || type == "mpnet" || type == "modernbert") {
    BertConfig c = type == "mpnet"        ? mpnet_config_from_json(j, path)
                   : type == "modernbert" ? modernbert_config_from_json(j, path)
                                          : nomic_config_from_json(j, path);
    read_sentence_transformers_modules(dir, c);
    return c;
  }
  if (type == "distilbert") {
    BertConfig c = distilbert_config_from_json(j, path);
    read_sentence_transformers_modules(dir, c);
    return c;
  }
  // RoBERTa (and XLM-RoBERTa, CamemBERT) is BERT's layer with positions
  // counted from pad_token_id + 1 and one token type; the tokenizers differ
  // (byte-level BPE, SentencePiece Unigram), which tokenizer.json says.
  const bool roberta = type == "roberta" || type == "xlm-roberta" || type == "camembert";
  if (type != "bert" && !roberta)
    throw Unsupported(str(path, ": model_type '", type,
                          "' is not supported (rlx embeds BERT-family models: 'bert', 'distilbert', 'roberta', "
                          "'xlm-roberta', 'camembert', 'nomic_bert', 'mpnet', 'modernbert')"));
  BertConfig c;
  c.vocab_size = json_get<int64_t>(j, "vocab_size", path);
  c.hidden = json_get<int64_t>(j, "hidden_size", path);
  c.layers = json_get<int64_t>(j, "num_hidden_layers", path);
  c.heads = json_get<int64_t>(j, "num_attention_heads", path);
  c.intermediate = json_get<int64_t>(j, "intermediate_size", path);
  c.max_position = json_get<int64_t>(j, "max_position_embeddings", path);
  if (roberta) {
    c.position_offset = json_get_or<int64_t>(j, "pad_token_id", 1, path) + 1;
    RLX_FORMAT_CHECK(c.position_offset >= 1 && c.max_position - c.position_offset >= 2, path,
                     ": max_position_embeddings ", c.max_position, " leaves no positions after pad_token_id + 1");
    c.max_position -= c.position_offset;
  }
  c.type_vocab = json_get_or<int64_t>(j, "type_vocab_size", 2, path);
  c.layer_norm_eps = static_cast<float>(json_get_or<double>(j, "layer_norm_eps", 1e-12, path));
  const auto act = json_get_or<std::string>(j, "hidden_act", "gelu", path);
  if (act == "gelu") c.gelu_tanh = false;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") c.gelu_tanh = true;
  else throw Unsupported(str(path, ": hidden_act '", act, "' is not supported (gelu, gelu_new, gelu_pytorch_tanh)"));
  const auto pos_type = json_get_or<std::string>(j, "position_embedding_type", "absolute", path);
  if (pos_type != "absolute")
    throw Unsupported(str(path, ": position_embedding_type '", pos_type, "' is not supported (absolute)"));
  check_sizes(c, path);
  read_sentence_transformers_modules(dir, c);
  return c;
}

namespace detail {

void check_sizes(const BertConfig& c, const std::string& path) {
  RLX_FORMAT_CHECK(c.hidden > 0 && c.heads > 0 && c.hidden % c.heads == 0, path, ": hidden size ", c.hidden,
                   " is not a multiple of the head count ", c.heads);
  RLX_FORMAT_CHECK(c.layers > 0 && c.layers < 1000 && c.vocab_size > 0 && c.intermediate > 0 && c.max_position > 0 &&
                       c.type_vocab >= 0,
                   path, ": implausible sizes");
}

// transformers' DistilBertConfig: dim, n_layers, n_heads, hidden_dim; no token
// types; LayerNorm eps fixed at 1e-12. Sinusoidal position tables are stored
// in the weights like learned ones, so both load the same way.
BertConfig distilbert_config_from_json(const nlohmann::json& j, const std::string& path) {
  BertConfig c;
  c.arch = Arch::DistilBert;
  c.vocab_size = json_get<int64_t>(j, "vocab_size", path);
  c.hidden = json_get<int64_t>(j, "dim", path);
  c.layers = json_get<int64_t>(j, "n_layers", path);
  c.heads = json_get<int64_t>(j, "n_heads", path);
  c.intermediate = json_get<int64_t>(j, "hidden_dim", path);
  c.max_position = json_get<int64_t>(j, "max_position_embeddings", path);
  c.type_vocab = 0;
  c.layer_norm_eps = 1e-12f;
  const auto act = json_get_or<std::string>(j, "activation", "gelu", path);
  if (act != "gelu") throw Unsupported(str(path, ": activation '", act, "' is not supported (gelu)"));
  check_sizes(c, path);
  return c;
}

// The DistilBERT name of a BERT weight name (embeddings keep theirs).
std::string distilbert_name(const std::string& bert) {
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attention.self.query.", "attention.q_lin."},     {"attention.self.key.", "attention.k_lin."},
      {"attention.self.value.", "attention.v_lin."},     {"attention.output.dense.", "attention.out_lin."},
      {"attention.output.LayerNorm.", "sa_layer_norm."}, {"intermediate.dense.", "ffn.lin1."},
      {"output.dense.", "ffn.lin2."},                    {"output.LayerNorm.", "output_layer_norm."}};
  const std::string prefix = "encoder.layer.";
  if (!bert.starts_with(prefix)) return bert;
  const size_t dot = bert.find('.', prefix.size());
  const std::string index = bert.substr(prefix.size(), dot - prefix.size()), rest = bert.substr(dot + 1);
  for (const auto& [from, to] : kLayer)
    if (rest.starts_with(from)) return str("transformer.layer.", index, ".", to, rest.substr(std::strlen(from)));
  return bert;
}

void read_sentence_transformers_modules(const std::string& dir, BertConfig& c) {
  // sentence-transformers: the modules after the encoder, in order. A module
  // rlx does not run is an error, not skipped: skipping one would give other
  // vectors than the model's.
  const std::string modules = (fs::path(dir) / "modules.json").string();
  if (!fs::exists(modules)) {
    c.pooling = Pooling::Mean;  // plain HF model: mean pooling, as most embedding servers do
    c.normalize = false;
    return;
  }
  const auto mj = load_json_file(modules);
  RLX_FORMAT_CHECK(mj.is_array(), modules, ": expected a JSON array of modules");
  c.pooling = Pooling::None;
  c.normalize = false;
  c.dense.clear();
  for (size_t i = 0; i < mj.size(); ++i) {
    const std::string where = str(modules, ": module ", i);
    const auto mtype = json_get<std::string>(mj[i], "type", where);
    const std::string short_type = mtype.substr(mtype.rfind('.') + 1);
    const fs::path mdir = fs::path(dir) / json_get_or<std::string>(mj[i], "path", "", where);
    RLX_CHECK_AS(Unsupported, !c.normalize, where, ": ", short_type,
                 " after Normalize is not supported (rlx normalizes last)");
    if (short_type == "Transformer") {
      RLX_CHECK_AS(Unsupported, i == 0, where, ": the Transformer must be the first module");
    } else if (short_type == "Pooling") {
      RLX_CHECK_AS(Unsupported, c.pooling == Pooling::None, where, ": a second Pooling module is not supported");
      const std::string pc = (mdir / "config.json").string();
      const auto pj = load_json_file(pc);
      std::vector<std::string> modes;
      for (const auto& [key, value] : pj.items())
        if (key.starts_with("pooling_mode_") && value.is_boolean() && value.get<bool>()) modes.push_back(key);
      // The constructor's string form ("mean", "cls", ...), when no flag is set.
      if (const auto mode = json_get_opt<std::string>(pj, "pooling_mode", pc); mode && modes.empty())
        modes.push_back(*mode == "mean" ? "pooling_mode_mean_tokens"
                        : *mode == "cls" ? "pooling_mode_cls_token"
                                         : "pooling_mode '" + *mode + "'");
      RLX_CHECK_AS(Unsupported, modes.size() == 1, pc, ": ", modes.size(),
                   " pooling modes are on; rlx supports exactly one of pooling_mode_mean_tokens and "
                   "pooling_mode_cls_token (sentence-transformers concatenates several)");
      if (modes[0] == "pooling_mode_mean_tokens") c.pooling = Pooling::Mean;
      else if (modes[0] == "pooling_mode_cls_token") c.pooling = Pooling::Cls;
      else throw Unsupported(str(pc, ": ", modes[0], " is not supported (mean and CLS pooling are)"));
    } else if (short_type == "Dense") {
      RLX_CHECK_AS(Unsupported, c.pooling != Pooling::None, where, ": a Dense module before the pooling");
      const std::string dc = (mdir / "config.json").string();
      const auto dj = load_json_file(dc);
      BertConfig::Dense d;
      d.dir = mdir.string();
      d.in = json_get<int64_t>(dj, "in_features", dc);
      d.out = json_get<int64_t>(dj, "out_features", dc);
      d.bias = json_get_or<bool>(dj, "bias", true, dc);
      const auto act = json_get_or<std::string>(dj, "activation_function", "torch.nn.modules.activation.Tanh", dc);
      if (act == "torch.nn.modules.activation.Tanh") d.tanh = true;
      else if (act != "torch.nn.modules.linear.Identity")
        throw Unsupported(str(dc, ": activation_function '", act, "' is not supported (Tanh, Identity)"));
      const int64_t in = c.dense.empty() ? c.hidden : c.dense.back().out;
      RLX_FORMAT_CHECK(d.in == in && d.out > 0 && d.out <= (int64_t{1} << 20), dc, ": in_features ", d.in,
                       " and out_features ", d.out, " do not follow the ", in, "-wide vectors before it");
      c.dense.push_back(std::move(d));
    } else if (short_type == "Normalize") {
      c.normalize = true;
    } else {
      throw Unsupported(str(where, ": module type '", mtype,
                            "' is not supported (Transformer, Pooling, Dense, Normalize)"));
    }
  }
  RLX_CHECK_AS(Unsupported, c.pooling != Pooling::None || (c.dense.empty() && !c.normalize), modules,
               ": Dense or Normalize without a Pooling module");
}

EncoderInputs encoder_inputs(Graph& g) {
  EncoderInputs in;
  in.ids = input(g, "input_ids", DType::I32, {"B", "L"});
  in.types = input(g, "token_type_ids", DType::I32, {"B", "L"});
  in.mask = input(g, "attention_mask", DType::I32, {"B", "L"});
  in.positions = input(g, "positions", DType::I32, {"L"});
  return in;
}

Value bert_embeddings(Graph& g, const EncoderInputs& in, const BertConfig& c) {
  const DType f = DType::F32;
  const int64_t H = c.hidden;
  // RoBERTa's table starts position_offset rows early (create_position_ids_from_input_ids).
  Value pos_table = param(g, names::kPosEmb, f, {c.position_offset + c.max_position, H});
  if (c.position_offset > 0) pos_table = narrow(pos_table, 0, c.position_offset, c.max_position);
  auto emb = gather(param(g, names::kWordEmb, f, {c.vocab_size, H}), in.ids) + gather(pos_table, in.positions);
  if (c.type_vocab > 0) emb = emb + gather(param(g, names::kTypeEmb, f, {c.type_vocab, H}), in.types);
  return layer_norm(emb, param(g, names::kEmbLnW, f, {H}), param(g, names::kEmbLnB, f, {H}), c.layer_norm_eps);
}

Value post_ln_layer(Graph& g, Value x, int64_t i, const PostLnLayerNames& n, const AttentionAttrs& a,
                    Value mask_or_bias, const BertConfig& c) {
  const DType f = DType::F32;
  const int64_t H = c.hidden;
  auto linear = [&](Value v, const char* part, int64_t out, int64_t in) {
    return project(g, v, names::layer(i, str(part, ".weight").c_str()), out, in, c) +
           param(g, names::layer(i, str(part, ".bias").c_str()), f, {out});
  };
  auto norm_param = [&](const char* part, const char* which) {
    return param(g, names::layer(i, str(part, which).c_str()), f, {H});
  };
  auto qkv = linear(x, n.qkv, 3 * H, H);
  auto ctx = attention(narrow(qkv, 2, 0, H), narrow(qkv, 2, H, H), narrow(qkv, 2, 2 * H, H), a, mask_or_bias);
  auto attn = linear(ctx, n.out, H, H);
  x = layer_norm(attn + x, norm_param(n.attn_norm, ".weight"), norm_param(n.attn_norm, ".bias"), c.layer_norm_eps);
  auto h = linear(x, n.up, c.intermediate, H);
  h = c.gelu_tanh ? gelu_tanh(h) : gelu(h);
  auto y = linear(h, n.down, H, c.intermediate);
  return layer_norm(y + x, norm_param(n.out_norm, ".weight"), norm_param(n.out_norm, ".bias"), c.layer_norm_eps);
}

Value project(Graph& g, Value x, const std::string& name, int64_t out, int64_t in, const BertConfig& c) {
  if (is_quant(c.linear_dtype)) return dequant_matmul(x, param(g, name, c.linear_dtype, {out, in}));
  return matmul(x, param(g, name, DType::F32, {out, in}), MatMulAttrs{false, true});  // HF Linear: [out, in]
}

void add_pooling_output(Graph& g, Value x, Value mask, const BertConfig& c) {
  const DType f = DType::F32;
  const int64_t H = c.hidden;
  if (c.pooling == Pooling::None) {
    output("hidden_states", x);
    return;
  }
  Value pooled;
  if (c.pooling == Pooling::Cls) {
    pooled = reshape(narrow(x, 1, 0, 1), {"B", H});
  } else {
    auto m = cast(mask, f);
    // Σ_l m[b, l]·x[b, l, :] as a batched [1, L]·[L, H] matmul: one GEMM, not a
    // broadcast multiply writing [B, L, H] and a reduction reading it back.
    pooled = reshape(matmul(reshape(m, {"B", 1, "L"}), x), {"B", H});
    // The mean divides each row by its token count, a positive scale that the
    // L2 normalization below removes again (a row with no tokens is 0 either
    // way), so a normalized model skips it: three launches fewer. A Dense
    // module in between is affine, so there the count matters.
    if (!c.normalize || !c.dense.empty())
      pooled = pooled / binary(BinaryFn::Max, reduce(ReduceFn::Sum, m, {1}, true), scalar(g, 1e-9f));
  }
  for (size_t k = 0; k < c.dense.size(); ++k) {
    const BertConfig::Dense& d = c.dense[k];
    pooled = matmul(pooled, param(g, str("dense.", k, ".weight"), f, {d.out, d.in}), MatMulAttrs{false, true});
    if (d.bias) pooled = pooled + param(g, str("dense.", k, ".bias"), f, {d.out});
    if (d.tanh) pooled = unary(UnaryFn::Tanh, pooled);
  }
  if (c.normalize) {
    const int64_t W = c.output_dim();
    // F.normalize, x / max(‖x‖₂, 1e-12), as one RMS norm (one kernel instead
    // of five): x / sqrt(Σx²/W + ε) · W^-½ = x / sqrt(Σx² + W·ε), with W·ε =
    // 1e-24, so it differs from F.normalize only for ‖x‖ ≲ 1e-12 (x: the
    // pooled vector, a sum of token vectors when the pooling is the mean).
    const std::vector<float> inv_sqrt_w(static_cast<size_t>(W), 1.0f / std::sqrt(static_cast<float>(W)));
    pooled = rms_norm(pooled, constant(g, Tensor::from(inv_sqrt_w, {W}), "normalize.scale"),
                      1e-24f / static_cast<float>(W));
  }
  output("embeddings", pooled);
}

}  // namespace detail

std::vector<Tensor> extra_inputs(const BertConfig& c, int64_t L) {
  if (c.arch == Arch::MPNet) return {mpnet_relative_buckets(c, L)};
  if (c.arch == Arch::ModernBert) return {modernbert_local_band(c, L)};
  return {};
}

int64_t attention_bias_elements(const BertConfig& c, int64_t L) {
  if (c.arch == Arch::MPNet) return c.heads * L * L;
  if (c.arch == Arch::ModernBert && c.layers > 1 && c.global_every > 1) return L * L;  // some layer is local
  return 0;
}

Graph build_graph(const BertConfig& c) {
  if (c.arch == Arch::NomicBert) return build_nomic_graph(c);
  if (c.arch == Arch::MPNet) return build_mpnet_graph(c);
  if (c.arch == Arch::ModernBert) return build_modernbert_graph(c);
  Graph g;
  const EncoderInputs in = encoder_inputs(g);
  Value x = bert_embeddings(g, in, c);
  AttentionAttrs a{static_cast<int>(c.heads), static_cast<int>(c.heads), static_cast<int>(c.hidden / c.heads)};
  a.mask = MaskKind::Custom;
  const PostLnLayerNames names{"attention.self.qkv", "attention.output.dense", "attention.output.LayerNorm",
                               "intermediate.dense", "output.dense",           "output.LayerNorm"};
  for (int64_t i = 0; i < c.layers; ++i) x = post_ln_layer(g, x, i, names, a, in.mask, c);
  add_pooling_output(g, x, in.mask, c);
  return g;
}

namespace detail {

Tensor WeightSource::get(const std::string& name, const std::vector<int64_t>& shape) const {
  std::optional<Tensor> t = find(name);
  RLX_FORMAT_CHECK(t.has_value(), describe(name), " is missing");
  RLX_FORMAT_CHECK(t->shape() == shape, describe(name), " has shape ", shape_str(t->shape()), ", expected ",
                   shape_str(shape));
  if (t->dtype() == DType::F32) return *t;
  RLX_FORMAT_CHECK(is_float(t->dtype()) || is_quant(t->dtype()), describe(name), " has non-float dtype ",
                   t->dtype());
  return is_quant(t->dtype()) ? dequantize(*t) : t->to(DType::F32);
}

Tensor WeightSource::get_linear(const std::string& name, const std::vector<int64_t>& shape,
                                const BertConfig& c) const {
  if (!is_quant(c.linear_dtype)) return get(name, shape);
  std::optional<Tensor> t = find(name);
  RLX_FORMAT_CHECK(t.has_value(), describe(name), " is missing");
  RLX_FORMAT_CHECK(t->shape() == shape, describe(name), " has shape ", shape_str(t->shape()), ", expected ",
                   shape_str(shape));
  RLX_FORMAT_CHECK(t->dtype() == c.linear_dtype, describe(name), " is stored as ", t->dtype(),
                   " but the other linear weights as ", c.linear_dtype, " (mixed weight types are not supported)");
  return *t;
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  std::vector<int64_t> shape = parts[0].shape();
  int64_t rows = 0;
  for (const auto& p : parts) {
    RLX_ASSERT(p.dtype() == parts[0].dtype() && p.rank() == parts[0].rank());
    rows += p.shape()[0];
  }
  shape[0] = rows;
  Tensor out = Tensor::empty(parts[0].dtype(), shape);
  char* dst = static_cast<char*>(out.raw_mut());
  for (const auto& p : parts) {
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

}  // namespace detail

namespace {

// model.safetensors in a HF folder, with or without the model's prefix
// ("bert.", "roberta." for the RoBERTa family, "distilbert.", "mpnet.", "model."
// for ModernBERT's masked-LM checkpoints), which task
// heads' checkpoints carry; DistilBERT's tensors under their own names.
class SafetensorsSource : public WeightSource {
 public:
  explicit SafetensorsSource(const std::string& dir, Arch arch = Arch::Bert)
      : st_(open(dir)), distilbert_(arch == Arch::DistilBert) {
    const std::string probe = arch == Arch::ModernBert ? kModernBertWordEmb : names::kWordEmb;
    for (const char* p : {"bert.", "roberta.", "distilbert.", "mpnet.", "model."})
      if (st_.contains(p + probe)) prefix_ = p;
  }
  std::optional<Tensor> find(const std::string& name) const override {
    if (!st_.contains(stored(name))) return std::nullopt;
    return st_.tensor(stored(name));
  }
  std::string describe(const std::string& name) const override { return str(st_.path(), ": tensor '", stored(name), "'"); }

 private:
  static SafetensorsFile open(const std::string& dir) {
    const std::string path = (fs::path(dir) / "model.safetensors").string();
    if (!fs::exists(path) && fs::exists(fs::path(dir) / "pytorch_model.bin"))
      throw Unsupported(str(dir, ": only pytorch_model.bin (a pickle) is there; rlx reads model.safetensors "
                            "(save it with safetensors, e.g. model.save_pretrained(dir, safe_serialization=True))"));
    RLX_FORMAT_CHECK(fs::exists(path), dir, ": no model.safetensors");
    return SafetensorsFile::open(path);
  }
  std::string stored(const std::string& name) const { return prefix_ + (distilbert_ ? distilbert_name(name) : name); }
  SafetensorsFile st_;
  bool distilbert_;
  std::string prefix_;
};

}  // namespace

std::map<std::string, Tensor> load_weights(const BertConfig& c, const std::string& dir) {
  SafetensorsSource src(dir, c.arch);
  auto w = c.arch == Arch::NomicBert    ? load_nomic_weights(c, src)
           : c.arch == Arch::MPNet      ? load_mpnet_weights(c, src)
           : c.arch == Arch::ModernBert ? load_modernbert_weights(c, src)
                                        : load_bert_weights(c, src);
  for (size_t k = 0; k < c.dense.size(); ++k) {
    const BertConfig::Dense& d = c.dense[k];
    SafetensorsSource dense(d.dir);
    w[str("dense.", k, ".weight")] = dense.get("linear.weight", {d.out, d.in});
    if (d.bias) w[str("dense.", k, ".bias")] = dense.get("linear.bias", {d.out});
  }
  return w;
}

std::map<std::string, Tensor> detail::load_bert_weights(const BertConfig& c, const WeightSource& src) {
  const int64_t H = c.hidden;
  std::map<std::string, Tensor> w;
  w[names::kWordEmb] = src.get(names::kWordEmb, {c.vocab_size, H});
  w[names::kPosEmb] = src.get(names::kPosEmb, {c.position_offset + c.max_position, H});
  if (c.type_vocab > 0) w[names::kTypeEmb] = src.get(names::kTypeEmb, {c.type_vocab, H});
  w[names::kEmbLnW] = src.get(names::kEmbLnW, {H});
  w[names::kEmbLnB] = src.get(names::kEmbLnB, {H});
  for (int64_t i = 0; i < c.layers; ++i) {
    auto get = [&](const char* s, std::vector<int64_t> shape) { return src.get(names::layer(i, s), shape); };
    auto linear = [&](const char* s, std::vector<int64_t> shape) {
      return src.get_linear(names::layer(i, s), shape, c);
    };
    w[names::layer(i, "attention.self.qkv.weight")] =
        concat_rows({linear("attention.self.query.weight", {H, H}), linear("attention.self.key.weight", {H, H}),
                     linear("attention.self.value.weight", {H, H})});
    w[names::layer(i, "attention.self.qkv.bias")] =
        concat_rows({get("attention.self.query.bias", {H}), get("attention.self.key.bias", {H}),
                     get("attention.self.value.bias", {H})});
    w[names::layer(i, "attention.output.dense.weight")] = linear("attention.output.dense.weight", {H, H});
    for (const char* s : {"attention.output.dense.bias", "attention.output.LayerNorm.weight",
                          "attention.output.LayerNorm.bias", "output.dense.bias", "output.LayerNorm.weight",
                          "output.LayerNorm.bias"})
      w[names::layer(i, s)] = get(s, {H});
    w[names::layer(i, "intermediate.dense.weight")] = linear("intermediate.dense.weight", {c.intermediate, H});
    w[names::layer(i, "intermediate.dense.bias")] = get("intermediate.dense.bias", {c.intermediate});
    w[names::layer(i, "output.dense.weight")] = linear("output.dense.weight", {H, c.intermediate});
  }
  return w;
}

}  // namespace rlx::bert
