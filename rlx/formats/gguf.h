// GGUF v2/v3: a reader over a memory-mapped file and a writer.
//
// The bytes, in order (all little-endian):
//  1. magic "GGUF", u32 version (2 or 3; v1 used 32-bit counts and is rejected)
//  2. u64 tensor_count, u64 metadata_kv_count
//  3. metadata_kv_count × { string key, u32 value_type, value }
//       string: u64 byte length, then UTF-8 bytes (no terminator)
//       array:  u32 element_type, u64 count, then count values (arrays may nest)
//  4. tensor_count × { string name, u32 n_dims, n_dims × u64 ne, u32 ggml_type, u64 offset }
//       ne[0] is the fastest-varying dimension; offset is relative to the data section
//       and a multiple of the alignment
//  5. zero padding up to `general.alignment` (u32, default 32), then the data section.
//
// Files are untrusted: every count, length, dimension, offset and size is checked
// in 64-bit arithmetic against the file size and fixed limits before use, and each
// failure is a FormatError naming the file, the field and its byte offset.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "rlx/core/dtype.h"
#include "rlx/core/tensor.h"

namespace rlx {

// Metadata value types; the numbers are the on-disk ids.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
  String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// A metadata array: one typed vector; the variant index equals the element's GgufType id.
struct GgufArray {
  using Items = std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
                             std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>,
                             std::vector<float>, std::vector<bool>, std::vector<std::string>,
                             std::vector<GgufArray>, std::vector<uint64_t>, std::vector<int64_t>,
                             std::vector<double>>;
  Items items;

  GgufType type() const { return static_cast<GgufType>(items.index()); }
  size_t size() const;
  bool operator==(const GgufArray&) const = default;
};

// A metadata value; the variant index equals its GgufType id.
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;
inline GgufType gguf_type_of(const GgufValue& v) { return static_cast<GgufType>(v.index()); }

namespace gguf_detail {
// Index of T among a variant's alternatives, at compile time.
template <typename T, typename V> struct index_of;
template <typename T, typename... Ts> struct index_of<T, std::variant<Ts...>> {
  static constexpr size_t value = [] {
    constexpr bool same[] = {std::is_same_v<T, Ts>...};
    for (size_t i = 0; i < sizeof...(Ts); ++i)
      if (same[i]) return i;
    return sizeof...(Ts);
  }();
  static_assert(value < sizeof...(Ts), "not a GGUF metadata type");
};
}  // namespace gguf_detail

// Short human-readable rendering (arrays show their first elements), for messages and tools.
std::string gguf_value_str(const GgufValue& v);

struct GgufTensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> ne;        // GGUF order: ne[0] is the fastest-varying dimension
  uint64_t offset = 0;            // absolute byte offset of the data in the file
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while the GgufFile (or a view) lives
  uint64_t info_offset = 0;       // byte offset of this tensor's info record, for messages

  int64_t numel() const;
  // rlx (row-major) shape: ne reversed, so ne[0] is the last dimension.
  std::vector<int64_t> shape() const;
};

class GgufFile {
 public:
  // Maps `path` and parses it; throws FormatError on any malformed field.
  static GgufFile open(const std::string& path);
  // Parses bytes already in memory; `keep_alive` owns them and is shared by
  // tensor views. `source` names the bytes in error messages.
  static GgufFile from_memory(const uint8_t* data, size_t size, std::shared_ptr<const void> keep_alive,
                              std::string source = "<memory>");

  const std::string& source() const { return source_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Typed access: T is one of GgufValue's alternatives. A missing key or another
  // type is a FormatError naming the key, its type and the expected type.
  template <typename T>
  const T& get(std::string_view key) const {
    const GgufValue& v = require(key);
    if (const T* p = std::get_if<T>(&v)) return *p;
    type_mismatch(key, v, gguf_detail::index_of<T, GgufValue>::value);
  }
  template <typename T>
  T get_or(std::string_view key, T fallback) const {
    const GgufValue* v = find(key);
    return v ? get<T>(key) : fallback;
  }
  // Typed array access: get_array<std::string>("tokenizer.ggml.tokens").
  template <typename T>
  const std::vector<T>& get_array(std::string_view key) const {
    const GgufArray& a = get<GgufArray>(key);
    if (const auto* p = std::get_if<std::vector<T>>(&a.items)) return *p;
    array_type_mismatch(key, a, gguf_detail::index_of<std::vector<T>, GgufArray::Items>::value);
  }
  // Any integer type (u64 above INT64_MAX is an error) / any float type.
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Throws InvalidArgument naming the tensor when absent.
  const GgufTensorInfo& tensor(std::string_view name) const;
  // A read-only rlx::Tensor over the mapped bytes (no copy); it keeps the mapping alive.
  Tensor view(const GgufTensorInfo& info) const;
  Tensor view(std::string_view name) const { return view(tensor(name)); }

 private:
  friend class GgufParser;
  GgufFile() = default;
  const GgufValue& require(std::string_view key) const;
  [[noreturn]] void type_mismatch(std::string_view key, const GgufValue& v, size_t want) const;
  [[noreturn]] void array_type_mismatch(std::string_view key, const GgufArray& a, size_t want) const;

  std::shared_ptr<const void> keep_alive_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string source_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF file: metadata of every type, tensors of any DType with a ggml id.
// The layout matches llama.cpp's writer (tensors in insertion order, each padded
// to the alignment), so the python `gguf` reader and ggml read the result.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3);

  // Adds or replaces a metadata entry (first insertion order is kept).
  // `general.alignment` must be a u32 power of two; it also sets the data alignment.
  void set(std::string key, GgufValue value);
  void set_alignment(uint32_t alignment) { set("general.alignment", GgufValue(alignment)); }

  // `ne` in GGUF order (ne[0] fastest, at most 4 dims, each > 0, ne[0] a multiple of
  // the block size); `bytes` must hold exactly the tensor's size. The bytes are copied.
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::span<const uint8_t> bytes);
  // The tensor's storage is shared, not copied; ne = shape reversed.
  void add_tensor(std::string name, const Tensor& t);

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    uint32_t ggml_type;
    std::vector<int64_t> ne;
    std::shared_ptr<const void> owner;
    const uint8_t* data;
    uint64_t nbytes;
  };
  void check_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne) const;
  template <typename Sink> void emit(Sink& sink) const;

  uint32_t version_;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace rlx
