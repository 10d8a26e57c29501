// Helpers shared by the sm90 GEMM tests: 16-bit values as raw bits, and a
// device allocation freed at scope exit.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace rlx::test
