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

std::pair<int32_t, int32_t> parse_cls_sep(const Json& post, const std::string& where) {
  RLX_CHECK_AS(Unsupported, post.is_object(), where, ": expected RobertaProcessing or TemplateProcessing but found ",
               post.type_name());
  const auto type = json_get<std::string>(post, "type", where);
  std::pair<int32_t, int32_t> ids;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (auto [key, id] : {std::pair{"cls", &ids.first}, std::pair{"sep", &ids.second}}) {
      const Json& pair = member(post, key, where);
      RLX_FORMAT_CHECK(pair.is_array() && pair.size() == 2 && pair[0].is_string(), where, ".", key,
                       ": expected [token, id]");
      *id = token_id(pair[1], str(where, ".", key));
    }
    return ids;
  }
  RLX_CHECK_AS(Unsupported, type == "TemplateProcessing", where, ": type '", type,
               "' is not RobertaProcessing or TemplateProcessing");
  const Json& single = member(post, "single", where);
  auto holds = [&](size_t k, const char* kind) { return single[k].is_object() && single[k].contains(kind); };
  const bool shape = single.is_array() && single.size() == 3 && holds(0, "SpecialToken") && holds(1, "Sequence") &&
                     holds(2, "SpecialToken");
  RLX_CHECK_AS(Unsupported, shape, where, ".single: only the template [special] $A [special] is supported");
  const Json& specials = member(post, "special_tokens", where);
  for (auto [k, id] : {std::pair{size_t{0}, &ids.first}, std::pair{size_t{2}, &ids.second}}) {
    const std::string at = str(where, ".single[", k, "]");
    const auto name = json_get<std::string>(member(single[k], "SpecialToken", at), "id", at);
    const Json& list = member(member(specials, name.c_str(), where + ".special_tokens"), "ids", at);
    RLX_FORMAT_CHECK(list.is_array() && list.size() == 1, at, ": special token '", name, "' must map to one id");
    *id = token_id(list[0], at);
  }
  return ids;
}

int32_t pad_id_of(const Json& tokenizer, const std::string& path, std::optional<int32_t> pad_token_id) {
  if (const Json& pad = tokenizer.value("padding", Json()); pad.is_object())
    return token_id(member(pad, "pad_id", path + ": padding"), path + ": padding.pad_id");
  RLX_FORMAT_CHECK(pad_token_id.has_value(), path,
                   ": no pad id: neither a 'padding' section nor a pad token ('<pad>', or tokenizer_config.json's "
                   "pad_token)");
  return *pad_token_id;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    for (size_t k = 0; k < 4; ++k) out.push_back(i + k <= bytes.size() ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=');
  }
  return out;
}

int64_t default_max_length_of(const Json& tokenizer, const std::string& path) {
  const Json tcfg = sibling_tokenizer_config(path);
  if (auto n = tcfg.is_object() ? model_max_length(tcfg) : std::nullopt) return *n;
  int64_t max_length = 512;
  if (const Json& tr = tokenizer.value("truncation", Json()); tr.is_object()) {
    max_length = json_get_or<int64_t>(tr, "max_length", max_length, path + ": truncation");
    RLX_FORMAT_CHECK(max_length >= 2, path, ": truncation.max_length ", max_length,
                     " leaves no room for the two special tokens");
  }
  return max_length;
}

}  // namespace rlx::detail
