// Byte-level BPE tokenizer from a Hugging Face tokenizer.json (model type
// "BPE"), matching the `tokenizers` library: what RoBERTa and the
// sentence-transformers models built on it (all-distilroberta-v1,
// all-roberta-large-v1) and ModernBERT ship.
//
// Per text:
//   1. Added tokens (<s>, </s>, <pad>, <unk>, <mask>, …) are matched in the raw
//      text first (leftmost-longest; lstrip/rstrip take the whitespace beside
//      them) and pass through unchanged. The rest is put in NFC when the
//      normalizer says so, and the added tokens marked normalized are matched
//      in that.
//   2. The ByteLevel pre-tokenizer: a space is prepended to each remaining piece
//      that lacks one when add_prefix_space is true, then GPT-2's regex splits it
//      into words (byte_level_bpe.h).
//   3. BPE: each word's bytes are base tokens (GPT-2's byte → character map),
//      adjacent pairs merged lowest rank first; with ignore_merges a word that is
//      itself a token is taken whole.
//   4. Truncate to max_length − 2 pieces and wrap in the post-processor's
//      cls/sep (RobertaProcessing or TemplateProcessing "<s> $A </s>").
//
// No normalizer but NFC is supported, nor any other pre-tokenizer, byte fallback,
// dropout, subword prefixes/suffixes or ByteLevel without its regex: each is
// Unsupported naming the field. Thread safety: immutable once loaded (but for
// an internal word cache); encode() may be called from many threads at once.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "rlx/models/tokenizers/sentence_tokenizer.h"

namespace rlx {

class ByteLevelBpeTokenizer final : public SentenceTokenizer {
 public:
  // Throws FormatError naming the file and field for malformed input,
  // Unsupported for a pipeline step this loader does not implement. A
  // tokenizer_config.json next to the file supplies model_max_length.
  static ByteLevelBpeTokenizer from_tokenizer_json(const std::string& path);
  static ByteLevelBpeTokenizer from_tokenizer_json(const nlohmann::json& j, const std::string& path);

  Encoding encode(std::string_view text, int64_t max_length = 0) const override;
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, int64_t max_length = 0,
                                     int num_threads = 0) const override;
  int32_t pad_id() const override;
  int64_t default_max_length() const override;
  void set_default_max_length(int64_t n) override;

  int32_t unk_id() const;  // the model's unk_token, or -1 when it has none (RoBERTa's has none)
  int32_t cls_id() const;
  int32_t sep_id() const;
  size_t vocab_size() const;  // entries in model.vocab

 private:
  struct Impl;  // byte_level_bpe_tokenizer.cpp
  explicit ByteLevelBpeTokenizer(std::shared_ptr<const Impl> impl, int64_t max_length);
  // Ids allowed before the sep token (cls included) for a caller's max_length.
  size_t cap_for(int64_t max_length) const;
  std::shared_ptr<const Impl> impl_;  // immutable, shared by copies
  int64_t max_length_ = 512;
};

}  // namespace rlx
