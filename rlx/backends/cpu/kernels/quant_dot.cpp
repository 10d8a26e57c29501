// quant_dot: AVX2 dot products of quantized weight rows with one activation
// row, the CPU decode GEMV's inner loop.
//
// Why: a decode token reads every weight once, so the GEMV should run at
// memory speed; dequantizing a row and then dotting it (or forming each
// weight q·d before multiplying it by x) spent four floating-point operations
// per weight and left Gemma 3 270M at half of llama.cpp's CPU decode speed.
// Every layout here (one per GGUF quant type) gives, per sub-block of 32, its
// weights as unsigned bytes u (w = scale·(u − offset) − m'; the table and
// lattice formats give their signed values, offset 0), its scale(s) and its
// min m', and each block's scale is factored out of its sum:
//   Σ x·w = scale · Σ x·(u − offset) − m' · Σ x      (Σ x per 32 once per call)
// Two ways to take Σ x·(u − offset):
// - f32 (q8_0, q8_1, q8_k always; the rest with RLX_CPU_GEMV_Q8=0 or a
//   non-finite x): one int→float conversion and one FMA per weight. Error:
//   f32 rounding.
// - int8 (every other type, by default): x re-quantized once per call to
//   two int8 levels per 32, x̃ = dx·(256·a + b) with 256·dx = max|x| / 127
//   (a = round(x / (256·dx)), b = round(remainder / dx), both clamped to
//   ±127 so that a table format's sign can flip them), so that 32 weights
//   cost two byte multiply-adds per level (AVX2's VPMADDUBSW + VPMADDWD, or
//   one AVX512-VNNI VPDPBUSD where the CPU has it: quant_dot_int8.inc).
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
#include "rlx/formats/quant.h"
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

using namespace ggml_tables;

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

// Each layout: kElems weights in kBytes per block, kSubs sub-blocks of 32.
// u(b, s): sub-block s's 32 weights as bytes, w = scale·(u − kOffset) − m'
// (kSigned: u holds the signed values themselves, kOffset 0, and the int8
// path multiplies |u| by x's levels carrying u's sign; kRaw: no u, qs(b, s)
// points at the stored int8 weights). kScale: one scale per block
// (Per::Block, scale(b)), per sub-block (Per::Sub) or per 16 weights
// (Per::Half), the latter two from scales(b, sc, mn), which also gives the
// mins m' when kMin is Sub or Half; kMin Block: min(b), the m' of a
// one-sub-block block. kInt8: the int8 path takes it (else f32 only).
enum class Per { None, Block, Sub, Half };

// q8_0: f16 d, i8 qs[32]; w = d·q. The f32 path widens the stored weights
// straight from memory; the int8 path would need |q| ≤ 127 (q8_0 allows
// −128) and reads memory no faster, so the q8 formats keep f32.
struct Q8_0 {
  static constexpr int kElems = 32, kBytes = 34, kSubs = 1, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = false, kSigned = false, kRaw = true;
  RLX_AVX2_INLINE static const uint8_t* qs(const uint8_t* b, int) { return b + 2; }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// q8_1: f16 d, f16 s (Σq·d, for ggml's dot products), i8 qs[32]; w = d·q.
struct Q8_1 {
  static constexpr int kElems = 32, kBytes = 36, kSubs = 1, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = false, kSigned = false, kRaw = true;
  RLX_AVX2_INLINE static const uint8_t* qs(const uint8_t* b, int) { return b + 4; }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// q8_k: 256 elements; f32 d, i8 qs[256], i16 bsums[16]; w = d·q.
struct Q8_K {
  static constexpr int kElems = 256, kBytes = 292, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = false, kSigned = false, kRaw = true;
  RLX_AVX2_INLINE static const uint8_t* qs(const uint8_t* b, int s) { return b + 4 + 32 * s; }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) {
    float d;
    std::memcpy(&d, b, 4);
    return d;
  }
};

// q4_0: f16 d, u8 qs[16]; element j: (low nibble of qs[j]) − 8, element
// j + 16: (high nibble) − 8; w = d·q.
struct Q4_0 {
  static constexpr int kElems = 32, kBytes = 18, kSubs = 1, kOffset = 8;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) { return nibbles32(b + 2); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// q4_1: f16 d, f16 m, u8 qs[16] (q4_0's nibble order); w = d·q + m.
struct Q4_1 {
  static constexpr int kElems = 32, kBytes = 20, kSubs = 1, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::Block;
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) { return nibbles32(b + 4); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
  RLX_AVX2_INLINE static float min(const uint8_t* b) { return -load_f16(b + 2); }
};

// Byte j all ones where bit j of `bits` is set, else zero.
RLX_AVX2_INLINE __m256i bit_mask32(uint32_t bits) {
  // Byte j / 8 of `bits` to byte j, all of its bits but bit j % 8 set, compared with all ones.
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  return _mm256_cmpeq_epi8(
      _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread), others),
      _mm256_set1_epi8(-1));
}

