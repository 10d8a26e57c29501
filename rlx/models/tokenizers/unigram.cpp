// SentencePiece Unigram tokenizer from tokenizer.json (pipeline in unigram.h).
//
// Parity with tokenizers 0.23.3 includes its quirks:
//   - Precompiled walks extended grapheme clusters (unicode-segmentation in HF,
//     utf8proc here). A cluster under 6 bytes is replaced whole by the value of
//     the *shortest* key that prefixes it, so "A" U+0302 U+0300 becomes "Â" and
//     "ﬁ" U+0301 becomes "fi"; CR LF becomes the replacement of CR alone. Longer
//     clusters, and clusters no key prefixes, go character by character.
//   - prepend_scheme "first" prepends only to a split whose first byte HF aligns
//     to byte 0 of the text: not after an added token, nor after leading
//     characters that Strip or Replace (empty content, or a match longer than one
//     character) removed, nor to any word but the first after WhitespaceSplit.
//     HF's Precompiled loses track of removed leading characters, so those keep
//     the ▁, as here.
//   - Unigram: ties keep the first candidate (shorter pieces are tried first,
//     the unknown piece last); a run of unknown pieces is fused into one token
//     whose id is looked up again (usually the unknown id).
// Known gaps: NFKC and Lowercase use utf8proc's Unicode tables, which may differ
// from HF's for recently added characters; an empty-string vocabulary piece is
// ignored (HF would offer it to the lattice as a zero-length piece).
#include "rlx/models/tokenizers/unigram.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <variant>
#include <vector>

#include "rlx/core/error.h"
#include "rlx/formats/hf_config.h"
#include "rlx/models/tokenizers/added_tokens.h"
#include "rlx/models/tokenizers/hf_files.h"
#include "rlx/models/tokenizers/parallel_encode.h"
#include "rlx/models/tokenizers/unicode_norm.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx {
namespace {

using Json = nlohmann::json;
using namespace detail;  // hf_files.h, added_tokens.h
constexpr size_t npos = std::string_view::npos;

// ---- UTF-8 and character classes ----------------------------------------------

// Byte length of the character starting at s[i] (s is valid UTF-8).
inline size_t char_len(std::string_view s, size_t i) { return utf8::lead_length(static_cast<unsigned char>(s[i])); }

using utf8::char_at;

// Start of the character that ends just before byte `end` (> 0).
inline size_t prev_char_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// Strip, WhitespaceSplit and added tokens' lstrip/rstrip test Unicode White_Space.
constexpr auto is_whitespace = utf8::is_white_space;

// End of the extended grapheme cluster that starts at byte `i`.
size_t grapheme_end(std::string_view s, size_t i) {
  size_t len = char_len(s, i);
  char32_t prev = char_at(s, i, len);
  utf8proc_int32_t state = 0;
  for (i += len; i < s.size(); i += len) {
    len = char_len(s, i);
    const char32_t c = char_at(s, i, len);
    if (prev < 0x80 && c < 0x80 && !(prev == '\r' && c == '\n')) break;  // ASCII pairs break, CR LF aside
    if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev), static_cast<utf8proc_int32_t>(c), &state))
      break;
    prev = c;
  }
  return i;
}

// ---- Base64 ----------------------------------------------------------------------

// Standard base64 with canonical padding, which is what HF accepts for
// precompiled_charsmap. Returns the offset of the first bad character, or npos.
size_t base64_decode(std::string_view in, std::string& out) {
  static constexpr auto kDigit = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) t[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out.clear();
  if (in.size() % 4 != 0) return in.size();
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    size_t pad = 0;
    if (i + 4 == in.size()) pad = in[i + 3] != '=' ? 0 : in[i + 2] == '=' ? 2 : 1;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int8_t d = k < 4 - pad ? kDigit[static_cast<unsigned char>(in[i + k])] : 0;
      if (d < 0) return i + k;
      v = v << 6 | static_cast<uint32_t>(d);
    }
    if ((pad == 1 && (v & 0xFF)) || (pad == 2 && (v & 0xFFFF))) return i + 3 - pad;  // non-zero dropped bits
    out.push_back(static_cast<char>(v >> 16));
    if (pad < 2) out.push_back(static_cast<char>(v >> 8));
    if (pad < 1) out.push_back(static_cast<char>(v));
  }
  return npos;
}

// ---- Precompiled charsmap -------------------------------------------------------

