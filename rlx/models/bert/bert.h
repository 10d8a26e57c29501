// BERT-family encoders as rlx graphs, from a Hugging Face folder (config.json
// + model.safetensors) or a GGUF file written by llama.cpp's converter:
//  - BERT (MiniLM, ...): post-LN layers, GELU (erf or tanh as config.json
//    says), absolute position embeddings (bert.cpp); RoBERTa, XLM-RoBERTa
//    and CamemBERT are the same with positions counted from pad_token_id + 1,
//    DistilBERT without token types and with its own weight names;
//  - Nomic BERT (nomic-embed-text): rotary positions, SwiGLU FFN, no biases,
//    post-LN (nomic_bert.cpp);
//  - MPNet (all-mpnet-base-v2): BERT's layers plus a relative position bias
//    shared by every layer's attention, no token types (mpnet.cpp);
//  - ModernBERT (modernbert-embed-base, gte-modernbert-base): pre-LN layers,
//    rotary positions, GeGLU FFN, local (sliding-window) attention in all but
//    every n-th layer, no token types (modernbert.cpp);
// then optional mean/CLS pooling and L2 normalization (sentence-transformers).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rlx/ir/builder.h"

namespace rlx {
class GgufFile;
class WordPieceTokenizer;
class SentenceTokenizer;
}  // namespace rlx

namespace rlx::bert {

enum class Pooling { None, Mean, Cls };
enum class Arch { Bert, DistilBert, NomicBert, MPNet, ModernBert };  // DistilBert: BERT's graph, its own names

struct BertConfig {
  Arch arch = Arch::Bert;
  int64_t vocab_size = 30522;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  int64_t max_position = 512;  // positions a sequence may use
  // Rows of the position table before position 0 (MPNet, RoBERTa: pad id + 1).
  int64_t position_offset = 0;
  int64_t type_vocab = 2;
  float layer_norm_eps = 1e-12f;
  bool gelu_tanh = false;  // hidden_act "gelu_new"/"gelu_pytorch_tanh"
  Pooling pooling = Pooling::Mean;
  // sentence-transformers Dense modules after the pooling (LaBSE, distiluse):
  // y = act(x·Wᵀ + b), weights "linear.weight"/"linear.bias" in `dir`.
  struct Dense {
    std::string dir;
    int64_t in = 0, out = 0;
    bool bias = true;
    bool tanh = false;  // else identity
  };
  std::vector<Dense> dense;
  bool normalize = true;  // after the Dense modules
  // NomicBert: rotary embedding over the first `rope_dims` of each head.
  float rope_base = 10000.0f;
  int64_t rope_dims = 0;
  bool rope_interleaved = false;
  // MPNet: rows of the per-head relative attention bias table (T5-style
  // buckets: half per direction, half of those exact, the rest log-spaced up
  // to relative_max_distance).
  int64_t relative_buckets = 32;
  int64_t relative_max_distance = 128;
  // ModernBert: layer i attends globally when i % global_every == 0, else
  // only to keys j with |i − j| ≤ local_window (rotary base rope_base_local
  // there, rope_base in the global layers); biases where the flags say.
  int64_t global_every = 1;
  int64_t local_window = 0;
  float rope_base_local = 10000.0f;
  bool norm_bias = true, attention_bias = true, mlp_bias = true;
  // Storage type of the linear layers' weights: F32 (any float file is
  // converted), or a GGUF quant type (then they stay packed and run through
  // DequantMatMul).
  DType linear_dtype = DType::F32;

  // From a HF config.json (model_type "bert", "distilbert", "roberta",
  // "xlm-roberta", "camembert", "nomic_bert", "mpnet" or "modernbert"; and, when
  // present beside it, sentence-transformers' modules.json and
  // 1_Pooling/config.json). Unsupported architectures and settings are
  // FormatError/Unsupported naming the file and key.
  static BertConfig from_dir(const std::string& dir);
  // From a GGUF file's metadata (general.architecture "bert" or "nomic-bert",
  // as llama.cpp's convert_hf_to_gguf.py writes them).
  static BertConfig from_gguf(const GgufFile& file);
  // Width of the embeddings: the last Dense module's, else hidden.
  int64_t output_dim() const { return dense.empty() ? hidden : dense.back().out; }
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

// Nomic BERT weight names (nomic-ai's HF layout, as in model.safetensors):
// "encoder.layers.N.attn.Wqkv.weight" (Q, K, V rows), "attn.out_proj",
// "mlp.fc11" (up), "mlp.fc12" (gate: y = fc11(x) · silu(fc12(x))), "mlp.fc2",
// "norm1", "norm2", and "emb_ln" after the embeddings. The builder uses a
// fused "encoder.layers.N.mlp.gate_up.weight" = [fc12; fc11] (gate first, as
// FusedSwiGLU wants) that the loader assembles.
namespace nomic_names {
inline const char* kEmbLnW = "emb_ln.weight";
inline const char* kEmbLnB = "emb_ln.bias";
std::string layer(int64_t i, const char* suffix);
}  // namespace nomic_names

// Inputs: input_ids, token_type_ids, attention_mask (i32 [B, L]) and
// positions (i32 [L]), then extra_inputs(). Output "embeddings": [B, hidden]
// when pooled, else "hidden_states" [B, L, hidden].
Graph build_graph(const BertConfig& cfg);
// The graph's inputs after the four above, for sequences of length L: MPNet's
// relative position buckets (i32 [L, L]), ModernBERT's local attention band
// (f32 [L, L]: 0 where a local layer's query sees the key, else −30000);
// none for the other architectures.
std::vector<Tensor> extra_inputs(const BertConfig& cfg, int64_t L);
// Elements of the additive attention bias the graph builds per sequence of
// length L (MPNet: heads·L², ModernBERT: L²; 0 for the others), so callers
// can bound the batch by the memory it takes.
int64_t attention_bias_elements(const BertConfig& cfg, int64_t L);

// Reads the weights the graph needs from `model.safetensors` in `dir`
// (with or without a "bert." prefix), fusing Q/K/V. Missing or mis-shaped
// tensors are FormatError naming the tensor.
std::map<std::string, Tensor> load_weights(const BertConfig& cfg, const std::string& dir);
// The same from a GGUF file (llama.cpp names: token_embd, blk.N.attn_q, ...).
std::map<std::string, Tensor> load_weights(const BertConfig& cfg, const GgufFile& file);
// The WordPiece tokenizer stored in a GGUF file (tokenizer.ggml.model "bert":
// llama.cpp's "phantom space" spelling of the vocabulary is undone).
WordPieceTokenizer tokenizer_from_gguf(const GgufFile& file);
// The tokenizer of a BERT-family GGUF: that WordPiece vocabulary, or the "t5"
// (SentencePiece Unigram) and "gpt2" (byte-level BPE) ones llama.cpp writes
// for XLM-RoBERTa and RoBERTa models, read as the tokenizer.json they came from.
std::shared_ptr<const SentenceTokenizer> sentence_tokenizer_from_gguf(const GgufFile& file);
// True when `path` is a file starting with the GGUF magic.
bool is_gguf_file(const std::string& path);

}  // namespace rlx::bert