// Bit j of the 32-bit word at p as 0x10 in byte j (the fifth bit of q5_0 / q5_1).
RLX_AVX2_INLINE __m256i high_bits32(const uint8_t* p) {
  return _mm256_and_si256(bit_mask32(quant_detail::load_u32(p)), _mm256_set1_epi8(0x10));
}

// v with byte j negated where bit j of `signs` is set (|v| ≤ 127).
RLX_AVX2_INLINE __m256i apply_signs(__m256i v, uint32_t signs) {
  const __m256i m = bit_mask32(signs);
  return _mm256_sub_epi8(_mm256_xor_si256(v, m), m);
}

// q5_0: f16 d, u32 qh, u8 qs[16]; element j < 16: (low nibble | bit j of qh
// as bit 4) − 16, element j + 16: (high nibble | bit j + 16 of qh as bit 4)
// − 16; w = d·q.
struct Q5_0 {
  static constexpr int kElems = 32, kBytes = 22, kSubs = 1, kOffset = 16;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) {
    return _mm256_or_si256(nibbles32(b + 6), high_bits32(b + 2));
  }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// q5_1: f16 d, f16 m, u32 qh, u8 qs[16] (q5_0's bit order); w = d·q + m.
struct Q5_1 {
  static constexpr int kElems = 32, kBytes = 24, kSubs = 1, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::Block;
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
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
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) { return bits32(b + 16 + 32 * (s / 2), 4 * (s % 2), 0x0F); }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float* mn) { k4_scales_mins(b, sc, mn); }
};

// q5_k: 256 elements; f16 d, f16 dmin, 12 bytes of scales/mins, u8 qh[32],
// u8 qs[128]. As q4_k, plus bit s of qh[l] as 16; w = (d·sc)·q − dmin·m.
struct Q5_K {
  static constexpr int kElems = 256, kBytes = 176, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::Sub;
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
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
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
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
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
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
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
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
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) { return crumbs32(b, s); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b + 64); }
};

// tq1_0: 256 elements; u8 qs[48] (5 trits per byte), u8 qh[4] (4 per
// byte), f16 d; w = d·(t − 1). A byte holds ceil(v·256 / 243) for the 5-trit
// number v, so trit n of byte p is ((p·3^n mod 256)·3) >> 8. Sub-block s < 5:
// trit s of qs[0..32); 5 and 6: trits 0, 1 and 2, 3 of qs[32..48); 7: trit 4
// of qs[32..48), then trit n of qh[0..4) for n = 0..3.
struct TQ1_0 {
  static constexpr int kElems = 256, kBytes = 54, kSubs = 8, kOffset = 1;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = false, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    __m256i p, mult;  // the 32 bytes and each one's 3^n (the same for both bytes of a 16-bit lane)
    if (s < 5) {
      p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
      mult = _mm256_set1_epi16(static_cast<int16_t>(kPow3[s]));
    } else {
      const __m128i tail = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 32));
      if (s < 7) {
        p = _mm256_set_m128i(tail, tail);
        mult = _mm256_set_m128i(_mm_set1_epi16(kPow3[2 * s - 9]), _mm_set1_epi16(kPow3[2 * s - 10]));
      } else {
        p = _mm256_set_m128i(_mm_set1_epi32(static_cast<int>(quant_detail::load_u32(b + 48))), tail);
        mult = _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27);
      }
    }
    const __m256i even = trit(_mm256_and_si256(p, _mm256_set1_epi16(0xFF)), mult);
    return _mm256_or_si256(even, _mm256_slli_epi16(trit(_mm256_srli_epi16(p, 8), mult), 8));
  }
  // The trit of each 16-bit lane's byte (< 256) for its multiplier 3^n.
  RLX_AVX2_INLINE static __m256i trit(__m256i bytes16, __m256i mult) {
    const __m256i q = _mm256_and_si256(_mm256_mullo_epi16(bytes16, mult), _mm256_set1_epi16(0xFF));
    return _mm256_srli_epi16(_mm256_mullo_epi16(q, _mm256_set1_epi16(3)), 8);
  }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b + 52); }
  static constexpr int16_t kPow3[5] = {1, 3, 9, 27, 81};
};

