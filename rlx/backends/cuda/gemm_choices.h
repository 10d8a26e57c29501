// GemmEngine's timed choices kept on disk, per GPU: which cuBLASLt algorithm
// won a shape's timing, and whether rlx's sm90 kernel or cuBLASLt runs it.
// Timing one shape takes tens of milliseconds (up to 16 candidates); a corpus
// embedded at many lengths plans a few new GEMM shapes per length, so every
// `rlx embed` process re-timed them. With the file, a later process plans
// the same shapes from it.
//
// File: calibration_dir()/cuda-gemm-<gpu-uuid>.json, used only when its
// identity (GPU, driver, CUDA runtime, cuBLASLt and rlx versions) equals the
// running one; read and written unless RLX_CUDA_GEMM_CACHE=0. A corrupt
// or stale file is ignored (with a warning, resp. under RLX_VERBOSE) and
// replaced by the next write. Host code only: tested on the CPU.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/runtime/calibration.h"

namespace rlx::cuda {

struct GemmChoices {
  static constexpr int kSchemaVersion = 1;
  // GemmEngine's shape key (every field but the pointers) → the winning
  // algorithm's config (GemmAlgo::config).
  std::map<std::string, std::vector<int64_t>> algos;
  // prefer_sm90's shape + activations key → "cublaslt" or an sm90 kernel's
  // name (sm90_gemm_kernel_name).
  std::map<std::string, std::string> sm90;

  bool operator==(const GemmChoices&) const = default;
};

std::string gemm_choices_to_json(const CalibrationIdentity& id, const GemmChoices& c);
// The choices in `text`, or nullopt with the reason in `why` when it is
// malformed, of another schema, or of another identity than `running`.
std::optional<GemmChoices> gemm_choices_from_json(std::string_view text, const CalibrationIdentity& running,
                                                  std::string* why);
// calibration_dir()/cuda-gemm-<uuid>.json (the UUID's unsafe characters replaced by '_').
std::string gemm_choices_path(const std::string& gpu_uuid);

// One GPU's file: read when constructed; each record_*() adds a choice and
// rewrites the file atomically, merged with entries another process may have
// written since. Never throws for file contents or a folder it cannot write
// (it warns once and keeps the choices in memory).
class GemmChoiceFile {
 public:
  GemmChoiceFile(std::string path, CalibrationIdentity id);
  const GemmChoices& choices() const { return choices_; }
  const std::string& path() const { return path_; }
  void record_algo(const std::string& shape, const std::vector<int64_t>& config);
  void record_sm90(const std::string& shape, const std::string& choice);

 private:
  std::optional<GemmChoices> read(bool warn) const;
  void save();

  std::string path_;
  CalibrationIdentity id_;
  GemmChoices choices_;
  bool warned_ = false;
};

}  // namespace rlx::cuda
