#include "rlx/models/tokenizers/wordpiece.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>

#include "rlx/core/error.h"
#include "rlx/core/log.h"
#include "rlx/formats/hf_config.h"
#include "rlx/formats/mmap_file.h"
#include "rlx/models/tokenizers/hf_files.h"
#include "rlx/models/tokenizers/parallel_encode.h"
#include "rlx/models/tokenizers/utf8.h"
#include "rlx/models/tokenizers/wordpiece_tables.h"

namespace rlx {
namespace {

using Json = nlohmann::json;
constexpr size_t npos = std::string_view::npos;

// ---- UTF-8 -------------------------------------------------------------------

// Decodes one code point of already-validated UTF-8 and advances `p`.
inline char32_t decode(const unsigned char*& p) {
  const char32_t c = *p++;
  if (c < 0x80) return c;
  if (c < 0xE0) return ((c & 0x1F) << 6) | (*p++ & 0x3F);
  if (c < 0xF0) {
    const char32_t r = ((c & 0x0F) << 12) | ((p[0] & 0x3Fu) << 6) | (p[1] & 0x3Fu);
    p += 2;
    return r;
  }
  const char32_t r = ((c & 0x07) << 18) | ((p[0] & 0x3Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  p += 3;
  return r;
}

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    const char b[2] = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    out.append(b, 2);
  } else if (c < 0x10000) {
    const char b[3] = {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
                       static_cast<char>(0x80 | (c & 0x3F))};
    out.append(b, 3);
  } else {
    const char b[4] = {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
                       static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    out.append(b, 4);
  }
}

// ---- Character classes ---------------------------------------------------------
// HF's own classes, measured by gen_wordpiece_tables.py: its Unicode category
// tables are older than utf8proc's, and exact parity needs HF's.

namespace tables = wordpiece_tables;

template <size_t N>
constexpr bool in_table(const tables::Range (&t)[N], char32_t c) {
  const auto* it = std::upper_bound(t, t + N, c, [](char32_t v, const tables::Range& r) { return v < r.lo; });
  return it != t && c <= (it - 1)->hi;
}

enum CharClass : uint8_t { kControl = 1, kWhitespace = 2, kPunctuation = 4, kChinese = 8, kMark = 16 };

constexpr bool in_class(char32_t c, CharClass k) {
  switch (k) {
    case kControl:
      return in_table(tables::kControl, c);
    case kWhitespace:
      return in_table(tables::kWhitespace, c);
    case kPunctuation:
      return in_table(tables::kPunctuation, c);
    case kChinese:
      return in_table(tables::kChinese, c);
    case kMark:
      return in_table(tables::kNonspacingMark, c);
  }
  return false;
}

// Latin-1 answers from one table lookup, since most text is mostly ASCII.
constexpr auto kLatin1 = [] {
  std::array<uint8_t, 256> t{};
  for (char32_t c = 0; c < 256; ++c)
    for (CharClass k : {kControl, kWhitespace, kPunctuation, kChinese, kMark})
      if (in_class(c, k)) t[c] |= k;
  return t;
}();

inline bool is(char32_t c, CharClass k) { return c < 256 ? (kLatin1[c] & k) != 0 : in_class(c, k); }

inline int combining_class(char32_t c) {
  return c < 0x300 ? 0 : utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

// Appends the canonical (NFD) decomposition of `c`, Hangul syllables included.
void append_nfd(std::u32string& out, char32_t c) {
  if (c < 0xC0) {  // nothing below U+00C0 decomposes
    out.push_back(c);
    return;
  }
  utf8proc_int32_t buf[8];
  int boundclass = 0;
  const auto n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 8, UTF8PROC_DECOMPOSE, &boundclass);
  RLX_ASSERT(n > 0 && n <= 8);
  for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back(static_cast<char32_t>(buf[i]));
}

// NFD's canonical ordering: a stable sort by combining class within each run
// of non-starters (class ≠ 0); starters act as barriers.
void canonical_order(std::u32string& s) {
  for (size_t i = 1; i < s.size(); ++i) {
    const int cc = combining_class(s[i]);
    if (cc == 0) continue;
    for (size_t j = i; j > 0 && combining_class(s[j - 1]) > cc; --j) std::swap(s[j - 1], s[j]);
  }
}

// Rust's char::to_lowercase (full mapping). U+0130 is the only code point whose
// unconditional full lowercase differs from the simple one utf8proc gives.
inline void append_lower(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
  } else if (c == 0x130) {
    out.append("i\xCC\x87");  // i + U+0307 COMBINING DOT ABOVE
  } else {
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
}

}  // namespace

using namespace detail;  // hf_files.h

// ---- Construction -------------------------------------------------------------

struct WordPieceTokenizer::Scratch {
  std::u32string cps;  // pending run of non-ASCII characters, after clean-text and CJK spacing
  std::u32string nfd;  // that run decomposed, before dropping Mn
  std::string norm;    // normalized UTF-8
};

void WordPieceTokenizer::Matcher::add(std::string content, int32_t id) {
  first_byte[static_cast<unsigned char>(content[0])] = true;
  tokens.emplace_back(std::move(content), id);
}

void WordPieceTokenizer::Matcher::find(std::string_view text, size_t pos, size_t& start, size_t& len,
                                       int32_t& id) const {
  start = npos;
  if (tokens.empty()) return;
  for (size_t i = pos; i < text.size(); ++i) {
    if (!first_byte[static_cast<unsigned char>(text[i])]) continue;
    len = 0;
    for (const auto& [tok, tid] : tokens) {
      if (tok.size() > len && text.compare(i, tok.size(), tok) == 0) len = tok.size(), id = tid;
    }
    if (len) {
      start = i;
      return;
    }
  }
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::pair<std::string, int32_t>> vocab, WordPieceConfig config,
                                       std::vector<AddedToken> added_tokens, const std::string& source)
    : config_(std::move(config)), strip_accents_(config_.strip_accents.value_or(config_.lowercase)) {
  RLX_FORMAT_CHECK(!vocab.empty(), source, ": the vocabulary is empty");
  RLX_FORMAT_CHECK(config_.max_input_chars_per_word >= 0, source, ": max_input_chars_per_word is negative");
  RLX_FORMAT_CHECK(config_.model_max_length >= 2, source, ": model_max_length ", config_.model_max_length,
                   " leaves no room for [CLS] and [SEP]");

  auto pool = std::make_shared<std::string>();
  size_t bytes = 0;
  for (const auto& [tok, id] : vocab) bytes += tok.size();
  pool->reserve(bytes);  // no reallocation below, so offsets become stable views
  std::vector<size_t> offsets;
  offsets.reserve(vocab.size());
  for (const auto& [tok, id] : vocab) {
    RLX_FORMAT_CHECK(utf8::first_invalid(tok) == npos, source, ": vocabulary token with id ", id, " is not valid UTF-8");
    offsets.push_back(pool->size());
    pool->append(tok);
  }
  pool_ = std::move(pool);
  const std::string_view all(*pool_);
  const std::string_view prefix = config_.continuing_subword_prefix;
  vocab_.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const std::string_view tok = all.substr(offsets[i], vocab[i].first.size());
    vocab_.insert_or_assign(tok, vocab[i].second);  // a later duplicate wins, as in HF
    max_piece_bytes_ = std::max(max_piece_bytes_, tok.size());
  }
  // Continuation pieces keyed without the prefix, so lookups need no string building.
  for (const auto& [tok, id] : vocab_) {
    if (tok.size() < prefix.size() || tok.substr(0, prefix.size()) != prefix) continue;
    continuation_.insert_or_assign(tok.substr(prefix.size()), id);
    max_cont_bytes_ = std::max(max_cont_bytes_, tok.size() - prefix.size());
  }

