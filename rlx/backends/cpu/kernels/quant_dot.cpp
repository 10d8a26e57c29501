// quant_dot: AVX2 dot products of quantized weight rows with one activation
// row, the CPU decode GEMV's inner loop.
//
// Why: a decode token reads every weight once, so the GEMV should run at
// memory speed; dequantizing a row and then dotting it (or forming each
// weight q·d before multiplying it by x) spent four floating-point operations
// per weight and left Gemma 3 270M at half of llama.cpp's CPU decode speed.
// Every layout here gives, per sub-block of 32, its weights as unsigned bytes
// u (w = scale·(u − offset) − m'; the table formats give their signed table
// values, offset 0), its scale(s) and its min m', and each
// block's scale is factored out of its sum:
//   Σ x·w = scale · Σ x·(u − offset) − m' · Σ x      (Σ x per 32 once per call)
// Two ways to take Σ x·(u − offset):
// - f32 (q8_0 always; the rest with RLX_CPU_GEMV_Q8=0 or a non-finite x): one
//   int→float conversion and one FMA per weight. Error: f32 rounding.
// - int8 (every type but q8_0, by default): x re-quantized once per call to
//   two int8 levels per 32, x̃ = dx·(256·a + b) with 256·dx = max|x| / 127
//   (a = round(x / (256·dx)), b = round(remainder / dx), both clamped to
//   ±127 so that a table format's sign can flip them), so that 32 weights
//   cost two byte multiply-adds per level.
//   |x − x̃| ≤ dx (≤ dx/2 unless b was clamped), i.e. about 15 bits of each
//   block's largest |x|; the bound per row is Σ|w|·dx + f32 rounding.
// Each row asks for its bytes 4 KB ahead: without that the hardware prefetcher
// left a core reading DRAM at about half its share.
#include "rlx/backends/cpu/kernels/quant_dot.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "rlx/core/env.h"
#include "rlx/core/error.h"
#include "rlx/formats/quant_internal.h"  // the reference block layouts' helpers
#include "rlx/formats/quant_tables.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RLX_QUANT_DOT_AVX2 1
#endif

namespace rlx::cpu {

#if RLX_QUANT_DOT_AVX2
namespace {

#define RLX_AVX2 __attribute__((target("avx2,fma,f16c")))
#define RLX_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

using ggml_tables::kvalues_iq4nl;
using ggml_tables::kvalues_mxfp4;

RLX_AVX2_INLINE float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

RLX_AVX2_INLINE float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Eight unsigned bytes → eight floats.
RLX_AVX2_INLINE __m256 u8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

// Eight signed bytes → eight floats.
RLX_AVX2_INLINE __m256 i8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
RLX_AVX2_INLINE __m256 i8x8_ps(const uint8_t* p) {
  return i8x8_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Σ x[0..16) · q[0..16) for 16 int8 weights, in eight lanes.
RLX_AVX2_INLINE __m256 dot16_i8(const float* x, __m128i q) {
  const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x), i8x8_ps(q));
  return _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), i8x8_ps(_mm_srli_si128(q, 8)), s);
}

// The 32 nibbles of 16 bytes in q4_0 / q5_0 order: byte j's low nibble is
// element j, its high nibble element j + 16.
RLX_AVX2_INLINE __m256i nibbles32(const uint8_t* p) {
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), m4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
}

// Bytes p[0..32) shifted right by `right` (or left by −right) bits, masked.
RLX_AVX2_INLINE __m256i bits32(const uint8_t* p, int right, int mask) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  // 16-bit shifts: bits crossing into the neighbouring byte are masked off.
  const __m256i sh = right >= 0 ? _mm256_srli_epi16(v, right) : _mm256_slli_epi16(v, -right);
  return _mm256_and_si256(sh, _mm256_set1_epi8(static_cast<char>(mask)));
}

// Each layout: kElems weights in kBytes per block, kSubs sub-blocks of 32;
// u(b, s): sub-block s's weights as bytes, w = scale·(u − kOffset) − m' (for
// the table formats, u is the signed table value itself and kOffset 0). The
// scales come one per block (kScale Block: scale(b)), one per sub-block
// (PerSub) or one per 16 weights (PerHalf), the latter two from scales(b,
// sc, mn), which also gives the mins m' where kMin says (PerSub, PerHalf);
// kMin Block: min(b), one m' for a one-sub-block block. kInt8: the int8 path
// takes it; kSigned: u is the signed table value (the path multiplies |u| by
// x's levels with u's sign).
enum class Per { None, Block, Sub, Half };

