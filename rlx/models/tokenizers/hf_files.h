// Reading Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json):
// the helpers the WordPiece and Unigram loaders share. Every error names the
// file and field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace rlx::detail {

// j[key], which must exist; j must be an object.
const nlohmann::json& member(const nlohmann::json& j, const char* key, const std::string& where);
// A token id: an integer in [0, 2^31 - 1).
int32_t token_id(const nlohmann::json& v, const std::string& where);
// A special token in tokenizer_config.json: a string or an AddedToken object.
std::optional<std::string> special_token(const nlohmann::json& cfg, const char* key, const std::string& where);
// transformers' model_max_length; HF writes a huge sentinel (1e30) for "no
// limit", which is not a usable default, so anything outside [2, 2^31) is ignored.
std::optional<int64_t> model_max_length(const nlohmann::json& cfg);
// tokenizer_config.json next to `file`, or null when there is none.
nlohmann::json sibling_tokenizer_config(const std::string& file);

// The post-processor's cls and sep ids: RobertaProcessing (or BertProcessing),
// or a TemplateProcessing whose single template is [special] $A [special].
std::pair<int32_t, int32_t> parse_cls_sep(const nlohmann::json& post, const std::string& where);
// The pad id: the file's padding section, else `pad_token_id` (the id of its
// pad token, if any), else a FormatError.
int32_t pad_id_of(const nlohmann::json& tokenizer, const std::string& path, std::optional<int32_t> pad_token_id);
// Standard base64 with padding (tokenizer.json's precompiled_charsmap).
std::string base64_encode(std::string_view bytes);
// Tokens per text when a caller gives none: tokenizer_config.json's
// model_max_length, else the file's truncation.max_length, else 512.
int64_t default_max_length_of(const nlohmann::json& tokenizer, const std::string& path);

}  // namespace rlx::detail
