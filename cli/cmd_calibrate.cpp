// rlx calibrate: measure kernel variants on a GPU and store the table the
// cost model reads ($XDG_CACHE_HOME/rlx/cuda-calib-<gpu-uuid>.json).
#include <memory>
#include <string>

#include "cli/common.h"

namespace rlx::cli {
namespace {

struct CalibrateOptions {
  std::string device = "cuda";
};

void run_calibrate(const CalibrateOptions&) { not_available("calibrate"); }

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand("calibrate", "Measure kernel throughput on a device and cache it for the cost model");
  cmd->add_option("--device", o->device, "Device to calibrate: cuda or cuda:N")
      ->check(device_validator())
      ->capture_default_str();
  cmd->callback([o] { run_calibrate(*o); });
}

}  // namespace rlx::cli