// q8_0: f16 d, i8 qs[32]; w = d·q. Its u would be q + 128, too large for the
// byte multiply-add's int16 pairs, so it keeps the f32 path (which reads
// memory as fast as the int8 one would).
struct Q8_0 {
  static constexpr int kElems = 32, kBytes = 34, kSubs = 1, kOffset = 128;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = false, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), _mm256_set1_epi8(-128));
  }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// q4_0: f16 d, u8 qs[16]; element j: (low nibble of qs[j]) − 8, element
// j + 16: (high nibble) − 8; w = d·q.
struct Q4_0 {
  static constexpr int kElems = 32, kBytes = 18, kSubs = 1, kOffset = 8;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) { return nibbles32(b + 2); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// q4_1: f16 d, f16 m, u8 qs[16] (q4_0's nibble order); w = d·q + m.
struct Q4_1 {
  static constexpr int kElems = 32, kBytes = 20, kSubs = 1, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::Block;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) { return nibbles32(b + 4); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
  RLX_AVX2_INLINE static float min(const uint8_t* b) { return -load_f16(b + 2); }
};

// Bit j of the 32-bit word at p as 0x10 in byte j (the fifth bit of q5_0 / q5_1).
RLX_AVX2_INLINE __m256i high_bits32(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  // Byte j = 0x10 where bit j of qh is set: byte j / 8 of qh to byte j, all
  // of its bits but bit j % 8 set, compared with all ones.
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  const __m256i bit = _mm256_cmpeq_epi8(
      _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), spread), others),
      _mm256_set1_epi8(-1));
  return _mm256_and_si256(bit, _mm256_set1_epi8(0x10));
}

// q5_0: f16 d, u32 qh, u8 qs[16]; element j < 16: (low nibble | bit j of qh
// as bit 4) − 16, element j + 16: (high nibble | bit j + 16 of qh as bit 4)
// − 16; w = d·q.
struct Q5_0 {
  static constexpr int kElems = 32, kBytes = 22, kSubs = 1, kOffset = 16;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) {
    return _mm256_or_si256(nibbles32(b + 6), high_bits32(b + 2));
  }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// q5_1: f16 d, f16 m, u32 qh, u8 qs[16] (q5_0's bit order); w = d·q + m.
struct Q5_1 {
  static constexpr int kElems = 32, kBytes = 24, kSubs = 1, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::Block;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) {
    return _mm256_or_si256(nibbles32(b + 8), high_bits32(b + 4));
  }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
  RLX_AVX2_INLINE static float min(const uint8_t* b) { return -load_f16(b + 2); }
};

// The eight 6-bit scales and mins of a q4_k / q5_k block at once, as
// d·sc and dmin·m (what scale_min_k4 gives one at a time): bytes 0-3 hold
// scales 0-3 (+ the top 2 bits of scales 4-7), bytes 4-7 the mins 0-3 (+ the
// top bits of mins 4-7), bytes 8-11 the low nibbles of scales and mins 4-7.
RLX_AVX2_INLINE void k4_scales_mins(const uint8_t* b, float* sc, float* mn) {
  uint32_t w[3];
  std::memcpy(w, b + 4, 12);
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0Fu) | (((w[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0F0F0F0Fu) | (((w[1] >> 6) & 0x03030303u) << 4);
  const uint64_t scales = (w[0] & 0x3F3F3F3Fu) | uint64_t{sc_hi} << 32;
  const uint64_t mins = (w[1] & 0x3F3F3F3Fu) | uint64_t{mn_hi} << 32;
  auto widen = [](uint64_t v) __attribute__((always_inline)) { return _mm_cvtsi64_si128(static_cast<long long>(v)); };
  _mm256_store_ps(sc, _mm256_mul_ps(_mm256_set1_ps(load_f16(b)), u8x8(widen(scales))));
  _mm256_store_ps(mn, _mm256_mul_ps(_mm256_set1_ps(load_f16(b + 2)), u8x8(widen(mins))));
}

// q4_k: 256 elements; f16 d, f16 dmin, 12 bytes of scales/mins, u8 qs[128].
// Sub-blocks in pairs: the low nibbles of 32 bytes, then their high nibbles;
// w = (d·sc)·q − dmin·m.
struct Q4_K {
  static constexpr int kElems = 256, kBytes = 144, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::Sub;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) { return bits32(b + 16 + 32 * (s / 2), 4 * (s % 2), 0x0F); }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float* mn) { k4_scales_mins(b, sc, mn); }
};

