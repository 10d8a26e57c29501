// WordPiece tokenizer for BERT-family models, matching Hugging Face's
// `tokenizers` (BertNormalizer + BertPreTokenizer + WordPiece + the
// "[CLS] A [SEP]" template), which is what transformers' BertTokenizer(Fast)
// and sentence-transformers run.
//
// Per text:
//   1. Added tokens ("[CLS]", "[MASK]", …) are matched in the raw text first
//      (leftmost-longest) and pass through unchanged.
//   2. BertNormalizer, in HF's order: clean text (drop U+0000, U+FFFD and
//      Cc/Cf/Co control characters except \t \n \r; map whitespace to ' '),
//      put spaces around CJK ideographs, strip accents (NFD, drop Mn), lowercase.
//   3. BertPreTokenizer: split on whitespace; isolate punctuation (ASCII
//      33–47, 58–64, 91–96, 123–126 and Unicode P*).
//   4. WordPiece: greedy longest-match-first with the "##" continuation
//      prefix; a word longer than max_input_chars_per_word, or one that cannot
//      be covered by vocabulary pieces, becomes [UNK].
//   5. Truncate to max_length − 2 tokens and wrap in [CLS] … [SEP].
//
// The character classes (control, whitespace, CJK, Mn, punctuation) are HF's
// own, measured by gen_wordpiece_tables.py: HF's category tables date from
// Unicode 8.0, and utf8proc's current ones differ for ~570 code points. NFD,
// combining classes and lowercasing come from utf8proc. Against tokenizers
// 0.23.3 the ids match for every code point alone and in context, under each
// normalizer setting. Known gap: added tokens' lstrip/rstrip/single_word flags
// are ignored (BERT's special tokens never set them).
//
// Differences from transformers' pure-Python BertTokenizerLegacy, which rlx
// does not follow: it lowercases before stripping accents with Python's
// context-sensitive str.lower (final sigma "ς"), and splits CJK Extension E
// from U+2B820 where HF tokenizers starts at U+2B920.
//
// Thread safety: a loaded tokenizer is immutable; encode() may be called from
// many threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "rlx/models/tokenizers/sentence_tokenizer.h"

namespace rlx {

struct WordPieceConfig {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool lowercase = true;
  std::optional<bool> strip_accents;  // unset: follows `lowercase`, as in HF
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string continuing_subword_prefix = "##";
  int64_t max_input_chars_per_word = 100;
  int64_t model_max_length = 512;  // default truncation length (tokens, [CLS] and [SEP] included)
};

class WordPieceTokenizer final : public SentenceTokenizer {
 public:
  // A token matched verbatim before normalization (normalized = false) or in
  // the normalized text (normalized = true), as HF's added_tokens.
  struct AddedToken {
    std::string content;
    int32_t id;
    bool normalized;
  };

  // From tokenizer.json: model.vocab, the normalizer settings, added_tokens and
  // the post-processor's [CLS]/[SEP]. A tokenizer_config.json next to it
  // supplies model_max_length, as transformers does. Throws FormatError naming
  // the file and field; Unsupported for a non-WordPiece/non-BERT pipeline.
  static WordPieceTokenizer from_tokenizer_json(const std::string& path);
  // The same from the file's parsed JSON (`path` names it in messages).
  static WordPieceTokenizer from_tokenizer_json(const nlohmann::json& j, const std::string& path);
  // From vocab.txt (one token per line, id = line number). A
  // tokenizer_config.json next to it supplies do_lower_case, strip_accents,
  // tokenize_chinese_chars, the special token strings and model_max_length.
  static WordPieceTokenizer from_vocab_txt(const std::string& path);
  // From a model folder: tokenizer.json if present, else vocab.txt. A
  // sentence-transformers max_seq_length (sentence_bert_config.json) becomes
  // the default max_length, since that is what sentence-transformers truncates
  // to. Its do_lower_case pre-pass (Python str.lower on the text) is not
  // applied; a warning says so when a model sets it.
  static WordPieceTokenizer from_dir(const std::string& dir);
  // From parts (tests, converted GGUF vocabularies): (token, id) pairs, a later
  // duplicate token replacing an earlier one as in HF. [UNK], [CLS], [SEP] and
  // [PAD] (as named in `config`) are looked up in the vocabulary, then in
  // `added_tokens`. `source` starts error messages.
  WordPieceTokenizer(std::vector<std::pair<std::string, int32_t>> vocab, WordPieceConfig config,
                     std::vector<AddedToken> added_tokens, const std::string& source);

  // SentenceTokenizer: [CLS] pieces… [SEP].
  Encoding encode(std::string_view text, int64_t max_length = 0) const override;
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, int64_t max_length = 0,
                                     int num_threads = 0) const override;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  int32_t unk_id() const { return unk_id_; }
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t pad_id() const override { return pad_id_; }
  size_t vocab_size() const { return vocab_.size(); }
  int64_t default_max_length() const override { return config_.model_max_length; }
  void set_default_max_length(int64_t n) override;
  const WordPieceConfig& config() const { return config_; }

 private:
  struct Scratch;  // per-call buffers (defined in wordpiece.cpp)
  // Leftmost-longest matcher over a handful of added tokens.
  struct Matcher {
    std::vector<std::pair<std::string, int32_t>> tokens;
    bool first_byte[256] = {};
    void add(std::string content, int32_t id);
    // First match at or after `pos`: (start, length, id); start = npos if none.
    void find(std::string_view text, size_t pos, size_t& start, size_t& len, int32_t& id) const;
  };

  void encode_into(std::string_view text, size_t cap, Scratch& s, std::vector<int32_t>& ids) const;
  void normalize(std::string_view text, Scratch& s) const;
  void flush_run(Scratch& s) const;
  void split_normalized(std::string_view norm, size_t cap, std::vector<int32_t>& ids) const;
  void pre_tokenize(std::string_view text, size_t cap, std::vector<int32_t>& ids) const;
  void word_piece(std::string_view word, size_t nchars, std::vector<int32_t>& ids) const;
  Encoding encode_one(std::string_view text, size_t cap, Scratch& s) const;
  // Ids allowed before [SEP] ([CLS] included) for a caller's max_length.
  size_t cap_for(int64_t max_length) const;

  WordPieceConfig config_;
  bool strip_accents_ = true;
  // All token bytes live in one immutable block shared by copies, so the
  // string_view keys below stay valid when the tokenizer is copied or moved.
  std::shared_ptr<const std::string> pool_;
  std::unordered_map<std::string_view, int32_t> vocab_;         // every token
  std::unordered_map<std::string_view, int32_t> continuation_;  // "##x" tokens, keyed by "x"
  size_t max_piece_bytes_ = 0;                                  // longest key in vocab_
  size_t max_cont_bytes_ = 0;                                   // longest key in continuation_
  Matcher raw_added_;
  Matcher normalized_added_;
  int32_t unk_id_ = 0, cls_id_ = 0, sep_id_ = 0, pad_id_ = 0;
};

}  // namespace rlx