// q1_0: 128 elements; f16 d, one bit per element (element j: bit j % 8 of
// byte j / 8): set → +d, clear → −d.
struct Q1_0 {
  static constexpr int kElems = 128, kBytes = 18, kSubs = 4, kOffset = 0;
  static constexpr Per kScale = Per::Block, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    return apply_signs(_mm256_set1_epi8(1), ~quant_detail::load_u32(b + 2 + 4 * s));
  }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
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
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) { return lookup32(nibbles32(b + 2), kvalues_iq4nl); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return load_f16(b); }
};

// iq4_xs: 256 elements; f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]
// (16 bytes per sub-block, iq4_nl's order); sub-block s's scale is
// d·(ls − 32), ls = 4 bits of scales_l | 2 bits of scales_h << 4.
struct IQ4_XS {
  static constexpr int kElems = 256, kBytes = 136, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
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
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int) { return lookup32(nibbles32(b + 1), kvalues_mxfp4); }
  RLX_AVX2_INLINE static float scale(const uint8_t* b) { return quant_detail::e8m0_half(b[0]); }
};

// Eight sign bits as byte masks: byte j all ones where bit j is set (a
// lookup per group of 8 weights, then one xor and subtract for all 32).
// kByteMasks: of the byte itself (iq2_s, iq3_s); kSignMasks: of
// ksigns_iq2xs[i], the 7-bit sign index of iq2_xxs, iq2_xs and iq3_xxs.
uint64_t byte_mask(uint8_t bits) {
  uint64_t m = 0;
  for (int j = 0; j < 8; ++j)
    if ((bits >> j) & 1) m |= uint64_t{0xFF} << (8 * j);
  return m;
}
const std::array<uint64_t, 256> kByteMasks = [] {
  std::array<uint64_t, 256> t{};
  for (size_t i = 0; i < t.size(); ++i) t[i] = byte_mask(static_cast<uint8_t>(i));
  return t;
}();
const std::array<uint64_t, 128> kSignMasks = [] {
  std::array<uint64_t, 128> t{};
  for (size_t i = 0; i < t.size(); ++i) t[i] = byte_mask(ksigns_iq2xs[i]);
  return t;
}();
RLX_AVX2_INLINE __m256i negate_where(__m256i v, __m256i mask) {
  return _mm256_sub_epi8(_mm256_xor_si256(v, mask), mask);
}

// The lattice formats: each group of 8 weights is a row of a grid table
// (unsigned byte magnitudes) with 8 sign bits, so u is the signed row.
// Their scales, as the reference writes them, e.g. d·(0.5 + s)·0.25.
RLX_AVX2_INLINE __m256i rows64(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3) {
  return _mm256_set_epi64x(static_cast<long long>(g3), static_cast<long long>(g2), static_cast<long long>(g1),
                           static_cast<long long>(g0));
}
// Eight rows of a table of 32-bit rows, by the eight indices in idx.
RLX_AVX2_INLINE __m256i rows32(const uint32_t* grid, __m256i idx) {
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(grid), idx, 4);
}

// iq2_xxs: 256 elements; f16 d, then per sub-block 4 grid bytes and a u32 of
// 4 × 7 sign bits (ksigns_iq2xs) and a 4-bit scale; w = d·(0.5 + s)·0.25·row.
struct IQ2_XXS {
  static constexpr int kElems = 256, kBytes = 66, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    const uint8_t* q = b + 2 + 8 * s;
    const uint32_t aux = quant_detail::load_u32(q + 4);
    const __m256i signs = rows64(kSignMasks[aux & 127], kSignMasks[(aux >> 7) & 127], kSignMasks[(aux >> 14) & 127],
                                 kSignMasks[(aux >> 21) & 127]);
    return negate_where(rows64(iq2xxs_grid[q[0]], iq2xxs_grid[q[1]], iq2xxs_grid[q[2]], iq2xxs_grid[q[3]]), signs);
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    const float d = load_f16(b);
    for (int s = 0; s < 8; ++s)
      sc[s] = d * (0.5f + static_cast<float>(quant_detail::load_u32(b + 6 + 8 * s) >> 28)) * 0.25f;
  }
};