// q5_k: 256 elements; f16 d, f16 dmin, 12 bytes of scales/mins, u8 qh[32],
// u8 qs[128]. As q4_k, plus bit s of qh[l] as 16; w = (d·sc)·q − dmin·m.
struct Q5_K {
  static constexpr int kElems = 256, kBytes = 176, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::Sub;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    return _mm256_or_si256(bits32(b + 48 + 32 * (s / 2), 4 * (s % 2), 0x0F), bits32(b + 16, s - 4, 0x10));
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float* mn) { k4_scales_mins(b, sc, mn); }
};

// q6_k: 256 elements; ql[128] (low 4 bits), qh[64] (high 2 bits), i8
// sc[16], f16 d at the end. Per half of 128: element 32k + l (k = 0..3,
// l = 0..31) is ((ql[l + 32·(k & 1)] >> 4·(k ≥ 2)) & 0xF | ((qh[l] >> 2k) & 3)
// << 4) − 32, scaled by sc[l / 16 + 2k]; w = (d·sc)·q.
struct Q6_K {
  static constexpr int kElems = 256, kBytes = 210, kSubs = 8, kOffset = 32;
  static constexpr Per kScale = Per::Half, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    const int n = s / 4, k = s % 4;
    const __m256i low = bits32(b + 64 * n + 32 * (k & 1), k >= 2 ? 4 : 0, 0x0F);
    return _mm256_or_si256(low, bits32(b + 128 + 32 * n, 2 * k - 4, 0x30));  // bits 2k, 2k + 1 → bits 4, 5
  }
  // The block's sixteen scales d·sc: sub-block s has 2s (weights 0-15) and 2s + 1.
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    const __m256 d = _mm256_set1_ps(load_f16(b + 208));
    _mm256_store_ps(sc, _mm256_mul_ps(d, i8x8_ps(b + 192)));
    _mm256_store_ps(sc + 8, _mm256_mul_ps(d, i8x8_ps(b + 200)));
  }
};

// The 2-bit fields of q2_k, q3_k and tq2_0: sub-block s is bits 2·(s % 4) of
// the 32 bytes at 32·(s / 4).
RLX_AVX2_INLINE __m256i crumbs32(const uint8_t* qs, int s) { return bits32(qs + 32 * (s / 4), 2 * (s % 4), 0x03); }

// q2_k: 256 elements; u8 scales[16] (low nibble scale, high nibble min, one
// per 16), u8 qs[64], f16 d, f16 dmin; w = (d·sc)·q − dmin·m.
struct Q2_K {
  static constexpr int kElems = 256, kBytes = 84, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Half, kMin = Per::Half;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) { return crumbs32(b + 16, s); }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float* mn) {
    const __m256 d = _mm256_set1_ps(load_f16(b + 80)), dmin = _mm256_set1_ps(load_f16(b + 82));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    _mm256_store_ps(sc, _mm256_mul_ps(d, u8x8(lo)));
    _mm256_store_ps(sc + 8, _mm256_mul_ps(d, u8x8(_mm_srli_si128(lo, 8))));
    _mm256_store_ps(mn, _mm256_mul_ps(dmin, u8x8(hi)));
    _mm256_store_ps(mn + 8, _mm256_mul_ps(dmin, u8x8(_mm_srli_si128(hi, 8))));
  }
};

