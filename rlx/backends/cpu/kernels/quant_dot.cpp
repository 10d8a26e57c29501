// quant_dot: AVX2 + FMA dot products of quantized rows with f32 activations,
// the CPU decode GEMV's inner loop.
//
// Why: a decode token reads every weight once, so the GEMV should run at
// memory speed; dequantizing a row and then dotting it (or forming each
// weight q·d before multiplying it by x) spent four floating-point operations
// per weight and left Gemma 3 270M at half of llama.cpp's CPU decode speed.
// Here a block's scale is factored out of its sum, as llama.cpp does, but
// the activations stay f32:
//   Σ x·(d·q)        = d · Σ x·q                      (q8_0, q4_0, q5_0, q6_k per 16)
//   Σ x·(d·sc·q − m') = (d·sc) · Σ x·q − m' · Σ x      (q4_k, q5_k per 32; Σ x once per call)
// so a weight costs one int→float conversion and one FMA, and a row's only
// loop-carried dependency is one FMA per 32 weights.
//
// Accuracy: f32 with FMA, in an order that differs from dequantize_row + dot8;
// the QuantDot test bounds the difference from a float64 dot of the
// dequantized row by f32 rounding (≈ K·2⁻²⁴ of Σ|x·w|).
#include "rlx/backends/cpu/kernels/quant_dot.h"

#include <cstring>
#include <vector>

#include "rlx/core/error.h"
#include "rlx/formats/quant_internal.h"  // the reference block layouts' helpers

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RLX_QUANT_DOT_AVX2 1
#endif

namespace rlx::cpu {

#if RLX_QUANT_DOT_AVX2
namespace {

#define RLX_AVX2 __attribute__((target("avx2,fma,f16c")))
#define RLX_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

using quant_detail::scale_min_k4;

RLX_AVX2_INLINE float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Eight signed bytes → eight floats.
RLX_AVX2_INLINE __m256 i8x8_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

RLX_AVX2_INLINE float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Σ x[0..32) · q[0..32) for 32 int8 weights in memory, in eight lanes.
RLX_AVX2_INLINE __m256 dot32_i8(const float* x, const uint8_t* q) {
  __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x), i8x8_ps(q));
  s = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), i8x8_ps(q + 8), s);
  s = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16), i8x8_ps(q + 16), s);
  return _mm256_fmadd_ps(_mm256_loadu_ps(x + 24), i8x8_ps(q + 24), s);
}

// The same for 32 int8 weights in a register (each group of eight widened by
// one shuffle; q6_k wants its two halves apart, with a scale each).
RLX_AVX2_INLINE __m256 i8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
RLX_AVX2_INLINE __m256 dot16_i8(const float* x, __m128i q) {
  const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x), i8x8_ps(q));
  return _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), i8x8_ps(_mm_srli_si128(q, 8)), s);
}
RLX_AVX2_INLINE __m256 dot32_i8(const float* x, __m256i q8) {
  const __m128i lo = _mm256_castsi256_si128(q8), hi = _mm256_extracti128_si256(q8, 1);
  __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x), i8x8_ps(lo));
  s = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), i8x8_ps(_mm_srli_si128(lo, 8)), s);
  s = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16), i8x8_ps(hi), s);
  return _mm256_fmadd_ps(_mm256_loadu_ps(x + 24), i8x8_ps(_mm_srli_si128(hi, 8)), s);
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

// A row's running sum: acc (eight lanes) − mins.
struct Acc {
  __m256 acc;
  float mins;
};

// Each layout adds sub-block s (32 weights, s < kSubs) of the block at b, with
// activations x (its 32) and their sum xsum, into a.

// q8_0: f16 d, i8 qs[32]; w = d·q.
struct Q8_0 {
  static constexpr int kElems = 32, kBytes = 34, kSubs = 1;
  static constexpr bool kMins = false;  // needs Σx per 32
  RLX_AVX2_INLINE static void sub(const uint8_t* b, int, const float* x, float, Acc& a) {
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16(b)), dot32_i8(x, b + 2), a.acc);
  }
};

