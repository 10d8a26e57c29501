// Diagnostics go to stderr; verbose lines only when RLX_VERBOSE is on.
#pragma once
#include <iostream>

#include "rlx/core/env.h"
#include "rlx/core/error.h"

namespace rlx {

inline bool verbose() { return env_bool("RLX_VERBOSE"); }

template <typename... Args>
void log_verbose(Args&&... args) {
  if (verbose()) std::cerr << "[rlx] " << str(std::forward<Args>(args)...) << "\n";
}

template <typename... Args>
void log_warn(Args&&... args) {
  std::cerr << "[rlx] warning: " << str(std::forward<Args>(args)...) << "\n";
}

}  // namespace rlx
