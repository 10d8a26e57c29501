// Counter-based uniform draws for the Sample op, shared by every backend so a
// seeded graph picks the same tokens on CPU and GPU. No state: the number for
// (seed, step, row) is a pure function of the three, built from splitmix64
// (Steele, Lea & Flood 2014) finalizers. Self-contained (no std:: calls) so a
// CUDA file can include it as is.
#pragma once
#include <stdint.h>

#ifdef __CUDACC__
#define RLX_HOST_DEVICE __host__ __device__
#else
#define RLX_HOST_DEVICE
#endif

namespace rlx {

// splitmix64's output function: a bijection on 64-bit values with full avalanche.
RLX_HOST_DEVICE inline uint64_t splitmix64_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 24 random bits (every value exact in f32).
// Distinct (step, row) pairs under one seed give distinct hash inputs.
RLX_HOST_DEVICE inline float sample_uniform(uint64_t seed, uint32_t step, uint32_t row) {
  const uint64_t key = (static_cast<uint64_t>(step) << 32) | static_cast<uint64_t>(row);
  const uint64_t h = splitmix64_mix(splitmix64_mix(seed) ^ key);
  return static_cast<float>(h >> 40) * 5.9604644775390625e-8f;  // 2^-24
}

}  // namespace rlx