// q4_0: f16 d, u8 qs[16]; element j: (low nibble of qs[j]) − 8, element
// j + 16: (high nibble) − 8; w = d·q.
struct Q4_0 {
  static constexpr int kElems = 32, kBytes = 18, kSubs = 1;
  static constexpr bool kMins = false;  // needs Σx per 32
  RLX_AVX2_INLINE static void sub(const uint8_t* b, int, const float* x, float, Acc& a) {
    const __m256i q8 = _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16(b)), dot32_i8(x, q8), a.acc);
  }
};

// q5_0: f16 d, u32 qh, u8 qs[16]; element j < 16: (low nibble | bit j of qh
// as bit 4) − 16, element j + 16: (high nibble | bit j + 16 of qh as bit 4)
// − 16; w = d·q.
struct Q5_0 {
  static constexpr int kElems = 32, kBytes = 22, kSubs = 1;
  static constexpr bool kMins = false;  // needs Σx per 32
  RLX_AVX2_INLINE static void sub(const uint8_t* b, int, const float* x, float, Acc& a) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    // Byte j = 0xFF where bit j of qh is set: byte j / 8 of qh to byte j, all
    // of its bits but bit j % 8 set, compared with all ones.
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    const __m256i bit = _mm256_cmpeq_epi8(
        _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), spread), others),
        _mm256_set1_epi8(-1));
    // nibble + 16·bit − 16 as int8: the nibble where the bit is set, else nibble | 0xF0.
    const __m256i high = _mm256_andnot_si256(bit, _mm256_set1_epi8(static_cast<char>(0xF0)));
    const __m256i q8 = _mm256_or_si256(nibbles32(b + 6), high);
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16(b)), dot32_i8(x, q8), a.acc);
  }
};

// q4_k: 256 elements; f16 d, f16 dmin, 12 bytes of scales/mins, u8 qs[128].
// Sub-blocks in pairs: the low nibbles of 32 bytes, then their high nibbles;
// w = (d·sc)·q − dmin·m.
struct Q4_K {
  static constexpr int kElems = 256, kBytes = 144, kSubs = 8;
  static constexpr bool kMins = true;  // needs Σx per 32
  RLX_AVX2_INLINE static void sub(const uint8_t* b, int s, const float* x, float xsum, Acc& a) {
    int sc, m;
    scale_min_k4(s, b + 4, sc, m);
    const __m256i q8 = bits32(b + 16 + 32 * (s / 2), 4 * (s % 2), 0x0F);
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16(b) * static_cast<float>(sc)), dot32_i8(x, q8), a.acc);
    a.mins += load_f16(b + 2) * static_cast<float>(m) * xsum;
  }
};

// q5_k: 256 elements; f16 d, f16 dmin, 12 bytes of scales/mins, u8 qh[32],
// u8 qs[128]. As q4_k, plus bit s of qh[l] as 16; w = (d·sc)·q − dmin·m.
struct Q5_K {
  static constexpr int kElems = 256, kBytes = 176, kSubs = 8;
  static constexpr bool kMins = true;  // needs Σx per 32
  RLX_AVX2_INLINE static void sub(const uint8_t* b, int s, const float* x, float xsum, Acc& a) {
    int sc, m;
    scale_min_k4(s, b + 4, sc, m);
    const __m256i q8 = _mm256_or_si256(bits32(b + 48 + 32 * (s / 2), 4 * (s % 2), 0x0F), bits32(b + 16, s - 4, 0x10));
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16(b) * static_cast<float>(sc)), dot32_i8(x, q8), a.acc);
    a.mins += load_f16(b + 2) * static_cast<float>(m) * xsum;
  }
};