// SentencePiece's compiled normalization rules: a little-endian u32 byte size, a
// darts-clone double array of that size keyed by UTF-8 strings, then the blob
// of NUL-terminated replacement strings that the keys' values point into.
class CharsMap {
 public:
  CharsMap(std::string_view bytes, const std::string& where) {
    RLX_FORMAT_CHECK(bytes.size() >= 4, where, ": ", bytes.size(), " bytes cannot hold the trie size");
    const uint32_t trie_bytes = read_u32(bytes, 0);
    RLX_FORMAT_CHECK(trie_bytes >= 4 && trie_bytes % 4 == 0 && trie_bytes <= bytes.size() - 4, where, ": trie size ",
                     trie_bytes, " is not a positive multiple of 4 within the ", bytes.size() - 4, " bytes after it");
    units_.resize(trie_bytes / 4);
    for (size_t i = 0; i < units_.size(); ++i) units_[i] = read_u32(bytes, 4 + 4 * i);
    replacements_.assign(bytes.substr(4 + size_t{trie_bytes}));
    const size_t bad = utf8::first_invalid(replacements_);
    RLX_FORMAT_CHECK(bad == npos, where, ": normalized strings are not valid UTF-8 at byte ", bad);
    validate(where);
    ascii_.fill(-1);
    for (size_t c = 1; c < ascii_.size(); ++c) {
      const char byte = static_cast<char>(c);
      if (auto at = shortest_key_value(std::string_view(&byte, 1))) ascii_[c] = static_cast<int32_t>(*at);
    }
  }

  // HF's Precompiled normalizer; see the file comment.
  void normalize(std::string_view in, std::string& out) const {
    out.clear();
    size_t i = 0;
    while (i < in.size()) {
      const auto c = static_cast<unsigned char>(in[i]);
      const bool next_ascii = i + 1 == in.size() || static_cast<unsigned char>(in[i + 1]) < 0x80;
      if (c < 0x80 && next_ascii && !(c == '\r' && i + 1 < in.size() && in[i + 1] == '\n')) {
        if (ascii_[c] < 0)
          out.push_back(static_cast<char>(c));
        else
          out.append(replacement(static_cast<uint32_t>(ascii_[c])));
        ++i;
        continue;
      }
      const size_t end = grapheme_end(in, i);
      size_t k = i;
      if (end - i < 6) {
        if (auto at = shortest_key_value(in.substr(i, end - i))) {
          out.append(replacement(*at));
          i = end;
          continue;
        }
        // No key prefixes the cluster, so none is its first character alone.
        k += char_len(in, i);
        out.append(in.substr(i, k - i));
      }
      while (k < end) {
        const size_t len = char_len(in, k);
        if (auto at = shortest_key_value(in.substr(k, len)))
          out.append(replacement(*at));
        else
          out.append(in.substr(k, len));
        k += len;
      }
      i = end;
    }
  }

 private:
  static uint32_t read_u32(std::string_view b, size_t at) {
    uint32_t v = 0;
    for (size_t k = 4; k-- > 0;) v = v << 8 | static_cast<unsigned char>(b[at + k]);
    return v;
  }
  // darts-clone unit fields. A unit matches byte b when its label is b; bit 31
  // keeps value units from matching any byte.
  static bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
  static uint32_t value(uint32_t u) { return u & 0x7FFFFFFFu; }
  static uint32_t label(uint32_t u) { return u & 0x800000FFu; }
  static uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

  // Checks every unit a lookup can reach, so lookups need no bounds checks
  // beyond the child probe: each leaf's value unit is inside the array and its
  // value starts a character in the blob. darts-clone shares common suffixes
  // (the keys form a DAG), so a unit is checked once however it is reached,
  // which also ends the walk on a hostile array with cycles.
  void validate(const std::string& where) const {
    std::vector<bool> seen(units_.size());
    std::vector<uint32_t> nodes{offset(units_[0])};
    while (!nodes.empty()) {
      const uint32_t node = nodes.back();
      nodes.pop_back();
      for (uint32_t b = 1; b < 256; ++b) {
        const uint32_t child = node ^ b;
        if (child >= units_.size() || label(units_[child]) != b || seen[child]) continue;
        seen[child] = true;
        const uint32_t next = child ^ offset(units_[child]);
        if (has_leaf(units_[child])) {
          RLX_FORMAT_CHECK(next < units_.size(), where, ": trie unit ", child, " points at unit ", next,
                           ", past the end of the ", units_.size(), "-unit trie");
          const uint32_t at = value(units_[next]);
          RLX_FORMAT_CHECK(
              at <= replacements_.size() &&
                  (at == replacements_.size() || (static_cast<unsigned char>(replacements_[at]) & 0xC0) != 0x80),
              where, ": trie value ", at, " is not the start of a string in the ", replacements_.size(),
              "-byte normalized blob");
        }
        nodes.push_back(next);
      }
    }
  }