// q3_k: 256 elements; u8 hmask[32], u8 qs[64], 16 six-bit scales in 12 bytes,
// f16 d. Element l of sub-block s: (2 bits as q2_k's) | (bit s of hmask[l])
// << 2, minus 4; w = (d·(sc − 32))·q.
struct Q3_K {
  static constexpr int kElems = 256, kBytes = 110, kSubs = 8, kOffset = 4;
  static constexpr Per kScale = Per::Half, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    return _mm256_or_si256(crumbs32(b + 32, s), bits32(b, s - 2, 0x04));
  }
  // The sixteen 6-bit scales at once (what scale_q3_k gives one at a time):
  // low nibbles of bytes 0-7 are scales 0-7 and their high nibbles 8-15; byte
  // 8 + j % 4 holds the top two bits of scale j at bit 2·(j / 4).
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    uint32_t a[3];
    std::memcpy(a, b + 96, 12);
    constexpr uint32_t k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
    const uint32_t v[4] = {(a[0] & k4) | ((a[2] & k2) << 4), (a[1] & k4) | (((a[2] >> 2) & k2) << 4),
                           ((a[0] >> 4) & k4) | (((a[2] >> 4) & k2) << 4),
                           ((a[1] >> 4) & k4) | (((a[2] >> 6) & k2) << 4)};
    const __m128i q = _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)), _mm_set1_epi8(32));
    const __m256 d = _mm256_set1_ps(load_f16(b + 108));
    _mm256_store_ps(sc, _mm256_mul_ps(d, i8x8_ps(q)));
    _mm256_store_ps(sc + 8, _mm256_mul_ps(d, i8x8_ps(_mm_srli_si128(q, 8))));
  }
};

// tq2_0: 256 elements; u8 qs[64] (q2_k's order), f16 d; w = d·(q − 1).
struct TQ2_0 {
  static constexpr int kElems = 256, kBytes = 66, kSubs = 8, kOffset = 1;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) { return crumbs32(b, s); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b + 64); }
};

// 32 nibbles → their values in a 16-entry int8 table (the non-linear formats).
RLX_AVX2_INLINE __m256i lookup32(__m256i nibbles, const int8_t* table) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles);
}

// iq4_nl: f16 d, u8 qs[16] (q4_0's nibble order) indexing kvalues_iq4nl; w = d·value.
struct IQ4_NL {
  static constexpr int kElems = 32, kBytes = 18, kSubs = 1, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) { return lookup32(nibbles32(b + 2), kvalues_iq4nl); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// iq4_xs: 256 elements; f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]
// (16 bytes per sub-block, iq4_nl's order); sub-block s's scale is
// d·(ls − 32), ls = 4 bits of scales_l | 2 bits of scales_h << 4.
struct IQ4_XS {
  static constexpr int kElems = 256, kBytes = 136, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    return lookup32(nibbles32(b + 8 + 16 * s), kvalues_iq4nl);
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    const __m128i l = _mm_cvtsi32_si128(static_cast<int>(quant_detail::load_u32(b + 4))), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_unpacklo_epi8(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4));  // s order
    const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(quant_detail::load_u16(b + 2)), shifts),
                                        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_or_si256(_mm256_cvtepu8_epi32(lo), _mm256_slli_epi32(hi, 4));
    const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)));
    _mm256_store_ps(sc, _mm256_mul_ps(_mm256_set1_ps(load_f16(b)), v));
  }
};

// mxfp4: u8 e (e8m0), u8 qs[16] (q4_0's nibble order) indexing the doubled
// e2m1 values; w = 2^(e − 128)·value.
struct MXFP4 {
  static constexpr int kElems = 32, kBytes = 17, kSubs = 1, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) { return lookup32(nibbles32(b + 1), kvalues_mxfp4); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return quant_detail::e8m0_half(b[0]); }
};

// nvfp4: 64 elements; u8 d[4] (ue4m3, one per 16), u8 qs[32]: per 16, eight
// bytes whose low nibbles are weights 0-7 and high nibbles 8-15.
struct NVFP4 {
  static constexpr int kElems = 64, kBytes = 36, kSubs = 2, kOffset = 0;
  static constexpr Per kScale = Per::Half, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    // nibbles32 gives (low 0-7, low 8-15 | high 0-7, high 8-15); the weights want low 0-7, high 0-7, low 8-15, ...
    return lookup32(_mm256_permute4x64_epi64(nibbles32(b + 4 + 16 * s), 0xD8), kvalues_mxfp4);
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    static const std::array<float, 256> kHalf = [] {  // ue4m3_half of every byte (it takes ldexp)
      std::array<float, 256> t{};
      for (int x = 0; x < 256; ++x) t[static_cast<size_t>(x)] = quant_detail::ue4m3_half(static_cast<uint8_t>(x));
      return t;
    }();
    for (int j = 0; j < 4; ++j) sc[j] = kHalf[b[j]];
  }
};

