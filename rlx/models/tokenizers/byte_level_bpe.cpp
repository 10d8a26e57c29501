#include "rlx/models/tokenizers/byte_level_bpe.h"

#include <utf8proc.h>

#include <algorithm>

#include "rlx/models/tokenizers/utf8.h"

namespace rlx::byte_level {

std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

// ---- Pre-tokenizer ------------------------------------------------------------

namespace {

CharClass classify(char32_t c) {
  if (utf8::is_white_space(c)) return kSpace;
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

// o200k's letter classes: U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}].
bool cased_upper(char32_t c) {
  if (c < 128) return c >= 'A' && c <= 'Z';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
      return true;
    default: return false;
  }
}
bool cased_lower(char32_t c) {
  if (c < 128) return c >= 'a' && c <= 'z';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
      return true;
    default: return false;
  }
}

// Gpt4o and Tekken: the first alternative of the header's regex that matches
// at i, with the backtracking a regex engine would do.
size_t match_cased(const CodePoints& t, size_t i, size_t n, bool gpt4o) {
  auto is = [&](size_t k, CharClass c) { return k < n && t.cls[k] == c; };
  auto is_crlf = [&](size_t k) { return k < n && (t.cp[k] == '\r' || t.cp[k] == '\n'); };
  auto upper = [&](size_t k) { return k < n && cased_upper(t.cp[k]); };
  auto lower = [&](size_t k) { return k < n && cased_lower(t.cp[k]); };
  auto run_end = [&](size_t k, CharClass c) {
    while (is(k, c)) ++k;
    return k;
  };
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)? after a word (Gpt4o only).
  auto contraction = [&](size_t k) -> size_t {
    if (!gpt4o || k >= n || t.cp[k] != '\'') return 0;
    auto low = [&](size_t j) -> char32_t { return j < n && t.cp[j] < 128 ? (t.cp[j] | 0x20) : 0; };
    const char32_t a = low(k + 1), b = low(k + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  };
  constexpr size_t kNone = static_cast<size_t>(-1);
  // U*W+ from s: U* greedy, then W+; when W+ cannot start where U* stopped,
  // U* gives back code points until one can (U and W share Lm, Lo and M).
  auto upper_then_lower = [&](size_t s) -> size_t {
    size_t a = s;
    while (upper(a)) ++a;
    if (lower(a)) {
      while (lower(a)) ++a;
      return a;
    }
    for (size_t k = a; k > s; --k)
      if (lower(k - 1)) return k;  // nothing after k - 1 (up to a) is in W
    return kNone;
  };
  // U+W* from s.
  auto upper_run_then_lower = [&](size_t s) -> size_t {
    size_t a = s;
    while (upper(a)) ++a;
    if (a == s) return kNone;
    while (lower(a)) ++a;
    return a;
  };
  const bool prefix = !is_crlf(i) && (is(i, kSpace) || is(i, kOther));  // [^\r\n\p{L}\p{N}]
  // The two word alternatives in order, each with the optional prefix first
  // (it is greedy), then without.
  for (int alternative = 0; alternative < 2; ++alternative)
    for (size_t s : {prefix ? i + 1 : kNone, i}) {
      if (s == kNone) continue;
      const size_t end = alternative == 0 ? upper_then_lower(s) : upper_run_then_lower(s);
      if (end != kNone) return end + contraction(end) - i;
    }
  // \p{N}{1,3} (Gpt4o) or \p{N} (Tekken)
  if (is(i, kNumber)) {
    size_t j = i;
    while (is(j, kNumber) && j - i < (gpt4o ? 3u : 1u)) ++j;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
  const size_t start = t.cp[i] == ' ' && is(i + 1, kOther) ? i + 1 : i;
  if (is(start, kOther)) {
    size_t j = run_end(start, kOther);
    while (is_crlf(j) || (j < n && t.cp[j] == '/')) ++j;
    return j - i;
  }
  // \s*[\r\n]+ : the whitespace run up to its last CR/LF.
  const size_t end = run_end(i, kSpace);
  for (size_t k = end; k > i; --k)
    if (is_crlf(k - 1)) return k - i;
  // \s+(?!\S) keeps the last space for the next word; then \s+.
  if (end < n && end - i >= 2) return end - 1 - i;
  return end - i;
}

}  // namespace

void CodePoints::assign(std::string_view text) {
  cp.clear();
  cls.clear();
  offset.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = p[pos] < 0x80 ? 1 : utf8::valid_length(text.substr(pos));
    const char32_t c = len ? utf8::decode(p + pos, len) : 0xFFFD;
    cp.push_back(c);
    cls.push_back(!len ? kOther : c < 128 ? kAsciiClass[c] : classify(c));
    offset.push_back(pos);
    pos += len ? len : 1;
  }
  offset.push_back(text.size());
}

