// n / d for n < 2^31 by multiply-high and shift, for index arithmetic in
// kernels (d is fixed per launch, computed on the host).
#pragma once
#include <cstdint>

namespace rlx::cuda::dev {

struct FastDiv {
  uint32_t d = 1, mul = 0, shift = 0;
  FastDiv() = default;
  // d ≤ 1 (also a 0-length view, never divided by) divides by one.
  explicit FastDiv(int64_t div) : d(static_cast<uint32_t>(div > 1 ? div : 1)) {
    if (d == 1) return;
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    mul = static_cast<uint32_t>(((uint64_t{1} << (31 + l)) + d - 1) / d);
    shift = l - 1;
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return d == 1 ? n : __umulhi(n, mul) >> shift; }
};

}  // namespace rlx::cuda::dev
