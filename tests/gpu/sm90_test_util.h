// Helpers shared by the sm90 GEMM tests: 16-bit values as raw bits, a device
// allocation freed at scope exit, and a check of a kernel's output against a
// float64 reference.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "rlx/core/dtype.h"
#include "rlx/core/half.h"

namespace rlx::test {

inline uint16_t to_bits(DType t, float v) { return t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v); }
inline double from_bits(DType t, uint16_t h) { return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h); }

// Whether a GPU is present and available(0) says the sm90 kernel under test runs on it.
inline bool sm90_kernel_here(bool (*available)(int)) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && available(0);
}
#define RLX_SKIP_WITHOUT_SM90_KERNEL(available)     \
  if (!::rlx::test::sm90_kernel_here(available)) \
  GTEST_SKIP() << "no compute capability 9.0 device (or no sm_90a build)"

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t n) { EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess); }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
};

// Every element of the [rows, n] T-bit output `out` within tol·(1 + |ref|) of
// `ref`; the first five misses named by row and column.
inline void expect_close_to_reference(DType t, const std::vector<uint16_t>& out, const std::vector<double>& ref,
                                      int64_t n, double tol) {
  ASSERT_EQ(out.size(), ref.size());
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double want = ref[i], got = from_bits(t, out[i]);
    if (!(std::fabs(got - want) <= tol * (1.0 + std::fabs(want))) && ++bad <= 5)
      ADD_FAILURE() << "Y[" << static_cast<int64_t>(i) / n << ", " << static_cast<int64_t>(i) % n << "] = " << got
                    << ", want " << want;
  }
  EXPECT_EQ(bad, 0) << bad << " bad values";
}

}  // namespace rlx::test
