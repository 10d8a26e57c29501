// quant_dot: AVX2 dot products of a quantized row with f32 activations.
//
// Why: the CPU decode GEMV dequantized each row into a buffer and dotted the
// buffer (two passes over K floats); for Gemma 3 270M that was most of a
// token. Here each group of eight weights is decoded in registers and
// multiplied into the accumulator at once.
//
// Exactness: every weight is formed with the reference dequantizer's
// operations in its order (rlx/formats/quant.cpp, quant_k.cpp: q·d, or
// d·sc·q, or d1·q − m1; one rounding each), and the products x·w go into
// eight lanes, lane = position % 8, in increasing position, reduced as dot8
// reduces them. AVX2 has no FMA, so nothing is contracted: the result equals
// dequantize_row + dot8 bit for bit (tests/unit/runtime: QuantDot).
#include "rlx/backends/cpu/kernels/quant_dot.h"

#include <cstring>

#include "rlx/core/error.h"
#include "rlx/formats/quant_internal.h"  // the reference block layouts' helpers

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RLX_QUANT_DOT_AVX2 1
#endif

namespace rlx::cpu {

#if RLX_QUANT_DOT_AVX2
namespace {

#define RLX_AVX2 __attribute__((target("avx2")))

using quant_detail::load_f16;
using quant_detail::scale_min_k4;

// acc += x[0..8) · w (lane l: position l of the group).
RLX_AVX2 inline __m256 add8(__m256 acc, const float* x, __m256 w) {
  return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(x), w));
}

// Eight unsigned bytes → eight int32 lanes.
RLX_AVX2 inline __m256i u8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// dot8's reduction: ((0 + 4) + (1 + 5)) + ((2 + 6) + (3 + 7)) + tail (0).
RLX_AVX2 inline float reduce8(__m256 acc) {
  float l[8];
  _mm256_storeu_ps(l, acc);
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7])) + 0.0f;
}

// q8_0: f16 d, i8 qs[32]; w = q·d.
RLX_AVX2 float dot_q8_0(const uint8_t* w, const float* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i, w += 34, x += 32) {
    const __m256 d = _mm256_set1_ps(load_f16(w));
    for (int g = 0; g < 4; ++g) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 2 + 8 * g));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
      acc = add8(acc, x + 8 * g, _mm256_mul_ps(q, d));
    }
  }
  return reduce8(acc);
}

// q4_0: f16 d, u8 qs[16]; element j: (low nibble of qs[j]) − 8, element
// j + 16: (high nibble) − 8; w = q·d.
RLX_AVX2 float dot_q4_0(const uint8_t* w, const float* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i mask = _mm256_set1_epi32(0xF), eight = _mm256_set1_epi32(8);
  for (int64_t i = 0; i < nb; ++i, w += 18, x += 32) {
    const __m256 d = _mm256_set1_ps(load_f16(w));
    const __m256i b0 = u8x8(w + 2), b1 = u8x8(w + 10);
    const __m256i q[4] = {_mm256_and_si256(b0, mask), _mm256_and_si256(b1, mask), _mm256_srli_epi32(b0, 4),
                          _mm256_srli_epi32(b1, 4)};
    for (int g = 0; g < 4; ++g)
      acc = add8(acc, x + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[g], eight)), d));
  }
  return reduce8(acc);
}

// q5_0: f16 d, u32 qh, u8 qs[16]; element j < 16: (low nibble | bit j of qh
// as bit 4) − 16, element j + 16: (high nibble | bit j + 16 of qh as bit 4)
// − 16; w = q·d.
RLX_AVX2 float dot_q5_0(const uint8_t* w, const float* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i mask = _mm256_set1_epi32(0xF), bit4 = _mm256_set1_epi32(0x10), sixteen = _mm256_set1_epi32(16);
  const __m256i j0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), j8 = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
  const __m256i twelve = _mm256_set1_epi32(12);
  for (int64_t i = 0; i < nb; ++i, w += 22, x += 32) {
    const __m256 d = _mm256_set1_ps(load_f16(w));
    uint32_t qh_bits;
    std::memcpy(&qh_bits, w + 2, 4);
    const __m256i qh = _mm256_set1_epi32(static_cast<int>(qh_bits));
    const __m256i b0 = u8x8(w + 6), b1 = u8x8(w + 14);
    // Bit 4 of element j: ((qh >> j) << 4) & 0x10; of element j + 16: (qh >> (j + 12)) & 0x10.
    const __m256i h0 = _mm256_and_si256(_mm256_slli_epi32(_mm256_srlv_epi32(qh, j0), 4), bit4);
    const __m256i h8 = _mm256_and_si256(_mm256_slli_epi32(_mm256_srlv_epi32(qh, j8), 4), bit4);
    const __m256i h16 = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_add_epi32(j0, twelve)), bit4);
    const __m256i h24 = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_add_epi32(j8, twelve)), bit4);
    const __m256i q[4] = {_mm256_or_si256(_mm256_and_si256(b0, mask), h0), _mm256_or_si256(_mm256_and_si256(b1, mask), h8),
                          _mm256_or_si256(_mm256_srli_epi32(b0, 4), h16), _mm256_or_si256(_mm256_srli_epi32(b1, 4), h24)};
    for (int g = 0; g < 4; ++g)
      acc = add8(acc, x + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[g], sixteen)), d));
  }
  return reduce8(acc);
}

