// Byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2": Qwen2/Qwen3, Llama 3),
// llama.cpp's llm_tokenizer_bpe.
//
// Per piece of text between special tokens:
//   1. The pre-tokenizer (tokenizer.ggml.pre) splits it into words. The splits are
//      those of the models' Hugging Face regexes, matched here by hand (first
//      alternative that matches at each position, as a backtracking regex would):
//        gpt2, default:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//        llama-bpe:       (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                         ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//        qwen2:           as llama-bpe with \p{N} for \p{N}{1,3}
//        smollm:          every \p{N} a piece of its own first, then gpt2's within the
//                         pieces between them (also llama.cpp's starcoder, refact,
//                         command-r, codeshell, exaone and minerva)
//      \p{L} and \p{N} are Unicode letters and numbers (utf8proc), \s is White_Space.
//   2. Each word's bytes map to GPT-2's printable characters (bytes_to_unicode);
//      each character is a base token.
//   3. Adjacent symbol pairs are merged lowest rank first (the merge's index in
//      tokenizer.ggml.merges; ties: leftmost) through a min-heap: O(m log m) per
//      word. llama-bpe first takes a word that is itself a token whole
//      (Hugging Face's ignore_merges, which llama.cpp also applies).
//   Word → ids results are cached.
#include <utf8proc.h>

#include <array>
#include <mutex>
#include <queue>

#include "rlx/core/error.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/tokenizers/llm_tokenizer.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other
// 68 bytes to U+0100 onwards in byte order.
std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

enum class PreTokenizer { Gpt2, Llama3, Qwen2, DigitsGpt2 };

PreTokenizer pre_tokenizer_for(const GgufFile& f) {
  const std::string pre = f.get_or<std::string>("tokenizer.ggml.pre", "default");
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") return PreTokenizer::Gpt2;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return PreTokenizer::Llama3;
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreTokenizer::Qwen2;
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "codeshell" ||
      pre == "exaone" || pre == "minerva-7b")
    return PreTokenizer::DigitsGpt2;
  throw Unsupported(str(f.source(), ": tokenizer.ggml.pre '", pre,
                        "' is not supported (supported: default, gpt2, llama-bpe, llama3, qwen2, smollm, starcoder, "
                        "refact, command-r, codeshell, exaone, minerva-7b)"));
}

// ---- Pre-tokenizer ------------------------------------------------------------

enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

CharClass classify(char32_t c) {
  if (is_white_space(c)) return kSpace;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return kNumber;
    default:
      return kOther;
  }
}

const std::array<CharClass, 128> kAsciiClass = [] {
  std::array<CharClass, 128> t{};
  for (char32_t c = 0; c < 128; ++c) t[c] = classify(c);
  return t;
}();

// The text as code points with their classes; an invalid byte is one kOther "code point".
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<CharClass> cls;
  std::vector<size_t> offset;  // byte offset of each code point, plus the end

  explicit CodePoints(std::string_view text) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = utf8::valid_length(text.substr(pos));
      const char32_t c = len ? utf8::decode(p + pos, len) : 0xFFFD;
      cp.push_back(c);
      cls.push_back(!len ? kOther : c < 128 ? kAsciiClass[c] : classify(c));
      offset.push_back(pos);
      pos += len ? len : 1;
    }
    offset.push_back(text.size());
  }
  size_t size() const { return cp.size(); }
};

