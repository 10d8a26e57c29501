// The fit of dev::gelu_erf_f16x2 (device/activation.cuh), shared with the host
// test that checks its accuracy contract on every f16 input in an emulation of
// the f16x2 arithmetic (tests/unit/cuda/test_gelu_f16x2_fit.cpp):
// z = x·Q(min(x², kGeluF16x2Clamp)) ≈ logit Φ(x)/2, Q(u) = Q2·u² + Q1·u + Q0,
// each coefficient an f16 value (scalars: a constexpr array is not device code).
#pragma once

namespace rlx::cuda {

inline constexpr float kGeluF16x2Q2 = -2.3055076599121094e-4f;
inline constexpr float kGeluF16x2Q1 = 0.0364990234375f;
inline constexpr float kGeluF16x2Q0 = 0.7978515625f;
inline constexpr float kGeluF16x2Clamp = 36.0f;

}  // namespace rlx::cuda
