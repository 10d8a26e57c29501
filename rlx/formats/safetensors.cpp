#include "rlx/formats/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

namespace rlx {
namespace {

using Json = nlohmann::ordered_json;  // keeps header order for names()

// Longest shape we accept; real tensors have a handful of dims, and the cap
// keeps a hostile header from allocating millions of dims per tensor.
constexpr size_t kMaxRank = 64;

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  static constexpr std::pair<std::string_view, DType> kTable[] = {
      {"F64", DType::F64},        {"F32", DType::F32},   {"F16", DType::F16}, {"BF16", DType::BF16},
      {"I64", DType::I64},        {"I32", DType::I32},   {"I16", DType::I16}, {"I8", DType::I8},
      {"U8", DType::U8},          {"BOOL", DType::Bool}, {"C64", DType::C64}, {"F8_E4M3", DType::F8E4M3},
      {"F8_E5M2", DType::F8E5M2},
  };
  for (const auto& [name, t] : kTable)
    if (name == s) return t;
  return std::nullopt;
}

// A JSON integer ≥ 0 (floats, strings and negatives are rejected).
std::optional<uint64_t> as_u64(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// Parses the header, rejecting duplicate keys at any depth: nlohmann keeps one
// of two equal keys silently, which would make a hostile file ambiguous.
Json parse_header(const std::string& path, const char* begin, const char* end) {
  std::vector<std::unordered_set<std::string>> keys;
  auto cb = [&](int, Json::parse_event_t ev, Json& parsed) {
    switch (ev) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case Json::parse_event_t::key: {
        const auto& k = parsed.get_ref<const std::string&>();
        RLX_FORMAT_CHECK(keys.back().insert(k).second, path, ": header: duplicate key '", k, "'");
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(begin, end, cb);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(str(path, ": header: invalid JSON: ", e.what()));
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile sf;
  sf.file_ = MappedFile::open(path);
  const MappedFile& f = *sf.file_;

  // 1. Header length.
  ByteReader r(f.data(), f.size(), path);
  const auto header_len = r.read<uint64_t>("header length (u64)");
  RLX_FORMAT_CHECK(header_len <= kMaxHeaderBytes, path, ": header length ", header_len, " exceeds the limit of ",
                   kMaxHeaderBytes, " bytes");
  RLX_FORMAT_CHECK(header_len <= r.remaining(), path, ": header length ", header_len,
                   " runs past the end of the file (", r.remaining(), " bytes after the length field)");

  // 2. Header JSON.
  const char* hbegin = reinterpret_cast<const char*>(r.read_bytes(header_len, "header"));
  Json header = parse_header(path, hbegin, hbegin + header_len);
  RLX_FORMAT_CHECK(header.is_object(), path, ": header must be a JSON object but is ", header.type_name());

  // 3. Data section.
  sf.data_start_ = r.offset();
  const uint64_t data_size = r.remaining();

  for (const auto& item : header.items()) {
    // Plain references, not a structured binding: clang < 16 cannot capture those in lambdas.
    const std::string& name = item.key();
    const Json& entry = item.value();
    if (name == "__metadata__") {
      RLX_FORMAT_CHECK(entry.is_object(), path, ": field '__metadata__' must be an object but is ", entry.type_name());
      for (const auto& [k, v] : entry.items()) {
        RLX_FORMAT_CHECK(v.is_string(), path, ": field '__metadata__': value of '", k, "' must be a string but is ",
                         v.type_name());
        sf.metadata_.emplace(k, v.get<std::string>());
      }
      continue;
    }
    const std::string where = str(path, ": tensor '", name, "'");
    RLX_FORMAT_CHECK(entry.is_object(), where, ": entry must be an object but is ", entry.type_name());
    auto field = [&](const char* key) -> const Json& {
      auto it = entry.find(key);
      RLX_FORMAT_CHECK(it != entry.end(), where, ": field '", key, "' is missing");
      return *it;
    };

    const Json& jdtype = field("dtype");
    RLX_FORMAT_CHECK(jdtype.is_string(), where, ": field 'dtype' must be a string but is ", jdtype.type_name());
    const auto dtype = dtype_from_safetensors(jdtype.get_ref<const std::string&>());
    RLX_FORMAT_CHECK(dtype.has_value(), where, ": field 'dtype': unsupported dtype '",
                     jdtype.get_ref<const std::string&>(), "'");

    const Json& jshape = field("shape");
    RLX_FORMAT_CHECK(jshape.is_array(), where, ": field 'shape' must be an array but is ", jshape.type_name());
    RLX_FORMAT_CHECK(jshape.size() <= kMaxRank, where, ": field 'shape' has ", jshape.size(), " dimensions (limit ",
                     kMaxRank, ")");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (size_t i = 0; i < jshape.size(); ++i) {
      const auto d = as_u64(jshape[i]);
      RLX_FORMAT_CHECK(d.has_value(), where, ": field 'shape': dimension ", i, " is ", jshape[i].dump(),
                       " (must be a non-negative integer)");
      // Keep numel and its byte size within int64 so Tensor arithmetic cannot overflow.
      RLX_FORMAT_CHECK(*d <= static_cast<uint64_t>(INT64_MAX), where, ": field 'shape': dimension ", i, " (", *d,
                       ") overflows int64");
      RLX_FORMAT_CHECK(!__builtin_mul_overflow(numel, *d, &numel) && numel <= static_cast<uint64_t>(INT64_MAX), where,
                       ": field 'shape': element count of ", jshape.dump(), " overflows int64");
      shape.push_back(static_cast<int64_t>(*d));
    }
    uint64_t nbytes = 0;
    RLX_FORMAT_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*dtype)), &nbytes), where,
                     ": field 'shape': byte size of ", jshape.dump(), " overflows uint64");

    const Json& joff = field("data_offsets");
    RLX_FORMAT_CHECK(joff.is_array() && joff.size() == 2, where,
                     ": field 'data_offsets' must be an array [begin, end] but is ", joff.dump().substr(0, 64));
    const auto begin = as_u64(joff[0]);
    const auto end = as_u64(joff[1]);
    RLX_FORMAT_CHECK(begin && end, where, ": field 'data_offsets': ", joff.dump(),
                     " must hold two non-negative integers");
    RLX_FORMAT_CHECK(*begin <= *end, where, ": field 'data_offsets': end ", *end, " < begin ", *begin);
    RLX_FORMAT_CHECK(*end <= data_size, where, ": field 'data_offsets': [", *begin, ", ", *end,
                     ") is out of range: the data section holds ", data_size, " bytes");
    RLX_FORMAT_CHECK(*end - *begin == nbytes, where, ": field 'data_offsets': range [", *begin, ", ", *end, ") holds ",
                     *end - *begin, " bytes but dtype ", jdtype.get_ref<const std::string&>(), " and shape ",
                     jshape.dump(), " need ", nbytes);

    sf.names_.push_back(name);
    sf.tensors_.emplace(name, TensorInfo{*dtype, std::move(shape), *begin, *end});
  }

