#include "rlx/backends/cuda/gemm_choices.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rlx/core/error.h"
#include "rlx/core/log.h"
#include "rlx/runtime/calibration_json.h"

namespace rlx::cuda {

using nlohmann::json;

std::string gemm_choices_to_json(const CalibrationIdentity& id, const GemmChoices& c) {
  json j;
  j["schema_version"] = GemmChoices::kSchemaVersion;
  put_identity(j, id);
  j["algos"] = c.algos;
  j["sm90"] = c.sm90;
  return j.dump(1);
}

std::optional<GemmChoices> gemm_choices_from_json(std::string_view text, const CalibrationIdentity& running,
                                                  std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<GemmChoices> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  try {
    const json j = json::parse(text);
    if (!j.is_object()) return fail("not a JSON object");
    const auto schema = j.find("schema_version");
    if (schema == j.end() || !schema->is_number_integer() || schema->get<int>() != GemmChoices::kSchemaVersion)
      return fail(str("schema_version is not ", GemmChoices::kSchemaVersion));
    const std::string diff = get_identity(j).mismatch(running);
    if (!diff.empty()) return fail(str("for another setup: ", diff));
    GemmChoices c;
    c.algos = j.at("algos").get<std::map<std::string, std::vector<int64_t>>>();
    c.sm90 = j.at("sm90").get<std::map<std::string, std::string>>();
    return c;
  } catch (const json::exception& e) {
    return fail(str("malformed (", e.what(), ")"));
  } catch (const FormatError& e) {
    return fail(e.what());
  }
}

std::string gemm_choices_path(const std::string& gpu_uuid) { return calibration_file("cuda-gemm", gpu_uuid); }

GemmChoiceFile::GemmChoiceFile(std::string path, CalibrationIdentity id) : path_(std::move(path)), id_(std::move(id)) {
  if (auto c = read(true)) {
    choices_ = std::move(*c);
    log_verbose("gemm choices: loaded ", path_, " (", choices_.algos.size(), " algorithms, ", choices_.sm90.size(),
                " kernel choices)");
  }
}

// The file's choices, or nullopt when it is missing, corrupt (a warning when
// `warn`) or stale (logged under RLX_VERBOSE).
std::optional<GemmChoices> GemmChoiceFile::read(bool warn) const {
  std::ifstream f(path_, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string why;
  auto c = gemm_choices_from_json(ss.str(), id_, &why);
  if (!c) {
    if (warn && why.rfind("for another setup", 0) != 0)
      log_warn("gemm choices: ignoring ", path_, ": ", why, " (it will be rewritten)");
    else
      log_verbose("gemm choices: ignoring ", path_, ": ", why);
  }
  return c;
}

void GemmChoiceFile::save() {
  // Another process may have added choices since this one read the file.
  if (auto on_disk = read(false)) {
    choices_.algos.merge(on_disk->algos);  // ours stay where both have a shape
    choices_.sm90.merge(on_disk->sm90);
  }
  try {
    write_file_atomically(path_, gemm_choices_to_json(id_, choices_));
  } catch (const std::exception& e) {
    if (!warned_) log_warn("gemm choices: not kept for later runs: ", e.what());
    warned_ = true;
  }
}

void GemmChoiceFile::record_algo(const std::string& shape, const std::vector<int64_t>& config) {
  choices_.algos[shape] = config;
  save();
}

void GemmChoiceFile::record_sm90(const std::string& shape, const std::string& choice) {
  choices_.sm90[shape] = choice;
  save();
}

}  // namespace rlx::cuda
