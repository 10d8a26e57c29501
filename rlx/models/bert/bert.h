// BERT-family encoders (BERT, MiniLM, ...) as rlx graphs: post-LN layers,
// GELU (erf or tanh as config.json says), absolute position embeddings,
// optional mean/CLS pooling and L2 normalization (sentence-transformers).
#pragma once
#include <map>
#include <string>

#include "rlx/ir/builder.h"

namespace rlx::bert {

enum class Pooling { None, Mean, Cls };

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  int64_t max_position = 512;
  int64_t type_vocab = 2;
  float layer_norm_eps = 1e-12f;
  bool gelu_tanh = false;  // hidden_act "gelu_new"/"gelu_pytorch_tanh"
  Pooling pooling = Pooling::Mean;
  bool normalize = true;

  // From a HF config.json (and, when present beside it, sentence-transformers'
  // modules.json and 1_Pooling/config.json). Unsupported architectures and
  // settings are FormatError/Unsupported naming the file and key.
  static BertConfig from_dir(const std::string& dir);
};

// Weight names, HF layout ("encoder.layer.3.attention.self.query.weight"). The
// builder uses a fused QKV projection "encoder.layer.N.attention.self.qkv.*"
// that the loader assembles from the three.
namespace names {
inline const char* kWordEmb = "embeddings.word_embeddings.weight";
inline const char* kPosEmb = "embeddings.position_embeddings.weight";
inline const char* kTypeEmb = "embeddings.token_type_embeddings.weight";
inline const char* kEmbLnW = "embeddings.LayerNorm.weight";
inline const char* kEmbLnB = "embeddings.LayerNorm.bias";
std::string layer(int64_t i, const char* suffix);
}  // namespace names

// Inputs: input_ids, token_type_ids, attention_mask (i32 [B, L]) and
// positions (i32 [L]). Output "embeddings": [B, hidden] when pooled, else
// "hidden_states" [B, L, hidden].
Graph build_graph(const BertConfig& cfg);

// Reads the weights the graph needs from `model.safetensors` in `dir`
// (with or without a "bert." prefix), fusing Q/K/V. Missing or mis-shaped
// tensors are FormatError naming the tensor.
std::map<std::string, Tensor> load_weights(const BertConfig& cfg, const std::string& dir);

}  // namespace rlx::bert
