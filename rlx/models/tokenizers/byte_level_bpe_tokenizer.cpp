// Byte-level BPE tokenizer from tokenizer.json (pipeline in byte_level_bpe_tokenizer.h).
//
// Parity with tokenizers 0.23.3 includes its loading rules:
//   - An added token takes the id its content has in the model vocabulary (or
//     an earlier added token), whatever id the file gives it; a new content gets
//     the next id past the vocabulary, as the library's AddedVocabulary assigns.
//   - Added tokens are matched in two passes: those with normalized false over
//     the raw text, then those with normalized true over what is left.
//   - A repeated merge pair takes its last rank (the library builds a map from
//     the list).
//   - A byte whose character is not in the vocabulary becomes the unknown token
//     (one for a run of them with fuse_unk), or is dropped when the model has
//     none, and its neighbours may then merge.
#include "rlx/models/tokenizers/byte_level_bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "rlx/core/error.h"
#include "rlx/formats/hf_config.h"
#include "rlx/models/tokenizers/added_tokens.h"
#include "rlx/models/tokenizers/byte_level_bpe.h"
#include "rlx/models/tokenizers/hf_files.h"
#include "rlx/models/tokenizers/parallel_encode.h"
#include "rlx/models/tokenizers/unicode_norm.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx {
namespace {

using Json = nlohmann::json;
using namespace detail;  // hf_files.h, added_tokens.h
constexpr size_t npos = std::string_view::npos;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

int32_t find_id(const Vocab& vocab, std::string_view token) {
  auto it = vocab.find(token);
  return it == vocab.end() ? -1 : it->second;
}

// ---- Added tokens -------------------------------------------------------------

// ---- Loading helpers ----------------------------------------------------------

// A string field that the library accepts as null or "" and rlx supports only so.
void require_empty(const Json& model, const char* key, const std::string& where) {
  const auto value = json_get_opt<std::string>(model, key, where);
  RLX_CHECK_AS(Unsupported, !value || value->empty(), where, ".", key, ": '", value.value_or(""),
               "' is not supported (only an empty one is)");
}

}  // namespace

// ---- The tokenizer ------------------------------------------------------------

struct ByteLevelBpeTokenizer::Impl {
  // Per-thread buffers, reused across texts.
  struct Scratch {
    std::vector<TextPiece> raw_pieces, pieces;
    std::string prefixed;  // a piece with the prefix space
    byte_level::CodePoints cps;
    std::string mapped;  // a word as GPT-2 characters (ignore_merges)
    std::string normalized;  // a piece after the NFC normalizer
    std::vector<int32_t> code_points;
    std::vector<int32_t> word;
    byte_level::MergeScratch merge;
  };

  void encode_into(std::string_view text, size_t cap, Scratch& s, std::vector<int32_t>& ids) const;
  void pre_tokenize(std::string_view piece, size_t cap, Scratch& s, std::vector<int32_t>& ids) const;
  void encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& ids) const;
  Encoding encode_one(std::string_view text, size_t cap, Scratch& s) const;

  Vocab vocab;
  byte_level::MergeRules merges;
  std::array<int32_t, 256> byte_tokens{};   // byte → the token of its GPT-2 character, or -1
  std::array<std::string, 256> byte_chars;  // byte → its GPT-2 character as UTF-8
  bool add_prefix_space = false, ignore_merges = false, fuse_unk = false;
  bool nfc = false;  // normalizer NFC (ModernBERT, OLMo): after the raw added tokens, before the rest
  int32_t unk_id = -1, cls_id = 0, sep_id = 0, pad_id = 0;
  AddedTokenMatcher raw_added, normalized_added;
  byte_level::WordCache cache;
};

void ByteLevelBpeTokenizer::Impl::encode_into(std::string_view text, size_t cap, Scratch& s,
                                              std::vector<int32_t>& ids) const {
  raw_added.split(text, s.raw_pieces);
  for (const TextPiece& raw : s.raw_pieces) {
    if (ids.size() >= cap) return;
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string_view part = text.substr(raw.begin, raw.end - raw.begin);
    if (nfc) {
      unicode_compose(part, /*compat=*/false, s.normalized, s.code_points);
      part = s.normalized;
    }
    normalized_added.split(part, s.pieces);
    for (const TextPiece& p : s.pieces) {
      if (ids.size() >= cap) return;
      if (p.id >= 0)
        ids.push_back(p.id);
      else
        pre_tokenize(part.substr(p.begin, p.end - p.begin), cap, s, ids);
    }
  }
}