// Four vectors of int32 (in int8 range) → 32 int8 in element order.
RLX_AVX2_INLINE __m256i pack32(const __m256i (&v)[4]) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));  // undo the packs' interleave
}

RLX_AVX2_INLINE __m256 round_clamp(__m256 t, __m256 lo, __m256 hi) {
  return _mm256_min_ps(_mm256_max_ps(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo), hi);
}

// The int8 path's two levels of row m of x (see the header comment), eight
// lanes at a time. false when the row has a NaN or an infinity (the f32 path
// then gives the IEEE result).
RLX_AVX2 bool quantize_x(const float* x, int64_t K, int64_t m, QuantDotX& q) {
  int8_t* qa_row = q.a.data() + m * K;
  int8_t* qb_row = q.b.data() + m * K;
  float* dx = q.dx.data() + m * (K / 32);
  int32_t* sums4 = q.sums4.data() + m * (K / 4);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t blk = 0; blk < K / 32; ++blk) {
    const float* p = x + 32 * blk;
    __m256 v[4];
    __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(p + 8 * j);
      const __m256 av = _mm256_andnot_ps(sign, v[j]);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(av, _mm256_set1_ps(3.4e38f), _CMP_NLE_UQ));  // NaN or infinity
      m = _mm256_max_ps(m, av);
    }
    if (_mm256_movemask_ps(bad)) return false;
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    __m256i qa[4], qb[4];
    if (amax < 1e-30f) {  // zeros (and denormal dust) quantize to zero
      dx[blk] = 0.0f;
      for (int j = 0; j < 4; ++j) qa[j] = qb[j] = _mm256_setzero_si256();
    } else {
      const float d1 = amax / 127.0f;
      dx[blk] = d1 / 256.0f;
      const __m256 inv = _mm256_set1_ps(127.0f / amax), inv256 = _mm256_set1_ps(256.0f * 127.0f / amax);
      const __m256 d = _mm256_set1_ps(d1), hi = _mm256_set1_ps(127.0f);
      for (int j = 0; j < 4; ++j) {
        const __m256 ra = round_clamp(_mm256_mul_ps(v[j], inv), _mm256_set1_ps(-127.0f), hi);
        const __m256 r = _mm256_fnmadd_ps(ra, d, v[j]);
        const __m256 rb = round_clamp(_mm256_mul_ps(r, inv256), _mm256_set1_ps(-127.0f), hi);
        qa[j] = _mm256_cvtps_epi32(ra);
        qb[j] = _mm256_cvtps_epi32(rb);
      }
    }
    const __m256i a8 = pack32(qa), b8 = pack32(qb);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qa_row + 32 * blk), a8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb_row + 32 * blk), b8);
    // Σ over each four consecutive bytes: (1·a pairs) then pairs of pairs.
    const __m256i sa = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, a8), ones16);
    const __m256i sb = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, b8), ones16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums4 + 8 * blk),
                        _mm256_add_epi32(_mm256_slli_epi32(sa, 8), sb));
  }
  return true;
}

constexpr int64_t kPrefetch = 4096;  // bytes ahead in the row stream

