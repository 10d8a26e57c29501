#include "rlx/runtime/backend_registry.h"

#include <mutex>

#include "rlx/core/error.h"

namespace rlx {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<BackendFactory> factories;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_backend(BackendFactory factory) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  for (auto& f : r.factories) {
    if (f.name == factory.name) {
      f = std::move(factory);
      return;
    }
  }
  r.factories.push_back(std::move(factory));
}

std::vector<std::string> registered_backends() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  for (const auto& f : r.factories) out.push_back(f.name);
  return out;
}

bool backend_available(const std::string& name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  for (const auto& f : r.factories)
    if (f.name == name) return f.device_count() > 0;
  return false;
}

std::shared_ptr<Backend> create_backend(const std::string& device) {
  std::string name = device;
  int index = 0;
  if (auto colon = device.find(':'); colon != std::string::npos) {
    name = device.substr(0, colon);
    const std::string idx = device.substr(colon + 1);
    RLX_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos && idx.size() < 4,
              "device '", device, "': index must be a number");
    index = std::stoi(idx);
  }
  BackendFactory factory;
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    std::string known;
    for (const auto& f : r.factories) {
      known += (known.empty() ? "" : ", ") + f.name;
      if (f.name == name) factory = f;
    }
    if (!factory.create) throw Unsupported(str("unknown device '", device, "' (backends built in: ", known, ")"));
  }
  const int count = factory.device_count();
  if (index >= count)
    throw Unsupported(str("device '", device, "' is not available: ", count, " ", name, " device(s) found"));
  return factory.create(index);
}

std::vector<DeviceInfo> list_devices() {
  std::vector<BackendFactory> fs;
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    fs = r.factories;
  }
  std::vector<DeviceInfo> out;
  for (const auto& f : fs)
    for (int i = 0; i < f.device_count(); ++i) out.push_back(f.create(i)->device_info());
  return out;
}

}  // namespace rlx