  // Overlap check: sort by begin; empty ranges cannot overlap anything.
  std::vector<const std::string*> order;
  for (const auto& n : sf.names_)
    if (const auto& t = sf.tensors_.at(n); t.end > t.begin) order.push_back(&n);
  std::sort(order.begin(), order.end(), [&](const std::string* a, const std::string* b) {
    return sf.tensors_.at(*a).begin < sf.tensors_.at(*b).begin;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo& prev = sf.tensors_.at(*order[i - 1]);
    const TensorInfo& cur = sf.tensors_.at(*order[i]);
    RLX_FORMAT_CHECK(prev.end <= cur.begin, path, ": tensor '", *order[i], "': field 'data_offsets': [", cur.begin,
                     ", ", cur.end, ") overlaps tensor '", *order[i - 1], "' at [", prev.begin, ", ", prev.end, ")");
  }
  return sf;
}

bool SafetensorsFile::contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

const SafetensorsFile::TensorInfo& SafetensorsFile::info(std::string_view name) const {
  auto it = tensors_.find(name);
  RLX_CHECK(it != tensors_.end(), path(), ": no tensor named '", name, "'");
  return it->second;
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo& t = info(name);
  const uint8_t* p = file_->data() + data_start_ + t.begin;
  const auto align = static_cast<uintptr_t>(dtype_size(t.dtype));
  if (reinterpret_cast<uintptr_t>(p) % align != 0)
    return Tensor::from_bytes(t.dtype, t.shape, p, static_cast<size_t>(t.end - t.begin));
  return Tensor::view_external(t.dtype, t.shape, p, file_);
}

}  // namespace rlx
