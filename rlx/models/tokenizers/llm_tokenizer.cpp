#include "rlx/models/tokenizers/llm_tokenizer.h"

#include <algorithm>
#include <array>

#include "rlx/core/error.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx {

// Defined in spm_tokenizer.cpp and bpe_tokenizer.cpp.
std::unique_ptr<LlmTokenizer> make_spm_tokenizer(const GgufFile& f);
std::unique_ptr<LlmTokenizer> make_bpe_tokenizer(const GgufFile& f);

namespace {

// Texts llama.cpp treats as end of generation whatever their id (llama-vocab.cpp).
constexpr std::array<std::string_view, 12> kEndOfGenerationTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",  "<|return|>", "<|call|>",  "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>"};

// "<0x0A>" → 0x0A; -1 when `text` is not of that form.
int parse_byte_token(std::string_view text) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::unique_ptr<LlmTokenizer> LlmTokenizer::from_gguf(const GgufFile& f) {
  RLX_FORMAT_CHECK(f.contains("tokenizer.ggml.model"), f.source(),
                   ": tokenizer.ggml.model is missing (the file has no tokenizer)");
  const std::string& model = f.get<std::string>("tokenizer.ggml.model");
  if (model == "llama") return make_spm_tokenizer(f);
  if (model == "gpt2") return make_bpe_tokenizer(f);
  throw Unsupported(str(f.source(), ": tokenizer.ggml.model '", model,
                        "' is not supported (supported: 'llama' = SentencePiece, 'gpt2' = byte-level BPE)"));
}

void LlmTokenizer::load_common(const GgufFile& f, std::string model_type) {
  model_type_ = std::move(model_type);
  source_ = f.source();
  RLX_FORMAT_CHECK(f.contains("tokenizer.ggml.tokens"), source_,
                   ": tokenizer.ggml.tokens is missing (the file has no tokenizer vocabulary)");
  tokens_ = f.get_array<std::string>("tokenizer.ggml.tokens");
  const size_t n = tokens_.size();
  RLX_FORMAT_CHECK(n > 0 && n < (size_t{1} << 31), source_, ": tokenizer.ggml.tokens has ", n,
                   " entries (expected 1 to 2^31 - 1)");

  types_.assign(n, TokenType::Normal);
  if (f.contains("tokenizer.ggml.token_type")) {
    const auto& raw = f.get_array<int32_t>("tokenizer.ggml.token_type");
    RLX_FORMAT_CHECK(raw.size() == n, source_, ": tokenizer.ggml.token_type has ", raw.size(),
                     " entries but tokenizer.ggml.tokens has ", n);
    for (size_t i = 0; i < n; ++i) {
      RLX_FORMAT_CHECK(raw[i] >= 1 && raw[i] <= 6, source_, ": tokenizer.ggml.token_type[", i, "] is ", raw[i],
                       " (expected 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused or 6 byte)");
      types_[i] = static_cast<TokenType>(raw[i]);
    }
  }

  // A later duplicate replaces an earlier one, as in llama.cpp.
  token_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_ids_[tokens_[i]] = static_cast<int32_t>(i);

  auto optional_id = [&](const char* key) -> int32_t {
    if (!f.contains(key)) return -1;
    const int64_t id = f.get_int(key);
    RLX_FORMAT_CHECK(id >= 0 && id < static_cast<int64_t>(n), source_, ": ", key, " is ", id,
                     " but the vocabulary has ", n, " tokens");
    return static_cast<int32_t>(id);
  };
  bos_ = optional_id("tokenizer.ggml.bos_token_id");
  eos_ = optional_id("tokenizer.ggml.eos_token_id");
  unk_ = optional_id("tokenizer.ggml.unknown_token_id");
  const int32_t eot = optional_id("tokenizer.ggml.eot_token_id");
  const int32_t eom = optional_id("tokenizer.ggml.eom_token_id");
  if (unk_ < 0)
    for (size_t i = 0; i < n && unk_ < 0; ++i)
      if (types_[i] == TokenType::Unknown) unk_ = static_cast<int32_t>(i);

  // llama.cpp's default is BOS for SentencePiece vocabularies, none for BPE.
  add_bos_ = f.get_or<bool>("tokenizer.ggml.add_bos_token", model_type_ == "llama") && bos_ >= 0;

  end_of_generation_.assign(n, false);
  for (int32_t id : {eos_, eot, eom})
    if (id >= 0) end_of_generation_[id] = true;
  for (std::string_view text : kEndOfGenerationTexts)
    if (auto it = token_ids_.find(text); it != token_ids_.end()) end_of_generation_[it->second] = true;

  // What each token decodes to. Normal tokens are model-specific; subclasses fill them.
  pieces_.assign(n, std::string());
  for (size_t i = 0; i < n; ++i) {
    if (types_[i] == TokenType::UserDefined) {
      pieces_[i] = tokens_[i];
    } else if (types_[i] == TokenType::Byte) {
      const int byte = parse_byte_token(tokens_[i]);
      RLX_FORMAT_CHECK(byte >= 0, source_, ": token ", i, " '", tokens_[i].substr(0, 32),
                       "' has type byte (6) but is not of the form <0xXX>");
      pieces_[i] = std::string(1, static_cast<char>(byte));
    }
  }

  // The trie of texts matched literally before tokenization.
  special_trie_.assign(1, TrieNode{});
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = types_[i];
    if ((t != TokenType::Control && t != TokenType::UserDefined && t != TokenType::Unknown) || tokens_[i].empty())
      continue;
    int32_t node = 0;
    for (unsigned char c : tokens_[i]) {
      auto& kids = special_trie_[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), c, [](const auto& kid, uint8_t b) { return kid.first < b; });
      if (it == kids.end() || it->first != c) {
        const auto next = static_cast<int32_t>(special_trie_.size());
        kids.insert(it, {c, next});
        special_trie_.emplace_back();  // invalidates `kids`; it is not used again
        node = next;
      } else {
        node = it->second;
      }
    }
    special_trie_[node].token = static_cast<int32_t>(i);  // the id token_to_id would give for a duplicate
    special_first_byte_[static_cast<unsigned char>(tokens_[i][0])] = true;
  }
  // Duplicated special texts keep the last id, as token_ids_ does.
  for (auto& node : special_trie_)
    if (node.token >= 0) node.token = token_ids_.at(tokens_[node.token]);
}

