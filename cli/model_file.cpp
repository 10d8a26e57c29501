#include "cli/model_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "rlx/core/error.h"

namespace rlx::cli {

WeightsFile WeightsFile::open(const std::string& path) {
  namespace fs = std::filesystem;
  WeightsFile w;
  w.path = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) w.path = (fs::path(path) / "model.safetensors").string();
  RLX_CHECK(fs::is_regular_file(w.path, ec), "'", w.path, "': no such file");
  char magic[4] = {};
  {
    std::ifstream f(w.path, std::ios::binary);
    RLX_CHECK(f.is_open(), "'", w.path, "': cannot open for reading");
    f.read(magic, 4);
  }
  if (std::memcmp(magic, "GGUF", 4) == 0) {
    w.gguf = GgufFile::open(w.path);
  } else if (w.path.ends_with(".safetensors")) {
    w.safetensors = SafetensorsFile::open(w.path);
  } else {
    throw InvalidArgument(str("'", w.path, "': neither GGUF (no 'GGUF' magic) nor a .safetensors file"));
  }
  return w;
}

std::vector<std::string> WeightsFile::tensor_names() const {
  if (safetensors) return safetensors->names();
  std::vector<std::string> names;
  for (const auto& t : gguf->tensors()) names.push_back(t.name);
  return names;
}

Tensor WeightsFile::tensor(const std::string& name) const {
  if (safetensors) return safetensors->tensor(name);
  return gguf->view(name);
}

}  // namespace rlx::cli
