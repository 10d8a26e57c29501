// Byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2": Qwen2/Qwen3, Llama 3),
// llama.cpp's llm_tokenizer_bpe.
//
// Per piece of text between special tokens:
//   1. The pre-tokenizer (tokenizer.ggml.pre) splits it into words with one of
//      the models' Hugging Face regexes (byte_level_bpe.h has them):
//        gpt2, default:   Gpt2
//        llama-bpe:       Llama3
//        qwen2:           Qwen2
//        smollm:          every \p{N} a piece of its own first, then Gpt2 within the
//                         pieces between them (also llama.cpp's starcoder, refact,
//                         command-r, codeshell, exaone and minerva)
//        gpt-4o, llama4:  Gpt4o;  tekken: Tekken
//      and llama.cpp's other names for the same regexes (pre_tokenizer_for).
//   2. Each word's bytes map to GPT-2's printable characters (bytes_to_unicode);
//      each character is a base token.
//   3. Adjacent symbol pairs are merged lowest rank first (the merge's index in
//      tokenizer.ggml.merges; ties: leftmost; a repeated pair keeps its first
//      rank). llama-bpe and tekken first take a word that is itself a token
//      whole (Hugging Face's ignore_merges, which llama.cpp also applies).
//   Word → ids results are cached.
#include <array>

#include "rlx/core/error.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/tokenizers/byte_level_bpe.h"
#include "rlx/models/tokenizers/llm_tokenizer.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx {
namespace {

using byte_level::Split;

// tokenizer.ggml.pre → split, with llama.cpp's names for each regex.
Split pre_tokenizer_for(const GgufFile& f) {
  const std::string pre = f.get_or<std::string>("tokenizer.ggml.pre", "default");
  auto any = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (pre == n) return true;
    return false;
  };
  if (any({"default", "gpt2", "gpt-2", "phi-2", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de",
           "jina-v2-code"}))
    return Split::Gpt2;
  if (any({"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx",
           "smaug-bpe"}))
    return Split::Llama3;
  if (any({"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"})) return Split::Qwen2;
  if (any({"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"})) return Split::DigitsGpt2;
  if (any({"gpt-4o", "llama4"})) return Split::Gpt4o;
  if (pre == "tekken") return Split::Tekken;
  throw Unsupported(str(f.source(), ": tokenizer.ggml.pre '", pre,
                        "' is not supported (supported: default, gpt2 and its aliases phi-2, olmo, jais, jina-*; "
                        "llama-bpe and its aliases llama3, falcon3, pixtral, lfm2, dbrx, smaug-bpe, ...; qwen2, "
                        "stablelm2, megrez; smollm, starcoder, refact, command-r, codeshell, exaone, minerva-7b; "
                        "gpt-4o, llama4; tekken)"));
}

// ---- Tokenizer -----------------------------------------------------------------

class BpeTokenizer final : public LlmTokenizer {
 public:
  explicit BpeTokenizer(const GgufFile& f) : pre_(pre_tokenizer_for(f)) {
    load_common(f, "gpt2");
    // llama.cpp: whole-word tokens first, and BOS unless the file says otherwise.
    ignore_merges_ = pre_ == Split::Llama3 || pre_ == Split::Tekken;
    if (ignore_merges_ && !f.contains("tokenizer.ggml.add_bos_token")) add_bos_ = bos_ >= 0;

    // Normal tokens decode through the inverse byte map; a character outside it
    // (not produced by byte-level BPE) is kept as its UTF-8.
    const std::array<char32_t, 256> to_unicode = byte_level::byte_to_unicode();
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
      merges_.add(*left_id, *right_id, static_cast<int32_t>(rank), *merged_id, /*replace=*/false);
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> ids;
    if (add_bos && bos_ >= 0) ids.push_back(bos_);
    partition(
        text,
        [&](std::string_view raw) {
          const byte_level::CodePoints cps(raw);
          for (size_t i = 0, end = 0; i < cps.size();) {
            // DigitsGpt2: a number code point alone, else gpt2's match up to the next one.
            if (i >= end) {
              end = cps.size();
              if (pre_ == Split::DigitsGpt2) {
                end = i + 1;
                if (cps.cls[i] != byte_level::kNumber)
                  while (end < cps.size() && cps.cls[end] != byte_level::kNumber) ++end;
              }
            }
            const size_t len = byte_level::match_at(cps, i, end, pre_);
            const std::string_view word = raw.substr(cps.offset[i], cps.offset[i + len] - cps.offset[i]);
            encode_word(word, ids);
            i += len;
          }
        },
        [&](int32_t id) { ids.push_back(id); });
    return ids;
  }

 private:
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const {
    if (cache_.find(word, ids)) return;
    const size_t first = ids.size();
    merge_word(word, ids);
    cache_.insert(word, ids.data() + first, ids.size() - first);
  }

  void merge_word(std::string_view word, std::vector<int32_t>& ids) const {
    if (ignore_merges_) {
      std::string mapped;
      for (unsigned char b : word) mapped += byte_chars_[b];
      if (auto id = token_to_id(mapped)) {
        ids.push_back(*id);
        return;
      }
    }
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());
    for (unsigned char b : word) symbols.push_back(byte_tokens_[b]);  // -1: a byte the vocabulary lacks
    byte_level::MergeScratch scratch;
    merges_.apply(symbols, scratch);
    for (int32_t id : symbols) {
      if (id >= 0)
        ids.push_back(id);
      else if (unk_ >= 0)
        ids.push_back(unk_);  // llama.cpp drops it
    }
  }

  Split pre_;
  bool ignore_merges_ = false;
  std::string byte_chars_[256];  // byte → its GPT-2 character, as UTF-8
  int32_t byte_tokens_[256];     // byte → the token of that character, or -1
  byte_level::MergeRules merges_;
  byte_level::WordCache cache_;
};

}  // namespace

std::unique_ptr<LlmTokenizer> make_bpe_tokenizer(const GgufFile& f) { return std::make_unique<BpeTokenizer>(f); }

}  // namespace rlx
