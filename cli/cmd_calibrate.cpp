// rlx calibrate: measure kernel variants on a GPU and store the table the
// cost model reads ($XDG_CACHE_HOME/rlx/cuda-calib-<gpu-uuid>.json), then
// print a summary (or the JSON with --json).
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include "cli/common.h"
#include "rlx/runtime/calibration.h"
#ifdef RLX_HAVE_CUDA
#include "rlx/backends/cuda/calibration.h"
#include "rlx/backends/cuda/gemm_choices.h"
#endif

namespace rlx::cli {
namespace {

struct CalibrateOptions {
  std::string device = "0";
  bool force = false;
  bool json = false;
  std::string output;
};

// "0", "cuda", "cuda:1" → the CUDA device index.
int device_index(const std::string& d) {
  std::string digits = d == "cuda" ? "0" : d.rfind("cuda:", 0) == 0 ? d.substr(5) : d;
  RLX_CHECK(!digits.empty() && digits.size() < 6 && digits.find_first_not_of("0123456789") == std::string::npos,
            "calibrate: --device '", d, "' is not a CUDA device (use N, cuda or cuda:N)");
  return std::stoi(digits);
}

void print_summary(const Calibration& c, const std::string& path, bool measured) {
  std::cout << c.identity.gpu_name << " (" << c.identity.gpu_uuid << "), driver " << c.identity.driver << ", CUDA "
            << c.identity.cuda_runtime << ", cuBLASLt " << c.identity.cublaslt << ", rlx " << c.identity.rlx << "\n"
            << (measured ? "measured in " : "loaded from cache (measured ") << std::fixed << std::setprecision(1)
            << c.measure_s << " s" << (measured ? "" : str(" at ", c.created_utc, ")"))
            << (c.complete ? "" : ", incomplete:") << "\n";
  for (const auto& p : c.problems) std::cout << "  " << p << "\n";
  std::cout << "file: " << path << "\n\n"
            << std::setprecision(2) << "launch " << c.launch_us << " us, graph node " << c.graph_node_us
            << " us, sync " << c.sync_us << " us; copy d2d " << std::setprecision(0) << c.d2d_gbps << " GB/s, h2d "
            << c.h2d_gbps << " GB/s, d2h " << c.d2h_gbps << " GB/s\n\n";
  // One row per bucket: the winner, and how much it beats the default (the first variant).
  std::cout << std::left << std::setw(16) << "FAMILY" << std::setw(24) << "SHAPE" << std::setw(18) << "BEST"
            << std::right << std::setw(10) << "US" << std::setw(11) << "GFLOPS" << std::setw(9) << "GBPS"
            << std::setw(12) << "VS FIRST" << "\n";
  for (const auto& b : c.buckets) {
    const VariantTiming* best = b.best();
    if (!best) continue;
    std::string shape;
    for (size_t i = 0; i < b.shape.size(); ++i) {
      if (i) shape += 'x';
      shape += std::to_string(b.shape[i]);
    }
    const double first = b.variants.front().us;
    std::cout << std::left << std::setw(16) << b.family << std::setw(24) << shape << std::setw(18) << best->variant
              << std::right << std::setprecision(2) << std::setw(10) << best->us << std::setprecision(0)
              << std::setw(11) << best->gflops << std::setw(9) << best->gbps << std::setprecision(2) << std::setw(11)
              << (first > 0 ? first / best->us : 1.0) << "x\n";
  }
}

void run_calibrate(const CalibrateOptions& o) {
#ifdef RLX_HAVE_CUDA
  const int device = device_index(o.device);
  const CalibrationIdentity id = cuda::device_identity(device);  // throws naming a missing device
  const std::string path = o.output.empty() ? calibration_path(id.gpu_uuid) : o.output;
  std::optional<Calibration> c;
  bool measured = false;
  if (o.force) {  // the per-shape GEMM timings kept by earlier processes are measured again too
    const std::string gemm = cuda::gemm_choices_path(id.gpu_uuid);
    std::error_code ec;
    if (std::filesystem::remove(gemm, ec)) std::cerr << "calibrate: removed " << gemm << "\n";
  } else {
    LoadResult r = load_calibration(path, id);
    if (r.status == CalibrationLoad::Loaded) c = std::move(r.calibration);
  }
  if (!c) {
    c = cuda::measure_calibration(device);
    save_calibration(*c, path);
    measured = true;
  }
  if (o.json) std::cout << calibration_to_json(*c) << "\n";
  else print_summary(*c, path, measured);
#else
  (void)o;
  (void)device_index;
  (void)print_summary;
  not_available("calibrate", "(built without CUDA)");
#endif
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Measure kernel variants and overheads on a GPU (at most 30 s) and cache them for the cost model; "
      "a valid cache is reused unless --force");
  cmd->add_option("--device", o->device, "CUDA device: N, cuda or cuda:N")->option_text("N")->capture_default_str();
  cmd->add_flag("--force", o->force,
                "Measure even when a valid cache file exists, and drop the GEMM timings kept by earlier runs "
                "(cuda-gemm-<uuid>.json), so each shape is timed again when first planned");
  cmd->add_flag("--json", o->json, "Print the calibration as JSON instead of the summary table");
  cmd->add_option("--output", o->output, "Write the calibration to FILE instead of the cache folder")
      ->option_text("FILE");
  cmd->callback([o] { run_calibrate(*o); });
}

}  // namespace rlx::cli