  // Value of the shortest key that prefixes `s` (HF's Precompiled::transform).
  std::optional<uint32_t> shortest_key_value(std::string_view s) const {
    uint32_t node = offset(units_[0]);
    for (const char ch : s) {
      const auto b = static_cast<unsigned char>(ch);
      if (b == 0) break;
      node ^= b;
      if (node >= units_.size() || label(units_[node]) != b) break;
      const bool leaf = has_leaf(units_[node]);
      node ^= offset(units_[node]);
      if (leaf) return value(units_[node]);
    }
    return std::nullopt;
  }

  // The string at `at` runs to the next NUL, or to the blob's end (c_str()'s NUL).
  std::string_view replacement(uint32_t at) const { return std::string_view(replacements_.c_str() + at); }

  std::vector<uint32_t> units_;
  std::string replacements_;
  std::array<int32_t, 128> ascii_{};  // value of the one-byte key for each ASCII byte, or -1
};

// ---- Vocabulary trie --------------------------------------------------------------

// The pieces as a byte trie: each node's children are consecutive nodes whose
// labels sit in a parallel byte array, so a step scans a few bytes; nodes with
// many children (near the root) get a direct 256-entry table instead.
class PieceTrie {
 public:
  // `pieces[i]` has id i and `scores[i]`; a later duplicate wins, as in HF's token → id map.
  PieceTrie(const std::vector<std::string>& pieces, const std::vector<double>& scores) {
    std::vector<int32_t> order;
    order.reserve(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i)
      if (!pieces[i].empty()) order.push_back(static_cast<int32_t>(i));
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return pieces[static_cast<size_t>(a)] < pieces[static_cast<size_t>(b)];
    });
    // Keep the last id of each run of equal pieces.
    std::vector<std::string_view> keys;
    std::vector<int32_t> ids;
    for (size_t i = 0; i < order.size(); ++i) {
      const std::string& p = pieces[static_cast<size_t>(order[i])];
      if (i + 1 < order.size() && pieces[static_cast<size_t>(order[i + 1])] == p) continue;
      keys.push_back(p);
      ids.push_back(order[i]);
    }
    // Breadth first over sorted key ranges sharing a prefix: a node's children
    // are created together, hence consecutive.
    struct Range {
      uint32_t node, lo, hi, depth;
    };
    std::vector<Range> queue{{0, 0, static_cast<uint32_t>(keys.size()), 0}};
    nodes_.push_back({});
    labels_.push_back(0);
    for (size_t q = 0; q < queue.size(); ++q) {
      auto [node, lo, hi, depth] = queue[q];
      if (lo < hi && keys[lo].size() == depth) {  // sorted: the prefix itself comes first
        nodes_[node].id = ids[lo];
        nodes_[node].score = scores[static_cast<size_t>(ids[lo++])];
      }
      nodes_[node].first_child = static_cast<uint32_t>(nodes_.size());
      while (lo < hi) {
        const char b = keys[lo][depth];
        uint32_t end = lo + 1;
        while (end < hi && keys[end][depth] == b) ++end;
        queue.push_back({static_cast<uint32_t>(nodes_.size()), lo, end, depth + 1});
        nodes_.push_back({});
        labels_.push_back(static_cast<unsigned char>(b));
        ++nodes_[node].num_children;
        lo = end;
      }
    }
    for (Node& n : nodes_) {
      if (n.num_children <= kMaxScan) continue;
      n.table = static_cast<int32_t>(tables_.size() / 256);
      tables_.resize(tables_.size() + 256);
      for (uint32_t c = n.first_child; c < n.first_child + n.num_children; ++c)
        tables_[static_cast<size_t>(n.table) * 256 + labels_[c]] = c;
    }
  }

  // Calls f(length, id, score) for every piece that prefixes `s`, shortest first.
  template <typename F>
  void for_each_prefix(std::string_view s, F&& f) const {
    uint32_t node = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      node = child(node, static_cast<unsigned char>(s[k]));
      if (node == 0) return;
      if (const Node& n = nodes_[node]; n.id >= 0) f(k + 1, n.id, n.score);
    }
  }

  // Id of piece `s`, or -1.
  int32_t find(std::string_view s) const {
    uint32_t node = 0;
    for (const char c : s)
      if ((node = child(node, static_cast<unsigned char>(c))) == 0) return -1;
    return s.empty() ? -1 : nodes_[node].id;
  }

 private:
  static constexpr uint32_t kMaxScan = 16;  // more children than this: a direct table

  struct Node {
    uint32_t first_child = 0;
    uint32_t num_children = 0;
    int32_t id = -1;     // the piece ending here, or -1
    int32_t table = -1;  // row of tables_, or -1 when the labels are scanned
    double score = 0;    // the piece's score, kept here to save a cache miss
  };

  // The child of `node` labelled `b`, or 0 (the root is nobody's child).
  uint32_t child(uint32_t node, unsigned char b) const {
    const Node& n = nodes_[node];
    if (n.table >= 0) return tables_[static_cast<size_t>(n.table) * 256 + b];
    const unsigned char* first = labels_.data() + n.first_child;
    const unsigned char* last = first + n.num_children;
    const unsigned char* it = std::find(first, last, b);
    return it != last ? n.first_child + static_cast<uint32_t>(it - first) : 0;
  }

  std::vector<Node> nodes_;
  std::vector<unsigned char> labels_;  // labels_[i]: the byte leading to nodes_[i]
  std::vector<uint32_t> tables_;       // 256 child indices (0: none) per wide node
};

