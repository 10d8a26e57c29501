// Host conversions between f32 and f16 / bf16 / fp8 (e4m3, e5m2): exact bit
// patterns, round-to-nearest-even ties, subnormals, infinities and NaNs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "rlx/core/half.h"

namespace rlx {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float p2(int e) { return std::ldexp(1.0f, e); }

// ---- f16 ----

bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(F16, ExactValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(0.5f), 0x3800);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);  // max finite
  EXPECT_EQ(f32_to_f16(p2(-14)), 0x0400);   // min normal
  EXPECT_EQ(f32_to_f16(p2(-24)), 0x0001);   // min subnormal
  EXPECT_EQ(f32_to_f16(1023 * p2(-24)), 0x03ff);  // max subnormal
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), p2(-24));
  EXPECT_EQ(f16_to_f32(0x03ff), 1023 * p2(-24));
  EXPECT_EQ(f16_to_f32(0x0400), p2(-14));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x8001), -p2(-24));
}

TEST(F16, RoundToNearestEven) {
  // f16 ulp at 1.0 is 2^-10; the ties sit at odd multiples of 2^-11.
  EXPECT_EQ(f32_to_f16(1.0f + p2(-11)), 0x3c00);              // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * p2(-11)), 0x3c02);          // tie -> even (up)
  EXPECT_EQ(f32_to_f16(1.0f + p2(-11) + p2(-20)), 0x3c01);    // just above the tie
  EXPECT_EQ(f32_to_f16(1.0f + p2(-11) - p2(-20)), 0x3c00);    // just below
  EXPECT_EQ(f32_to_f16(-(1.0f + 3 * p2(-11))), 0xbc02);
  // Mantissa carry into the exponent: 2 - 2^-11 is the tie between 0x3bff and 0x4000.
  EXPECT_EQ(f32_to_f16(2.0f - p2(-11)), 0x4000);
}

TEST(F16, Subnormals) {
  EXPECT_EQ(f32_to_f16(p2(-25)), 0x0000);                  // tie between 0 and min subnormal -> 0
  EXPECT_EQ(f32_to_f16(p2(-25) + p2(-40)), 0x0001);        // just above the tie
  EXPECT_EQ(f32_to_f16(3 * p2(-25)), 0x0002);              // tie between 1 and 2 ulps -> 2
  EXPECT_EQ(f32_to_f16(5 * p2(-25)), 0x0002);              // tie between 2 and 3 -> 2
  EXPECT_EQ(f32_to_f16(p2(-14) - p2(-25)), 0x0400);        // tie between max subnormal and min normal
  EXPECT_EQ(f32_to_f16(p2(-30)), 0x0000);                  // underflow to zero keeps the sign
  EXPECT_EQ(f32_to_f16(-p2(-30)), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(F16, OverflowInfNaN) {
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);   // below the tie with 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);   // the tie rounds to even = inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(f32_to_f16(kInf), 0x7c00);
  EXPECT_EQ(f32_to_f16(-kInf), 0xfc00);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(kNaN)));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(bits_f32(0x7f800001u))));  // low-payload NaN stays NaN
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xfc01)));
}

TEST(F16, EveryValueRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto v = static_cast<uint16_t>(h);
    const float f = f16_to_f32(v);
    if (f16_is_nan(v)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(f16_is_nan(f32_to_f16(f))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), v) << std::hex << h;
  }
}

// ---- bf16 ----

TEST(BF16, ExactValuesAndTies) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f807fffu)), 0x3f80);  // below the tie
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3fff8000u)), 0x4000);  // carry into the exponent
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0x4049), bits_f32(0x40490000u));
}

TEST(BF16, SubnormalsInfNaN) {
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00008000u)), 0x0000);  // subnormal tie -> 0
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00010000u)), 0x0001);
  EXPECT_EQ(f32_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xff80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up past the max
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f7f7fffu)), 0x7f7f);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = f32_to_bf16(bits_f32(nan));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan;  // never becomes inf
  }
}

TEST(BF16, EveryValueRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto v = static_cast<uint16_t>(h);
    const float f = bf16_to_f32(v);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), v) << std::hex << h;
  }
}

// ---- fp8 e4m3 (OCP E4M3FN) ----

