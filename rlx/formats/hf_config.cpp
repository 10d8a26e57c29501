#include "rlx/formats/hf_config.h"

#include <limits>

#include "rlx/formats/mmap_file.h"

namespace rlx {

nlohmann::json load_json_file(const std::string& path, uint64_t max_bytes) {
  auto file = MappedFile::open(path);
  RLX_FORMAT_CHECK(file->size() <= max_bytes, path, ": JSON file of ", file->size(), " bytes exceeds the limit of ",
                   max_bytes, " bytes");
  const char* begin = reinterpret_cast<const char*>(file->data());
  try {
    // An empty file maps to nullptr; parse an empty range so the error says "unexpected end of input".
    return file->size() ? nlohmann::json::parse(begin, begin + file->size()) : nlohmann::json::parse("");
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(str(path, ": invalid JSON: ", e.what()));
  }
}

namespace json_detail {

bool convert(const nlohmann::json& v, bool& out) {
  if (!v.is_boolean()) return false;
  out = v.get<bool>();
  return true;
}

bool convert(const nlohmann::json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(u);
    return true;
  }
  if (!v.is_number_integer()) return false;
  out = v.get<int64_t>();
  return true;
}

bool convert(const nlohmann::json& v, double& out) {
  if (!v.is_number()) return false;
  out = v.get<double>();
  return true;
}

bool convert(const nlohmann::json& v, std::string& out) {
  if (!v.is_string()) return false;
  out = v.get<std::string>();
  return true;
}

bool convert(const nlohmann::json& v, std::vector<int64_t>& out) {
  if (!v.is_array()) return false;
  out.clear();
  out.reserve(v.size());
  for (const auto& e : v) {
    int64_t x = 0;
    if (!convert(e, x)) return false;
    out.push_back(x);
  }
  return true;
}

bool convert(const nlohmann::json& v, std::vector<std::string>& out) {
  if (!v.is_array()) return false;
  out.clear();
  out.reserve(v.size());
  for (const auto& e : v) {
    if (!e.is_string()) return false;
    out.push_back(e.get<std::string>());
  }
  return true;
}

}  // namespace json_detail

HfConfig HfConfig::load(const std::string& path) {
  nlohmann::json j = load_json_file(path);
  RLX_FORMAT_CHECK(j.is_object(), path, ": expected a JSON object at the top level but found ", j.type_name());
  return HfConfig(std::move(j), path);
}

bool HfConfig::has(std::string_view key) const {
  auto it = json_.find(key);
  return it != json_.end() && !it->is_null();
}

}  // namespace rlx