void ByteLevelBpeTokenizer::Impl::pre_tokenize(std::string_view piece, size_t cap, Scratch& s,
                                               std::vector<int32_t>& ids) const {
  if (add_prefix_space && !piece.starts_with(' ')) {
    s.prefixed.assign(1, ' ');
    s.prefixed.append(piece);
    piece = s.prefixed;
  }
  s.cps.assign(piece);
  const size_t n = s.cps.size();
  for (size_t i = 0; i < n && ids.size() < cap;) {
    const size_t len = byte_level::match_at(s.cps, i, n, byte_level::Split::Gpt2);
    encode_word(piece.substr(s.cps.offset[i], s.cps.offset[i + len] - s.cps.offset[i]), s, ids);
    i += len;
  }
}

void ByteLevelBpeTokenizer::Impl::encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& ids) const {
  if (cache.find(word, ids)) return;
  if (ignore_merges) {
    s.mapped.clear();
    for (const unsigned char b : word) s.mapped += byte_chars[b];
    if (const int32_t id = find_id(vocab, s.mapped); id >= 0) {
      ids.push_back(id);
      cache.insert(word, &id, 1);
      return;
    }
  }
  s.word.clear();
  bool after_unknown = false;
  for (const unsigned char b : word) {
    const int32_t id = byte_tokens[b];
    if (id < 0 && (unk_id < 0 || (fuse_unk && after_unknown))) continue;
    s.word.push_back(id >= 0 ? id : unk_id);
    after_unknown = id < 0;
  }
  merges.apply(s.word, s.merge);
  ids.insert(ids.end(), s.word.begin(), s.word.end());
  cache.insert(word, s.word.data(), s.word.size());
}

Encoding ByteLevelBpeTokenizer::Impl::encode_one(std::string_view text, size_t cap, Scratch& s) const {
  require_utf8(text, "ByteLevelBpeTokenizer");
  std::vector<int32_t> ids{cls_id};
  encode_into(text, cap, s, ids);
  return finish_encoding(std::move(ids), cap, sep_id);
}

// ---- Loading ------------------------------------------------------------------

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(std::shared_ptr<const Impl> impl, int64_t max_length)
    : impl_(std::move(impl)), max_length_(max_length) {}

ByteLevelBpeTokenizer ByteLevelBpeTokenizer::from_tokenizer_json(const std::string& path) {
  return from_tokenizer_json(load_json_file(path), path);
}

