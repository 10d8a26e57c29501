// Shared pieces of the CPU quant code: unaligned little-endian loads and the
// per-type block kernels, which quant.cpp lists in its dispatch table.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "rlx/core/half.h"

namespace rlx::quant_detail {

inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }
inline void store_f16(uint8_t* p, float f) { uint16_t h = f32_to_f16(f); std::memcpy(p, &h, 2); }

// Scale and min of sub-block j (0..7) from the 12 packed bytes of Q4_K / Q5_K:
// bytes 0-3 hold scales 0-3 (+ the top 2 bits of scales 4-7), bytes 4-7 the
// mins 0-3 (+ top bits of mins 4-7), bytes 8-11 the low nibbles of 4-7.
inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K's 16 six-bit scales: low nibbles in bytes 0-7 (two per byte), the top
// two bits of scale j in byte 8 + j % 4 at bit 2 * (j / 4).
inline int scale_q3_k(int j, const uint8_t* s) {
  const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// ggml_e8m0_to_fp32_half: 2^(e - 128), built from bits (e < 2 gives a subnormal).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ggml_ue4m3_to_fp32: unsigned e4m3 (bias 7; bit 7 ignored), halved to match
// the doubled e2m1 table; 0x7F (NaN) decodes as 0.
inline float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int exp = (x >> 3) & 0xF, man = x & 7;
  const float raw = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                             : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return raw * 0.5f;
}

// The block kernels of the common types are also compiled for AVX2 and
// picked at load time (function multiversioning): decoding the weights of a
// CPU matmul row by row is the CPU's decode-time hot loop. AVX2 has no FMA
// and the library builds with -ffp-contract=off, so every clone gives the
// same bits.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(RLX_NO_MULTIVERSION)
#define RLX_DEQUANT_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define RLX_DEQUANT_MULTIVERSION
#endif

// Block kernels: convert `nb` consecutive blocks.
using DequantFn = void (*)(const uint8_t* src, float* dst, int64_t nb);
using QuantFn = void (*)(const float* src, uint8_t* dst, int64_t nb);

// quant_k.cpp
void dequant_q2_k(const uint8_t*, float*, int64_t);
void dequant_q3_k(const uint8_t*, float*, int64_t);
void dequant_q4_k(const uint8_t*, float*, int64_t);
void dequant_q5_k(const uint8_t*, float*, int64_t);
void dequant_q6_k(const uint8_t*, float*, int64_t);
void dequant_q8_k(const uint8_t*, float*, int64_t);
void quant_q4_k(const float*, uint8_t*, int64_t);
void quant_q6_k(const float*, uint8_t*, int64_t);

// quant_iq.cpp
void dequant_iq2_xxs(const uint8_t*, float*, int64_t);
void dequant_iq2_xs(const uint8_t*, float*, int64_t);
void dequant_iq2_s(const uint8_t*, float*, int64_t);
void dequant_iq3_xxs(const uint8_t*, float*, int64_t);
void dequant_iq3_s(const uint8_t*, float*, int64_t);
void dequant_iq1_s(const uint8_t*, float*, int64_t);
void dequant_iq1_m(const uint8_t*, float*, int64_t);
void dequant_iq4_nl(const uint8_t*, float*, int64_t);
void dequant_iq4_xs(const uint8_t*, float*, int64_t);
void dequant_tq1_0(const uint8_t*, float*, int64_t);
void dequant_tq2_0(const uint8_t*, float*, int64_t);
void dequant_mxfp4(const uint8_t*, float*, int64_t);
void dequant_nvfp4(const uint8_t*, float*, int64_t);

}  // namespace rlx::quant_detail
