// rlx inspect: metadata and tensor table of a GGUF or safetensors file.
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/model_file.h"

namespace rlx::cli {
namespace {

// Arrays longer than this are summarized in JSON (tokenizer vocabularies
// hold 10^5 entries); `rlx inspect` is for looking, not for extracting.
constexpr size_t kJsonArrayLimit = 64;
constexpr size_t kJsonArrayHead = 8;

nlohmann::ordered_json to_json(const GgufValue& v);

nlohmann::ordered_json array_to_json(const GgufArray& a) {
  auto items = nlohmann::ordered_json::array();
  const size_t n = std::min(a.size(), a.size() > kJsonArrayLimit ? kJsonArrayHead : a.size());
  std::visit(
      [&](const auto& vec) {
        for (size_t i = 0; i < n; ++i) items.push_back(to_json(GgufValue{vec[i]}));
      },
      a.items);
  if (a.size() <= kJsonArrayLimit) return items;
  return {{"type", std::string(gguf_type_name(a.type()))}, {"count", a.size()}, {"head", items}};
}

nlohmann::ordered_json to_json(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::ordered_json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, GgufArray>) return array_to_json(x);
        else return x;
      },
      v);
}

nlohmann::ordered_json shape_json(const std::vector<int64_t>& shape) { return nlohmann::ordered_json(shape); }

struct TensorRow {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t offset;
  uint64_t nbytes;
};

std::vector<TensorRow> tensor_rows(const WeightsFile& w) {
  std::vector<TensorRow> rows;
  if (w.gguf) {
    for (const auto& t : w.gguf->tensors()) rows.push_back({t.name, t.type, t.shape(), t.offset, t.nbytes});
  } else {
    for (const auto& name : w.safetensors->names()) {
      const auto& i = w.safetensors->info(name);
      rows.push_back({name, i.dtype, i.shape, i.begin, i.end - i.begin});
    }
  }
  return rows;
}

void print_json(const WeightsFile& w, const std::vector<TensorRow>& rows) {
  nlohmann::ordered_json out;
  out["path"] = w.path;
  if (w.gguf) {
    out["format"] = "gguf";
    out["version"] = w.gguf->version();
    out["alignment"] = w.gguf->alignment();
    out["data_offset"] = w.gguf->data_offset();
    out["file_size"] = w.gguf->file_size();
    auto meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : w.gguf->metadata()) meta[k] = to_json(v);
    out["metadata"] = meta;
  } else {
    out["format"] = "safetensors";
    out["metadata"] = w.safetensors->metadata();
  }
  auto tensors = nlohmann::ordered_json::array();
  for (const auto& r : rows)
    tensors.push_back({{"name", r.name}, {"dtype", std::string(dtype_name(r.dtype))}, {"shape", shape_json(r.shape)},
                       {"offset", r.offset}, {"nbytes", r.nbytes}});
  out["tensors"] = tensors;
  std::cout << out.dump(2) << "\n";
}

void print_text(const WeightsFile& w, const std::vector<TensorRow>& rows) {
  std::cout << w.path << ": ";
  if (w.gguf) {
    std::cout << "GGUF v" << w.gguf->version() << ", " << human_bytes(static_cast<int64_t>(w.gguf->file_size()))
              << ", alignment " << w.gguf->alignment() << ", data at byte " << w.gguf->data_offset() << "\n";
    std::cout << "\nmetadata (" << w.gguf->metadata().size() << "):\n";
    for (const auto& [k, v] : w.gguf->metadata())
      std::cout << "  " << k << " (" << gguf_type_name(gguf_type_of(v)) << ") = " << gguf_value_str(v) << "\n";
  } else {
    std::cout << "safetensors\n";
    std::cout << "\nmetadata (" << w.safetensors->metadata().size() << "):\n";
    for (const auto& [k, v] : w.safetensors->metadata()) std::cout << "  " << k << " = " << v << "\n";
  }
  size_t wn = 4;
  for (const auto& r : rows) wn = std::max(wn, r.name.size());
  std::cout << "\ntensors (" << rows.size() << "):\n";
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;  // dtype -> (elements, bytes)
  int64_t elements = 0;
  uint64_t bytes = 0;
  for (const auto& r : rows) {
    std::cout << "  " << std::left << std::setw(static_cast<int>(wn + 2)) << r.name << std::setw(9)
              << dtype_name(r.dtype) << std::setw(22) << shape_str(r.shape) << human_bytes(static_cast<int64_t>(r.nbytes))
              << "\n";
    const int64_t n = shape_numel(r.shape);
    auto& t = by_type[std::string(dtype_name(r.dtype))];
    t.first += n;
    t.second += r.nbytes;
    elements += n;
    bytes += r.nbytes;
  }
  std::cout << "\ntotal: " << elements << " elements in " << human_bytes(static_cast<int64_t>(bytes)) << "\n";
  for (const auto& [name, t] : by_type)
    std::cout << "  " << std::setw(9) << name << t.first << " elements, " << human_bytes(static_cast<int64_t>(t.second))
              << "\n";
}

struct InspectOptions {
  std::string file;
  bool json = false;
};

void run_inspect(const InspectOptions& o) {
  const WeightsFile w = WeightsFile::open(o.file);
  const auto rows = tensor_rows(w);
  if (o.json) print_json(w, rows);
  else print_text(w, rows);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "Show the metadata and tensors of a GGUF or safetensors file");
  cmd->add_option("file", o->file, "A .gguf or .safetensors file, or a model directory with model.safetensors")
      ->required();
  cmd->add_flag("--json", o->json,
                "Print JSON (arrays longer than 64 items appear as {type, count, head: first 8 items})");
  cmd->callback([o] { run_inspect(*o); });
}

}  // namespace rlx::cli