ByteLevelBpeTokenizer ByteLevelBpeTokenizer::from_tokenizer_json(const Json& j, const std::string& path) {
  RLX_FORMAT_CHECK(j.is_object(), path, ": expected a JSON object but found ", j.type_name());
  auto impl = std::make_shared<Impl>();

  // The model: vocabulary, merges, and the options rlx supports.
  const std::string where_model = path + ": model";
  const Json& model = member(j, "model", path);
  const auto type = json_get<std::string>(model, "type", where_model);
  RLX_CHECK_AS(Unsupported, type == "BPE", where_model, ": type '", type, "' is not BPE");
  RLX_CHECK_AS(Unsupported, !json_get_or<bool>(model, "byte_fallback", false, where_model), where_model,
               ".byte_fallback: byte fallback is not supported");
  const double dropout = json_get_or<double>(model, "dropout", 0.0, where_model);
  RLX_CHECK_AS(Unsupported, dropout == 0.0, where_model, ".dropout: BPE dropout (", dropout, ") is not supported");
  require_empty(model, "continuing_subword_prefix", where_model);
  require_empty(model, "end_of_word_suffix", where_model);
  impl->fuse_unk = json_get_or<bool>(model, "fuse_unk", false, where_model);
  impl->ignore_merges = json_get_or<bool>(model, "ignore_merges", false, where_model);

  const Json& vocab = member(model, "vocab", where_model);
  RLX_FORMAT_CHECK(vocab.is_object() && !vocab.empty(), where_model,
                   ".vocab: expected a non-empty object of token: id but found ", vocab.type_name());
  RLX_FORMAT_CHECK(vocab.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), where_model,
                   ".vocab: too many tokens");
  impl->vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    const std::string where = str(where_model, ".vocab['", token.substr(0, 64), "']");
    RLX_FORMAT_CHECK(utf8::first_invalid(token) == npos, where, ": token is not valid UTF-8");
    impl->vocab.emplace(token, token_id(id, where));
  }
  const std::array<char32_t, 256> to_unicode = byte_level::byte_to_unicode();
  for (size_t b = 0; b < 256; ++b) {
    utf8::append(impl->byte_chars[b], to_unicode[b]);
    impl->byte_tokens[b] = find_id(impl->vocab, impl->byte_chars[b]);
  }
  if (const auto unk = json_get_opt<std::string>(model, "unk_token", where_model)) {
    impl->unk_id = find_id(impl->vocab, *unk);
    RLX_FORMAT_CHECK(impl->unk_id >= 0, where_model, ".unk_token: '", unk->substr(0, 64), "' is not in the vocabulary");
  }

  const Json& merges = member(model, "merges", where_model);
  RLX_FORMAT_CHECK(merges.is_array(), where_model, ".merges: expected an array but found ", merges.type_name());
  RLX_FORMAT_CHECK(merges.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), where_model,
                   ".merges: too many merges");
  impl->merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string where = str(where_model, ".merges[", rank, "]");
    const Json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const auto& text = m.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      RLX_FORMAT_CHECK(space != npos && text.find(' ', space + 1) == npos, where, ": '", text.substr(0, 64),
                       "' is not of the form 'left right'");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {
      RLX_FORMAT_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where,
                       ": expected 'left right' or [left, right] but found ", m.dump().substr(0, 64));
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    const int32_t left_id = find_id(impl->vocab, left), right_id = find_id(impl->vocab, right);
    const int32_t merged_id = find_id(impl->vocab, left + right);
    for (const auto& [part, id] : {std::pair{&left, left_id}, std::pair{&right, right_id}})
      RLX_FORMAT_CHECK(id >= 0, where, ": '", part->substr(0, 64), "' is not in the vocabulary");
    RLX_FORMAT_CHECK(merged_id >= 0, where, ": the merged token '", (left + right).substr(0, 64),
                     "' is not in the vocabulary");
    impl->merges.add(left_id, right_id, static_cast<int32_t>(rank), merged_id, /*replace=*/true);
  }

  // No normalizer or NFC (alone or as a one-step Sequence); ByteLevel with its regex.
  const Json& normalizer = member(j, "normalizer", path);
  auto is_type = [](const Json& n, const char* type) { return n.is_object() && n.value("type", Json()) == type; };
  const Json steps = is_type(normalizer, "Sequence") ? normalizer.value("normalizers", Json()) : Json();
  impl->nfc = is_type(normalizer, "NFC") || (steps.is_array() && steps.size() == 1 && is_type(steps[0], "NFC"));
  const bool no_normalizer = normalizer.is_null() || (steps.is_array() && steps.empty());
  RLX_CHECK_AS(Unsupported, no_normalizer || impl->nfc, path, ": normalizer: ", normalizer.dump().substr(0, 64),
               " is not supported (byte-level BPE is supported without a normalizer or with NFC)");
  const std::string where_pre = path + ": pre_tokenizer";
  const Json& pre = member(j, "pre_tokenizer", path);
  RLX_CHECK_AS(Unsupported, pre.is_object(), where_pre, ": expected ByteLevel but found ", pre.type_name());
  const auto pre_type = json_get<std::string>(pre, "type", where_pre);
  RLX_CHECK_AS(Unsupported, pre_type == "ByteLevel", where_pre, ": type '", pre_type,
               "' is not supported (ByteLevel is)");
  impl->add_prefix_space = json_get<bool>(pre, "add_prefix_space", where_pre);
  RLX_CHECK_AS(Unsupported, json_get_or<bool>(pre, "use_regex", true, where_pre), where_pre,
               ".use_regex: ByteLevel without the GPT-2 regex is not supported");

  std::tie(impl->cls_id, impl->sep_id) = parse_cls_sep(member(j, "post_processor", path), path + ": post_processor");

  // Added tokens, with the ids the library gives them (see the file comment).
  // The pad token: tokenizer_config.json's pad_token (ModernBERT's "[PAD]"), else "<pad>".
  const Json tcfg = sibling_tokenizer_config(path);
  const std::string pad_name =
      (tcfg.is_object() ? special_token(tcfg, "pad_token", path + ": tokenizer_config.json") : std::nullopt)
          .value_or("<pad>");
  std::optional<int32_t> pad_id;
  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    RLX_FORMAT_CHECK(it->is_array(), path, ": added_tokens must be an array");
    Vocab added;
    int64_t next_id = static_cast<int64_t>(impl->vocab.size());
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = str(path, ": added_tokens[", i, "]");
      const Json& t = (*it)[i];
      // The file's id must be well-formed even though the library assigns its own.
      AddedTokenMatcher::Token token{json_get<std::string>(t, "content", where), token_id(member(t, "id", where), where),
                               json_get_or<bool>(t, "lstrip", false, where),
                               json_get_or<bool>(t, "rstrip", false, where)};
      RLX_CHECK_AS(Unsupported, !json_get_or<bool>(t, "single_word", false, where), where,
                   ".single_word: single-word added tokens are not supported");
      RLX_FORMAT_CHECK(utf8::first_invalid(token.content) == npos, where, ": content is not valid UTF-8");
      if (token.content.empty()) continue;  // the library ignores it
      if (const int32_t known = find_id(added, token.content); known >= 0) {
        token.id = known;
      } else if (const int32_t in_vocab = find_id(impl->vocab, token.content); in_vocab >= 0) {
        token.id = in_vocab;
      } else {
        RLX_FORMAT_CHECK(next_id < std::numeric_limits<int32_t>::max(), where, ": no id left for the token");
        token.id = static_cast<int32_t>(next_id++);
      }
      next_id = std::max<int64_t>(next_id, int64_t{token.id} + 1);
      added.emplace(token.content, token.id);
      if (token.content == pad_name) pad_id = token.id;
      if (json_get_or<bool>(t, "normalized", false, where))
        impl->normalized_added.add(std::move(token));
      else
        impl->raw_added.add(std::move(token));
    }
  }
  if (!pad_id && find_id(impl->vocab, pad_name) >= 0) pad_id = find_id(impl->vocab, pad_name);
  impl->pad_id = pad_id_of(j, path, pad_id);
  return ByteLevelBpeTokenizer(std::move(impl), default_max_length_of(j, path));
}