TEST(FP8E4M3, Decode) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);          // exp 7 (bias 7), man 0
  EXPECT_EQ(fp8_e4m3_to_f32(0x39), 1.125f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);        // max: S.1111.110
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);        // exp 15 is finite: no infinities
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), p2(-9));        // min subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * p2(-9));    // max subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), p2(-6));        // min normal
}

TEST(FP8E4M3, NaNOnlyAtAllOnes) {
  for (uint32_t c = 0; c <= 0xff; ++c) {
    const float f = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    const bool nan = (c & 0x7f) == 0x7f;
    EXPECT_EQ(std::isnan(f), nan) << std::hex << c;
    EXPECT_FALSE(std::isinf(f)) << std::hex << c;
    if (!nan) {
      EXPECT_LE(std::fabs(f), 448.0f) << std::hex << c;
    }
  }
}

TEST(FP8E4M3, EncodeSaturates) {
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(460.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(kInf), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-kInf), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(kNaN) & 0x7f, 0x7f);
}

TEST(FP8E4M3, EncodeRoundsToNearestEven) {
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);       // tie between 1.0 (even) and 1.125
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);       // tie between 1.125 and 1.25 (even)
  EXPECT_EQ(f32_to_fp8_e4m3(1.07f), 0x39);
  EXPECT_EQ(f32_to_fp8_e4m3(-1.1875f), 0xba);
  EXPECT_EQ(f32_to_fp8_e4m3(p2(-10)), 0x00);       // tie between 0 and min subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(3 * p2(-10)), 0x02);   // tie between 1 and 2 subnormal ulps
  EXPECT_EQ(f32_to_fp8_e4m3(p2(-12)), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(400.0f), 0x7c);        // tie between 384 (0x7c, even) and 416 (0x7d)
  EXPECT_EQ(f32_to_fp8_e4m3(432.0f), 0x7e);        // tie between 416 and 448 (0x7e, even)
}

TEST(FP8E4M3, EveryValueRoundTrips) {
  for (uint32_t c = 0; c <= 0xff; ++c) {
    const auto v = static_cast<uint8_t>(c);
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(v)), v) << std::hex << c;
  }
}

// ---- fp8 e5m2 ----

TEST(FP8E5M2, DecodeEncode) {
  EXPECT_EQ(fp8_e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);      // max finite
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), p2(-16));       // min subnormal
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0x7c)));
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0xfc)));
  for (uint8_t nan : {0x7d, 0x7e, 0x7f, 0xfd, 0xff}) EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(nan))) << int(nan);
  EXPECT_EQ(f32_to_fp8_e5m2(1.0f), 0x3c);
  EXPECT_EQ(f32_to_fp8_e5m2(57344.0f), 0x7b);
  EXPECT_EQ(f32_to_fp8_e5m2(1e6f), 0x7c);          // IEEE-like: overflow is inf
  EXPECT_EQ(f32_to_fp8_e5m2(kInf), 0x7c);
  EXPECT_EQ(f32_to_fp8_e5m2(-kInf), 0xfc);
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(kNaN))));
}

TEST(FP8E5M2, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_fp8_e5m2(1.125f), 0x3c);        // tie between 1.0 (even) and 1.25
  EXPECT_EQ(f32_to_fp8_e5m2(1.375f), 0x3e);        // tie between 1.25 and 1.5 (even)
  EXPECT_EQ(f32_to_fp8_e5m2(1.2f), 0x3d);
  EXPECT_EQ(f32_to_fp8_e5m2(p2(-17)), 0x00);       // tie between 0 and min subnormal
  EXPECT_EQ(f32_to_fp8_e5m2(3 * p2(-17)), 0x02);
  // A value just above a tie must round up even when f16 would round it onto the tie.
  EXPECT_EQ(f32_to_fp8_e5m2(1.125f + p2(-13)), 0x3d);
  EXPECT_EQ(f32_to_fp8_e5m2(-(1.125f + p2(-13))), 0xbd);
}

TEST(FP8E5M2, EveryValueRoundTrips) {
  for (uint32_t c = 0; c <= 0xff; ++c) {
    const auto v = static_cast<uint8_t>(c);
    const float f = fp8_e5m2_to_f32(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp8_e5m2(f), v) << std::hex << c;
  }
}

}  // namespace
}  // namespace rlx