  for (auto& t : added_tokens) {
    RLX_FORMAT_CHECK(!t.content.empty(), source, ": added token with id ", t.id, " has empty content");
    RLX_FORMAT_CHECK(utf8::first_invalid(t.content) == npos, source, ": added token with id ", t.id,
                     " is not valid UTF-8");
    if (!t.normalized) {
      raw_added_.add(t.content, t.id);
      continue;
    }
    // HF matches a normalized added token against normalized text, so its
    // pattern is the token's own normalized form.
    Scratch s;
    normalize(t.content, s);
    if (!s.norm.empty()) normalized_added_.add(s.norm, t.id);
  }
  auto lookup = [&](const std::string& name, const char* role) {
    if (auto id = token_to_id(name)) return *id;
    for (const auto& t : added_tokens)
      if (t.content == name) return t.id;
    throw FormatError(str(source, ": ", role, " token '", name, "' is in neither the vocabulary nor added_tokens"));
  };
  unk_id_ = lookup(config_.unk_token, "unk");
  cls_id_ = lookup(config_.cls_token, "cls");
  sep_id_ = lookup(config_.sep_token, "sep");
  pad_id_ = lookup(config_.pad_token, "pad");
}

WordPieceTokenizer WordPieceTokenizer::from_tokenizer_json(const std::string& path) {
  return from_tokenizer_json(load_json_file(path), path);
}

WordPieceTokenizer WordPieceTokenizer::from_tokenizer_json(const Json& j, const std::string& path) {
  RLX_FORMAT_CHECK(j.is_object(), path, ": expected a JSON object but found ", j.type_name());
  WordPieceConfig cfg;

  const Json& model = member(j, "model", path);
  const std::string where_model = path + ": model";
  const auto type = json_get<std::string>(model, "type", where_model);
  RLX_CHECK_AS(Unsupported, type == "WordPiece", where_model, ": type '", type,
               "' is not WordPiece; this loader handles BERT WordPiece tokenizers only");
  cfg.unk_token = json_get_or<std::string>(model, "unk_token", cfg.unk_token, where_model);
  cfg.continuing_subword_prefix =
      json_get_or<std::string>(model, "continuing_subword_prefix", cfg.continuing_subword_prefix, where_model);
  cfg.max_input_chars_per_word =
      json_get_or<int64_t>(model, "max_input_chars_per_word", cfg.max_input_chars_per_word, where_model);
  const Json& jvocab = member(model, "vocab", where_model);
  RLX_FORMAT_CHECK(jvocab.is_object(), where_model, ".vocab: expected an object of token → id but found ",
                   jvocab.type_name());
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(jvocab.size());
  for (const auto& [tok, id] : jvocab.items())
    vocab.emplace_back(tok, token_id(id, str(where_model, ".vocab['", tok, "']")));

  // A null normalizer means none; anything but BertNormalizer would change the text differently.
  const std::string where_norm = path + ": normalizer";
  const Json& norm = member(j, "normalizer", path);
  if (norm.is_null()) {
    cfg.clean_text = cfg.handle_chinese_chars = cfg.lowercase = false;
    cfg.strip_accents = false;
  } else {
    const auto ntype = json_get<std::string>(norm, "type", where_norm);
    RLX_CHECK_AS(Unsupported, ntype == "BertNormalizer", where_norm, ": type '", ntype, "' is not BertNormalizer");
    cfg.clean_text = json_get_or<bool>(norm, "clean_text", true, where_norm);
    cfg.handle_chinese_chars = json_get_or<bool>(norm, "handle_chinese_chars", true, where_norm);
    cfg.lowercase = json_get_or<bool>(norm, "lowercase", true, where_norm);
    cfg.strip_accents = json_get_opt<bool>(norm, "strip_accents", where_norm);
  }
  const Json& pre = member(j, "pre_tokenizer", path);
  const auto ptype = json_get<std::string>(pre, "type", path + ": pre_tokenizer");
  RLX_CHECK_AS(Unsupported, ptype == "BertPreTokenizer", path, ": pre_tokenizer: type '", ptype,
               "' is not BertPreTokenizer");

  // [CLS]/[SEP] (MPNet, RoBERTa: <s>/</s>) come from the post-processor, in
  // any of HF's three spellings; all three wrap one sequence as cls A sep.
  const std::string where_post = path + ": post_processor";
  const Json& post = member(j, "post_processor", path);
  RLX_CHECK_AS(Unsupported, post.is_object(), where_post,
               ": expected BertProcessing, RobertaProcessing or TemplateProcessing but found ", post.type_name());
  const auto post_type = json_get<std::string>(post, "type", where_post);
  std::optional<int32_t> cls_id, sep_id;
  if (post_type == "BertProcessing" || post_type == "RobertaProcessing") {
    for (auto [key, name, id] :
         {std::tuple{"cls", &cfg.cls_token, &cls_id}, std::tuple{"sep", &cfg.sep_token, &sep_id}}) {
      const Json& pair = member(post, key, where_post);
      RLX_FORMAT_CHECK(pair.is_array() && pair.size() == 2 && pair[0].is_string(), where_post, ".", key,
                       ": expected [token, id]");
      *name = pair[0].get<std::string>();
      *id = token_id(pair[1], str(where_post, ".", key));
    }
  } else if (post_type == "TemplateProcessing") {
    const Json& single = member(post, "single", where_post);
    const bool bert_shape = single.is_array() && single.size() == 3 && single[0].contains("SpecialToken") &&
                            single[1].contains("Sequence") && single[2].contains("SpecialToken");
    RLX_CHECK_AS(Unsupported, bert_shape, where_post, ".single: only the template [special] $A [special] is supported");
    const Json& specials = member(post, "special_tokens", where_post);
    for (auto [pos, name, id] : {std::tuple{0, &cfg.cls_token, &cls_id}, std::tuple{2, &cfg.sep_token, &sep_id}}) {
      const std::string where = str(where_post, ".single[", pos, "]");
      *name = json_get<std::string>(member(single[pos], "SpecialToken", where), "id", where);
      const Json& ids = member(member(specials, name->c_str(), where_post + ".special_tokens"), "ids", where);
      RLX_FORMAT_CHECK(ids.is_array() && ids.size() == 1, where, ": special token '", *name, "' must map to one id");
      *id = token_id(ids[0], where);
    }
  } else {
    throw Unsupported(
        str(where_post, ": type '", post_type, "' is not BertProcessing, RobertaProcessing or TemplateProcessing"));
  }

  std::vector<AddedToken> added;
  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    RLX_FORMAT_CHECK(it->is_array(), path, ": added_tokens must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = str(path, ": added_tokens[", i, "]");
      const Json& t = (*it)[i];
      added.push_back({json_get<std::string>(t, "content", where), token_id(member(t, "id", where), where),
                       json_get_or<bool>(t, "normalized", false, where)});
    }
  }
  // The pad token: the file's padding section, else tokenizer_config.json's
  // (MPNet's "<pad>"), else BERT's [PAD].
  const Json tcfg = sibling_tokenizer_config(path);
  if (const Json& pad = j.value("padding", Json()); pad.is_object()) {
    cfg.pad_token = json_get_or<std::string>(pad, "pad_token", cfg.pad_token, path + ": padding");
  } else if (tcfg.is_object()) {
    const std::string where = (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
    if (auto s = special_token(tcfg, "pad_token", where)) cfg.pad_token = *s;
  }

  // Default length: transformers' model_max_length, else the file's own truncation setting.
  if (auto n = tcfg.is_object() ? model_max_length(tcfg) : std::nullopt) {
    cfg.model_max_length = *n;
  } else if (const Json& tr = j.value("truncation", Json()); tr.is_object()) {
    cfg.model_max_length = json_get_or<int64_t>(tr, "max_length", cfg.model_max_length, path + ": truncation");
  }

  WordPieceTokenizer tok(std::move(vocab), std::move(cfg), std::move(added), path);
  tok.cls_id_ = *cls_id;
  tok.sep_id_ = *sep_id;
  return tok;
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_txt(const std::string& path) {
  auto file = MappedFile::open(path);
  const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
  // Lines end in \n, \r\n or \r, like Python's universal newlines in HF's load_vocab.
  std::vector<std::pair<std::string, int32_t>> vocab;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find_first_of("\r\n", pos);
    if (end == npos) end = text.size();
    RLX_FORMAT_CHECK(vocab.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), path, ": too many lines");
    vocab.emplace_back(std::string(text.substr(pos, end - pos)), static_cast<int32_t>(vocab.size()));
    RLX_FORMAT_CHECK(utf8::first_invalid(vocab.back().first) == npos, path, ": line ", vocab.size(),
                     " is not valid UTF-8");
    pos = end + 1;
    if (end + 1 < text.size() && text[end] == '\r' && text[end + 1] == '\n') ++pos;
  }