// A layout's weight scales for sub-block s of the block at b, taken once per
// block by next_block, which also adds the block's m'·Σx to each row of x's
// accumulator (Σx per 32, or per 16 for q2_k, prepared once per call).
template <class L>
struct Scales {
  alignas(32) float block[16];
  alignas(32) float mins[16];
  float one = 0.0f;  // kScale Block
  // Block i of a row (at w) starts: ask for the bytes ahead and take its scales and mins.
  template <int M>
  RLX_AVX2_INLINE void next_block(const uint8_t* w, const QuantDotX& q, int64_t i, __m256 (&row_mins)[M]) {
    _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetch), _MM_HINT_T0);
    if constexpr (L::kScale == Per::Block) one = L::scale(w);
    else L::scales(w, block, mins);
    if constexpr (L::kMin == Per::Block) {
      static_assert(L::kSubs == 1);
      const float mn = L::min(w);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m)
        row_mins[m] = _mm256_add_ps(row_mins[m], _mm256_set_ps(0, 0, 0, 0, 0, 0, 0, mn * q.xsum[m * (q.K / 32) + i]));
    } else if constexpr (L::kMin == Per::Sub) {
      const __m256 mn = _mm256_load_ps(mins);
      const float* xsum = q.xsum.data() + i * L::kSubs;
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m)
        row_mins[m] = _mm256_fmadd_ps(mn, _mm256_loadu_ps(xsum + m * (q.K / 32)), row_mins[m]);
    } else if constexpr (L::kMin == Per::Half) {
      const __m256 m0 = _mm256_load_ps(mins), m8 = _mm256_load_ps(mins + 8);
      const float* xsum = q.xsum16.data() + i * 2 * L::kSubs;
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const float* xs = xsum + m * (q.K / 16);
        const __m256 lo = _mm256_fmadd_ps(m0, _mm256_loadu_ps(xs), row_mins[m]);
        row_mins[m] = _mm256_fmadd_ps(m8, _mm256_loadu_ps(xs + 8), lo);
      }
    }
  }
  // The eight lanes' scale for sub-block s (Half: lanes 0-3 for its weights 0-15).
  RLX_AVX2_INLINE __m256 lanes(int s) const {
    if constexpr (L::kScale == Per::Sub) return _mm256_broadcast_ss(block + s);
    else if constexpr (L::kScale == Per::Half)
      return _mm256_setr_m128(_mm_broadcast_ss(block + 2 * s), _mm_broadcast_ss(block + 2 * s + 1));
    else return _mm256_set1_ps(one);
  }
};

// One weight row against the M rows of x, f32 activations: out[m].
template <class L, int M>
RLX_AVX2 void dot_row_f32(const uint8_t* w, const QuantDotX& q, int64_t nb, float* out) {
  __m256 acc[M], mins[M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[m] = mins[m] = _mm256_setzero_ps();
  Scales<L> sc;
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(L::kOffset));
  for (int64_t i = 0; i < nb; ++i, w += L::kBytes) {
    sc.next_block(w, q, i, mins);
#pragma GCC unroll 8
    for (int s = 0; s < L::kSubs; ++s) {
      const int64_t sub = i * L::kSubs + s;
      const __m256 scale = sc.lanes(s);
      if constexpr (std::is_same_v<L, Q8_0>) {  // the int8 weights as stored, widened straight from memory
        __m256 wq[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) wq[g] = i8x8_ps(w + 2 + 8 * g);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const float* xs = q.x + m * q.K + 32 * sub;
          __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xs), wq[0]);
#pragma GCC unroll 4
          for (int g = 1; g < 4; ++g) t = _mm256_fmadd_ps(_mm256_loadu_ps(xs + 8 * g), wq[g], t);
          acc[m] = _mm256_fmadd_ps(scale, t, acc[m]);
        }
        continue;
      }
      const __m256i qw = _mm256_sub_epi8(L::u(w, s), offset);  // u − offset fits int8 for every layout
      const __m128i q_lo = _mm256_castsi256_si128(qw), q_hi = _mm256_extracti128_si256(qw, 1);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const float* xs = q.x + m * q.K + 32 * sub;
        const __m256 lo = dot16_i8(xs, q_lo), hi = dot16_i8(xs + 16, q_hi);
        if constexpr (L::kScale == Per::Half) {  // scale: lanes 0-3 for weights 0-15, 4-7 for 16-31
          acc[m] = _mm256_fmadd_ps(_mm256_permute2f128_ps(scale, scale, 0x00), lo, acc[m]);
          acc[m] = _mm256_fmadd_ps(_mm256_permute2f128_ps(scale, scale, 0x11), hi, acc[m]);
        } else {
          acc[m] = _mm256_fmadd_ps(scale, _mm256_add_ps(lo, hi), acc[m]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) out[m] = hsum(acc[m]) - hsum(mins[m]);
}

