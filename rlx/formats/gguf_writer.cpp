// GGUF writer: the layout of gguf.h, produced the way llama.cpp's gguf-py does
// (tensor offsets assigned in insertion order, every tensor padded to the
// alignment, padding bytes zero) so both ggml and the python reader accept it.
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "rlx/formats/ggml_types.h"
#include "rlx/formats/gguf.h"

namespace rlx {
namespace {

constexpr int kMaxDims = 4;

// Sinks count what they wrote so the data section can be aligned without seeking.
struct VectorSink {
  std::vector<uint8_t>& out;
  uint64_t pos = 0;
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    pos += n;
  }
};

struct FileSink {
  std::ofstream& out;
  const std::string& path;
  uint64_t pos = 0;
  void put(const void* p, size_t n) {
    out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    if (!out) throw Error(str(path, ": write failed (", std::strerror(errno), ")"));
    pos += n;
  }
};

template <typename Sink, typename T>
void put_raw(Sink& s, T v) {
  s.put(&v, sizeof(T));
}

template <typename Sink>
void put_string(Sink& s, std::string_view v) {
  put_raw<Sink, uint64_t>(s, v.size());
  s.put(v.data(), v.size());
}

template <typename Sink>
void put_value(Sink& s, const GgufValue& v);

template <typename Sink>
void put_array(Sink& s, const GgufArray& a) {
  put_raw<Sink, uint32_t>(s, static_cast<uint32_t>(a.type()));
  put_raw<Sink, uint64_t>(s, a.size());
  std::visit(
      [&](const auto& items) {
        using T = typename std::decay_t<decltype(items)>::value_type;
        if constexpr (std::is_same_v<T, bool>) {
          for (bool b : items) put_raw<Sink, uint8_t>(s, b ? 1 : 0);
        } else if constexpr (std::is_arithmetic_v<T>) {
          if (!items.empty()) s.put(items.data(), items.size() * sizeof(T));
        } else {
          for (const auto& item : items) put_value(s, GgufValue(item));
        }
      },
      a.items);
}

template <typename Sink>
void put_value(Sink& s, const GgufValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) put_string(s, x);
        else if constexpr (std::is_same_v<T, GgufArray>) put_array(s, x);
        else if constexpr (std::is_same_v<T, bool>) put_raw<Sink, uint8_t>(s, x ? 1 : 0);
        else put_raw(s, x);
      },
      v);
}

template <typename Sink>
void put_padding(Sink& s, uint64_t n) {
  static constexpr uint8_t kZeros[64] = {};
  while (n > 0) {
    const uint64_t k = n < sizeof(kZeros) ? n : sizeof(kZeros);
    s.put(kZeros, k);
    n -= k;
  }
}

uint64_t pad_to(uint64_t n, uint64_t align) { return (align - n % align) % align; }

}  // namespace

GgufWriter::GgufWriter(uint32_t version) : version_(version) {
  RLX_CHECK(version == 2 || version == 3, "GgufWriter: version ", version, " (only 2 and 3 are written)");
}

void GgufWriter::set(std::string key, GgufValue value) {
  RLX_CHECK(!key.empty(), "GgufWriter: empty metadata key");
  if (key == "general.alignment") {
    const auto* a = std::get_if<uint32_t>(&value);
    RLX_CHECK(a && *a != 0 && std::has_single_bit(*a),
              "GgufWriter: general.alignment must be a u32 power of two, got ", gguf_type_name(gguf_type_of(value)),
              " ", gguf_value_str(value));
    alignment_ = *a;
  }
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::check_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne) const {
  RLX_CHECK(!name.empty(), "GgufWriter: empty tensor name");
  for (const auto& t : tensors_) RLX_CHECK(t.name != name, "GgufWriter: duplicate tensor name '", name, "'");
  RLX_CHECK(ne.size() <= kMaxDims, "GgufWriter: tensor '", name, "' has ", ne.size(), " dims (max ", kMaxDims, ")");
  for (int64_t d : ne) RLX_CHECK(d > 0, "GgufWriter: tensor '", name, "' has a dimension ", d, " (must be > 0)");
  const int64_t block = dtype_info(type).block_elems;
  const int64_t ne0 = ne.empty() ? 1 : ne[0];
  RLX_CHECK(ne0 % block == 0, "GgufWriter: tensor '", name, "': ne[0] = ", ne0, " is not a multiple of the ", type,
            " block size ", block);
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::span<const uint8_t> bytes) {
  const uint32_t ggml_type = ggml_type_id(type);
  check_tensor(name, type, ne);
  const auto nbytes = static_cast<uint64_t>(dtype_bytes(type, shape_numel(ne)));
  RLX_CHECK(nbytes == bytes.size(), "GgufWriter: tensor '", name, "' (", type, " ne ", shape_str(ne), ") needs ",
            nbytes, " bytes, got ", bytes.size());
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
  const uint8_t* data = copy->data();
  tensors_.push_back({std::move(name), ggml_type, std::move(ne), std::move(copy), data, nbytes});
}

void GgufWriter::add_tensor(std::string name, const Tensor& t) {
  const uint32_t ggml_type = ggml_type_id(t.dtype());
  std::vector<int64_t> ne(t.shape().rbegin(), t.shape().rend());
  check_tensor(name, t.dtype(), ne);
  auto owner = std::make_shared<Tensor>(t);  // shares the storage and keeps it alive
  const auto* data = static_cast<const uint8_t*>(t.raw());
  tensors_.push_back({std::move(name), ggml_type, std::move(ne), std::move(owner), data, t.nbytes()});
}

template <typename Sink>
void GgufWriter::emit(Sink& s) const {
  s.put("GGUF", 4);
  put_raw<Sink, uint32_t>(s, version_);
  put_raw<Sink, uint64_t>(s, tensors_.size());
  put_raw<Sink, uint64_t>(s, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(s, key);
    put_raw<Sink, uint32_t>(s, static_cast<uint32_t>(gguf_type_of(value)));
    put_value(s, value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(s, t.name);
    put_raw<Sink, uint32_t>(s, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put_raw<Sink, uint64_t>(s, static_cast<uint64_t>(d));
    put_raw<Sink, uint32_t>(s, t.ggml_type);
    put_raw<Sink, uint64_t>(s, offset);
    offset += t.nbytes + pad_to(t.nbytes, alignment_);
  }
  put_padding(s, pad_to(s.pos, alignment_));
  for (const auto& t : tensors_) {
    if (t.nbytes) s.put(t.data, t.nbytes);
    put_padding(s, pad_to(t.nbytes, alignment_));
  }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  VectorSink sink{out, 0};
  emit(sink);
  return out;
}

void GgufWriter::write(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(str(path, ": cannot open for writing (", std::strerror(errno), ")"));
  FileSink sink{out, path, 0};
  emit(sink);
  out.close();
  if (!out) throw Error(str(path, ": write failed (", std::strerror(errno), ")"));
}

}  // namespace rlx
