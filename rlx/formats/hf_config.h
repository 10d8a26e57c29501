// JSON files of a Hugging Face model folder (config.json, tokenizer.json,
// tokenizer_config.json, sentence_bert_config.json) with typed access.
//
// Every getter names the file and the key when the key is missing or has the
// wrong JSON type, e.g. "model/config.json: key 'hidden_size' must be an
// integer but is a string". JSON `null` counts as absent, because HF writes
// null for "not set" (e.g. "strip_accents": null).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "rlx/core/error.h"

namespace rlx {

// Reads and parses a JSON file. Throws FormatError naming `path` when it cannot
// be read, is larger than `max_bytes`, or is not valid JSON.
nlohmann::json load_json_file(const std::string& path, uint64_t max_bytes = uint64_t{1} << 30);

namespace json_detail {
// Strict conversions: integers must be JSON integers (no 3.0, no "3") that fit
// the target; doubles accept any JSON number; bools only true/false.
bool convert(const nlohmann::json& v, bool& out);
bool convert(const nlohmann::json& v, int64_t& out);
bool convert(const nlohmann::json& v, double& out);
bool convert(const nlohmann::json& v, std::string& out);
bool convert(const nlohmann::json& v, std::vector<int64_t>& out);
bool convert(const nlohmann::json& v, std::vector<std::string>& out);

template <typename T>
constexpr const char* expected_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "a boolean";
  else if constexpr (std::is_same_v<T, int64_t>)
    return "an integer (int64)";
  else if constexpr (std::is_same_v<T, double>)
    return "a number";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
    return "an array of integers";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return "an array of strings";
  else
    static_assert(!sizeof(T), "json_get: unsupported type (use bool, int64_t, double, std::string or vectors)");
}
}  // namespace json_detail

// `key` of object `j` as T; std::nullopt when absent or null. `source` (file
// path, optionally with a field path) starts every error message.
template <typename T>
std::optional<T> json_get_opt(const nlohmann::json& j, std::string_view key, std::string_view source) {
  RLX_FORMAT_CHECK(j.is_object(), source, ": expected a JSON object holding key '", key, "' but found ", j.type_name());
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  T out{};
  RLX_FORMAT_CHECK(json_detail::convert(*it, out), source, ": key '", key, "' must be ",
                   json_detail::expected_name<T>(), " but is ", it->type_name(), " (", it->dump().substr(0, 64), ")");
  return out;
}

// Required key: throws FormatError when absent or null.
template <typename T>
T json_get(const nlohmann::json& j, std::string_view key, std::string_view source) {
  std::optional<T> v = json_get_opt<T>(j, key, source);
  RLX_FORMAT_CHECK(v.has_value(), source, ": required key '", key, "' is missing");
  return std::move(*v);
}

template <typename T>
T json_get_or(const nlohmann::json& j, std::string_view key, T fallback, std::string_view source) {
  std::optional<T> v = json_get_opt<T>(j, key, source);
  return v ? std::move(*v) : std::move(fallback);
}

// A model's config.json: `HfConfig::load("model/config.json").get<int64_t>("hidden_size")`.
class HfConfig {
 public:
  static HfConfig load(const std::string& path);
  HfConfig(nlohmann::json json, std::string source) : json_(std::move(json)), source_(std::move(source)) {}

  const nlohmann::json& json() const { return json_; }
  const std::string& source() const { return source_; }
  // True when the key is present and not null.
  bool has(std::string_view key) const;

  template <typename T>
  T get(std::string_view key) const {
    return json_get<T>(json_, key, source_);
  }
  template <typename T>
  T get_or(std::string_view key, T fallback) const {
    return json_get_or<T>(json_, key, std::move(fallback), source_);
  }
  template <typename T>
  std::optional<T> get_opt(std::string_view key) const {
    return json_get_opt<T>(json_, key, source_);
  }

 private:
  nlohmann::json json_;
  std::string source_;
};

}  // namespace rlx