// Length in code points of the pre-tokenizer's match at `i` (always ≥ 1) in
// the piece of text that ends at code point n.
size_t match_at(const CodePoints& t, size_t i, size_t n, PreTokenizer pre) {
  auto is = [&](size_t k, CharClass c) { return k < n && t.cls[k] == c; };
  auto is_crlf = [&](size_t k) { return k < n && (t.cp[k] == '\r' || t.cp[k] == '\n'); };
  auto run_end = [&](size_t k, CharClass c) {
    while (is(k, c)) ++k;
    return k;
  };
  auto lower = [&](size_t k) -> char32_t {
    if (k >= n) return 0;
    const char32_t c = t.cp[k];
    return (pre == PreTokenizer::Llama3 || pre == PreTokenizer::Qwen2) && c >= 'A' && c <= 'Z' ? c + 32 : c;  // (?i:…)
  };

  // Contractions: 's 't 'm 'd 're 've 'll.
  if (t.cp[i] == '\'') {
    const char32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }

  if (pre == PreTokenizer::Gpt2 || pre == PreTokenizer::DigitsGpt2) {
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': one class, optionally after a space.
    const size_t start = t.cp[i] == ' ' && i + 1 < n && t.cls[i + 1] != kSpace ? i + 1 : i;
    if (t.cls[start] != kSpace) return run_end(start, t.cls[start]) - i;
  } else {
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (is(i, kLetter)) return run_end(i, kLetter) - i;
    if (!is_crlf(i) && (is(i, kSpace) || is(i, kOther)) && is(i + 1, kLetter)) return run_end(i + 1, kLetter) - i;
    // \p{N}{1,3} (llama-bpe) or \p{N} (qwen2)
    if (is(i, kNumber)) {
      const size_t max_digits = pre == PreTokenizer::Llama3 ? 3 : 1;
      size_t j = i;
      while (is(j, kNumber) && j - i < max_digits) ++j;
      return j - i;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    const size_t start = t.cp[i] == ' ' && is(i + 1, kOther) ? i + 1 : i;
    if (is(start, kOther)) {
      size_t j = run_end(start, kOther);
      while (is_crlf(j)) ++j;
      return j - i;
    }
    // \s*[\r\n]+ : the whitespace run up to its last CR/LF.
    const size_t end = run_end(i, kSpace);
    for (size_t k = end; k > i; --k)
      if (is_crlf(k - 1)) return k - i;
  }
  // \s+(?!\S) keeps the last space for the next word; then \s+.
  const size_t end = run_end(i, kSpace);
  if (end < n && end - i >= 2) return end - 1 - i;
  return end - i;
}

// ---- Tokenizer -----------------------------------------------------------------

class BpeTokenizer final : public LlmTokenizer {
 public:
  explicit BpeTokenizer(const GgufFile& f) : pre_(pre_tokenizer_for(f)) {
    load_common(f, "gpt2");
    ignore_merges_ = pre_ == PreTokenizer::Llama3;

    // Normal tokens decode through the inverse byte map; a character outside it
    // (not produced by byte-level BPE) is kept as its UTF-8.
    const std::array<char32_t, 256> to_unicode = byte_to_unicode();
    std::unordered_map<char32_t, uint8_t> to_byte;
    for (int b = 0; b < 256; ++b) {
      to_byte[to_unicode[b]] = static_cast<uint8_t>(b);
      std::string s;
      utf8::append(s, to_unicode[b]);
      byte_chars_[b] = s;
      byte_tokens_[b] = token_to_id(s).value_or(-1);
    }
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (types_[i] != TokenType::Normal) continue;
      const std::string_view text = tokens_[i];
      std::string& piece = pieces_[i];
      for (size_t pos = 0; pos < text.size();) {
        const size_t len = utf8::valid_length(text.substr(pos));
        auto it = len ? to_byte.find(utf8::decode(reinterpret_cast<const unsigned char*>(text.data()) + pos, len))
                      : to_byte.end();
        if (it != to_byte.end())
          piece.push_back(static_cast<char>(it->second));
        else
          piece.append(text.substr(pos, std::max<size_t>(len, 1)));
        pos += std::max<size_t>(len, 1);
      }
    }

    RLX_FORMAT_CHECK(f.contains("tokenizer.ggml.merges"), source_,
                     ": tokenizer.ggml.merges is missing (required by the 'gpt2' tokenizer)");
    const auto& merges = f.get_array<std::string>("tokenizer.ggml.merges");
    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string& m = merges[rank];
      const size_t space = m.find(' ', 1);
      RLX_FORMAT_CHECK(space != std::string::npos, source_, ": tokenizer.ggml.merges[", rank, "] '", m.substr(0, 64),
                       "' is not of the form 'left right'");
      const std::string left = m.substr(0, space), right = m.substr(space + 1);
      const auto left_id = token_to_id(left), right_id = token_to_id(right), merged_id = token_to_id(left + right);
      for (const auto& [part, id] : {std::pair{&left, left_id}, std::pair{&right, right_id}})
        RLX_FORMAT_CHECK(id.has_value(), source_, ": tokenizer.ggml.merges[", rank, "] '", m.substr(0, 64),
                         "' names '", part->substr(0, 64), "', which is not in tokenizer.ggml.tokens");
      RLX_FORMAT_CHECK(merged_id.has_value(), source_, ": tokenizer.ggml.merges[", rank, "] '", m.substr(0, 64),
                       "' makes '", (left + right).substr(0, 64), "', which is not in tokenizer.ggml.tokens");
      merges_.try_emplace(pair_key(*left_id, *right_id), Merge{static_cast<int32_t>(rank), *merged_id});
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> ids;
    if (add_bos && bos_ >= 0) ids.push_back(bos_);
    partition(
        text,
        [&](std::string_view raw) {
          const CodePoints cps(raw);
          for (size_t i = 0, end = 0; i < cps.size();) {
            // DigitsGpt2: a number code point alone, else gpt2's match up to the next one.
            if (i >= end) {
              end = cps.size();
              if (pre_ == PreTokenizer::DigitsGpt2) {
                end = i + 1;
                if (cps.cls[i] != kNumber)
                  while (end < cps.size() && cps.cls[end] != kNumber) ++end;
              }
            }
            const size_t len = match_at(cps, i, end, pre_);
            const std::string_view word = raw.substr(cps.offset[i], cps.offset[i + len] - cps.offset[i]);
            encode_word(word, ids);
            i += len;
          }
        },
        [&](int32_t id) { ids.push_back(id); });
    return ids;
  }

 private:
  struct Merge {
    int32_t rank, merged;
  };
  struct Symbol {
    int32_t id;  // -1: a byte the vocabulary lacks; merged away when `gone`
    int32_t prev, next;
    bool gone = false;
  };
  struct Pair {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator<(const Pair& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void encode_word(std::string_view word, std::vector<int32_t>& ids) const {
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (auto it = cache_.find(word); it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> out = merge_word(word);
    ids.insert(ids.end(), out.begin(), out.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheLimit) cache_.clear();
    cache_.emplace(std::string(word), std::move(out));
  }

  std::vector<int32_t> merge_word(std::string_view word) const {
    std::vector<int32_t> out;
    if (ignore_merges_) {
      std::string mapped;
      for (unsigned char b : word) mapped += byte_chars_[b];
      if (auto id = token_to_id(mapped)) return {*id};
    }
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    for (size_t k = 0; k < word.size(); ++k) {
      const auto index = static_cast<int32_t>(k);
      symbols.push_back({byte_tokens_[static_cast<unsigned char>(word[k])], index - 1,
                         k + 1 < word.size() ? index + 1 : -1});
    }
    std::priority_queue<Pair> queue;
    auto try_pair = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
      auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
      if (it != merges_.end())
        queue.push({it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.merged});
    };
    for (int32_t k = 1; k < static_cast<int32_t>(symbols.size()); ++k) try_pair(k - 1, k);
    while (!queue.empty()) {
      const Pair p = queue.top();
      queue.pop();
      Symbol& left = symbols[p.left];
      Symbol& right = symbols[p.right];
      // Stale: a side was merged into something else since this pair was queued.
      if (left.gone || right.gone || left.next != p.right || left.id != p.left_id || right.id != p.right_id) continue;
      left.id = p.merged;
      right.gone = true;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = p.left;
      try_pair(left.prev, p.left);
      try_pair(p.left, left.next);
    }
    for (int32_t k = symbols.empty() ? -1 : 0; k >= 0; k = symbols[k].next) {
      if (symbols[k].id >= 0)
        out.push_back(symbols[k].id);
      else if (unk_ >= 0)
        out.push_back(unk_);  // a byte the vocabulary lacks (llama.cpp drops it)
    }
    return out;
  }

  static constexpr size_t kCacheLimit = 1 << 16;

  PreTokenizer pre_;
  bool ignore_merges_ = false;
  std::string byte_chars_[256];     // byte → its GPT-2 character, as UTF-8
  int32_t byte_tokens_[256];        // byte → the token of that character, or -1
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) → rank and result
  mutable std::mutex cache_mutex_;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace

std::unique_ptr<LlmTokenizer> make_bpe_tokenizer(const GgufFile& f) { return std::make_unique<BpeTokenizer>(f); }

}  // namespace rlx