size_t match_at(const CodePoints& t, size_t i, size_t n, Split split) {
  if (split == Split::Gpt4o || split == Split::Tekken) return match_cased(t, i, n, split == Split::Gpt4o);
  auto is = [&](size_t k, CharClass c) { return k < n && t.cls[k] == c; };
  auto is_crlf = [&](size_t k) { return k < n && (t.cp[k] == '\r' || t.cp[k] == '\n'); };
  auto run_end = [&](size_t k, CharClass c) {
    while (is(k, c)) ++k;
    return k;
  };
  auto lower = [&](size_t k) -> char32_t {
    if (k >= n) return 0;
    const char32_t c = t.cp[k];
    return (split == Split::Llama3 || split == Split::Qwen2) && c >= 'A' && c <= 'Z' ? c + 32 : c;  // (?i:…)
  };

  // Contractions: 's 't 'm 'd 're 've 'll.
  if (t.cp[i] == '\'') {
    const char32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }

  if (split == Split::Gpt2 || split == Split::DigitsGpt2) {
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': one class, optionally after a space.
    const size_t start = t.cp[i] == ' ' && i + 1 < n && t.cls[i + 1] != kSpace ? i + 1 : i;
    if (t.cls[start] != kSpace) return run_end(start, t.cls[start]) - i;
  } else {
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (is(i, kLetter)) return run_end(i, kLetter) - i;
    if (!is_crlf(i) && (is(i, kSpace) || is(i, kOther)) && is(i + 1, kLetter)) return run_end(i + 1, kLetter) - i;
    // \p{N}{1,3} (llama-bpe) or \p{N} (qwen2)
    if (is(i, kNumber)) {
      const size_t max_digits = split == Split::Llama3 ? 3 : 1;
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

// ---- Merges -------------------------------------------------------------------

void MergeRules::add(int32_t left, int32_t right, int32_t rank, int32_t merged, bool replace) {
  const Rule rule{rank, merged};
  if (replace)
    rules_.insert_or_assign(key(left, right), rule);
  else
    rules_.try_emplace(key(left, right), rule);
}

void MergeRules::apply(std::vector<int32_t>& ids, MergeScratch& scratch) const {
  using Pair = MergeScratch::Pair;
  auto& symbols = scratch.symbols;
  auto& heap = scratch.heap;
  symbols.clear();
  heap.clear();
  const auto n = static_cast<int32_t>(ids.size());
  for (int32_t k = 0; k < n; ++k)
    symbols.push_back({ids[static_cast<size_t>(k)], k - 1, k + 1 < n ? k + 1 : -1, false});
  // Heap order: the top is the lowest rank, then the leftmost pair.
  auto later = [](const Pair& a, const Pair& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t left_id = symbols[static_cast<size_t>(left)].id, right_id = symbols[static_cast<size_t>(right)].id;
    if (left_id < 0 || right_id < 0) return;
    auto it = rules_.find(key(left_id, right_id));
    if (it == rules_.end()) return;
    heap.push_back({it->second.rank, left, right, left_id, right_id, it->second.merged});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t k = 1; k < n; ++k) try_pair(k - 1, k);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Pair p = heap.back();
    heap.pop_back();
    auto& left = symbols[static_cast<size_t>(p.left)];
    auto& right = symbols[static_cast<size_t>(p.right)];
    // Stale: a side was merged into something else since this pair was queued.
    if (left.gone || right.gone || left.next != p.right || left.id != p.left_id || right.id != p.right_id) continue;
    left.id = p.merged;
    right.gone = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = p.left;
    try_pair(left.prev, p.left);
    try_pair(p.left, left.next);
  }
  ids.clear();
  for (int32_t k = n > 0 ? 0 : -1; k >= 0; k = symbols[static_cast<size_t>(k)].next)
    ids.push_back(symbols[static_cast<size_t>(k)].id);
}

// ---- Word cache ---------------------------------------------------------------

bool WordCache::find(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.size() > kMaxWordBytes) return false;
  Shard& s = shard(word);
  std::unique_lock lock(s.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  auto it = s.map.find(word);
  if (it == s.map.end()) return false;
  ids.insert(ids.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t n) const {
  if (word.size() > kMaxWordBytes) return;
  Shard& s = shard(word);
  std::unique_lock lock(s.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (s.map.size() >= kMaxEntriesPerShard) s.map.clear();
  s.map.try_emplace(std::string(word), ids, ids + n);
}

}  // namespace rlx::byte_level
