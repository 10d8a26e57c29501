// Sentence embeddings end to end: tokenize (multi-threaded), group texts by
// length into padded batches (one compiled specialization per length bucket),
// run the encoder, and return one L2-normalized vector per text in input order.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rlx/models/bert/bert.h"
#include "rlx/models/tokenizers/sentence_tokenizer.h"
#include "rlx/runtime/session.h"

namespace rlx::bert {

struct EmbedOptions {
  std::string device = "auto";     // auto | cpu | cuda | cuda:N
  DType dtype = DType::Count_;     // f32 | f16 | bf16; Count_ = f16 on a GPU, f32 on the CPU
  int64_t batch = 0;               // texts per batch; 0 = 256 on a GPU, 32 on the CPU
  int64_t max_length = 0;          // tokens incl. [CLS]/[SEP]; 0 = the model's limit
  int threads = 0;                 // tokenizer threads; 0 = hardware
  // Called after each batch with (texts done, total).
  std::function<void(size_t, size_t)> progress;
  // Decoder LLM GGUF files only: "last" (the last token's final hidden state),
  // "mean" or "cls" (the first token's); "" = the file's <arch>.pooling_type.
  std::string pooling;
};

struct EmbedStats {
  size_t texts = 0;
  size_t tokens = 0;       // real (unpadded) tokens
  double seconds = 0;      // tokenization + inference
};

// A model's config, tokenizer and weights, from a folder or a GGUF file.
struct ModelFiles {
  BertConfig config;
  std::shared_ptr<const SentenceTokenizer> tokenizer;
  std::map<std::string, Tensor> weights;
  // `path`: a sentence-transformers / HF folder (see BertConfig::from_dir), or
  // a BERT / nomic-bert GGUF file (see bert.h).
  static ModelFiles load(const std::string& path);
};

// What `rlx embed` and `rlx serve` use: texts in, one vector per text out.
// SentenceEmbedder (BERT-family encoders) and llm::LlmEmbedder (decoder LLM
// GGUF files with last-token or mean pooling) implement it; open_text_embedder
// picks one for a path.
class TextEmbedder {
 public:
  virtual ~TextEmbedder() = default;
  // [texts.size(), dim()] f32, row i for texts[i].
  virtual Tensor embed(const std::vector<std::string>& texts) = 0;
  virtual int64_t dim() const = 0;
  virtual int64_t max_length() const = 0;  // tokens a text is truncated to
  virtual DType dtype() const = 0;
  virtual DeviceInfo device() const = 0;
  virtual const EmbedStats& last_stats() const = 0;
  // Tokens the model sees for `text` (after truncation).
  virtual int64_t count_tokens(const std::string& text) const = 0;
};

// A SentenceEmbedder for a model folder or a BERT-family GGUF file; an
// llm::LlmEmbedder for a decoder LLM GGUF file (see EmbedOptions::pooling).
std::unique_ptr<TextEmbedder> open_text_embedder(const std::string& model, EmbedOptions options);

class SentenceEmbedder final : public TextEmbedder {
 public:
  // `model` is a sentence-transformers / HF folder or a GGUF file (ModelFiles).
  SentenceEmbedder(const std::string& model, EmbedOptions options);
  // [texts.size(), dim()] f32, row i for texts[i].
  Tensor embed(const std::vector<std::string>& texts) override;
  int64_t dim() const override { return config_.output_dim(); }
  int64_t max_length() const override { return max_length_; }
  DType dtype() const override { return options_.dtype; }
  DeviceInfo device() const override { return session_->device(); }
  const EmbedStats& last_stats() const override { return stats_; }
  int64_t count_tokens(const std::string& text) const override {
    return static_cast<int64_t>(tokenizer_->encode(text, max_length_).input_ids.size());
  }
  const SentenceTokenizer& tokenizer() const { return *tokenizer_; }
  const BertConfig& config() const { return config_; }

 private:
  SentenceEmbedder(ModelFiles files, EmbedOptions options);
  EmbedOptions options_;
  BertConfig config_;
  std::shared_ptr<const SentenceTokenizer> tokenizer_;
  int64_t max_length_ = 512;
  int64_t length_step_ = 8;  // batch lengths are multiples of this
  int64_t batch_tokens_ = 0;  // > 0: a batch of length L takes up to batch_tokens_ / L texts (RLX_EMBED_BATCH_TOKENS)
  // extra_inputs() of the last batch length (MPNet's and ModernBERT's are L × L):
  // batches come longest first, so consecutive ones mostly share it.
  std::vector<Tensor> extra_;
  int64_t extra_length_ = -1;
  std::unique_ptr<Session> session_;
  std::shared_ptr<Executable> exe_;
  EmbedStats stats_;
};

// Length bucket for a batch whose longest text has `n` tokens: rounded up to a
// multiple of 8 (capped at `max`), so few shapes are ever compiled.
int64_t length_bucket(int64_t n, int64_t max);

}  // namespace rlx::bert