// q4_k: 256 elements; f16 d, f16 dmin, 12 bytes of scales/mins, u8 qs[128].
// Sub-blocks of 32 in pairs: the low nibbles of 32 bytes, then their high
// nibbles; w = (d·sc)·q − dmin·m.
RLX_AVX2 float dot_q4_k(const uint8_t* w, const float* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i mask = _mm256_set1_epi32(0xF);
  for (int64_t i = 0; i < nb; ++i, w += 144) {
    const float d = load_f16(w), dmin = load_f16(w + 2);
    const uint8_t* q = w + 16;
    for (int is = 0; is < 8; is += 2, q += 32) {
      for (int half = 0; half < 2; ++half, x += 32) {
        int sc, m;
        scale_min_k4(is + half, w + 4, sc, m);
        const __m256 dv = _mm256_set1_ps(d * static_cast<float>(sc)), mv = _mm256_set1_ps(dmin * static_cast<float>(m));
        for (int g = 0; g < 4; ++g) {
          const __m256i b = u8x8(q + 8 * g);
          const __m256i v = half == 0 ? _mm256_and_si256(b, mask) : _mm256_srli_epi32(b, 4);
          acc = add8(acc, x + 8 * g, _mm256_sub_ps(_mm256_mul_ps(dv, _mm256_cvtepi32_ps(v)), mv));
        }
      }
    }
  }
  return reduce8(acc);
}

// q6_k: 256 elements; ql[128] (low 4 bits), qh[64] (high 2 bits), i8
// sc[16], f16 d at the end. Per half of 128: element 32k + l (k = 0..3,
// l = 0..31) is ((ql[l + 32·(k & 1)] >> 4·(k ≥ 2)) & 0xF | ((qh[l] >> 2k) & 3)
// << 4) − 32, scaled by sc[l / 16 + 2k]; w = (d·sc)·q.
RLX_AVX2 float dot_q6_k(const uint8_t* w, const float* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i mask = _mm256_set1_epi32(0xF), three = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
  for (int64_t i = 0; i < nb; ++i, w += 210) {
    const float d = load_f16(w + 208);
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8) {
      for (int k = 0; k < 4; ++k, x += 32) {
        const uint8_t* lo = ql + 32 * (k & 1);
        for (int g = 0; g < 4; ++g) {
          const int l = 8 * g;
          const __m256 s = _mm256_set1_ps(d * static_cast<float>(sc[l / 16 + 2 * k]));
          const __m256i low = _mm256_and_si256(_mm256_srlv_epi32(u8x8(lo + l), _mm256_set1_epi32(k >= 2 ? 4 : 0)), mask);
          const __m256i high = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(u8x8(qh + l), _mm256_set1_epi32(2 * k)), three), 4);
          const __m256i q = _mm256_sub_epi32(_mm256_or_si256(low, high), bias);
          acc = add8(acc, x + l, _mm256_mul_ps(s, _mm256_cvtepi32_ps(q)));
        }
      }
    }
  }
  return reduce8(acc);
}

}  // namespace
#endif

bool quant_dot_supported(DType type) {
#if RLX_QUANT_DOT_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 && (type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q5_0 || type == DType::Q4_K ||
                  type == DType::Q6_K);
#else
  (void)type;
  return false;
#endif
}

float quant_dot(DType type, const uint8_t* w, const float* x, int64_t K) {
#if RLX_QUANT_DOT_AVX2
  switch (type) {
    case DType::Q8_0: return dot_q8_0(w, x, K / 32);
    case DType::Q4_0: return dot_q4_0(w, x, K / 32);
    case DType::Q5_0: return dot_q5_0(w, x, K / 32);
    case DType::Q4_K: return dot_q4_k(w, x, K / 256);
    case DType::Q6_K: return dot_q6_k(w, x, K / 256);
    default: break;
  }
#endif
  (void)w, (void)x, (void)K;
  throw Unsupported(str("quant_dot: no kernel for ", dtype_name(type)));
}

}  // namespace rlx::cpu