// ---- Normalizers ------------------------------------------------------------------
// Each rewrites `in` into `out`. `at_origin` tracks whether HF would still align
// the first normalized character with the segment's first byte (prepend "first").

struct Precompiled {
  CharsMap map;
};
struct ReplaceString {
  std::string pattern, content;
};
struct CollapseSpaces {  // Replace with the regex " {2,}"
  std::string content;
};
struct Strip {
  bool left, right;
};
struct Nfkc {};
struct Lowercase {};
using Normalizer = std::variant<Precompiled, ReplaceString, CollapseSpaces, Strip, Nfkc, Lowercase>;

void apply(const Precompiled& n, std::string_view in, std::string& out, bool&, std::vector<utf8proc_int32_t>&) {
  n.map.normalize(in, out);
}

void apply(const ReplaceString& n, std::string_view in, std::string& out, bool& at_origin,
           std::vector<utf8proc_int32_t>&) {
  out.clear();
  size_t pos = 0;
  for (size_t at = in.find(n.pattern); at != npos; at = in.find(n.pattern, pos)) {
    // HF aligns replacement characters with the match's last character.
    if (at == 0 && (n.content.empty() || char_len(in, 0) != n.pattern.size())) at_origin = false;
    out.append(in.substr(pos, at - pos)).append(n.content);
    pos = at + n.pattern.size();
  }
  out.append(in.substr(pos));
}

void apply(const CollapseSpaces& n, std::string_view in, std::string& out, bool& at_origin,
           std::vector<utf8proc_int32_t>&) {
  out.clear();
  size_t i = 0;
  while (i < in.size()) {
    const size_t run = in.find_first_not_of(' ', i);
    const size_t end = run == npos ? in.size() : run;
    if (end - i >= 2) {
      if (i == 0) at_origin = false;
      out.append(n.content);
      i = end;
    } else {
      const size_t next = in.find(' ', i + 1);
      const size_t stop = next == npos ? in.size() : next;
      out.append(in.substr(i, stop - i));
      i = stop;
    }
  }
}

void apply(const Strip& n, std::string_view in, std::string& out, bool& at_origin, std::vector<utf8proc_int32_t>&) {
  size_t begin = 0, end = in.size();
  while (n.left && begin < end) {
    const size_t len = char_len(in, begin);
    if (!is_whitespace(char_at(in, begin, len))) break;
    begin += len;
  }
  while (n.right && end > begin) {
    const size_t start = prev_char_start(in, end);
    if (!is_whitespace(char_at(in, start, end - start))) break;
    end = start;
  }
  if (begin > 0) at_origin = false;
  out.assign(in.substr(begin, end - begin));
}

void apply(const Nfkc&, std::string_view in, std::string& out, bool&, std::vector<utf8proc_int32_t>& cps) {
  unicode_compose(in, /*compat=*/true, out, cps);
}

