// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama": Gemma, Llama 2),
// llama.cpp's llm_tokenizer_spm.
//
// Per piece of text between special tokens:
//   1. ' ' → U+2581 ("▁"), with one "▁" in front when add_space_prefix is set and
//      the piece starts the text or follows a special token.
//   2. Split into UTF-8 characters (an invalid byte is a symbol of its own).
//   3. Every adjacent pair whose concatenation is a token enters a max-heap keyed
//      by that token's score (ties: leftmost). Popping the best pair merges it
//      (skipped if either side changed since it was queued) and queues the new
//      pairs with its neighbours: O(n log n) for n characters.
//   4. Each final symbol is its token, or, if it is not one, one <0xXX> token per
//      byte (the unknown token when the vocabulary lacks byte tokens).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>

#include "rlx/core/error.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/tokenizers/llm_tokenizer.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public LlmTokenizer {
 public:
  explicit SpmTokenizer(const GgufFile& f) {
    load_common(f, "llama");
    const size_t n = tokens_.size();
    RLX_FORMAT_CHECK(f.contains("tokenizer.ggml.scores"), source_,
                     ": tokenizer.ggml.scores is missing (required by the 'llama' tokenizer)");
    scores_ = f.get_array<float>("tokenizer.ggml.scores");
    RLX_FORMAT_CHECK(scores_.size() == n, source_, ": tokenizer.ggml.scores has ", scores_.size(),
                     " entries but tokenizer.ggml.tokens has ", n);
    for (size_t i = 0; i < n; ++i)
      RLX_FORMAT_CHECK(std::isfinite(scores_[i]), source_, ": tokenizer.ggml.scores[", i, "] is not finite");
    add_space_prefix_ = f.get_or<bool>("tokenizer.ggml.add_space_prefix", true);
    strip_leading_space_ = add_space_prefix_;

    for (size_t i = 0; i < n; ++i) {
      if (types_[i] != TokenType::Normal) continue;
      std::string& piece = pieces_[i];
      const std::string& text = tokens_[i];
      for (size_t pos = 0; pos < text.size();) {
        if (text.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
          piece.push_back(' ');
          pos += kSpaceMark.size();
        } else {
          piece.push_back(text[pos++]);
        }
      }
    }
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_tokens_[b] = token_to_id(name).value_or(unk_);
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> ids;
    if (add_bos && bos_ >= 0) ids.push_back(bos_);
    bool after_special = true;
    std::string escaped;
    partition(
        text,
        [&](std::string_view raw) {
          escaped.clear();
          if (add_space_prefix_ && after_special) escaped += kSpaceMark;
          for (char c : raw) {
            if (c == ' ')
              escaped += kSpaceMark;
            else
              escaped.push_back(c);
          }
          tokenize(escaped, ids);
          after_special = false;
        },
        [&](int32_t id) {
          ids.push_back(id);
          after_special = true;
        });
    return ids;
  }

 private:
  struct Symbol {
    size_t start, len;  // bytes in the escaped text; len = 0 once merged away
    int32_t prev, next;
  };
  struct Pair {
    float score;
    int32_t left, right;
    size_t len;  // left.len + right.len when queued; stale if either changed
    bool operator<(const Pair& o) const { return score < o.score || (score == o.score && left > o.left); }
  };

  void tokenize(std::string_view text, std::vector<int32_t>& ids) const {
    std::vector<Symbol> symbols;
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = std::max<size_t>(1, utf8::valid_length(text.substr(pos)));
      const auto index = static_cast<int32_t>(symbols.size());
      symbols.push_back({pos, len, index - 1, pos + len < text.size() ? index + 1 : -1});
      pos += len;
    }
    std::priority_queue<Pair> queue;
    auto try_pair = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const size_t len = symbols[left].len + symbols[right].len;
      if (auto id = token_to_id(text.substr(symbols[left].start, len))) queue.push({scores_[*id], left, right, len});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_pair(i - 1, i);
    while (!queue.empty()) {
      const Pair p = queue.top();
      queue.pop();
      Symbol& left = symbols[p.left];
      Symbol& right = symbols[p.right];
      if (left.len == 0 || right.len == 0 || left.len + right.len != p.len) continue;
      left.len += right.len;
      right.len = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = p.left;
      try_pair(left.prev, p.left);
      try_pair(p.left, left.next);
    }
    for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
      const std::string_view piece = text.substr(symbols[i].start, symbols[i].len);
      if (auto id = token_to_id(piece)) {
        ids.push_back(*id);
        continue;
      }
      for (unsigned char c : piece) {
        RLX_CHECK(byte_tokens_[c] >= 0, source_, ": cannot encode byte 0x", std::hex, static_cast<int>(c),
                  ": the vocabulary has neither <0x", static_cast<int>(c), "> nor an unknown token");
        ids.push_back(byte_tokens_[c]);
      }
    }
  }

  std::vector<float> scores_;
  bool add_space_prefix_ = true;
  int32_t byte_tokens_[256];
};

}  // namespace

std::unique_ptr<LlmTokenizer> make_spm_tokenizer(const GgufFile& f) { return std::make_unique<SpmTokenizer>(f); }

}  // namespace rlx
