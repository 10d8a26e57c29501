// GGUF reader: see gguf.h for the byte layout. Every size below is checked
// before it is used, in uint64 arithmetic that cannot wrap: the classes of bug
// behind CVE-2025-53630 (tensor size sums overflowing), CVE-2026-27940 and
// CVE-2026-33298 (element count × type size overflowing, padding wrapping
// around) are each caught by a named check.
#include "rlx/formats/gguf.h"

#include <bit>
#include <cstring>
#include <limits>

#include "rlx/formats/ggml_types.h"
#include "rlx/formats/mmap_file.h"

namespace rlx {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;                 // nested arrays beyond this are hostile
constexpr uint64_t kMaxKeyLength = 65535;         // the GGUF spec's limit
constexpr uint64_t kMaxTensorNameLength = 1024;   // ggml itself stops at 63
constexpr uint64_t kMaxTensorCount = 1u << 20;    // real models have < 100k
constexpr uint64_t kMaxMetadataCount = 1u << 20;
constexpr uint64_t kMaxArrayLength = 1u << 28;    // vocabularies are < 1M entries
constexpr int kMaxDims = 4;                       // GGML_MAX_DIMS
// Smallest possible encodings, used to bound counts by the bytes that remain.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;            // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims, type, offset

uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::String: case GgufType::Array: return 0;
  }
  return 0;
}

bool valid_type_id(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::F64); }