// q6_k: 256 elements; ql[128] (low 4 bits), qh[64] (high 2 bits), i8
// sc[16], f16 d at the end. Per half of 128: element 32k + l (k = 0..3,
// l = 0..31) is ((ql[l + 32·(k & 1)] >> 4·(k ≥ 2)) & 0xF | ((qh[l] >> 2k) & 3)
// << 4) − 32, scaled by sc[l / 16 + 2k]; w = (d·sc)·q.
struct Q6_K {
  static constexpr int kElems = 256, kBytes = 210, kSubs = 8;
  static constexpr bool kMins = false;  // needs Σx per 32
  RLX_AVX2_INLINE static void sub(const uint8_t* b, int s, const float* x, float, Acc& a) {
    const int n = s / 4, k = s % 4;
    const __m256i low = bits32(b + 64 * n + 32 * (k & 1), k >= 2 ? 4 : 0, 0x0F);
    const __m256i high = bits32(b + 128 + 32 * n, 2 * k - 4, 0x30);  // bits 2k, 2k + 1 → bits 4, 5
    const __m256i q8 = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
    // Two scales per 32: positions 0-15 and 16-31.
    const __m256 s0 = dot16_i8(x, _mm256_castsi256_si128(q8));
    const __m256 s1 = dot16_i8(x + 16, _mm256_extracti128_si256(q8, 1));
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n + 2 * k);
    const float d = load_f16(b + 208);
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[0])), s0, a.acc);
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[1])), s1, a.acc);
  }
};

// Σ over the row's blocks, asking for the bytes kPrefetch ahead: a decode
// GEMV streams a chunk of consecutive rows, and the hardware prefetcher alone
// kept a core at about half of its share of DRAM bandwidth (Gemma 3's 178 MB
// q8_0 output head: 14.4 → 6.3 ms on two cores).
template <class L>
RLX_AVX2 float dot_row(const uint8_t* w, const float* x, const float* xsum, int64_t nb) {
  constexpr int64_t kPrefetch = 4096;
  Acc a{_mm256_setzero_ps(), 0.0f};
  for (int64_t i = 0; i < nb; ++i, w += L::kBytes) {
    _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetch), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int s = 0; s < L::kSubs; ++s) {
      const int64_t sub = i * L::kSubs + s;
      L::sub(w, s, x + 32 * sub, xsum[sub], a);
    }
  }
  return hsum(a.acc) - a.mins;
}

template <class L>
void dot_rows(const uint8_t* w, int64_t row_bytes, const float* x, int64_t K, int64_t rows, float* y) {
  thread_local std::vector<float> xsum;  // Σ x per 32, for the k-quants' mins
  xsum.assign(static_cast<size_t>(K / 32), 0.0f);
  if constexpr (L::kMins)
    for (int64_t b = 0; b < K / 32; ++b)
      for (int64_t j = 0; j < 32; ++j) xsum[static_cast<size_t>(b)] += x[32 * b + j];
  for (int64_t r = 0; r < rows; ++r) y[r] = dot_row<L>(w + r * row_bytes, x, xsum.data(), K / L::kElems);
}

}  // namespace
#endif

bool quant_dot_supported(DType type) {
#if RLX_QUANT_DOT_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 && (type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q5_0 || type == DType::Q4_K ||
                  type == DType::Q5_K || type == DType::Q6_K);
#else
  (void)type;
  return false;
#endif
}

void quant_dot_rows(DType type, const uint8_t* w, int64_t row_bytes, const float* x, int64_t K, int64_t rows,
                    float* y) {
#if RLX_QUANT_DOT_AVX2
  switch (type) {
    case DType::Q8_0: return dot_rows<Q8_0>(w, row_bytes, x, K, rows, y);
    case DType::Q4_0: return dot_rows<Q4_0>(w, row_bytes, x, K, rows, y);
    case DType::Q5_0: return dot_rows<Q5_0>(w, row_bytes, x, K, rows, y);
    case DType::Q4_K: return dot_rows<Q4_K>(w, row_bytes, x, K, rows, y);
    case DType::Q5_K: return dot_rows<Q5_K>(w, row_bytes, x, K, rows, y);
    case DType::Q6_K: return dot_rows<Q6_K>(w, row_bytes, x, K, rows, y);
    default: break;
  }
#endif
  (void)w, (void)row_bytes, (void)x, (void)K, (void)rows, (void)y;
  throw Unsupported(str("quant_dot: no kernel for ", dtype_name(type)));
}

float quant_dot(DType type, const uint8_t* w, const float* x, int64_t K) {
  float y = 0.0f;
  quant_dot_rows(type, w, 0, x, K, 1, &y);
  return y;
}

}  // namespace rlx::cpu