// Rust's char::to_lowercase, one character at a time as HF applies it.
void apply(const Lowercase&, std::string_view in, std::string& out, bool&, std::vector<utf8proc_int32_t>&) {
  out.clear();
  for (size_t i = 0; i < in.size();) {
    const auto c = static_cast<unsigned char>(in[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
      ++i;
      continue;
    }
    const size_t len = char_len(in, i);
    const char32_t cp = char_at(in, i, len);
    if (cp == 0x130)
      out.append("i\xCC\x87");  // U+0130's full lowercase: i + U+0307, the one multi-character mapping
    else
      utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    i += len;
  }
}

// ---- Added tokens -----------------------------------------------------------------

// ---- Loading helpers --------------------------------------------------------------

void parse_normalizer(const Json& n, const std::string& where, std::vector<Normalizer>& out) {
  if (n.is_null()) return;
  const auto type = json_get<std::string>(n, "type", where);
  if (type == "Sequence") {
    const Json& list = member(n, "normalizers", where);
    RLX_FORMAT_CHECK(list.is_array(), where, ".normalizers: expected an array but found ", list.type_name());
    for (size_t i = 0; i < list.size(); ++i) parse_normalizer(list[i], str(where, ".normalizers[", i, "]"), out);
  } else if (type == "Precompiled") {
    const std::string field = where + ".precompiled_charsmap";
    const auto b64 = json_get<std::string>(n, "precompiled_charsmap", where);
    std::string bytes;
    const size_t bad = base64_decode(b64, bytes);
    RLX_FORMAT_CHECK(
        bad == npos, field, ": not valid base64 (",
        bad < b64.size() ? str("bad character at offset ", bad) : str("length ", b64.size(), " is not a multiple of 4"),
        ")");
    out.push_back(Precompiled{CharsMap(bytes, field)});
  } else if (type == "Replace") {
    const Json& pattern = member(n, "pattern", where);
    auto content = json_get<std::string>(n, "content", where);
    if (auto s = json_get_opt<std::string>(pattern, "String", where + ".pattern")) {
      RLX_CHECK_AS(Unsupported, !s->empty(), where, ".pattern.String: an empty pattern is not supported");
      out.push_back(ReplaceString{std::move(*s), std::move(content)});
    } else {
      const auto regex = json_get<std::string>(pattern, "Regex", where + ".pattern");
      RLX_CHECK_AS(Unsupported, regex == " {2,}", where, ".pattern.Regex: only \" {2,}\" is supported, not \"", regex,
                   "\"");
      out.push_back(CollapseSpaces{std::move(content)});
    }
  } else if (type == "Strip") {
    out.push_back(Strip{json_get<bool>(n, "strip_left", where), json_get<bool>(n, "strip_right", where)});
  } else if (type == "NFKC") {
    out.push_back(Nfkc{});
  } else if (type == "Lowercase") {
    out.push_back(Lowercase{});
  } else {
    throw Unsupported(str(where, ": type '", type,
                          "' is not supported (Sequence, Precompiled, Replace, Strip, NFKC and Lowercase are)"));
  }
}

}  // namespace

// ---- The tokenizer ----------------------------------------------------------------

struct UnigramTokenizer::Impl {
  enum class Prepend { kAlways, kFirst, kNever };

  // Per-thread buffers, reused across texts.
  struct Scratch {
    std::string norm, tmp;  // normalizer input/output, swapped after each step
    std::string meta;       // a split after Metaspace
    std::vector<utf8proc_int32_t> cps;
    std::vector<TextPiece> raw_splits, norm_splits;
    struct PathNode {
      double score;
      size_t start;  // npos: not reached yet
      int32_t id;
    };
    std::vector<PathNode> path;
    std::vector<int32_t> word_ids;
  };

  Impl(const std::vector<std::string>& pieces, const std::vector<double>& scores) : trie(pieces, scores) {}

  void encode_into(std::string_view text, size_t cap, Scratch& s, std::vector<int32_t>& ids) const;
  void normalize(std::string_view text, Scratch& s, bool& at_origin) const;
  void pre_tokenize(std::string_view text, bool at_origin, size_t cap, Scratch& s, std::vector<int32_t>& ids) const;
  void metaspace(std::string_view word, bool at_origin, size_t cap, Scratch& s, std::vector<int32_t>& ids) const;
  void unigram(std::string_view piece, Scratch& s, std::vector<int32_t>& ids) const;
  Encoding encode_one(std::string_view text, size_t cap, Scratch& s) const;

  PieceTrie trie;
  size_t vocab_size = 0;
  double unk_score = 0;
  int32_t unk_id = 0, cls_id = 0, sep_id = 0, pad_id = 0;
  std::vector<Normalizer> normalizers;
  bool whitespace_split = false;
  std::string replacement;
  Prepend prepend = Prepend::kAlways;
  bool split = true;
  AddedTokenMatcher raw_added, normalized_added;
};

