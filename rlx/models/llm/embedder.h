// Sentence embeddings from a decoder LLM GGUF file (Qwen3-Embedding, and any
// architecture rlx generates with): each text runs as one causal sequence
// and its embedding is the final-normed hidden state of its last token
// ("last"), the mean over its tokens ("mean") or its first token ("cls"),
// L2-normalized, as llama.cpp's embedding mode computes them. The pooling
// comes from the file's <arch>.pooling_type unless the options name one.
//
// Texts are tokenized as llama.cpp does for embeddings: BOS when the file's
// tokenizer adds it, EOS appended when tokenizer.ggml.add_eos_token says so,
// truncated to max_length tokens. Lengths are padded up to multiples of 32
// with the pad (else EOS) token: attention is causal, so positions before the
// padding are exact, and few sequence lengths are ever compiled.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "rlx/formats/gguf.h"
#include "rlx/models/bert/embedder.h"
#include "rlx/models/llm/config.h"
#include "rlx/models/tokenizers/llm_tokenizer.h"

namespace rlx::llm {

enum class Pooling { Mean = 1, Cls = 2, Last = 3 };  // llama.cpp's pooling_type values

// A GGUF file whose architecture rlx builds as a decoder LLM.
bool is_decoder_gguf(const std::string& path);

class LlmEmbedder final : public bert::TextEmbedder {
 public:
  // options: device, dtype (Count_: f16 on a GPU, f32 on the CPU), max_length
  // (0: the model's context, at most 2048), pooling.
  LlmEmbedder(const std::string& path, bert::EmbedOptions options);

  Tensor embed(const std::vector<std::string>& texts) override;
  // The same from token ids (each already as the model should see it).
  Tensor embed_ids(const std::vector<std::vector<int32_t>>& ids);

  int64_t dim() const override { return config_.hidden; }
  int64_t max_length() const override { return max_length_; }
  DType dtype() const override { return options_.dtype; }
  DeviceInfo device() const override { return session_->device(); }
  const bert::EmbedStats& last_stats() const override { return stats_; }
  int64_t count_tokens(const std::string& text) const override {
    return static_cast<int64_t>(tokenize(text).size());
  }
  Pooling pooling() const { return pooling_; }

 private:
  std::vector<int32_t> tokenize(const std::string& text) const;

  bert::EmbedOptions options_;
  GgufFile file_;
  LlmConfig config_;
  std::unique_ptr<LlmTokenizer> tokenizer_;
  bool add_eos_ = false;
  int32_t pad_ = 0;
  Pooling pooling_ = Pooling::Last;
  int64_t max_length_ = 0;
  std::unique_ptr<Session> session_;
  std::shared_ptr<Executable> exe_;
  bert::EmbedStats stats_;
};

}  // namespace rlx::llm
