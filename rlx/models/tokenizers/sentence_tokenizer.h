// What the sentence embedder asks of a tokenizer: a text (or a batch, in input
// order) to "cls pieces… sep" ids truncated to a length, its pad id and its
// default length. WordPieceTokenizer (BERT, MPNet), UnigramTokenizer
// (SentencePiece models as tokenizer.json: XLM-RoBERTa and the multilingual
// sentence-transformers models) and ByteLevelBpeTokenizer (RoBERTa) implement it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rlx {

struct Encoding {
  std::vector<int32_t> input_ids;       // cls pieces… sep
  std::vector<int32_t> attention_mask;  // all 1: encodings are not padded
  std::vector<int32_t> token_type_ids;  // all 0: a single sequence
};

class SentenceTokenizer {
 public:
  virtual ~SentenceTokenizer() = default;
  // Encodes one text. max_length ≤ 0 means default_max_length(); otherwise it
  // must be ≥ 2. Throws InvalidArgument when `text` is not valid UTF-8, naming
  // the byte offset of the first invalid sequence.
  virtual Encoding encode(std::string_view text, int64_t max_length = 0) const = 0;
  // Encodes `texts` on up to `num_threads` threads (≤ 0: hardware
  // concurrency); results are in input order. An invalid text throws
  // InvalidArgument naming its index (the lowest one, if several).
  virtual std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, int64_t max_length = 0,
                                             int num_threads = 0) const = 0;
  virtual int32_t pad_id() const = 0;
  // Tokens per text, cls and sep included, when a call passes no max_length.
  virtual int64_t default_max_length() const = 0;
  virtual void set_default_max_length(int64_t n) = 0;
};

// The tokenizer of a Hugging Face model folder: tokenizer.json's model type
// picks WordPiece, Unigram or BPE; a folder with only vocab.txt is WordPiece. A
// sentence-transformers max_seq_length (sentence_bert_config.json) becomes the
// default length, as sentence-transformers truncates to it.
std::shared_ptr<SentenceTokenizer> load_sentence_tokenizer(const std::string& dir);
// The sentence_bert_config.json part of that: max_seq_length as the default
// length, and a warning when its do_lower_case asks for a pass rlx skips.
void apply_sentence_transformers_config(const std::string& dir, SentenceTokenizer& tok);

}  // namespace rlx