void UnigramTokenizer::Impl::encode_into(std::string_view text, size_t cap, Scratch& s,
                                         std::vector<int32_t>& ids) const {
  raw_added.split(text, s.raw_splits);
  for (const TextPiece& seg : s.raw_splits) {
    if (ids.size() >= cap) return;
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    bool at_origin = seg.begin == 0;
    normalize(text.substr(seg.begin, seg.end - seg.begin), s, at_origin);
    normalized_added.split(s.norm, s.norm_splits);
    for (const TextPiece& sub : s.norm_splits) {
      if (ids.size() >= cap) return;
      if (sub.id >= 0)
        ids.push_back(sub.id);
      else
        pre_tokenize(std::string_view(s.norm).substr(sub.begin, sub.end - sub.begin), at_origin && sub.begin == 0, cap,
                     s, ids);
    }
  }
}

void UnigramTokenizer::Impl::normalize(std::string_view text, Scratch& s, bool& at_origin) const {
  s.norm.assign(text);
  for (const Normalizer& step : normalizers) {
    std::visit([&](const auto& n) { apply(n, s.norm, s.tmp, at_origin, s.cps); }, step);
    s.norm.swap(s.tmp);
  }
}

void UnigramTokenizer::Impl::pre_tokenize(std::string_view text, bool at_origin, size_t cap, Scratch& s,
                                          std::vector<int32_t>& ids) const {
  if (!whitespace_split) {
    metaspace(text, at_origin, cap, s, ids);
    return;
  }
  size_t i = 0;
  while (i < text.size() && ids.size() < cap) {
    size_t len = char_len(text, i);
    if (is_whitespace(char_at(text, i, len))) {
      i += len;
      continue;
    }
    size_t end = i + len;
    while (end < text.size() && !is_whitespace(char_at(text, end, len = char_len(text, end)))) end += len;
    metaspace(text.substr(i, end - i), at_origin && i == 0, cap, s, ids);
    i = end;
  }
}

void UnigramTokenizer::Impl::metaspace(std::string_view word, bool at_origin, size_t cap, Scratch& s,
                                       std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  std::string& m = s.meta;
  m.clear();
  const bool marked = word[0] == ' ' || word.starts_with(replacement);
  if (!marked && (prepend == Prepend::kAlways || (prepend == Prepend::kFirst && at_origin))) m += replacement;
  for (size_t i = 0; i < word.size();) {
    const size_t space = std::min(word.find(' ', i), word.size());
    m.append(word.substr(i, space - i));
    if (space == word.size()) break;
    m += replacement;
    i = space + 1;
  }
  const std::string_view all(m);
  if (!split) {
    unigram(all, s, ids);
    return;
  }
  // Each replacement character starts a new piece.
  size_t piece = 0;
  for (size_t at = all.find(replacement, 1); at != npos && ids.size() < cap; at = all.find(replacement, at + 1)) {
    unigram(all.substr(piece, at - piece), s, ids);
    piece = at;
  }
  if (ids.size() < cap) unigram(all.substr(piece), s, ids);
}

// The best-scoring segmentation (HF's optimized Unigram::encode).
void UnigramTokenizer::Impl::unigram(std::string_view piece, Scratch& s, std::vector<int32_t>& ids) const {
  using PathNode = Scratch::PathNode;
  const size_t n = piece.size();
  s.path.assign(n + 1, PathNode{0.0, npos, -1});
  auto relax = [&](size_t end, double score, size_t start, int32_t id) {
    PathNode& node = s.path[end];
    if (node.start == npos || score > node.score) node = {score, start, id};
  };
  for (size_t start = 0; start < n;) {
    const double base = s.path[start].score;
    const size_t char_bytes = char_len(piece, start);
    bool covered = false;  // some piece is exactly this character
    trie.for_each_prefix(piece.substr(start), [&](size_t len, int32_t id, double score) {
      relax(start + len, base + score, start, id);
      covered |= len == char_bytes;
    });
    if (!covered) relax(start + char_bytes, base + unk_score, start, unk_id);
    start += char_bytes;
  }
  // Walk back from the end; a run of unknown pieces becomes one token.
  s.word_ids.clear();
  size_t unk_end = npos;
  auto flush_unk = [&](size_t unk_start) {
    if (unk_end == npos) return;
    const int32_t id = trie.find(piece.substr(unk_start, unk_end - unk_start));
    s.word_ids.push_back(id >= 0 ? id : unk_id);
    unk_end = npos;
  };
  for (size_t end = n; end > 0; end = s.path[end].start) {
    const PathNode& node = s.path[end];
    if (node.id == unk_id) {
      if (unk_end == npos) unk_end = end;
    } else {
      flush_unk(end);
      s.word_ids.push_back(node.id);
    }
  }
  flush_unk(0);
  ids.insert(ids.end(), s.word_ids.rbegin(), s.word_ids.rend());
}

