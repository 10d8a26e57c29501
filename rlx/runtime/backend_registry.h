// Backends by name. Built-in ones (cpu, and cuda when compiled in) are
// registered by rlx/backends/builtin.cpp the first time a Session is made.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rlx/runtime/backend.h"

namespace rlx {

struct BackendFactory {
  std::string name;                                        // "cpu", "cuda"
  std::function<int()> device_count;                       // 0 = not available here
  std::function<std::shared_ptr<Backend>(int index)> create;
};

void register_backend(BackendFactory factory);
std::vector<std::string> registered_backends();
// "cpu", "cuda", "cuda:1". Throws Unsupported naming what is available.
std::shared_ptr<Backend> create_backend(const std::string& device);
// Every device of every registered backend.
std::vector<DeviceInfo> list_devices();
bool backend_available(const std::string& name);

}  // namespace rlx
