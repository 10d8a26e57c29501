// Pieces shared by the BERT-family builders and loaders (bert.cpp,
// nomic_bert.cpp, bert_gguf.cpp); not part of the public API.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rlx/models/bert/bert.h"

namespace rlx::bert::detail {

// Named weights of one file, by their Hugging Face name. Subclasses map the
// name to what the file stores (a "bert." prefix, llama.cpp's GGUF names).
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The stored tensor (any dtype, unconverted), or nullopt.
  virtual std::optional<Tensor> find(const std::string& hf_name) const = 0;
  // The file's name and the stored name of `hf_name`, for messages.
  virtual std::string describe(const std::string& hf_name) const = 0;

  // The tensor as f32 with exactly `shape`; FormatError naming it when it is
  // missing, mis-shaped or not numeric.
  Tensor get(const std::string& hf_name, const std::vector<int64_t>& shape) const;
  // A linear layer's weight [out, in] stored as `cfg.linear_dtype`: a quant
  // weight stays packed (and must be of that type), a float one becomes f32.
  Tensor get_linear(const std::string& hf_name, const std::vector<int64_t>& shape, const BertConfig& cfg) const;
  bool contains(const std::string& hf_name) const { return find(hf_name).has_value(); }
};

// Rows of same-dtype tensors stacked (quant rows are whole blocks, so packed
// weights concatenate byte-wise too).
Tensor concat_rows(const std::vector<Tensor>& parts);

// x · Wᵀ for a param `name` [out, in] of cfg.linear_dtype (MatMul, or
// DequantMatMul for packed weights).
Value project(Graph& g, Value x, const std::string& name, int64_t out, int64_t in, const BertConfig& cfg);

// The inputs every BERT-family graph takes, in order (bert.h, build_graph).
struct EncoderInputs {
  Value ids, types, mask, positions;
};
EncoderInputs encoder_inputs(Graph& g);

// LayerNorm(word + position (+ token type) embeddings) with BERT's weight
// names; positions read past position_offset rows (RoBERTa, MPNet) and no
// token types when the model has none (DistilBERT, MPNet).
Value bert_embeddings(Graph& g, const EncoderInputs& in, const BertConfig& cfg);

// Weight-name prefixes (without ".weight"/".bias") of a post-LN layer's parts
// under "encoder.layer.N.".
struct PostLnLayerNames {
  const char *qkv, *out, *attn_norm, *up, *down, *out_norm;
};
// x = LN(x + attention(q, k, v of x·Wqkvᵀ; mask_or_bias)·Woᵀ), then
// x = LN(x + gelu(x·W1ᵀ)·W2ᵀ), every projection with its bias.
Value post_ln_layer(Graph& g, Value x, int64_t layer, const PostLnLayerNames& names, const AttentionAttrs& attn,
                    Value mask_or_bias, const BertConfig& cfg);

// Sets the graph's output: hidden states, or pooled (mean over mask / CLS)
// and optionally L2-normalized embeddings.
void add_pooling_output(Graph& g, Value x, Value mask, const BertConfig& cfg);

// sentence-transformers' modules.json (+ pooling config) in `dir`: pooling
// and normalization; a plain HF folder gets mean pooling, no normalization.
void read_sentence_transformers_modules(const std::string& dir, BertConfig& cfg);

// Nomic BERT (nomic_bert.cpp).
BertConfig nomic_config_from_json(const nlohmann::json& j, const std::string& path);
Graph build_nomic_graph(const BertConfig& cfg);
std::map<std::string, Tensor> load_nomic_weights(const BertConfig& cfg, const WeightSource& src);

// MPNet (mpnet.cpp).
BertConfig mpnet_config_from_json(const nlohmann::json& j, const std::string& path);
Graph build_mpnet_graph(const BertConfig& cfg);
std::map<std::string, Tensor> load_mpnet_weights(const BertConfig& cfg, const WeightSource& src);
Tensor mpnet_relative_buckets(const BertConfig& cfg, int64_t L);

// ModernBERT (modernbert.cpp).
BertConfig modernbert_config_from_json(const nlohmann::json& j, const std::string& path);
Graph build_modernbert_graph(const BertConfig& cfg);
std::map<std::string, Tensor> load_modernbert_weights(const BertConfig& cfg, const WeightSource& src);
Tensor modernbert_local_band(const BertConfig& cfg, int64_t L);
// Its word embedding table's name (the probe for a checkpoint's prefix).
inline const char* kModernBertWordEmb = "embeddings.tok_embeddings.weight";

// BERT (bert.cpp): size checks shared by the config readers; DistilBERT's
// config and weight names.
void check_sizes(const BertConfig& cfg, const std::string& path);
BertConfig distilbert_config_from_json(const nlohmann::json& j, const std::string& path);
std::string distilbert_name(const std::string& bert_name);

// BERT (bert.cpp).
std::map<std::string, Tensor> load_bert_weights(const BertConfig& cfg, const WeightSource& src);

}  // namespace rlx::bert::detail