Encoding UnigramTokenizer::Impl::encode_one(std::string_view text, size_t cap, Scratch& s) const {
  require_utf8(text, "UnigramTokenizer");
  std::vector<int32_t> ids{cls_id};
  encode_into(text, cap, s, ids);
  return finish_encoding(std::move(ids), cap, sep_id);
}

// ---- Loading ----------------------------------------------------------------------

UnigramTokenizer::UnigramTokenizer(std::shared_ptr<const Impl> impl, int64_t max_length)
    : impl_(std::move(impl)), max_length_(max_length) {}

UnigramTokenizer UnigramTokenizer::from_tokenizer_json(const std::string& path) {
  return from_tokenizer_json(load_json_file(path), path);
}

UnigramTokenizer UnigramTokenizer::from_tokenizer_json(const Json& j, const std::string& path) {
  RLX_FORMAT_CHECK(j.is_object(), path, ": expected a JSON object but found ", j.type_name());

  const std::string where_model = path + ": model";
  const Json& model = member(j, "model", path);
  const auto type = json_get<std::string>(model, "type", where_model);
  RLX_CHECK_AS(Unsupported, type == "Unigram", where_model, ": type '", type, "' is not Unigram");
  RLX_CHECK_AS(Unsupported, !json_get_or<bool>(model, "byte_fallback", false, where_model), where_model,
               ".byte_fallback: byte fallback is not supported");
  const Json& vocab = member(model, "vocab", where_model);
  RLX_FORMAT_CHECK(vocab.is_array() && !vocab.empty(), where_model,
                   ".vocab: expected a non-empty array of [piece, score]");
  RLX_FORMAT_CHECK(vocab.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), where_model,
                   ".vocab: too many pieces");
  std::vector<std::string> pieces;
  std::vector<double> scores;
  pieces.reserve(vocab.size());
  scores.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const Json& entry = vocab[i];
    double score = 0;
    RLX_FORMAT_CHECK(
        entry.is_array() && entry.size() == 2 && entry[0].is_string() && json_detail::convert(entry[1], score),
        where_model, ".vocab[", i, "]: expected [piece, score] but found ", entry.dump().substr(0, 64));
    pieces.push_back(entry[0].get<std::string>());
    RLX_FORMAT_CHECK(utf8::first_invalid(pieces.back()) == npos, where_model, ".vocab[", i,
                     "]: piece is not valid UTF-8");
    scores.push_back(score);
  }
  const Json& unk = member(model, "unk_id", where_model);
  RLX_CHECK_AS(Unsupported, !unk.is_null(), where_model, ".unk_id: a model without an unknown piece is not supported");
  const int32_t unk_id = token_id(unk, where_model + ".unk_id");
  RLX_FORMAT_CHECK(static_cast<size_t>(unk_id) < pieces.size(), where_model, ".unk_id: ", unk_id,
                   " is not below the vocabulary size ", pieces.size());

  auto impl = std::make_shared<Impl>(pieces, scores);
  impl->unk_id = unk_id;
  impl->unk_score = *std::min_element(scores.begin(), scores.end()) - 10.0;  // HF's unknown-piece penalty
  impl->vocab_size = pieces.size();

  parse_normalizer(member(j, "normalizer", path), path + ": normalizer", impl->normalizers);

  // Metaspace, alone or after WhitespaceSplit.
  const std::string where_pre = path + ": pre_tokenizer";
  const Json* meta = &member(j, "pre_tokenizer", path);
  std::string meta_where = where_pre;
  RLX_CHECK_AS(Unsupported, !meta->is_null(), where_pre, ": a missing pre-tokenizer is not supported (Metaspace is)");
  if (json_get<std::string>(*meta, "type", where_pre) == "Sequence") {
    const Json& list = member(*meta, "pretokenizers", where_pre);
    const bool shape = list.is_array() && list.size() == 2 && list[0].is_object() &&
                       list[0].value("type", Json()) == "WhitespaceSplit";
    RLX_CHECK_AS(Unsupported, shape, where_pre, ".pretokenizers: only [WhitespaceSplit, Metaspace] is supported");
    impl->whitespace_split = true;
    meta = &list[1];
    meta_where = where_pre + ".pretokenizers[1]";
  }
  const auto meta_type = json_get<std::string>(*meta, "type", meta_where);
  RLX_CHECK_AS(Unsupported, meta_type == "Metaspace", meta_where, ": type '", meta_type,
               "' is not supported (Metaspace, optionally after WhitespaceSplit, is)");
  impl->replacement = json_get<std::string>(*meta, "replacement", meta_where);
  RLX_FORMAT_CHECK(!impl->replacement.empty() && utf8::first_invalid(impl->replacement) == npos &&
                       char_len(impl->replacement, 0) == impl->replacement.size(),
                   meta_where, ".replacement: expected one character but found '", impl->replacement, "'");
  const auto scheme = json_get_opt<std::string>(*meta, "prepend_scheme", meta_where);
  if (!scheme || *scheme == "always") {
    impl->prepend = Impl::Prepend::kAlways;
  } else if (*scheme == "first") {
    impl->prepend = Impl::Prepend::kFirst;
  } else {
    RLX_FORMAT_CHECK(*scheme == "never", meta_where, ".prepend_scheme: '", *scheme,
                     "' is not one of always, first, never");
    impl->prepend = Impl::Prepend::kNever;
  }
  // Legacy files say add_prefix_space instead; HF rejects `false` unless the scheme is "never".
  const auto add_prefix_space = json_get_opt<bool>(*meta, "add_prefix_space", meta_where);
  RLX_FORMAT_CHECK(add_prefix_space.value_or(true) || impl->prepend == Impl::Prepend::kNever, meta_where,
                   ".add_prefix_space: false contradicts the prepend scheme");
  impl->split = json_get_or<bool>(*meta, "split", true, meta_where);

  std::tie(impl->cls_id, impl->sep_id) = parse_cls_sep(member(j, "post_processor", path), path + ": post_processor");

  std::optional<int32_t> pad_id;
  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    RLX_FORMAT_CHECK(it->is_array(), path, ": added_tokens must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = str(path, ": added_tokens[", i, "]");
      const Json& t = (*it)[i];
      AddedTokenMatcher::Token token{json_get<std::string>(t, "content", where), token_id(member(t, "id", where), where),
                                json_get_or<bool>(t, "lstrip", false, where),
                                json_get_or<bool>(t, "rstrip", false, where)};
      RLX_FORMAT_CHECK(!token.content.empty() && utf8::first_invalid(token.content) == npos, where,
                       ": content must be non-empty UTF-8");
      RLX_CHECK_AS(Unsupported, !json_get_or<bool>(t, "single_word", false, where), where,
                   ".single_word: single-word added tokens are not supported");
      if (token.content == "<pad>") pad_id = token.id;
      if (!json_get_or<bool>(t, "normalized", false, where)) {
        impl->raw_added.add(std::move(token));
        continue;
      }
      // HF matches a normalized token against normalized text, by its own normalized form.
      Impl::Scratch s;
      bool at_origin = true;
      impl->normalize(token.content, s, at_origin);
      if (s.norm.empty()) continue;
      token.content = s.norm;
      impl->normalized_added.add(std::move(token));
    }
  }
  if (!pad_id && impl->trie.find("<pad>") >= 0) pad_id = impl->trie.find("<pad>");
  impl->pad_id = pad_id_of(j, path, pad_id);
  return UnigramTokenizer(std::move(impl), default_max_length_of(j, path));
}

