// The tokenizers library's AddedVocabulary split, shared by the tokenizer.json
// loaders (Unigram, byte-level BPE): added tokens are found in the text before
// the model sees it (internal header).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlx::detail {

// A stretch of text: an added token's match (id ≥ 0) or text for the model (id −1).
struct TextPiece {
  size_t begin, end;
  int32_t id;
};

// Leftmost-longest matches over a handful of tokens; lstrip/rstrip widen a
// match over the whitespace before/after it (never into an earlier match).
class AddedTokenMatcher {
 public:
  struct Token {
    std::string content;  // non-empty
    int32_t id;
    bool lstrip, rstrip;
  };
  void add(Token t);
  bool empty() const { return tokens_.empty(); }
  // `text` as pieces, in order; `out` is cleared first.
  void split(std::string_view text, std::vector<TextPiece>& out) const;

 private:
  const Token* longest_at(std::string_view text, size_t i) const;
  std::vector<Token> tokens_;
  std::array<bool, 256> starts_{};  // first bytes of the tokens
};

}  // namespace rlx::detail