// Scales 0.25·d·(0.5 + nibble), low nibble for weights 0-15 of sub-block s, high for 16-31.
RLX_AVX2_INLINE void iq2_half_scales(float d, const uint8_t* nibbles, float* sc) {
  for (int s = 0; s < 8; ++s) {
    sc[2 * s] = d * (0.5f + static_cast<float>(nibbles[s] & 0xF)) * 0.25f;
    sc[2 * s + 1] = d * (0.5f + static_cast<float>(nibbles[s] >> 4)) * 0.25f;
  }
}

// iq2_xs: 256 elements; f16 d, u16 qs[32] (9-bit grid index, 7-bit sign
// index), u8 scales[8] (two 4-bit scales per sub-block).
struct IQ2_XS {
  static constexpr int kElems = 256, kBytes = 74, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Half, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    uint16_t q[4];
    std::memcpy(q, b + 2 + 8 * s, 8);
    const __m256i signs =
        rows64(kSignMasks[q[0] >> 9], kSignMasks[q[1] >> 9], kSignMasks[q[2] >> 9], kSignMasks[q[3] >> 9]);
    return negate_where(
        rows64(iq2xs_grid[q[0] & 511], iq2xs_grid[q[1] & 511], iq2xs_grid[q[2] & 511], iq2xs_grid[q[3] & 511]), signs);
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) { iq2_half_scales(load_f16(b), b + 66, sc); }
};

// iq2_s: 256 elements; f16 d, u8 qs[32], u8 signs[32], u8 qh[8] (2 high
// index bits per group of 8), u8 scales[8].
struct IQ2_S {
  static constexpr int kElems = 256, kBytes = 82, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Half, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    const uint8_t* qs = b + 2 + 4 * s;
    const int qh = b[66 + s];
    auto row = [&](int l) __attribute__((always_inline)) {
      return iq2s_grid[qs[l] | ((qh << (8 - 2 * l)) & 0x300)];
    };
    const uint8_t* sg = b + 34 + 4 * s;
    return negate_where(rows64(row(0), row(1), row(2), row(3)),
                        rows64(kByteMasks[sg[0]], kByteMasks[sg[1]], kByteMasks[sg[2]], kByteMasks[sg[3]]));
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) { iq2_half_scales(load_f16(b), b + 74, sc); }
};

// iq3_xxs: 256 elements; f16 d, u8 qs[64] (8 indices into a grid of 4-byte
// rows per sub-block), u32 scales_and_signs[8] (4 × 7 sign bits, 4-bit scale).
struct IQ3_XXS {
  static constexpr int kElems = 256, kBytes = 98, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * s)));
    const uint32_t aux = quant_detail::load_u32(b + 66 + 4 * s);
    const __m256i signs = rows64(kSignMasks[aux & 127], kSignMasks[(aux >> 7) & 127], kSignMasks[(aux >> 14) & 127],
                                 kSignMasks[(aux >> 21) & 127]);
    return negate_where(rows32(iq3xxs_grid, idx), signs);
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    const float d = load_f16(b);
    for (int s = 0; s < 8; ++s)
      sc[s] = d * (0.5f + static_cast<float>(quant_detail::load_u32(b + 66 + 4 * s) >> 28)) * 0.5f;
  }
};

// iq3_s: 256 elements; f16 d, u8 qs[64], u8 qh[8] (the 9th index bit of each
// of a sub-block's 8 rows), u8 signs[32], u8 scales[4] (4 bits per sub-block).
struct IQ3_S {
  static constexpr int kElems = 256, kBytes = 110, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * s)));
    const __m256i bit = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);  // row k's 9th index bit is bit k of qh
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b[66 + s]), bit), _mm256_set1_epi32(1));
    const uint8_t* sg = b + 74 + 4 * s;
    return negate_where(rows32(iq3s_grid, _mm256_or_si256(lo, _mm256_slli_epi32(hi, 8))),
                        rows64(kByteMasks[sg[0]], kByteMasks[sg[1]], kByteMasks[sg[2]], kByteMasks[sg[3]]));
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    const float d = load_f16(b);
    for (int s = 0; s < 8; ++s) {
      const int sc4 = s % 2 ? b[106 + s / 2] >> 4 : b[106 + s / 2] & 0xF;
      sc[s] = d * static_cast<float>(1 + 2 * sc4);
    }
  }
};