// ---- Encoding ---------------------------------------------------------------------

Encoding UnigramTokenizer::encode(std::string_view text, int64_t max_length) const {
  Impl::Scratch s;
  return impl_->encode_one(text, cap_for(max_length), s);
}

std::vector<Encoding> UnigramTokenizer::encode_batch(const std::vector<std::string>& texts, int64_t max_length,
                                                     int num_threads) const {
  const size_t cap = cap_for(max_length);
  return detail::encode_in_parallel<Impl::Scratch>(
      texts.size(), num_threads, [&](size_t i, Impl::Scratch& s) { return impl_->encode_one(texts[i], cap, s); });
}

int32_t UnigramTokenizer::pad_id() const { return impl_->pad_id; }
int32_t UnigramTokenizer::unk_id() const { return impl_->unk_id; }
int32_t UnigramTokenizer::cls_id() const { return impl_->cls_id; }
int32_t UnigramTokenizer::sep_id() const { return impl_->sep_id; }
size_t UnigramTokenizer::vocab_size() const { return impl_->vocab_size; }
int64_t UnigramTokenizer::default_max_length() const { return max_length_; }

void UnigramTokenizer::set_default_max_length(int64_t n) {
  RLX_CHECK(n >= 2, "UnigramTokenizer: max_length ", n, " leaves no room for the two special tokens");
  max_length_ = n;
}

size_t UnigramTokenizer::cap_for(int64_t max_length) const {
  const int64_t m = max_length <= 0 ? max_length_ : max_length;
  RLX_CHECK(m >= 2, "UnigramTokenizer: max_length ", m, " leaves no room for the two special tokens");
  return static_cast<size_t>(m - 1);  // ids before the sep token, cls included
}

}  // namespace rlx