std::string ne_str(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

// Parses one file into a GgufFile. Each read names what it reads (`what`, e.g.
// "metadata 'general.name'") so that errors name the field and its byte offset.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& f) : f_(f), r_(f.data_, f.size_, f.source_) {}

  void parse() {
    read_header();
    for (uint64_t i = 0; i < n_kv_; ++i) read_kv(i);
    read_alignment();
    for (uint64_t i = 0; i < n_tensors_; ++i) read_tensor_info(i);
    locate_data();
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw FormatError(str(f_.source_, ": ", std::forward<Args>(args)...));
  }

  // Reads a fixed-size field, failing with the field's name and byte offset.
  template <typename T>
  T field(const std::string& what, const char* name) {
    const uint64_t at = r_.offset();
    if (r_.remaining() < sizeof(T))
      fail(what, ": ", name, " at byte ", at, " needs ", sizeof(T), " bytes but only ", r_.remaining(), " remain");
    return r_.read<T>(name);
  }

  void read_header() {
    if (f_.size_ < 4 || std::memcmp(f_.data_, "GGUF", 4) != 0)
      fail("not a GGUF file (it does not start with \"GGUF\")");
    r_.seek(4, "version");
    const std::string header = "header";
    const uint32_t version = field<uint32_t>(header, "field 'version'");
    if (version == 1)
      fail("GGUF version 1 is not supported (it used 32-bit counts); re-convert the model with a current llama.cpp");
    if (version != 2 && version != 3)
      fail("unsupported GGUF version ", version, " at byte 4",
           __builtin_bswap32(version) <= 3 ? " (a big-endian GGUF file?)" : "", "; rlx reads versions 2 and 3");
    f_.version_ = version;
    n_tensors_ = field<uint64_t>(header, "field 'tensor_count'");
    n_kv_ = field<uint64_t>(header, "field 'metadata_kv_count'");
    const uint64_t rest = r_.remaining();
    if (n_tensors_ > kMaxTensorCount || n_tensors_ > rest / kMinTensorInfoBytes)
      fail("header field 'tensor_count' at byte 8 is ", n_tensors_, ", more than the limit ", kMaxTensorCount,
           " or than ", rest, " remaining bytes can hold");
    if (n_kv_ > kMaxMetadataCount || n_kv_ > (rest - n_tensors_ * kMinTensorInfoBytes) / kMinKvBytes)
      fail("header field 'metadata_kv_count' at byte 16 is ", n_kv_, ", more than the limit ", kMaxMetadataCount,
           " or than ", rest, " remaining bytes can hold");
  }

  std::string read_string(const std::string& what, uint64_t max_len) {
    const uint64_t at = r_.offset();
    const uint64_t len = field<uint64_t>(what, "string length");
    if (len > max_len) fail(what, ": string length ", len, " at byte ", at, " exceeds the limit ", max_len);
    if (len > r_.remaining())
      fail(what, ": string length ", len, " at byte ", at, " runs past end of file (size ", f_.size_, ")");
    const uint8_t* p = r_.read_bytes(len, "string bytes");
    return std::string(reinterpret_cast<const char*>(p), len);
  }

  GgufType read_type(const std::string& what) {
    const uint64_t at = r_.offset();
    const uint32_t id = field<uint32_t>(what, "value type");
    if (!valid_type_id(id)) fail(what, ": unknown value type ", id, " at byte ", at);
    return static_cast<GgufType>(id);
  }

  template <typename T>
  T read_scalar(const std::string& what) {
    if constexpr (std::is_same_v<T, bool>) {
      const uint64_t at = r_.offset();
      const uint8_t b = field<uint8_t>(what, "bool value");
      if (b > 1) fail(what, ": bool at byte ", at, " is ", int{b}, ", not 0 or 1");
      return b == 1;
    } else {
      return field<T>(what, "value");
    }
  }

  GgufValue read_value(GgufType t, const std::string& what, int depth) {
    switch (t) {
      case GgufType::U8: return read_scalar<uint8_t>(what);
      case GgufType::I8: return read_scalar<int8_t>(what);
      case GgufType::U16: return read_scalar<uint16_t>(what);
      case GgufType::I16: return read_scalar<int16_t>(what);
      case GgufType::U32: return read_scalar<uint32_t>(what);
      case GgufType::I32: return read_scalar<int32_t>(what);
      case GgufType::F32: return read_scalar<float>(what);
      case GgufType::Bool: return read_scalar<bool>(what);
      case GgufType::String: return read_string(what, std::numeric_limits<uint64_t>::max());
      case GgufType::Array: return read_array(what, depth + 1);
      case GgufType::U64: return read_scalar<uint64_t>(what);
      case GgufType::I64: return read_scalar<int64_t>(what);
      case GgufType::F64: return read_scalar<double>(what);
    }
    fail(what, ": unknown value type");
  }

  // Numeric arrays are copied in one piece; strings, bools and nested arrays one by one.
  template <typename T>
  std::vector<T> read_items(uint64_t n, GgufType t, const std::string& what, int depth) {
    std::vector<T> out;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      out.resize(n);
      if (n) std::memcpy(out.data(), r_.read_bytes(n * sizeof(T), "array data"), n * sizeof(T));
    } else {
      out.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        GgufValue v = read_value(t, what, depth);
        out.push_back(std::move(std::get<T>(v)));
      }
    }
    return out;
  }

  GgufArray read_array(const std::string& what, int depth) {
    const uint64_t at = r_.offset();
    if (depth > kMaxArrayDepth) fail(what, ": arrays nested deeper than ", kMaxArrayDepth, " at byte ", at);
    const GgufType t = read_type(what + " array element");
    const uint64_t count_at = r_.offset();
    const uint64_t n = field<uint64_t>(what, "array count");
    // Each element takes at least this many bytes, so the count is bounded by what remains.
    const uint64_t min_elem = t == GgufType::String ? 8 : t == GgufType::Array ? 12 : scalar_size(t);
    if (n > r_.remaining() / min_elem)
      fail(what, ": array count ", n, " at byte ", count_at, " needs at least ", min_elem, " bytes per ",
           gguf_type_name(t), " element but only ", r_.remaining(), " bytes remain");
    if (n > kMaxArrayLength)
      fail(what, ": array count ", n, " at byte ", count_at, " exceeds the limit ", kMaxArrayLength);
    GgufArray a;
    switch (t) {
      case GgufType::U8: a.items = read_items<uint8_t>(n, t, what, depth); break;
      case GgufType::I8: a.items = read_items<int8_t>(n, t, what, depth); break;
      case GgufType::U16: a.items = read_items<uint16_t>(n, t, what, depth); break;
      case GgufType::I16: a.items = read_items<int16_t>(n, t, what, depth); break;
      case GgufType::U32: a.items = read_items<uint32_t>(n, t, what, depth); break;
      case GgufType::I32: a.items = read_items<int32_t>(n, t, what, depth); break;
      case GgufType::F32: a.items = read_items<float>(n, t, what, depth); break;
      case GgufType::Bool: a.items = read_items<bool>(n, t, what, depth); break;
      case GgufType::String: a.items = read_items<std::string>(n, t, what, depth); break;
      case GgufType::Array: a.items = read_items<GgufArray>(n, t, what, depth); break;
      case GgufType::U64: a.items = read_items<uint64_t>(n, t, what, depth); break;
      case GgufType::I64: a.items = read_items<int64_t>(n, t, what, depth); break;
      case GgufType::F64: a.items = read_items<double>(n, t, what, depth); break;
    }
    return a;
  }

  void read_kv(uint64_t index) {
    const uint64_t at = r_.offset();
    std::string key = read_string(str("metadata entry #", index, " key (at byte ", at, ")"), kMaxKeyLength);
    if (key.empty()) fail("metadata entry #", index, " at byte ", at, " has an empty key");
    const std::string what = str("metadata '", key, "'");
    if (f_.metadata_index_.count(key)) fail("duplicate ", what, " at byte ", at);
    const GgufType t = read_type(what);
    value_offsets_.push_back(r_.offset());
    GgufValue v = read_value(t, what, 0);
    f_.metadata_index_.emplace(key, f_.metadata_.size());
    f_.metadata_.emplace_back(std::move(key), std::move(v));
  }

  void read_alignment() {
    f_.alignment_ = kDefaultAlignment;
    auto it = f_.metadata_index_.find("general.alignment");
    if (it == f_.metadata_index_.end()) return;
    const GgufValue& v = f_.metadata_[it->second].second;
    const uint64_t at = value_offsets_[it->second];
    const auto* a = std::get_if<uint32_t>(&v);
    if (!a)
      fail("metadata 'general.alignment' (value at byte ", at, ") is ", gguf_type_name(gguf_type_of(v)),
           ", must be u32");
    if (*a == 0 || !std::has_single_bit(*a))
      fail("metadata 'general.alignment' (value at byte ", at, ") is ", *a, ", must be a nonzero power of two");
    f_.alignment_ = *a;
  }

  void read_tensor_info(uint64_t index) {
    GgufTensorInfo t;
    t.info_offset = r_.offset();
    t.name = read_string(str("tensor #", index, " name (info at byte ", t.info_offset, ")"), kMaxTensorNameLength);
    const std::string what = str("tensor '", t.name, "' (info at byte ", t.info_offset, ")");
    if (t.name.empty()) fail("tensor #", index, " (info at byte ", t.info_offset, ") has an empty name");
    if (f_.tensor_index_.count(t.name)) fail(what, ": duplicate tensor name");

    const uint64_t dims_at = r_.offset();
    const uint32_t n_dims = field<uint32_t>(what, "n_dims");
    if (n_dims > kMaxDims) fail(what, ": n_dims ", n_dims, " at byte ", dims_at, " exceeds ", kMaxDims);
    std::vector<uint64_t> ne(n_dims);
    for (uint32_t i = 0; i < n_dims; ++i) ne[i] = field<uint64_t>(what, "ne");
    const uint64_t type_at = r_.offset();
    const uint32_t ggml_type = field<uint32_t>(what, "type");
    const uint64_t offset_at = r_.offset();
    const uint64_t rel_offset = field<uint64_t>(what, "offset");

    // Element count: every dimension positive and the product within int64.
    uint64_t numel = 1;
    for (uint32_t i = 0; i < n_dims; ++i) {
      if (ne[i] == 0) fail(what, ": ne[", i, "] is 0 (ne = ", ne_str(ne), ")");
      if (ne[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(what, ": ne[", i, "] = ", ne[i], " exceeds int64 (ne = ", ne_str(ne), ")");
      if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne[i])
        fail(what, ": element count of ne = ", ne_str(ne), " overflows int64");
      numel *= ne[i];
    }
    auto dtype = dtype_from_ggml_opt(ggml_type);
    if (!dtype) {
      std::string_view name = ggml_type_name(ggml_type);
      if (name.empty()) fail(what, ": unknown ggml type id ", ggml_type, " at byte ", type_at);
      fail(what, ": ggml type ", ggml_type, " (", name, ") at byte ", type_at, " is not supported by rlx");
    }
    const DTypeInfo& info = dtype_info(*dtype);
    const uint64_t block = static_cast<uint64_t>(info.block_elems);
    const uint64_t ne0 = n_dims ? ne[0] : 1;
    if (ne0 % block != 0)
      fail(what, ": ne[0] = ", ne0, " is not a multiple of the ", info.name, " block size ", block);
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel / block, static_cast<uint64_t>(info.block_bytes), &nbytes))
      fail(what, ": size of ", numel, " ", info.name, " elements (", numel / block, " blocks of ", info.block_bytes,
           " bytes) overflows 64 bits");
    if (rel_offset % f_.alignment_ != 0)
      fail(what, ": offset ", rel_offset, " at byte ", offset_at, " is not a multiple of the alignment ",
           f_.alignment_);

    t.type = *dtype;
    t.ne.assign(ne.begin(), ne.end());
    t.offset = rel_offset;  // made absolute in locate_data once the data section is known
    t.nbytes = nbytes;
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
  }

  void locate_data() {
    // pos <= size < 2^63 and alignment <= 2^31, so the rounding cannot wrap.
    const uint64_t pos = r_.offset();
    const uint64_t data = (pos + f_.alignment_ - 1) / f_.alignment_ * f_.alignment_;
    if (f_.tensors_.empty()) {
      f_.data_offset_ = std::min(data, f_.size_);
      return;
    }
    if (data > f_.size_)
      fail("data section start ", data, " (tensor infos end at byte ", pos, ", alignment ", f_.alignment_,
           ") is past end of file (size ", f_.size_, ")");
    f_.data_offset_ = data;
    const uint64_t avail = f_.size_ - data;
    for (GgufTensorInfo& t : f_.tensors_) {
      // Compare against what remains instead of adding, so a huge offset cannot wrap.
      if (t.offset > avail || t.nbytes > avail - t.offset)
        fail("tensor '", t.name, "' (info at byte ", t.info_offset, "): offset ", t.offset, " + ", t.nbytes,
             " bytes (data section at byte ", data, ") runs past end of file (size ", f_.size_, ")");
      t.offset += data;
      t.data = f_.data_ + t.offset;
    }
  }

  GgufFile& f_;
  ByteReader r_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::vector<uint64_t> value_offsets_;  // byte offset of each metadata value, for messages
};

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

