// Reading Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json):
// the helpers the WordPiece and Unigram loaders share. Every error names the
// file and field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

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

}  // namespace rlx::detail
