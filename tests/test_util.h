// Helpers shared by the gtest binaries.
#pragma once
#include <string>

#include "rlx/core/error.h"

namespace rlx::test {

// The message of the rlx::Error that `f` throws, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace rlx::test
