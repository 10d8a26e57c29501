// SentencePiece Unigram tokenizer from a Hugging Face tokenizer.json, matching
// the `tokenizers` library: what XLM-RoBERTa and the multilingual
// sentence-transformers models (paraphrase-multilingual-*, multilingual-e5-*,
// bge-m3) ship.
//
// Per text:
//   1. Added tokens (<s>, </s>, <pad>, <unk>, <mask>, …) are matched in the raw
//      text first (leftmost-longest) and pass through unchanged.
//   2. The normalizer: a Sequence of Precompiled (SentencePiece's compiled
//      character map: a double-array trie of byte sequences, longest match
//      replaced by its normalized string), Replace (string or regex " {2,}"),
//      Strip, NFKC, Lowercase — the ones the converters write for these models.
//   3. The pre-tokenizer: Metaspace (spaces become U+2581 "▁", a ▁ prepended
//      per prepend_scheme / add_prefix_space, split before each ▁ when split is
//      true), optionally after WhitespaceSplit in a Sequence.
//   4. Unigram: the best-scoring segmentation of each word (Viterbi over the
//      pieces' log probabilities, as the library's optimized path), a character
//      no piece covers scored as unk (min score − 10), consecutive unks fused.
//   5. Truncate to max_length − 2 pieces and wrap in the post-processor's
//      cls/sep (TemplateProcessing "<s> $A </s>" or RobertaProcessing).
//
// Anything else in the file (another normalizer or pre-tokenizer, byte
// fallback) is Unsupported naming the field. Thread safety: immutable once
// loaded; encode() may be called from many threads at once.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "rlx/models/tokenizers/sentence_tokenizer.h"

namespace rlx {

class UnigramTokenizer final : public SentenceTokenizer {
 public:
  // Throws FormatError naming the file and field for malformed input,
  // Unsupported for a pipeline step this loader does not implement. A
  // tokenizer_config.json next to the file supplies model_max_length.
  static UnigramTokenizer from_tokenizer_json(const std::string& path);
  static UnigramTokenizer from_tokenizer_json(const nlohmann::json& j, const std::string& path);

  Encoding encode(std::string_view text, int64_t max_length = 0) const override;
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, int64_t max_length = 0,
                                     int num_threads = 0) const override;
  int32_t pad_id() const override;
  int64_t default_max_length() const override;
  void set_default_max_length(int64_t n) override;

  int32_t unk_id() const;
  int32_t cls_id() const;
  int32_t sep_id() const;
  size_t vocab_size() const;

 private:
  struct Impl;  // unigram.cpp
  explicit UnigramTokenizer(std::shared_ptr<const Impl> impl, int64_t max_length);
  // Ids allowed before the sep token (cls included) for a caller's max_length.
  size_t cap_for(int64_t max_length) const;
  std::shared_ptr<const Impl> impl_;  // immutable, shared by copies
  int64_t max_length_ = 512;
};

}  // namespace rlx