// ---- Encoding -----------------------------------------------------------------

Encoding ByteLevelBpeTokenizer::encode(std::string_view text, int64_t max_length) const {
  Impl::Scratch s;
  return impl_->encode_one(text, cap_for(max_length), s);
}

std::vector<Encoding> ByteLevelBpeTokenizer::encode_batch(const std::vector<std::string>& texts, int64_t max_length,
                                                          int num_threads) const {
  const size_t cap = cap_for(max_length);
  return detail::encode_in_parallel<Impl::Scratch>(
      texts.size(), num_threads, [&](size_t i, Impl::Scratch& s) { return impl_->encode_one(texts[i], cap, s); });
}

int32_t ByteLevelBpeTokenizer::pad_id() const { return impl_->pad_id; }
int32_t ByteLevelBpeTokenizer::unk_id() const { return impl_->unk_id; }
int32_t ByteLevelBpeTokenizer::cls_id() const { return impl_->cls_id; }
int32_t ByteLevelBpeTokenizer::sep_id() const { return impl_->sep_id; }
size_t ByteLevelBpeTokenizer::vocab_size() const { return impl_->vocab.size(); }
int64_t ByteLevelBpeTokenizer::default_max_length() const { return max_length_; }

void ByteLevelBpeTokenizer::set_default_max_length(int64_t n) {
  RLX_CHECK(n >= 2, "ByteLevelBpeTokenizer: max_length ", n, " leaves no room for the two special tokens");
  max_length_ = n;
}

size_t ByteLevelBpeTokenizer::cap_for(int64_t max_length) const {
  const int64_t m = max_length <= 0 ? max_length_ : max_length;
  RLX_CHECK(m >= 2, "ByteLevelBpeTokenizer: max_length ", m, " leaves no room for the two special tokens");
  return static_cast<size_t>(m - 1);  // ids before the sep token, cls included
}

}  // namespace rlx