  WordPieceConfig cfg;
  std::string mask_token = "[MASK]";
  const Json tcfg = sibling_tokenizer_config(path);
  if (tcfg.is_object()) {
    const std::string where = (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
    cfg.lowercase = json_get_or<bool>(tcfg, "do_lower_case", true, where);
    cfg.strip_accents = json_get_opt<bool>(tcfg, "strip_accents", where);
    cfg.handle_chinese_chars = json_get_or<bool>(tcfg, "tokenize_chinese_chars", true, where);
    for (auto [key, dst] : {std::pair{"unk_token", &cfg.unk_token}, std::pair{"cls_token", &cfg.cls_token},
                            std::pair{"sep_token", &cfg.sep_token}, std::pair{"pad_token", &cfg.pad_token},
                            std::pair{"mask_token", &mask_token}})
      if (auto s = special_token(tcfg, key, where)) *dst = *s;
    if (auto n = model_max_length(tcfg)) cfg.model_max_length = *n;
  }
  // transformers registers the five special tokens as unnormalized added tokens.
  std::vector<AddedToken> added;
  for (const std::string* name : {&cfg.pad_token, &cfg.unk_token, &cfg.cls_token, &cfg.sep_token, &mask_token}) {
    for (auto it = vocab.rbegin(); it != vocab.rend(); ++it) {
      if (it->first == *name) {
        added.push_back({*name, it->second, false});
        break;
      }
    }
  }
  return WordPieceTokenizer(std::move(vocab), std::move(cfg), std::move(added), path);
}

WordPieceTokenizer WordPieceTokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  std::optional<WordPieceTokenizer> tok;
  if (fs::exists(d / "tokenizer.json"))
    tok = from_tokenizer_json((d / "tokenizer.json").string());
  else if (fs::exists(d / "vocab.txt"))
    tok = from_vocab_txt((d / "vocab.txt").string());
  else
    throw FormatError(str(dir, ": neither tokenizer.json nor vocab.txt found"));
  apply_sentence_transformers_config(dir, *tok);
  return std::move(*tok);
}