// One weight row against the M rows of x, int8 activations: per sub-block,
// per lane (four weights) the integer 256·Σu·a + Σu·b − offset·(256·Σa + Σb),
// exact in f32 (< 2^24), times the weight scale and dx. The weights are
// decoded once for all M rows.
template <class L, int M>
RLX_AVX2 void dot_row_int8(const uint8_t* w, const QuantDotX& q, int64_t nb, float* out) {
  __m256 acc[M], mins[M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[m] = mins[m] = _mm256_setzero_ps();
  Scales<L> sc;
  const __m256i ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
  const int64_t nsub = q.K / 32;  // dx per 32
  for (int64_t i = 0; i < nb; ++i, w += L::kBytes) {
    sc.next_block(w, q, i, mins);
#pragma GCC unroll 8
    for (int s = 0; s < L::kSubs; ++s) {
      const int64_t sub = i * L::kSubs + s;
      const __m256i w8 = L::u(w, s);
      const __m256i u = L::kSigned ? _mm256_abs_epi8(w8) : w8;  // the byte multiply-add's unsigned operand
      const __m256 scale = sc.lanes(s);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.a.data() + m * q.K + 32 * sub));
        __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.b.data() + m * q.K + 32 * sub));
        if constexpr (L::kSigned) {  // |a|, |b| ≤ 127, so the sign flips exactly
          a = _mm256_sign_epi8(a, w8);
          b = _mm256_sign_epi8(b, w8);
        }
        // u ≤ 127 and |a|, |b| ≤ 127: each int16 pair sum stays below 2^15.
        __m256i t = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, a), c256),
                                     _mm256_madd_epi16(_mm256_maddubs_epi16(u, b), ones));
        if constexpr (L::kOffset != 0) {
          const __m256i sums =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.sums4.data() + m * (q.K / 4) + 8 * sub));
          constexpr int kShift = std::countr_zero(static_cast<unsigned>(L::kOffset));  // offset = 2^kShift
          static_assert(L::kOffset == 1 << kShift);
          t = _mm256_sub_epi32(t, _mm256_slli_epi32(sums, kShift));
        }
        const __m256 s_dx = _mm256_mul_ps(scale, _mm256_set1_ps(q.dx[static_cast<size_t>(m * nsub + sub)]));
        acc[m] = _mm256_fmadd_ps(s_dx, _mm256_cvtepi32_ps(t), acc[m]);
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) out[m] = hsum(acc[m]) - hsum(mins[m]);
}

template <class L, int M>
void dot_rows(const uint8_t* w, int64_t row_bytes, const QuantDotX& x, int64_t rows, float* y, int64_t ldy) {
  const int64_t nb = x.K / L::kElems;
  float out[M];
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (L::kInt8) {
      if (x.int8) {
        dot_row_int8<L, M>(w + r * row_bytes, x, nb, out);
        for (int m = 0; m < M; ++m) y[m * ldy + r] = out[m];
        continue;
      }
    }
    dot_row_f32<L, M>(w + r * row_bytes, x, nb, out);
    for (int m = 0; m < M; ++m) y[m * ldy + r] = out[m];
  }
}

template <class L>
void dot_rows_m(const uint8_t* w, int64_t row_bytes, const QuantDotX& x, int64_t rows, float* y, int64_t ldy) {
  switch (x.M) {
    case 1: return dot_rows<L, 1>(w, row_bytes, x, rows, y, ldy);
    case 2: return dot_rows<L, 2>(w, row_bytes, x, rows, y, ldy);
    case 3: return dot_rows<L, 3>(w, row_bytes, x, rows, y, ldy);
    case 4: return dot_rows<L, 4>(w, row_bytes, x, rows, y, ldy);
    case 5: return dot_rows<L, 5>(w, row_bytes, x, rows, y, ldy);
    case 6: return dot_rows<L, 6>(w, row_bytes, x, rows, y, ldy);
    case 7: return dot_rows<L, 7>(w, row_bytes, x, rows, y, ldy);
    case 8: return dot_rows<L, 8>(w, row_bytes, x, rows, y, ldy);
    default: throw InvalidArgument(str("quant_dot: ", x.M, " rows of x; at most ", QuantDotX::kMaxRows));
  }
}

}  // namespace
#endif

namespace {

// What a type's GEMV needs of x: Σx per 32 or per 16 (its mins), int8 levels.
struct XNeeds {
  bool supported = false, sum32 = false, sum16 = false, int8 = false;
};
XNeeds x_needs(DType type) {
  switch (type) {
    case DType::Q8_0: return {true, false, false, false};
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q6_K:
    case DType::Q3_K:
    case DType::TQ2_0: return {true, false, false, true};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K: return {true, true, false, true};
    case DType::Q2_K: return {true, false, true, true};
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4:
    case DType::NVFP4: return {true, false, false, true};
    default: return {};
  }
}

}  // namespace

