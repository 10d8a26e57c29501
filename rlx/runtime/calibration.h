// The calibration store: what `rlx calibrate` measured on one GPU, as JSON at
// $XDG_CACHE_HOME/rlx/cuda-calib-<gpu-uuid>.json (RLX_CALIB_DIR overrides the
// folder). Backend-neutral so the cost model and the CPU tests can read it;
// the measuring lives in rlx/backends/cuda/calibration.h.
//
// A file is used only when its identity (GPU name and UUID, driver, CUDA
// runtime, cuBLASLt and rlx versions) equals the running one and its schema
// version is current; anything else is ignored (a corrupt file with a
// warning) and re-measured. Units are in the field names: us, gflops, gbps.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlx {

// The rlx version compiled into the library ("0.1.0").
std::string rlx_version();

struct CalibrationIdentity {
  std::string gpu_name;
  std::string gpu_uuid;
  std::string driver;        // "13.0"
  std::string cuda_runtime;  // "13.0"
  std::string cublaslt;      // cublasLtGetVersion(), e.g. "130100"
  std::string rlx;           // rlx_version()

  bool operator==(const CalibrationIdentity&) const = default;
  // "" when equal, else the first differing field: "driver '13.0' (file) != '13.1' (this machine)".
  std::string mismatch(const CalibrationIdentity& running) const;
};

// One measured variant of a kernel family at one shape.
struct VariantTiming {
  std::string variant;          // "algo0", "prefill_mma", ...
  double us = 0;                // median time of one launch
  double gflops = 0;            // useful FLOPs per second / 1e9 (0 when not meaningful)
  double gbps = 0;              // bytes moved per second / 1e9 (0 when not meaningful)
  std::vector<int64_t> config;  // opaque to the store: how the family re-creates the variant
};

// The variants of one family measured at one shape. The family names what the
// shape means, e.g. "gemm.f16" with shape {m, n, k}.
struct ShapeBucket {
  std::string family;
  std::vector<int64_t> shape;
  std::vector<VariantTiming> variants;
  // The fastest variant (null when none was measured).
  const VariantTiming* best() const;
};

struct Calibration {
  static constexpr int kSchemaVersion = 2;  // 2: `problems`; power-of-2 GEMM m buckets

  CalibrationIdentity identity;
  std::string created_utc;    // ISO 8601
  double measure_s = 0;       // how long measuring took
  bool complete = true;       // false when a family failed or the time budget cut measuring short
  std::vector<std::string> problems;  // one line per reason `complete` is false

  // Device-wide overheads and bandwidths.
  double launch_us = 0;       // host cost of one direct kernel launch
  double graph_node_us = 0;   // cost of one kernel inside a replayed CUDA graph
  double sync_us = 0;         // launch-to-host round trip of an empty stream sync
  double d2d_gbps = 0;        // device copy, bytes read + written per second
  double h2d_gbps = 0;        // pinned host → device
  double d2h_gbps = 0;        // device → pinned host

  std::vector<ShapeBucket> buckets;

  // The bucket of `family` nearest to `shape` (sum of |log2| ratios over the
  // dims; shapes of another rank never match); null when the family has none.
  // `distance`, when given, receives that sum (0 = exact).
  const ShapeBucket* nearest(std::string_view family, const std::vector<int64_t>& shape,
                             double* distance = nullptr) const;
  std::vector<std::string> families() const;
};

// JSON text of a calibration (pretty-printed) and back. Parsing throws
// FormatError naming the field that is missing or malformed, or the schema
// version when it is not kSchemaVersion.
std::string calibration_to_json(const Calibration& c);
Calibration calibration_from_json(std::string_view text);

// The cache folder: RLX_CALIB_DIR, else $XDG_CACHE_HOME/rlx, else $HOME/.cache/rlx.
std::string calibration_dir();
// calibration_dir()/<stem>-<uuid>.json (the UUID's unsafe characters replaced
// by '_'); calibration_path() is the calibration's ("cuda-calib").
std::string calibration_file(const std::string& stem, const std::string& gpu_uuid);
std::string calibration_path(const std::string& gpu_uuid);

// `text` and a newline written to a temporary file renamed over `path`,
// creating folders. Throws InvalidArgument naming the path when it cannot.
void write_file_atomically(const std::string& path, const std::string& text);
// The same for a calibration.
void save_calibration(const Calibration& c, const std::string& path);

enum class CalibrationLoad { Loaded, Missing, Corrupt, Stale };
struct LoadResult {
  CalibrationLoad status = CalibrationLoad::Missing;
  std::optional<Calibration> calibration;  // set when Loaded
  std::string why;                         // for anything but Loaded
};
// Reads `path` if it exists and matches `running`. A corrupt or wrong-schema
// file gives a warning on stderr; a stale one (another GPU, driver, CUDA,
// cuBLASLt or rlx version) is logged under RLX_VERBOSE. Never throws for file
// contents.
LoadResult load_calibration(const std::string& path, const CalibrationIdentity& running);

}  // namespace rlx