// The iq1 grids hold −1 / 0 / +1 per byte and each group of 8 shifts by
// δ = ±1/8: u = 8·row ± 1, and the scale is divided by 8.
RLX_AVX2_INLINE __m256i iq1_u(__m256i rows, __m256i delta) {
  const __m256i r2 = _mm256_add_epi8(rows, rows), r4 = _mm256_add_epi8(r2, r2);
  return _mm256_add_epi8(_mm256_add_epi8(r4, r4), delta);
}

// iq1_s: 256 elements; f16 d, u8 qs[32], u16 qh[8] (3 high index bits per
// group, a 3-bit scale and δ's sign per sub-block); w = d·(2s + 1)·(row + δ).
struct IQ1_S {
  static constexpr int kElems = 256, kBytes = 50, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Sub, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    const uint8_t* qs = b + 2 + 4 * s;
    const uint16_t qh = quant_detail::load_u16(b + 34 + 2 * s);
    auto row = [&](int l) __attribute__((always_inline)) { return iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)]; };
    return iq1_u(rows64(row(0), row(1), row(2), row(3)), _mm256_set1_epi8(qh & 0x8000 ? -1 : 1));
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    const float d = load_f16(b);
    for (int s = 0; s < 8; ++s)
      sc[s] = d * static_cast<float>(2 * ((quant_detail::load_u16(b + 34 + 2 * s) >> 12) & 7) + 1) * 0.125f;
  }
};

// iq1_m: 256 elements; u8 qs[32], u8 qh[16] (per group: 3 high index bits
// and δ's sign), u8 scales[8] (3-bit scales per 16; their top nibbles hold
// the f16 d); w = d·(2s + 1)·(row + δ).
struct IQ1_M {
  static constexpr int kElems = 256, kBytes = 56, kSubs = 8, kOffset = 0;
  static constexpr Per kScale = Per::Half, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
  RLX_AVX2_INLINE static __m256i u(const uint8_t* b, int s) {
    const uint8_t* qs = b + 4 * s;
    const uint8_t* qh = b + 32 + 2 * s;
    auto row = [&](int l) __attribute__((always_inline)) {
      const int h = qh[l / 2];
      return iq1s_grid[qs[l] | ((l % 2 ? h << 4 : h << 8) & 0x700)];
    };
    auto delta = [&](int l) __attribute__((always_inline)) {
      return qh[l / 2] & (l % 2 ? 0x80 : 0x08) ? int64_t{-1} : int64_t{0x0101010101010101};
    };
    return iq1_u(rows64(row(0), row(1), row(2), row(3)), _mm256_set_epi64x(delta(3), delta(2), delta(1), delta(0)));
  }
  RLX_AVX2_INLINE static void scales(const uint8_t* b, float* sc, float*) {
    uint16_t w[4];
    std::memcpy(w, b + 48, 8);
    const auto dbits =
        static_cast<uint16_t>((w[0] >> 12) | ((w[1] >> 8) & 0x00F0) | ((w[2] >> 4) & 0x0F00) | (w[3] & 0xF000));
    const float d = f16_to_f32(dbits);
    for (int s = 0; s < 8; ++s) {
      const int shift = 6 * (s % 2);
      sc[2 * s] = d * static_cast<float>(2 * ((w[s / 2] >> shift) & 7) + 1) * 0.125f;
      sc[2 * s + 1] = d * static_cast<float>(2 * ((w[s / 2] >> (shift + 3)) & 7) + 1) * 0.125f;
    }
  }
};

