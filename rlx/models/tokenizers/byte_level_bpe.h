// Byte-level BPE building blocks shared by the GGUF LLM tokenizer
// (bpe_tokenizer.cpp) and the tokenizer.json sentence tokenizer
// (byte_level_bpe_tokenizer.cpp): GPT-2's byte → character map, the
// pre-tokenizer regexes matched by hand, merging by rank and a word cache
// (internal header).
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rlx::byte_level {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other
// 68 bytes to U+0100 onwards in byte order.
std::array<char32_t, 256> byte_to_unicode();

// The pre-tokenizer regexes (Hugging Face's), matched by hand: the first
// alternative that matches at each position, as a backtracking regex would.
//   Gpt2:       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//               (also tokenizers' ByteLevel pre-tokenizer with use_regex)
//   Llama3:     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//               ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2:      as Llama3 with \p{N} for \p{N}{1,3}
//   DigitsGpt2: Gpt2's, applied by the caller between single \p{N} pieces
//   Gpt4o:      [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}|
//               ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//               with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}],
//               C = (?i:'s|'t|'re|'ve|'m|'ll|'d) (o200k: GPT-4o, Phi-4-mini, Llama 4)
//   Tekken:     as Gpt4o without C and with \p{N} for \p{N}{1,3} (Mistral's Tekken)
// \p{L} and \p{N} are Unicode letters and numbers (utf8proc), \s is White_Space.
enum class Split { Gpt2, Llama3, Qwen2, DigitsGpt2, Gpt4o, Tekken };

enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };  // kSpace: utf8::is_white_space

// A text as code points with their classes; an invalid byte is one kOther "code point".
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<CharClass> cls;
  std::vector<size_t> offset;  // byte offset of each code point, plus the end

  CodePoints() = default;
  explicit CodePoints(std::string_view text) { assign(text); }
  void assign(std::string_view text);  // reuses the vectors' storage
  size_t size() const { return cp.size(); }
};

// Length in code points of the pre-tokenizer's match at `i` (always ≥ 1) in the
// piece of text that ends at code point n.
size_t match_at(const CodePoints& t, size_t i, size_t n, Split split);

// Buffers for MergeRules::apply, reusable across words.
struct MergeScratch {
  struct Symbol {
    int32_t id;  // merged away when `gone`
    int32_t prev, next;
    bool gone;
  };
  struct Pair {
    int32_t rank, left, right, left_id, right_id, merged;
  };
  std::vector<Symbol> symbols;
  std::vector<Pair> heap;
};

// The merges of a vocabulary: (left id, right id) → rank and merged id.
class MergeRules {
 public:
  void reserve(size_t n) { rules_.reserve(n); }
  // Sets the rule left + right → merged at `rank` (lower merges first). When
  // the pair already has a rule, `replace` picks the later one (Hugging Face
  // builds a map from the list) over the first (llama.cpp).
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged, bool replace);
  // Merges adjacent ids in place, lowest rank first (ties: leftmost), until no
  // rule applies, in O(m log m) through a min-heap. An id < 0 never merges.
  void apply(std::vector<int32_t>& ids, MergeScratch& scratch) const;

 private:
  struct Rule {
    int32_t rank, merged;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::unordered_map<uint64_t, Rule> rules_;
};

// Word → ids results, shared by all threads. Words are spread over shards with
// a lock each, so threads seldom meet; and no call ever waits: while another
// thread holds a shard, a lookup there misses and an insert is dropped, so the
// word is merged again (the `tokenizers` library's cache does the same).
class WordCache {
 public:
  // Appends the cached ids of `word` to `ids`; false when not cached.
  bool find(std::string_view word, std::vector<int32_t>& ids) const;
  void insert(std::string_view word, const int32_t* ids, size_t n) const;

 private:
  static constexpr size_t kShards = 64;
  static constexpr size_t kMaxEntriesPerShard = 1024;  // then the shard starts over
  static constexpr size_t kMaxWordBytes = 256;         // longer words are rare; keep memory bounded
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct alignas(64) Shard {  // a cache line each, so that threads on different shards do not contend
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  Shard& shard(std::string_view word) const { return shards_[Hash{}(word) % kShards]; }
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace rlx::byte_level
