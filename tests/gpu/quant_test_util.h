// Random GGUF weight blocks for the CUDA quant tests: random quants with the
// scale fields drawn from realistic ranges (as tests/data/gen_gguf_fixtures.py
// does), so every value is finite.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "rlx/core/dtype.h"
#include "rlx/core/half.h"

namespace rlx::test {

inline uint16_t realistic_f16(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> e(-3.0f, -1.0f);
  const float mag = std::pow(10.0f, e(rng));
  return f32_to_f16(rng() & 1 ? mag : -mag);
}

// Byte offsets of the f16 scale fields within one block (ggml-common.h).
inline std::vector<int> f16_scale_offsets(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: case DType::Q8_1: case DType::IQ2_XXS:
    case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S: case DType::IQ1_S:
    case DType::IQ4_NL: case DType::IQ4_XS: case DType::Q1_0: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    case DType::TQ1_0: return {52};
    case DType::TQ2_0: return {64};
    default: return {};
  }
}

// `n_elems` elements of type t as bytes: random quants, realistic scales.
inline std::vector<uint8_t> random_data(DType t, int64_t n_elems, std::mt19937_64& rng) {
  const DTypeInfo& info = dtype_info(t);
  const int64_t nb = n_elems / info.block_elems, bb = info.block_bytes;
  std::vector<uint8_t> b(static_cast<size_t>(nb * bb));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    for (int64_t i = 0; i < nb; ++i) {
      const float v = normal(rng);
      if (t == DType::F32) std::memcpy(&b[4 * i], &v, 4);
      const uint16_t h = t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      if (t != DType::F32) std::memcpy(&b[2 * i], &h, 2);
    }
    return b;
  }
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* blk = &b[static_cast<size_t>(i * bb)];
    for (int off : f16_scale_offsets(t)) {
      const uint16_t h = realistic_f16(rng);
      std::memcpy(blk + off, &h, 2);
    }
    if (t == DType::Q8_K) {
      const float d = f16_to_f32(realistic_f16(rng));
      std::memcpy(blk, &d, 4);
    }
    if (t == DType::IQ1_M) {  // the f16 scale is the top nibbles of the four u16 scale words
      const uint16_t d = realistic_f16(rng);
      for (int k = 0; k < 4; ++k) {
        uint16_t sc;
        std::memcpy(&sc, blk + 48 + 2 * k, 2);
        sc = static_cast<uint16_t>((sc & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12));
        std::memcpy(blk + 48 + 2 * k, &sc, 2);
      }
    }
    if (t == DType::MXFP4) blk[0] = static_cast<uint8_t>(117 + rng() % 7);  // 2^-11 .. 2^-5
  }
  return b;
}

}  // namespace rlx::test