// nvfp4: 64 elements; u8 d[4] (ue4m3, one per 16), u8 qs[32]: per 16, eight
// bytes whose low nibbles are weights 0-7 and high nibbles 8-15.
struct NVFP4 {
  static constexpr int kElems = 64, kBytes = 36, kSubs = 2, kOffset = 0;
  static constexpr Per kScale = Per::Half, kMin = Per::None;
  static constexpr bool kInt8 = true, kSigned = true, kRaw = false;
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
    // Every cache line of the block kPrefetch ahead: one request per block
    // left two of every three lines of a 210-byte q6_k block to a demand miss.
#pragma GCC unroll 4
    for (int line = 0; line < L::kBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetch + line), _MM_HINT_T0);
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
      if constexpr (L::kRaw) {  // the int8 weights as stored, widened straight from memory
        __m256 wq[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) wq[g] = i8x8_ps(L::qs(w, s) + 8 * g);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const float* xs = q.x + m * q.K + 32 * sub;
          __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xs), wq[0]);
#pragma GCC unroll 4
          for (int g = 1; g < 4; ++g) t = _mm256_fmadd_ps(_mm256_loadu_ps(xs + 8 * g), wq[g], t);
          acc[m] = _mm256_fmadd_ps(scale, t, acc[m]);
        }
      } else {
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
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) out[m] = hsum(acc[m]) - hsum(mins[m]);
}

// The int8 row dot for AVX2 and, picked at run time (quant_dot_vnni), for
// AVX512-VNNI: one body, compiled for each target.
#define RLX_INT8_NAME dot_row_int8
#define RLX_INT8_TARGET RLX_AVX2
#define RLX_INT8_VNNI 0
#include "rlx/backends/cpu/kernels/quant_dot_int8.inc"
#undef RLX_INT8_NAME
#undef RLX_INT8_TARGET
#undef RLX_INT8_VNNI
#define RLX_INT8_NAME dot_row_int8_vnni
#define RLX_INT8_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define RLX_INT8_VNNI 1
#include "rlx/backends/cpu/kernels/quant_dot_int8.inc"
#undef RLX_INT8_NAME
#undef RLX_INT8_TARGET
#undef RLX_INT8_VNNI

template <class L, int M>
void dot_rows(const uint8_t* w, int64_t row_bytes, const QuantDotX& x, int64_t rows, float* y, int64_t ldy) {
  const int64_t nb = x.K / L::kElems;
  float out[M];
  const bool vnni = L::kInt8 && x.int8 && quant_dot_vnni();
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (L::kInt8) {
      if (x.int8) {
        if (vnni) dot_row_int8_vnni<L, M>(w + r * row_bytes, x, nb, out);
        else dot_row_int8<L, M>(w + r * row_bytes, x, nb, out);
        for (int m = 0; m < M; ++m) y[m * ldy + r] = out[m];
        continue;
      }
    }
    dot_row_f32<L, M>(w + r * row_bytes, x, nb, out);
    for (int m = 0; m < M; ++m) y[m * ldy + r] = out[m];
  }
}

