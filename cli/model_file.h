// Opens a weights file for the inspection commands: GGUF (by its magic) or
// safetensors (a file, or a model directory holding model.safetensors).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "rlx/core/tensor.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/safetensors.h"

namespace rlx::cli {

struct WeightsFile {
  std::string path;  // the file actually opened
  std::optional<GgufFile> gguf;
  std::optional<SafetensorsFile> safetensors;

  // Throws FormatError (malformed file) or InvalidArgument (unknown format).
  static WeightsFile open(const std::string& path);
  std::vector<std::string> tensor_names() const;
  // A read-only view of the stored bytes; InvalidArgument naming the tensor when absent.
  Tensor tensor(const std::string& name) const;
};

}  // namespace rlx::cli