size_t GgufArray::size() const {
  return std::visit([](const auto& v) { return v.size(); }, items);
}

std::string gguf_value_str(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return "\"" + x + "\"";
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          constexpr size_t kShown = 8;
          std::string s = str("[", gguf_type_name(x.type()), " × ", x.size(), ": ");
          std::visit(
              [&](const auto& items) {
                for (size_t i = 0; i < items.size() && i < kShown; ++i) {
                  GgufValue item{items[i]};
                  s += (i ? ", " : "") + gguf_value_str(item);
                }
              },
              x.items);
          return s + (x.size() > kShown ? ", ...]" : "]");
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (sizeof(T) == 1) {
          return std::to_string(static_cast<int>(x));  // not as a character
        } else {
          return str(x);
        }
      },
      v);
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // checked against overflow when the file was parsed
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }

GgufFile GgufFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  return from_memory(mapped->data(), mapped->size(), mapped, path);
}

GgufFile GgufFile::from_memory(const uint8_t* data, size_t size, std::shared_ptr<const void> keep_alive,
                               std::string source) {
  GgufFile f;
  f.keep_alive_ = std::move(keep_alive);
  f.data_ = data;
  f.size_ = size;
  f.source_ = std::move(source);
  GgufParser(f).parse();
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::require(std::string_view key) const {
  const GgufValue* v = find(key);
  RLX_FORMAT_CHECK(v, source_, ": missing metadata '", key, "'");
  return *v;
}

void GgufFile::type_mismatch(std::string_view key, const GgufValue& v, size_t want) const {
  throw FormatError(str(source_, ": metadata '", key, "' is ", gguf_type_name(gguf_type_of(v)), ", expected ",
                        gguf_type_name(static_cast<GgufType>(want))));
}

void GgufFile::array_type_mismatch(std::string_view key, const GgufArray& a, size_t want) const {
  throw FormatError(str(source_, ": metadata '", key, "' is an array of ", gguf_type_name(a.type()),
                        ", expected an array of ", gguf_type_name(static_cast<GgufType>(want))));
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = require(key);
  return std::visit(
      [&](const auto& x) -> int64_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_same_v<T, uint64_t>)
            RLX_FORMAT_CHECK(x <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), source_,
                             ": metadata '", key, "' = ", x, " does not fit int64");
          return static_cast<int64_t>(x);
        } else {
          throw FormatError(str(source_, ": metadata '", key, "' is ", gguf_type_name(gguf_type_of(v)),
                                ", expected an integer"));
        }
      },
      v);
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = require(key);
  if (const auto* f = std::get_if<float>(&v)) return *f;
  if (const auto* d = std::get_if<double>(&v)) return *d;
  throw FormatError(
      str(source_, ": metadata '", key, "' is ", gguf_type_name(gguf_type_of(v)), ", expected f32 or f64"));
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  RLX_CHECK(t, source_, ": no tensor named '", name, "'");
  return *t;
}

Tensor GgufFile::view(const GgufTensorInfo& info) const {
  return Tensor::view_external(info.type, info.shape(), info.data, keep_alive_);
}

}  // namespace rlx
