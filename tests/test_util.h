// Helpers shared by the gtest binaries.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rlx/core/error.h"
#include "rlx/core/tensor.h"

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

// Sets (with nullptr: unsets) an environment variable for one scope, then
// restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// One random seed per test binary run, and the generator drawn from it;
// RLX_TRACE_SEED() prints the seed with any failure in its scope.
inline uint64_t run_seed() {
  static const uint64_t s = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  return s;
}
inline std::mt19937_64& rng() {
  static std::mt19937_64 g(run_seed());
  return g;
}
#define RLX_TRACE_SEED() SCOPED_TRACE(::testing::Message() << "seed " << ::rlx::test::run_seed())

// An f32 tensor of values uniform in [lo, hi), drawn from rng().
inline Tensor uniform_f32(std::vector<int64_t> shape, float lo, float hi) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng());
  return t;
}

}  // namespace rlx::test