bool quant_dot_supported(DType type) {
#if RLX_QUANT_DOT_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 && x_needs(type).supported;
#else
  (void)type;
  return false;
#endif
}

QuantDotX::QuantDotX(DType type, const float* xs, int64_t m, int64_t k) : x(xs), M(m), K(k) {
  RLX_CHECK_AS(InvalidArgument, M >= 1 && M <= kMaxRows, "quant_dot: ", M, " rows of x; 1 to ", kMaxRows);
  const XNeeds needs = x_needs(type);
  auto sums_per = [&](int64_t n, std::vector<float>& sums) {
    sums.assign(static_cast<size_t>(M * (K / n)), 0.0f);
    for (int64_t b = 0; b < M * (K / n); ++b)
      for (int64_t j = 0; j < n; ++j) sums[static_cast<size_t>(b)] += x[n * b + j];
  };
  if (needs.sum32) sums_per(32, xsum);
  if (needs.sum16) sums_per(16, xsum16);
#if RLX_QUANT_DOT_AVX2
  if (!needs.int8 || !quant_dot_supported(type) || !env_bool("RLX_CPU_GEMV_Q8")) return;
  a.resize(static_cast<size_t>(M * K));
  b.resize(static_cast<size_t>(M * K));
  dx.resize(static_cast<size_t>(M * (K / 32)));
  sums4.resize(static_cast<size_t>(M * (K / 4)));
  int8 = true;
  for (int64_t r = 0; r < M && int8; ++r) int8 = quantize_x(x + r * K, K, r, *this);
#endif
}

void quant_dot_rows(DType type, const uint8_t* w, int64_t row_bytes, const QuantDotX& x, int64_t rows, float* y,
                    int64_t ldy) {
#if RLX_QUANT_DOT_AVX2
  switch (type) {
    case DType::Q8_0: return dot_rows_m<Q8_0>(w, row_bytes, x, rows, y, ldy);
    case DType::Q4_0: return dot_rows_m<Q4_0>(w, row_bytes, x, rows, y, ldy);
    case DType::Q4_1: return dot_rows_m<Q4_1>(w, row_bytes, x, rows, y, ldy);
    case DType::Q5_0: return dot_rows_m<Q5_0>(w, row_bytes, x, rows, y, ldy);
    case DType::Q5_1: return dot_rows_m<Q5_1>(w, row_bytes, x, rows, y, ldy);
    case DType::Q2_K: return dot_rows_m<Q2_K>(w, row_bytes, x, rows, y, ldy);
    case DType::Q3_K: return dot_rows_m<Q3_K>(w, row_bytes, x, rows, y, ldy);
    case DType::Q4_K: return dot_rows_m<Q4_K>(w, row_bytes, x, rows, y, ldy);
    case DType::Q5_K: return dot_rows_m<Q5_K>(w, row_bytes, x, rows, y, ldy);
    case DType::Q6_K: return dot_rows_m<Q6_K>(w, row_bytes, x, rows, y, ldy);
    case DType::IQ4_NL: return dot_rows_m<IQ4_NL>(w, row_bytes, x, rows, y, ldy);
    case DType::IQ4_XS: return dot_rows_m<IQ4_XS>(w, row_bytes, x, rows, y, ldy);
    case DType::TQ2_0: return dot_rows_m<TQ2_0>(w, row_bytes, x, rows, y, ldy);
    case DType::MXFP4: return dot_rows_m<MXFP4>(w, row_bytes, x, rows, y, ldy);
    case DType::NVFP4: return dot_rows_m<NVFP4>(w, row_bytes, x, rows, y, ldy);
    default: break;
  }
#endif
  (void)w, (void)row_bytes, (void)x, (void)rows, (void)y, (void)ldy;
  throw Unsupported(str("quant_dot: no kernel for ", dtype_name(type)));
}

float quant_dot(DType type, const uint8_t* w, const float* x, int64_t K) {
  float y = 0.0f;
  quant_dot_rows(type, w, 0, QuantDotX(type, x, 1, K), 1, &y, 1);
  return y;
}

}  // namespace rlx::cpu
