#include "rlx/models/tokenizers/hf_files.h"

#include <filesystem>
#include <limits>

#include "rlx/core/error.h"
#include "rlx/formats/hf_config.h"

namespace rlx::detail {

using Json = nlohmann::json;

const Json& member(const Json& j, const char* key, const std::string& where) {
  RLX_FORMAT_CHECK(j.is_object(), where, ": expected an object holding '", key, "' but found ", j.type_name());
  auto it = j.find(key);
  RLX_FORMAT_CHECK(it != j.end(), where, ": required field '", key, "' is missing");
  return *it;
}

int32_t token_id(const Json& v, const std::string& where) {
  int64_t id = -1;
  RLX_FORMAT_CHECK(json_detail::convert(v, id) && id >= 0 && id < std::numeric_limits<int32_t>::max(), where,
                   ": token id must be an integer in [0, 2^31 - 1) but is ", v.dump().substr(0, 64));
  return static_cast<int32_t>(id);
}

std::optional<std::string> special_token(const Json& cfg, const char* key, const std::string& where) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_object()) return json_get<std::string>(*it, "content", str(where, ": ", key));
  RLX_FORMAT_CHECK(it->is_string(), where, ": key '", key, "' must be a string or an object with 'content'");
  return it->get<std::string>();
}

std::optional<int64_t> model_max_length(const Json& cfg) {
  auto it = cfg.find("model_max_length");
  int64_t n = 0;
  if (it == cfg.end() || !json_detail::convert(*it, n) || n < 2 || n >= (int64_t{1} << 31)) return std::nullopt;
  return n;
}

Json sibling_tokenizer_config(const std::string& file) {
  const auto p = std::filesystem::path(file).parent_path() / "tokenizer_config.json";
  if (!std::filesystem::exists(p)) return Json();
  Json cfg = load_json_file(p.string());
  RLX_FORMAT_CHECK(cfg.is_object(), p.string(), ": expected a JSON object but found ", cfg.type_name());
  return cfg;
}

}  // namespace rlx::detail
