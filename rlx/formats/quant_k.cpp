// K-quants: 256-element super-blocks of 16 or 8 sub-blocks whose scales are
// themselves quantized against one f16 (or f32) super-block scale.
// Layouts (ggml-common.h), byte offsets within a block:
//  q2_k  84: u8 scales[16] (lo 4 bits scale, hi 4 bits min) @0, u8 qs[64] @16, f16 d @80, f16 dmin @82
//  q3_k 110: u8 hmask[32] @0, u8 qs[64] @32, u8 scales[12] (16 × 6 bits) @96, f16 d @108
//  q4_k 144: f16 d @0, f16 dmin @2, u8 scales[12] (8 scales + 8 mins, 6 bits) @4, u8 qs[128] @16
//  q5_k 176: f16 d @0, f16 dmin @2, u8 scales[12] @4, u8 qh[32] @16, u8 qs[128] @48
//  q6_k 210: u8 ql[128] @0, u8 qh[64] @128, i8 scales[16] @192, f16 d @208
//  q8_k 292: f32 d @0, i8 qs[256] @4, i16 bsums[16] @260 (sums, for dot products only)
#include <cmath>
#include <cstring>

#include "rlx/formats/quant_internal.h"

namespace rlx::quant_detail {
namespace {

// ggml's nearest_int (round half to even) clamped to [lo, hi]; NaN yields lo.
inline int nearest_clamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::nearbyint(v));
}

}  // namespace

void dequant_q2_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 84) {
    const float d = load_f16(b + 80), dmin = load_f16(b + 82);
    const uint8_t* scales = b;
    const uint8_t* q = b + 16;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const int sc = scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequant_q3_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 110) {
    const float d = load_f16(b + 108);
    const uint8_t* hm = b;
    const uint8_t* q = b + 32;
    int is = 0;
    uint8_t m = 1;  // the high bit of element l of pass p sits in hmask[l] bit p
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d * static_cast<float>(scale_q3_k(is++, b + 96));
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

RLX_DEQUANT_MULTIVERSION
void dequant_q4_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 144) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* q = b + 16;
    for (int is = 0; is < 8; is += 2, q += 32) {
      int sc, m;
      scale_min_k4(is, b + 4, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, b + 4, sc, m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

RLX_DEQUANT_MULTIVERSION
void dequant_q5_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 176) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      const int u1 = 1 << is, u2 = 2 << is;  // the high bits of this pair of sub-blocks in qh
      int sc, m;
      scale_min_k4(is, b + 4, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, b + 4, sc, m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

RLX_DEQUANT_MULTIVERSION
void dequant_q6_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const float d = load_f16(b + 208);
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int n = 0; n < 2; ++n, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequant_q8_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 292, y += 256) {
    float d;
    std::memcpy(&d, b, 4);
    for (int j = 0; j < 256; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
  }
}

// Q4_K by plain round-to-nearest: each 32-element sub-block gets
// scale = (max - min) / 15 and min = -min(0, min x); the 8 scales and 8 mins
// are rounded to 6 bits against d = max scale / 63 and dmin = max min / 63;
// then every element is rounded against its sub-block's stored scale and min.
void quant_q4_k(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 144) {
    float scales[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      float mn = 0.0f, mx = x[32 * j];
      for (int l = 0; l < 32; ++l) {
        mn = std::min(mn, x[32 * j + l]);
        mx = std::max(mx, x[32 * j + l]);
      }
      scales[j] = (mx - mn) / 15;
      mins[j] = -mn;
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t* s = b + 4;
    std::memset(s, 0, 12);
    for (int j = 0; j < 8; ++j) {
      const int ls = nearest_clamp(inv_scale * scales[j], 0, 63), lm = nearest_clamp(inv_min * mins[j], 0, 63);
      if (j < 4) {
        s[j] = static_cast<uint8_t>(ls);
        s[j + 4] = static_cast<uint8_t>(lm);
      } else {
        s[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        s[j - 4] = static_cast<uint8_t>(s[j - 4] | ((ls >> 4) << 6));
        s[j] = static_cast<uint8_t>(s[j] | ((lm >> 4) << 6));
      }
    }
    store_f16(b, max_scale / 63.0f);
    store_f16(b + 2, max_min / 63.0f);
    const float d = load_f16(b), dmin = load_f16(b + 2);
    uint8_t L[256];
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      scale_min_k4(j, s, sc, m);
      const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l)
        L[32 * j + l] = static_cast<uint8_t>(dj != 0.0f ? nearest_clamp((x[32 * j + l] + mj) / dj, 0, 15) : 0);
    }
    // Byte l of each 32-byte group holds element l (low nibble) and l + 32 (high).
    uint8_t* q = b + 16;
    for (int j = 0; j < 256; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// Q6_K by plain round-to-nearest: each 16-element sub-block maps its
// largest-magnitude value to -32 (scale = that value / -32); the 16 scales are
// rounded to int8 against d = (largest scale) / -128; elements are then rounded
// to [-32, 31] against their stored sub-block scale.
void quant_q6_k(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 210) {
    float scales[16], max_scale = 0.0f, max_abs = 0.0f;
    for (int ib = 0; ib < 16; ++ib) {
      float amax = 0.0f, vmax = 0.0f;
      for (int l = 0; l < 16; ++l) {
        if (amax < std::fabs(x[16 * ib + l])) {
          amax = std::fabs(x[16 * ib + l]);
          vmax = x[16 * ib + l];
        }
      }
      scales[ib] = vmax / -32;
      if (std::fabs(scales[ib]) > max_abs) {
        max_abs = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    std::memset(b, 0, 210);
    if (!(max_abs > 0.0f)) continue;  // an all-zero block: d = 0 and every quant 0
    const float iscale = -128.0f / max_scale;
    store_f16(b + 208, 1 / iscale);
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(nearest_clamp(iscale * scales[ib], -128, 127));
    const float d = load_f16(b + 208);
    uint8_t L[256];
    for (int ib = 0; ib < 16; ++ib) {
      const float dj = d * static_cast<float>(sc[ib]);
      for (int l = 0; l < 16; ++l)
        L[16 * ib + l] = static_cast<uint8_t>(32 + (dj != 0.0f ? nearest_clamp(x[16 * ib + l] / dj, -32, 31) : 0));
    }
    // Per 128 elements: ql[l] = lo nibbles of l and l+64, ql[l+32] of l+32 and
    // l+96; qh[l] = the top 2 bits of l, l+32, l+64, l+96.
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int a = L[j + l], c = L[j + l + 32], e = L[j + l + 64], g = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((a & 0xF) | ((e & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((c & 0xF) | ((g & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((a >> 4) | ((c >> 4) << 2) | ((e >> 4) << 4) | ((g >> 4) << 6));
      }
    }
  }
}

}  // namespace rlx::quant_detail
