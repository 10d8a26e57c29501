// Host conversions between f32 and the 16- and 8-bit float formats.
// f16: IEEE binary16. bf16: top half of f32, round-to-nearest-even.
// fp8 e4m3: OCP "E4M3FN" — no infinities, max 448, NaN only at S.1111.111.
// fp8 e5m2: IEEE-like with infinities.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace rlx {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0) {
    // zero or subnormal: man * 2^-24 (exact: man < 2^10); a multiply, not ldexp's library call
    float v = static_cast<float>(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (ax < 0x38800000u) {
    // result is subnormal or zero: round |f| * 2^24 to nearest even integer
    float v = bits_f32(ax) * 16777216.0f;
    auto m = static_cast<uint32_t>(std::nearbyint(v));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t r = ax - 0x38000000u;  // rebias exponent 127 -> 15 (in place)
  r += 0xfffu + ((r >> 13) & 1u);  // round to nearest even on the 13 dropped bits
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float fp8_e4m3_to_f32(uint8_t v) {
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  float r;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0) r = std::ldexp(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
  else r = std::ldexp(1.0f + man / 8.0f, exp - 7);
  return neg ? -r : r;
}

inline float fp8_e5m2_to_f32(uint8_t v) { return f16_to_f32(static_cast<uint16_t>(v) << 8); }

// Round to nearest even, saturating to ±448 (OCP "satfinite" convention).
inline uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  // Find the nearest representable by scanning the 127 finite magnitudes (exact, simple).
  uint8_t best = 0;
  float best_err = a;
  for (uint8_t c = 1; c <= 0x7e; ++c) {
    float err = std::fabs(fp8_e4m3_to_f32(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) { best = c; best_err = err; }
  }
  return sign | best;
}

// Directly from f32 (not via f16, which would round twice).
inline uint8_t f32_to_fp8_e5m2(float f) {
  const uint32_t x = f32_bits(f);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e;           // NaN stays NaN
  if (ax >= 0x47700000u) return sign | 0x7c;          // ≥ 61440 rounds to inf
  if (ax < 0x38800000u) {                             // below 2^-14: subnormal, m · 2^-16
    auto m = static_cast<uint32_t>(std::nearbyint(bits_f32(ax) * 65536.0f));
    return static_cast<uint8_t>(sign | m);
  }
  uint32_t r = ax - 0x38000000u;                      // rebias exponent 127 → 15 in place
  r += 0xfffffu + ((r >> 21) & 1u);                   // round to nearest even on the 21 dropped bits
  return static_cast<uint8_t>(sign | (r >> 21));
}

}  // namespace rlx