// Blocks [0, nb) of one row at w to f32: scale·(u − offset) − m' per weight,
// in the reference dequantizers' operation order (their products and sums
// with the same scales), so the floats are the same bits.
template <class L>
RLX_AVX2 void dequant_row(const uint8_t* w, int64_t nb, float* y) {
  alignas(32) float block[16], mins[16];
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(L::kOffset));
  for (int64_t i = 0; i < nb; ++i, w += L::kBytes) {
    float one = 0.0f, min1 = 0.0f;
    if constexpr (L::kScale == Per::Block) one = L::scale(w);
    else L::scales(w, block, mins);
    if constexpr (L::kMin == Per::Block) min1 = L::min(w);
#pragma GCC unroll 8
    for (int s = 0; s < L::kSubs; ++s, y += 32) {
      __m256i v;
      if constexpr (L::kRaw) v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(L::qs(w, s)));
      else v = _mm256_sub_epi8(L::u(w, s), offset);
      const __m128i halves[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {  // weights 8g .. 8g + 7
        const int k = L::kScale == Per::Half ? 2 * s + g / 2 : s;
        const __m256 scale = _mm256_set1_ps(L::kScale == Per::Block ? one : block[k]);
        const __m256 q = i8x8_ps(g % 2 ? _mm_srli_si128(halves[g / 2], 8) : halves[g / 2]);
        __m256 r = _mm256_mul_ps(scale, q);
        if constexpr (L::kMin == Per::Block) r = _mm256_sub_ps(r, _mm256_set1_ps(min1));
        else if constexpr (L::kMin != Per::None) r = _mm256_sub_ps(r, _mm256_set1_ps(mins[k]));
        _mm256_storeu_ps(y + 8 * g, r);
      }
    }
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

#if RLX_QUANT_DOT_AVX2
// f(L{}) for the layout of `type`; false when there is none.
template <class F>
bool with_layout(DType type, F&& f) {
  switch (type) {
    case DType::Q8_0: return f(Q8_0{}), true;
    case DType::Q8_1: return f(Q8_1{}), true;
    case DType::Q8_K: return f(Q8_K{}), true;
    case DType::Q1_0: return f(Q1_0{}), true;
    case DType::TQ1_0: return f(TQ1_0{}), true;
    case DType::Q4_0: return f(Q4_0{}), true;
    case DType::Q4_1: return f(Q4_1{}), true;
    case DType::Q5_0: return f(Q5_0{}), true;
    case DType::Q5_1: return f(Q5_1{}), true;
    case DType::Q2_K: return f(Q2_K{}), true;
    case DType::Q3_K: return f(Q3_K{}), true;
    case DType::Q4_K: return f(Q4_K{}), true;
    case DType::Q5_K: return f(Q5_K{}), true;
    case DType::Q6_K: return f(Q6_K{}), true;
    case DType::IQ4_NL: return f(IQ4_NL{}), true;
    case DType::IQ4_XS: return f(IQ4_XS{}), true;
    case DType::TQ2_0: return f(TQ2_0{}), true;
    case DType::MXFP4: return f(MXFP4{}), true;
    case DType::NVFP4: return f(NVFP4{}), true;
    case DType::IQ2_XXS: return f(IQ2_XXS{}), true;
    case DType::IQ2_XS: return f(IQ2_XS{}), true;
    case DType::IQ2_S: return f(IQ2_S{}), true;
    case DType::IQ3_XXS: return f(IQ3_XXS{}), true;
    case DType::IQ3_S: return f(IQ3_S{}), true;
    case DType::IQ1_S: return f(IQ1_S{}), true;
    case DType::IQ1_M: return f(IQ1_M{}), true;
    default: return false;
  }
}
#endif

// What a type's GEMV needs of x, from its layout: Σx per 32 or per 16 (its
// mins), int8 levels.
struct XNeeds {
  bool supported = false, sum32 = false, sum16 = false, int8 = false;
};
XNeeds x_needs(DType type) {
  XNeeds n;
#if RLX_QUANT_DOT_AVX2
  with_layout(type, [&](auto l) {
    using L = decltype(l);
    n = {true, L::kMin == Per::Block || L::kMin == Per::Sub, L::kMin == Per::Half, L::kInt8};
  });
#else
  (void)type;
#endif
  return n;
}

}  // namespace

// VPDPBUSD on 256-bit registers (AVX512-VNNI with AVX512VL, the OS saving
// AVX-512 state) unless RLX_CPU_GEMV_VNNI=0: 8-16% faster a row on Zen 4.
bool quant_dot_vnni() {
#if RLX_QUANT_DOT_AVX2
  static const bool usable = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
  return usable && env_bool("RLX_CPU_GEMV_VNNI");
#else
  return false;
#endif
}

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
  if (quant_dot_supported(type) &&
      with_layout(type, [&](auto l) { dot_rows_m<decltype(l)>(w, row_bytes, x, rows, y, ldy); }))
    return;
#endif
  (void)w, (void)row_bytes, (void)x, (void)rows, (void)y, (void)ldy;
  throw Unsupported(str("quant_dot: no kernel for ", dtype_name(type)));
}

void dequantize_rows(DType type, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t K, float* y) {
#if RLX_QUANT_DOT_AVX2
  if (quant_dot_supported(type) && with_layout(type, [&](auto l) {
        using L = decltype(l);
        for (int64_t r = 0; r < rows; ++r) dequant_row<L>(w + r * row_bytes, K / L::kElems, y + r * K);
      }))
    return;
#endif
  for (int64_t r = 0; r < rows; ++r) dequantize_row(type, w + r * row_bytes, y + r * K, K);
}

float quant_dot(DType type, const uint8_t* w, const float* x, int64_t K) {
  float y = 0.0f;
  quant_dot_rows(type, w, 0, QuantDotX(type, x, 1, K), 1, &y, 1);
  return y;
}

}  // namespace rlx::cpu
