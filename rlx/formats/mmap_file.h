// A read-only memory map of a whole file. Loaders treat the bytes as untrusted:
// they bounds-check every read against size() (see ByteReader).
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "rlx/core/error.h"

namespace rlx {

class MappedFile {
 public:
  // Throws FormatError naming the path when it cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Sequential little-endian reader over untrusted bytes. Every read checks the
// remaining length in 64-bit arithmetic and throws FormatError with the byte
// offset and the `what` being read.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, uint64_t size, std::string source)
      : data_(data), size_(size), source_(std::move(source)) {}

  uint64_t offset() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::string& source() const { return source_; }

  void need(uint64_t n, const char* what) const {
    RLX_FORMAT_CHECK(n <= size_ - pos_, source_, ": ", what, " at byte offset ", pos_, " needs ", n,
                     " bytes but only ", size_ - pos_, " remain");
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const uint8_t* read_bytes(uint64_t n, const char* what) {
    need(n, what);
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  void seek(uint64_t pos, const char* what) {
    RLX_FORMAT_CHECK(pos <= size_, source_, ": ", what, " seeks to byte offset ", pos, " past the end (", size_, ")");
    pos_ = pos;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string source_;
};

}  // namespace rlx
