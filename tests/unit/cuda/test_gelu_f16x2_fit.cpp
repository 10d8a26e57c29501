// The accuracy contract of dev::gelu_erf_f16x2 (device/activation.cuh) on the
// host, for every f16 input, in an emulation of its f16x2 arithmetic: each
// instruction's exact result rounded to f16 once, tanh.approx taken as the
// correctly rounded tanh and as one f16 step either side of it (the GPU's
// result lies within that; GemmSm90.GeluErfF16x2EveryInput checks the GPU's
// own). Guards the fit (device/gelu_f16x2_fit.h) against an edit that breaks
// the bound documented in RLX_CUDA_GELU_F16X2: within an ulp for x ≥ 0, within
// 2^-10·max(1, |x|) for x < 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "rlx/backends/cuda/device/gelu_f16x2_fit.h"
#include "rlx/core/half.h"

namespace {

using namespace rlx;

double f16(double v) { return f16_to_f32(f32_to_f16(static_cast<float>(v))); }

// The f16 spacing at |v| (an ulp; 2^-24 among the subnormals).
double ulp16(double v) {
  const double a = std::max(std::fabs(v), 0x1p-14);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 10);
}

double gelu_emulated(double x, int tanh_steps) {
  const double u = std::min(f16(x * x), static_cast<double>(cuda::kGeluF16x2Clamp));
  double q = f16(u * f16(cuda::kGeluF16x2Q2) + f16(cuda::kGeluF16x2Q1));
  q = f16(q * u + f16(cuda::kGeluF16x2Q0));
  const double z = f16(x * q);
  double t = f16(std::tanh(z));
  t = std::clamp(t + tanh_steps * ulp16(t), -1.0, 1.0);
  const double h = f16(0.5 * x);
  return f16(h * t + h);
}

TEST(GeluF16x2Fit, MeetsItsBoundOnEveryInput) {
  for (const double q : {cuda::kGeluF16x2Q2, cuda::kGeluF16x2Q1, cuda::kGeluF16x2Q0})
    EXPECT_EQ(f16(q), q) << "coefficients are f16 values";
  int bad = 0;
  double worst_pos_ulps = 0, worst_neg = 0;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const double x = f16_to_f32(static_cast<uint16_t>(bits));
    if (!std::isfinite(x)) continue;
    const double ref = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    for (int steps : {0, -1, 1}) {
      const double got = gelu_emulated(x, steps);
      bool ok;
      if (x >= 0) {
        const double ulps = std::fabs(got - ref) / ulp16(ref);
        if (steps == 0) worst_pos_ulps = std::max(worst_pos_ulps, ulps);
        ok = ulps <= (steps == 0 ? 1.0 : 2.0);
      } else {
        const double rel = std::fabs(got - ref) / std::max(1.0, std::fabs(x));
        worst_neg = std::max(worst_neg, rel);
        ok = rel <= 0x1p-10;
      }
      if (!ok && bad++ < 10)
        ADD_FAILURE() << "gelu(" << x << "), tanh " << steps << " steps off: " << got << ", want " << ref;
    }
  }
  EXPECT_EQ(bad, 0);
  RecordProperty("worst_ulps_x_nonnegative", std::to_string(worst_pos_ulps));
  RecordProperty("worst_error_over_max_1_abs_x_negative", std::to_string(worst_neg));
}

}  // namespace
