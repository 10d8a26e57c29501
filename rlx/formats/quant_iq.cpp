// The lattice ("IQ") formats, the non-linear 4-bit formats, the ternary
// formats and the FP4 formats. Layouts (ggml-common.h), byte offsets:
//  iq2_xxs  66: f16 d @0, u16 qs[32] @2   (per 32: 4 grid bytes + u32 of 4×7 sign bits, 4-bit scale)
//  iq2_xs   74: f16 d @0, u16 qs[32] @2 (9-bit grid index, 7-bit sign index), u8 scales[8] @66
//  iq2_s    82: f16 d @0, u8 qs[32] @2, u8 signs[32] @34, u8 qh[8] @66, u8 scales[8] @74
//  iq3_xxs  98: f16 d @0, u8 qs[64] @2, u32 scales_and_signs[8] @66
//  iq3_s   110: f16 d @0, u8 qs[64] @2, u8 qh[8] @66, u8 signs[32] @74, u8 scales[4] @106
//  iq1_s    50: f16 d @0, u8 qs[32] @2, u16 qh[8] @34
//  iq1_m    56: u8 qs[32] @0, u8 qh[16] @32, u8 scales[8] @48 (the f16 d is spread over their top nibbles)
//  iq4_nl   18: f16 d @0, u8 qs[16] @2 (32 elements)
//  iq4_xs  136: f16 d @0, u16 scales_h @2, u8 scales_l[4] @4, u8 qs[128] @8
//  tq1_0    54: u8 qs[48] @0 (5 trits per byte), u8 qh[4] @48 (4 trits per byte), f16 d @52
//  tq2_0    66: u8 qs[64] @0 (2 bits per element), f16 d @64
//  mxfp4    17: u8 e (e8m0) @0, u8 qs[16] @1 (32 e2m1 values)
//  nvfp4    36: u8 d[4] (ue4m3, one per 16 elements) @0, u8 qs[32] @4 (64 e2m1 values)
#include <cmath>
#include <cstring>

#include "rlx/formats/quant_internal.h"
#include "rlx/formats/quant_tables.h"

namespace rlx::quant_detail {
namespace {

using namespace ggml_tables;

constexpr float kIq1Delta = 0.125f;  // IQ1S_DELTA

inline uint8_t grid_byte(uint64_t row, int j) { return static_cast<uint8_t>(row >> (8 * j)); }
inline float sign(uint8_t signs, int j) { return signs & kmask_iq2xs[j] ? -1.0f : 1.0f; }

// Eight lattice values with their signs, scaled by db, in ggml's order of operations.
inline void emit8(float* y, float db, uint64_t row, uint8_t signs) {
  for (int j = 0; j < 8; ++j) y[j] = db * static_cast<float>(grid_byte(row, j)) * sign(signs, j);
}

// A base-3 digit of a TQ1_0 byte: the byte stores ceil(v * 256 / 243) for a
// 5-trit number v; multiplying by 3^n (mod 256) brings trit n to the top.
inline float trit(uint8_t packed, int n, float d) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto q = static_cast<uint8_t>(packed * kPow3[n]);
  const int xi = (static_cast<uint16_t>(q) * 3) >> 8;
  return static_cast<float>(xi - 1) * d;
}

}  // namespace

void dequant_iq2_xxs(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 66) {
    const float d = load_f16(b);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = b + 2 + 8 * ib;
      const uint32_t aux = load_u32(q + 4);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) emit8(y, db, iq2xxs_grid[q[l]], ksigns_iq2xs[(aux >> (7 * l)) & 127]);
    }
  }
}

void dequant_iq2_xs(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 74) {
    const float d = load_f16(b);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t sc = b[66 + ib];
      const float db[2] = {d * (0.5f + static_cast<float>(sc & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint16_t q = load_u16(b + 2 + 2 * (4 * ib + l));
        emit8(y, db[l / 2], iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9]);
      }
    }
  }
}

void dequant_iq2_s(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 82) {
    const float d = load_f16(b);
    const uint8_t* qs = b + 2;
    const uint8_t* signs = b + 34;
    const uint8_t* qh = b + 66;
    for (int ib = 0; ib < 8; ++ib, qs += 4, signs += 4) {
      const uint8_t sc = b[74 + ib];
      const float db[2] = {d * (0.5f + static_cast<float>(sc & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const int idx = qs[l] | ((qh[ib] << (8 - 2 * l)) & 0x300);  // 2 high bits per group of 8
        emit8(y, db[l / 2], iq2s_grid[idx], signs[l]);
      }
    }
  }
}

void dequant_iq3_xxs(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 98) {
    const float d = load_f16(b);
    const uint8_t* qs = b + 2;
    for (int ib = 0; ib < 8; ++ib, qs += 8) {
      const uint32_t aux = load_u32(b + 66 + 4 * ib);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t s = ksigns_iq2xs[(aux >> (7 * l)) & 127];
        const uint32_t g1 = iq3xxs_grid[qs[2 * l]], g2 = iq3xxs_grid[qs[2 * l + 1]];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * static_cast<float>(grid_byte(g1, j)) * sign(s, j);
          y[j + 4] = db * static_cast<float>(grid_byte(g2, j)) * sign(s, j + 4);
        }
      }
    }
  }
}