void WordPieceTokenizer::set_default_max_length(int64_t n) {
  RLX_CHECK(n >= 2, "WordPieceTokenizer: max_length ", n, " leaves no room for [CLS] and [SEP]");
  config_.model_max_length = n;
}

std::optional<int32_t> WordPieceTokenizer::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// ---- Encoding -----------------------------------------------------------------

// BertNormalizer. Kept ASCII characters are NFD starters that decompose to
// themselves, so they go straight to the output; only runs of other characters
// take the buffered path (decompose, reorder, drop marks, lowercase). Dropped
// controls do not end a run: HF removes them before decomposing.
void WordPieceTokenizer::normalize(std::string_view text, Scratch& s) const {
  s.norm.clear();
  s.cps.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    if (*p < 0x80) {
      char c = static_cast<char>(*p++);
      if (config_.clean_text) {
        if (is(static_cast<char32_t>(c), kControl)) continue;
        if (is(static_cast<char32_t>(c), kWhitespace)) c = ' ';
      }
      if (!s.cps.empty()) flush_run(s);
      s.norm.push_back(config_.lowercase && c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
      continue;
    }
    char32_t c = decode(p);
    if (config_.clean_text) {
      if (is(c, kControl)) continue;
      if (is(c, kWhitespace)) c = ' ';
    }
    if (config_.handle_chinese_chars && is(c, kChinese)) {
      s.cps.push_back(' ');
      s.cps.push_back(c);
      s.cps.push_back(' ');
    } else {
      s.cps.push_back(c);
    }
  }
  if (!s.cps.empty()) flush_run(s);
}

