// rlx devices: every device of every backend compiled into this build.
#include <iomanip>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"

namespace rlx::cli {
namespace {

void run_devices(bool json) {
  register_builtin_backends();
  const auto devices = list_devices();
  if (json) {
    auto out = nlohmann::json::array();
    for (const auto& d : devices)
      out.push_back({{"backend", d.backend}, {"index", d.index}, {"name", d.name},
                     {"memory_bytes", d.memory_bytes}, {"details", d.details}});
    std::cout << out.dump(2) << "\n";
    return;
  }
  size_t wb = 7, wn = 4;
  for (const auto& d : devices) {
    wb = std::max(wb, d.backend.size());
    wn = std::max(wn, d.name.size());
  }
  std::cout << std::left << std::setw(static_cast<int>(wb + 2)) << "BACKEND" << std::setw(7) << "INDEX"
            << std::setw(static_cast<int>(wn + 2)) << "NAME" << std::setw(12) << "MEMORY"
            << "DETAILS\n";
  for (const auto& d : devices) {
    std::cout << std::setw(static_cast<int>(wb + 2)) << d.backend << std::setw(7) << d.index
              << std::setw(static_cast<int>(wn + 2)) << d.name << std::setw(12)
              << (d.memory_bytes > 0 ? human_bytes(d.memory_bytes) : std::string("-")) << d.details << "\n";
  }
  const auto backends = registered_backends();
  for (const auto& b : backends)
    if (!backend_available(b)) std::cout << "(backend '" << b << "' is built in but found no device)\n";
}

}  // namespace

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices rlx can run on (every backend in this build)");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print a JSON array instead of a table");
  cmd->callback([json] { run_devices(*json); });
}

}  // namespace rlx::cli