void dequant_iq3_s(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 110) {
    const float d = load_f16(b);
    const uint8_t* qs = b + 2;
    const uint8_t* qh = b + 66;
    const uint8_t* signs = b + 74;
    for (int ib = 0; ib < 8; ++ib, qs += 8, signs += 4) {
      const uint8_t sc = b[106 + ib / 2];
      const float db = d * static_cast<float>(1 + 2 * (ib % 2 ? sc >> 4 : sc & 0xF));
      for (int l = 0; l < 4; ++l, y += 8) {
        // The 9th bit of the two grid indices of group l: qh bits 2l and 2l+1.
        const uint32_t g1 = iq3s_grid[qs[2 * l] | ((qh[ib] << (8 - 2 * l)) & 256)];
        const uint32_t g2 = iq3s_grid[qs[2 * l + 1] | ((qh[ib] << (7 - 2 * l)) & 256)];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * static_cast<float>(grid_byte(g1, j)) * sign(signs[l], j);
          y[j + 4] = db * static_cast<float>(grid_byte(g2, j)) * sign(signs[l], j + 4);
        }
      }
    }
  }
}

void dequant_iq1_s(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 50) {
    const float d = load_f16(b);
    const uint8_t* qs = b + 2;
    for (int ib = 0; ib < 8; ++ib, qs += 4) {
      const uint16_t qh = load_u16(b + 34 + 2 * ib);
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint64_t row = iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(static_cast<int8_t>(grid_byte(row, j))) + delta);
      }
    }
  }
}

void dequant_iq1_m(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 56) {
    const uint8_t* qs = b;
    const uint8_t* qh = b + 32;
    uint16_t sc[4];
    for (int k = 0; k < 4; ++k) sc[k] = load_u16(b + 48 + 2 * k);
    const auto dbits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) |
                                             (sc[3] & 0xF000));
    const float d = f16_to_f32(dbits);
    for (int ib = 0; ib < 8; ++ib, qs += 4, qh += 2) {
      const int shift = 6 * (ib % 2);
      const float dl[2] = {d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1),
                           d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1)};
      for (int l = 0; l < 4; ++l, y += 8) {
        // Groups 0,1 take their 3 high index bits and delta sign from qh[0]; 2,3 from qh[1].
        const uint8_t h = qh[l / 2];
        const int idx = qs[l] | ((l % 2 ? h << 4 : h << 8) & 0x700);
        const float delta = h & (l % 2 ? 0x80 : 0x08) ? -kIq1Delta : kIq1Delta;
        const uint64_t row = iq1s_grid[idx];
        for (int j = 0; j < 8; ++j)
          y[j] = dl[l / 2] * (static_cast<float>(static_cast<int8_t>(grid_byte(row, j))) + delta);
      }
    }
  }
}

void dequant_iq4_nl(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = load_f16(b);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kvalues_iq4nl[b[2 + j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kvalues_iq4nl[b[2 + j] >> 4]);
    }
  }
}

void dequant_iq4_xs(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 136) {
    const float d = load_f16(b);
    const uint16_t scales_h = load_u16(b + 2);
    const uint8_t* qs = b + 8;
    for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
      const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kvalues_iq4nl[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kvalues_iq4nl[qs[j] >> 4]);
      }
    }
  }
}

void dequant_tq1_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 54) {
    const float d = load_f16(b + 52);
    // qs[0..32) hold elements 0..160 (trit n of byte m is element 32n + m),
    // qs[32..48) elements 160..240 (16n + m), qh[0..4) elements 240..256 (4n + m).
    for (int n = 0; n < 5; ++n)
      for (int m = 0; m < 32; ++m) *y++ = trit(b[m], n, d);
    for (int n = 0; n < 5; ++n)
      for (int m = 0; m < 16; ++m) *y++ = trit(b[32 + m], n, d);
    for (int n = 0; n < 4; ++n)
      for (int m = 0; m < 4; ++m) *y++ = trit(b[48 + m], n, d);
  }
}

void dequant_tq2_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 66) {
    const float d = load_f16(b + 64);
    for (int j = 0; j < 64; j += 32)
      for (int shift = 0; shift < 8; shift += 2)
        for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(((b[j + m] >> shift) & 3) - 1) * d;
  }
}

void dequant_mxfp4(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 17, y += 32) {
    const float d = e8m0_half(b[0]);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(kvalues_mxfp4[b[1 + j] & 0xF]) * d;
      y[j + 16] = static_cast<float>(kvalues_mxfp4[b[1 + j] >> 4]) * d;
    }
  }
}

void dequant_nvfp4(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 36) {
    for (int s = 0; s < 4; ++s, y += 16) {
      const float d = ue4m3_half(b[s]);
      const uint8_t* q = b + 4 + 8 * s;
      for (int j = 0; j < 8; ++j) {
        y[j] = static_cast<float>(kvalues_mxfp4[q[j] & 0xF]) * d;
        y[j + 8] = static_cast<float>(kvalues_mxfp4[q[j] >> 4]) * d;
      }
    }
  }
}

}  // namespace rlx::quant_detail