void WordPieceTokenizer::flush_run(Scratch& s) const {
  const std::u32string* chars = &s.cps;
  if (strip_accents_) {  // HF strips accents before lowercasing
    s.nfd.clear();
    for (char32_t c : s.cps) append_nfd(s.nfd, c);
    canonical_order(s.nfd);
    std::erase_if(s.nfd, [](char32_t c) { return is(c, kMark); });
    chars = &s.nfd;
  }
  for (char32_t c : *chars) {
    if (config_.lowercase)
      append_lower(s.norm, c);
    else
      append_utf8(s.norm, c);
  }
  s.cps.clear();
}

void WordPieceTokenizer::encode_into(std::string_view text, size_t cap, Scratch& s, std::vector<int32_t>& ids) const {
  size_t pos = 0, start = 0, len = 0;
  int32_t id = 0;
  while (ids.size() < cap) {
    raw_added_.find(text, pos, start, len, id);
    const size_t seg_end = start == npos ? text.size() : start;
    if (seg_end > pos) {
      normalize(text.substr(pos, seg_end - pos), s);
      split_normalized(s.norm, cap, ids);
    }
    if (start == npos) break;
    ids.push_back(id);
    pos = start + len;
  }
}

void WordPieceTokenizer::split_normalized(std::string_view norm, size_t cap, std::vector<int32_t>& ids) const {
  size_t pos = 0, start = 0, len = 0;
  int32_t id = 0;
  while (ids.size() < cap) {
    normalized_added_.find(norm, pos, start, len, id);
    const size_t seg_end = start == npos ? norm.size() : start;
    pre_tokenize(norm.substr(pos, seg_end - pos), cap, ids);
    if (start == npos) break;
    ids.push_back(id);
    pos = start + len;
  }
}