std::vector<LlmTokenizer::SpecialMatch> LlmTokenizer::find_special(std::string_view text) const {
  std::vector<SpecialMatch> found;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size(); ++i) {
    if (!special_first_byte_[p[i]]) continue;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const auto& kids = special_trie_[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), p[j], [](const auto& kid, uint8_t b) { return kid.first < b; });
      if (it == kids.end() || it->first != p[j]) break;
      node = it->second;
      if (special_trie_[node].token >= 0) found.push_back({i, j + 1 - i, special_trie_[node].token});
    }
  }
  if (found.empty()) return found;
  // llama.cpp takes the special tokens longest first (ties: lower id here), each
  // splitting the remaining raw text at its leftmost non-overlapping occurrences.
  std::sort(found.begin(), found.end(), [](const SpecialMatch& a, const SpecialMatch& b) {
    if (a.len != b.len) return a.len > b.len;
    if (a.id != b.id) return a.id < b.id;
    return a.start < b.start;
  });
  std::vector<bool> claimed(text.size(), false);
  std::vector<SpecialMatch> kept;
  for (const SpecialMatch& m : found) {
    bool free = true;
    for (size_t k = m.start; k < m.start + m.len && free; ++k) free = !claimed[k];
    if (!free) continue;
    for (size_t k = m.start; k < m.start + m.len; ++k) claimed[k] = true;
    kept.push_back(m);
  }
  std::sort(kept.begin(), kept.end(), [](const SpecialMatch& a, const SpecialMatch& b) { return a.start < b.start; });
  return kept;
}

void LlmTokenizer::check_id(int32_t id) const {
  RLX_CHECK(id >= 0 && id < vocab_size(), "LlmTokenizer: token id ", id, " is outside the vocabulary (", vocab_size(),
            " tokens)");
}

std::string LlmTokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return pieces_[id];
}

const std::string& LlmTokenizer::token_text(int32_t id) const {
  check_id(id);
  return tokens_[id];
}

LlmTokenizer::TokenType LlmTokenizer::token_type(int32_t id) const {
  check_id(id);
  return types_[id];
}

std::optional<int32_t> LlmTokenizer::token_to_id(std::string_view text) const {
  auto it = token_ids_.find(text);
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

bool LlmTokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && id < vocab_size() && end_of_generation_[id];
}

std::string LlmTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) {
    check_id(id);
    std::string_view piece = pieces_[id];
    if (piece.empty()) continue;
    if (at_start && strip_leading_space_ && piece.front() == ' ') piece.remove_prefix(1);
    at_start = false;
    out += piece;
  }
  return out;
}

// ---- TokenStreamDecoder -----------------------------------------------------------

namespace {

// Bytes to replace by one U+FFFD at the start of `s`, which is neither a valid
// sequence nor an incomplete one: the longest prefix that began a valid
// sequence (Unicode's "maximal subpart", as Python's errors="replace").
size_t invalid_length(std::string_view s) {
  for (size_t k = std::min<size_t>(3, s.size()); k >= 2; --k)
    if (utf8::is_incomplete_prefix(s.substr(0, k))) return k;
  return 1;
}

}  // namespace

std::string TokenStreamDecoder::push(int32_t id) {
  tok_.check_id(id);
  std::string_view piece = tok_.pieces_[id];
  if (piece.empty()) return {};
  if (at_start_ && tok_.strip_leading_space_ && piece.front() == ' ') piece.remove_prefix(1);
  at_start_ = false;

  const std::string bytes = pending_ + std::string(piece);
  pending_.clear();
  std::string out;
  std::string_view rest = bytes;
  while (!rest.empty()) {
    if (const size_t n = utf8::valid_length(rest)) {
      out.append(rest.substr(0, n));
      rest.remove_prefix(n);
    } else if (utf8::is_incomplete_prefix(rest)) {
      pending_ = std::string(rest);  // wait for the rest of the sequence
      break;
    } else {
      out.append(utf8::kReplacement);
      rest.remove_prefix(invalid_length(rest));
    }
  }
  return out;
}

std::string TokenStreamDecoder::finish() {
  std::string out = pending_.empty() ? "" : std::string(utf8::kReplacement);
  pending_.clear();
  at_start_ = true;
  return out;
}

}  // namespace rlx
