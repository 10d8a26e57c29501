// rlx bench: built-in benchmarks with JSON output.
#include <memory>
#include <string>

#include "cli/common.h"

namespace rlx::cli {
namespace {

struct BenchOptions {
  std::string device = "auto";
  bool json = false;
};

void run_bench(const BenchOptions&) { not_available("bench"); }

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Run the built-in benchmarks on a device");
  cmd->add_option("--device", o->device, "Device: auto, cpu, cuda or cuda:N")
      ->check(device_validator())
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print results as JSON");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace rlx::cli
