// Tokenizers for GGUF LLMs, read from the tokenizer.ggml.* metadata and
// matching llama.cpp's behaviour (its prompt path, with parse_special on).
//
// Metadata read (llama.cpp's converter writes it):
//   tokenizer.ggml.model        "llama" (SentencePiece) or "gpt2" (byte-level BPE)
//   tokenizer.ggml.tokens       string[n]; the id is the index
//   tokenizer.ggml.token_type   i32[n], optional (default 1): 1 normal, 2 unknown,
//                               3 control, 4 user-defined, 5 unused, 6 byte (<0xXX>)
//   tokenizer.ggml.scores       f32[n], required for "llama": merge priority
//   tokenizer.ggml.merges       string[], required for "gpt2": "left right", rank = index
//   tokenizer.ggml.pre          "gpt2" pre-tokenizer split (see bpe_tokenizer.cpp)
//   tokenizer.ggml.{bos,eos,eot,eom,unknown}_token_id, add_bos_token, add_space_prefix
//
// Encoding, both types: control, unknown and user-defined tokens that appear
// literally in the text are matched first (longest token first, as llama.cpp's
// tokenizer_st_partition), and the text between them is tokenized by the model.
//   - "llama": spaces become U+2581 (plus one leading U+2581 at the start and
//     after each special token when add_space_prefix is true); the text is split
//     into UTF-8 characters and the adjacent pair whose concatenation is a token
//     with the best score is merged repeatedly (ties: leftmost); a leftover
//     piece that is not a token becomes <0xXX> byte tokens.
//   - "gpt2": the pre-tokenizer regex splits the text into words; each word's
//     bytes are mapped to GPT-2's printable characters and merged by rank.
//
// Decoding omits control, unknown and unused tokens; byte tokens give their byte,
// user-defined tokens their text as-is. Known differences from llama.cpp: input
// that is not valid UTF-8 is split one invalid byte at a time (llama.cpp reads a
// lead byte's length blindly), and the "default" pre-tokenizer is GPT-2's regex.
//
// Thread safety: a loaded tokenizer may be used from many threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rlx {

class GgufFile;

class LlmTokenizer {
 public:
  // Token types as stored in tokenizer.ggml.token_type.
  enum class TokenType : uint8_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

  // Reads tokenizer.ggml.* metadata; throws FormatError naming the key (or the
  // token index) for malformed metadata and Unsupported naming an unknown model
  // or pre-tokenizer type.
  static std::unique_ptr<LlmTokenizer> from_gguf(const GgufFile& f);
  virtual ~LlmTokenizer() = default;
  LlmTokenizer(const LlmTokenizer&) = delete;
  LlmTokenizer& operator=(const LlmTokenizer&) = delete;

  // Text → ids; add_bos prepends BOS when the vocabulary has one (callers pass
  // add_bos_default()). Any bytes are accepted.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // ids → text (control/unknown/unused tokens omitted); bytes that do not form
  // complete UTF-8 are kept as-is. An id outside the vocabulary is InvalidArgument.
  virtual std::string decode(const std::vector<int32_t>& ids) const;
  // The raw bytes one token stands for (byte tokens give their byte; control,
  // unknown and unused tokens ""). An id outside the vocabulary is InvalidArgument.
  virtual std::string token_bytes(int32_t id) const;

  int32_t bos() const { return bos_; }  // -1 when absent
  int32_t eos() const { return eos_; }  // -1 when absent
  bool add_bos_default() const { return add_bos_; }
  // eos, eot, eom and the end-of-turn tokens llama.cpp recognizes by text
  // (<end_of_turn>, <|im_end|>, <|eot_id|>, <|endoftext|>, …).
  bool is_end_of_generation(int32_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& model_type() const { return model_type_; }

  // The vocabulary entry as stored (e.g. "▁the", "<0x0A>", "Ġthe").
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view text) const;

 protected:
  LlmTokenizer() = default;
  // Fills the members below from the metadata both model types share.
  void load_common(const GgufFile& f, std::string model_type);
  // Splits `text` at literal special tokens: calls raw(piece) for text between
  // them and special(id) for each match, in order.
  template <typename Raw, typename Special>
  void partition(std::string_view text, Raw&& raw, Special&& special) const;
  // Finds the special-token matches in `text` as llama.cpp does: longest token
  // first, each claiming the leftmost occurrences that do not overlap a claimed one.
  struct SpecialMatch {
    size_t start, len;
    int32_t id;
  };
  std::vector<SpecialMatch> find_special(std::string_view text) const;
  void check_id(int32_t id) const;

  std::string model_type_;
  std::string source_;  // starts error messages
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<std::string> pieces_;  // token_bytes() of every token
  std::unordered_map<std::string_view, int32_t> token_ids_;  // keys point into tokens_
  std::vector<bool> end_of_generation_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false;
  bool strip_leading_space_ = false;  // decode drops the space add_space_prefix put in front

  // A byte trie over the special tokens' texts, for find_special().
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;
  };
  std::vector<TrieNode> special_trie_;
  bool special_first_byte_[256] = {};

  friend class TokenStreamDecoder;
};

template <typename Raw, typename Special>
void LlmTokenizer::partition(std::string_view text, Raw&& raw, Special&& special) const {
  size_t pos = 0;
  for (const SpecialMatch& m : find_special(text)) {
    if (m.start > pos) raw(text.substr(pos, m.start - pos));
    special(m.id);
    pos = m.start + m.len;
  }
  if (pos < text.size()) raw(text.substr(pos));
}

// Streams detokenized text: push() returns only complete UTF-8, holding an
// incomplete trailing sequence back; bytes that can never become valid UTF-8
// come out as U+FFFD at once. finish() flushes what is held (as U+FFFD).
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const LlmTokenizer& t) : tok_(t) {}
  std::string push(int32_t id);
  std::string finish();

 private:
  const LlmTokenizer& tok_;
  std::string pending_;  // an incomplete UTF-8 sequence (at most 3 bytes)
  bool at_start_ = true;
};

}  // namespace rlx