// BertPreTokenizer: whitespace ends a word and is dropped; punctuation ends a
// word and is a word of its own. Stops once `cap` ids exist (truncation).
void WordPieceTokenizer::pre_tokenize(std::string_view text, size_t cap, std::vector<int32_t>& ids) const {
  const auto* base = reinterpret_cast<const unsigned char*>(text.data());
  const auto* p = base;
  const auto* end = base + text.size();
  size_t word_start = 0, nchars = 0;
  auto flush = [&](size_t word_end) {
    if (nchars) word_piece(text.substr(word_start, word_end - word_start), nchars, ids);
    nchars = 0;
  };
  while (p < end && ids.size() < cap) {
    const size_t at = static_cast<size_t>(p - base);
    const char32_t c = decode(p);
    if (is(c, kWhitespace)) {
      flush(at);
    } else if (is(c, kPunctuation)) {
      flush(at);
      word_piece(text.substr(at, static_cast<size_t>(p - base) - at), 1, ids);
    } else {
      if (nchars++ == 0) word_start = at;
    }
  }
  if (ids.size() < cap) flush(text.size());
}

// Greedy longest-match-first over the word's bytes, shrinking by whole code points.
void WordPieceTokenizer::word_piece(std::string_view word, size_t nchars, std::vector<int32_t>& ids) const {
  if (nchars > static_cast<size_t>(config_.max_input_chars_per_word)) {
    ids.push_back(unk_id_);
    return;
  }
  const size_t first = ids.size();
  size_t start = 0;
  while (start < word.size()) {
    const auto& map = start == 0 ? vocab_ : continuation_;
    size_t end = std::min(word.size(), start + (start == 0 ? max_piece_bytes_ : max_cont_bytes_));
    while (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;  // char boundary
    bool found = false;
    while (end > start) {
      if (auto it = map.find(word.substr(start, end - start)); it != map.end()) {
        ids.push_back(it->second);
        found = true;
        break;
      }
      do --end;
      while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (!found) {
      ids.resize(first);
      ids.push_back(unk_id_);
      return;
    }
    start = end;
  }
}

size_t WordPieceTokenizer::cap_for(int64_t max_length) const {
  const int64_t m = max_length <= 0 ? config_.model_max_length : max_length;
  RLX_CHECK(m >= 2, "WordPieceTokenizer: max_length ", m, " leaves no room for [CLS] and [SEP]");
  return static_cast<size_t>(m - 1);  // ids before [SEP], [CLS] included
}

Encoding WordPieceTokenizer::encode_one(std::string_view text, size_t cap, Scratch& s) const {
  detail::require_utf8(text, "WordPieceTokenizer");
  std::vector<int32_t> ids{cls_id_};
  encode_into(text, cap, s, ids);
  return detail::finish_encoding(std::move(ids), cap, sep_id_);
}

Encoding WordPieceTokenizer::encode(std::string_view text, int64_t max_length) const {
  Scratch s;
  return encode_one(text, cap_for(max_length), s);
}

std::vector<Encoding> WordPieceTokenizer::encode_batch(const std::vector<std::string>& texts, int64_t max_length,
                                                       int num_threads) const {
  const size_t cap = cap_for(max_length);
  return detail::encode_in_parallel<Scratch>(
      texts.size(), num_threads, [&](size_t i, Scratch& s) { return encode_one(texts[i], cap, s); });
}

}  // namespace rlx
