// Reader for the safetensors format (https://github.com/huggingface/safetensors).
//
// Bytes read, in order (the file is untrusted; every bound is checked):
//   1. u64 little-endian N: the header length (≤ 100 MB and ≤ file size − 8).
//   2. N bytes: a UTF-8 JSON object (may be padded with trailing spaces).
//      - optional "__metadata__": an object of string → string;
//      - every other key is a tensor name → {"dtype": "F32", "shape": [..],
//        "data_offsets": [begin, end]} with offsets relative to the data section.
//   3. The data section: bytes [8 + N, file size). Each tensor's range must lie
//      inside it, hold exactly numel × element size bytes, and not overlap
//      another tensor's range (gaps are allowed).
// Any violation throws FormatError naming the file, the tensor and the field.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/core/dtype.h"
#include "rlx/core/tensor.h"
#include "rlx/formats/mmap_file.h"

namespace rlx {

class SafetensorsFile {
 public:
  // Header limit: the format's reference implementation uses the same 100 MB.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  struct TensorInfo {
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin;  // offsets into the data section
    uint64_t end;
  };

  // Maps `path` and validates the whole header. Throws FormatError.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  // Tensor names in header order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(std::string_view name) const;
  // Throws InvalidArgument naming the file when `name` is absent.
  const TensorInfo& info(std::string_view name) const;
  // A read-only view of the tensor's bytes that keeps the mapping alive. The
  // view is zero-copy when the data is aligned to the element size (always so
  // for files written by the safetensors library, which pads the header to a
  // multiple of 8); a misaligned tensor is copied into aligned memory instead.
  Tensor tensor(std::string_view name) const;
  // The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::shared_ptr<const MappedFile> file_;
  uint64_t data_start_ = 0;
  std::vector<std::string> names_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace rlx
