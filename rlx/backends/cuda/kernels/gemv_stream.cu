// The streaming m = 1 GEMV for large quantized matrices (launch_quant_gemv_stream
// in quant.h).
//
// Why: the unit kernels (gemv.cu, gemv_q8.cu) split a block into 16/32-weight
// units over consecutive lanes. Their SASS for Q4_K runs ~370 instructions
// per 64 weights: each unit decodes its block's scales again, and rows of a
// group carry liveness predicates; at 4096² they reached 19-49% of the copy
// bandwidth. Here a thread owns whole 256-element chunks of one row (one
// K-quant block, or 8 blocks of 32): it decodes the scales once per chunk and
// its loop has no row predicates, 340 instructions per Q4_K chunk (1.33 per
// weight). Measured: quant_gemv_stream_applies and docs/performance.md.
//
// Layout: a CTA of 256 threads per SM owns a balanced, contiguous share of
// the rows and walks it in tiles of `tr` whole rows, each row at a pitch ≡ 16
// (mod 128) bytes so that the 32 lanes of a warp, reading the same chunk of
// 32 rows with 16-byte loads, hit every bank once. Thread t takes row t mod tr
// of a tile and the chunks c ≡ t / tr (mod 256 / tr); the 256 / tr threads of
// a row meet in shared memory.
//
// The chain of GEMVs in a decode graph (programmatic launches): what stands
// between a GEMV and the copy rate is the part after griddepcontrol.wait
// (x, the dots, the store), which no weight traffic can overlap within one
// kernel. So the kernel lets the next one in at once (launch_dependents on
// entry), a CTA fits twice in an SM's shared memory (kSmemBudget), and every
// stage is requested before the wait: the next GEMV's weights stream in while
// this one computes. The tiles come by bulk copies (cp.async.bulk, one per
// row, counted on the stage's mbarrier) rather than 16-byte cp.async, whose
// requests queued x's loads behind the weights. H200, CUDA graph of 4096²
// GEMVs, each change undone alone (docs/performance.md, session 24): Q4_K
// 4.64 µs against 5.84 (cp.async), 5.47 (trigger after x) and 5.43 (only the
// first stage before the wait). Rows too long for two stages of 8 rows in
// that budget take one CTA per SM (kSmemMax) and a ring refilled as tiles
// are done.
//
// Types: Q4_0, Q5_0, Q8_0, Q4_K, Q5_K (chunks of 144, 176, 272 bytes: 16-byte
// loads), IQ4_XS (136 bytes: chunks 8-byte aligned, 8-byte loads; K a
// multiple of 512) and Q6_K (210 bytes: chunks only 2-byte aligned, read
// through the aligned 8-byte words around them with a word select and a
// funnel shift; K a multiple of 2048). K is what makes a row a whole number
// of 16-byte granules for the tile copies. With 8-byte loads the 32 rows a
// warp reads at a 16 (mod 128) pitch meet two to a bank: twice the
// wavefronts of a 16-byte read per byte.
//
// Activations: every CTA quantizes x into shared memory as gemv_q8.cu does
// (two int8 levels per 32 elements, gemv_common.cuh), adding each block's
// level sum for the bias and "− min" terms. All lanes of a warp read the same
// activations (broadcast). Error bound: as quant_gemv_uses_q8 states.
#include <algorithm>
#include <string>

#include "rlx/backends/cuda/kernels/quant.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/kernels/gemv_common.cuh"
#include "rlx/backends/cuda/kernels/gemv_q8.h"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

using namespace quant_detail;
using dev::dp4a;
using dev::f16_bits;
using dev::IqTables;
using dev::q8x2;

constexpr int kThreads = 256;
constexpr int kChunk = 256;      // elements of a row a thread takes at a time
constexpr int kMaxStages = 4;
// Two CTAs fit in an SM's 228 KB (each also reserves 1 KB).
constexpr int64_t kSmemBudget = 112 * 1024;
constexpr int64_t kSmemMax = 200 * 1024;  // of the 227 KB an sm_90 CTA may opt into: one CTA per SM
constexpr int64_t kTileMax = 96 * 1024;

// The activations of one chunk in shared memory: a and b the two int8 levels,
// dx and s (level sums) of its 8 blocks of 32.
struct XChunk {
  const int8_t* a;
  const int8_t* b;
  const float* dx;
  const float* s;
};

__device__ __forceinline__ uint4 lds16(const void* p) { return *reinterpret_cast<const uint4*>(p); }

// Words of a 16-byte-aligned run of kWords words, loaded 16 bytes at a time.
template <int kWords>
__device__ __forceinline__ void lds_words(const uint8_t* p, uint32_t (&r)[kWords]) {
  static_assert(kWords % 4 == 0, "whole 16-byte loads");
#pragma unroll
  for (int i = 0; i < kWords / 4; ++i) {
    const uint4 v = lds16(p + 16 * i);
    r[4 * i] = v.x, r[4 * i + 1] = v.y, r[4 * i + 2] = v.z, r[4 * i + 3] = v.w;
  }
}
// The 32-bit word and the 16-bit half at even byte offset o of r (o is a
// constant once the block loops are unrolled, so these are register picks).
template <int N>
__device__ __forceinline__ uint32_t word_at(const uint32_t (&r)[N], int o) {
  return (o & 3) ? __byte_perm(r[o >> 2], r[(o >> 2) + 1], 0x5432) : r[o >> 2];
}
template <int N>
__device__ __forceinline__ uint32_t half_at(const uint32_t (&r)[N], int o) {
  return (o & 3) ? r[o >> 2] >> 16 : r[o >> 2] & 0xFFFFu;
}

// 16 activation bytes of level a and b at element e of the chunk, as words.
__device__ __forceinline__ void x_words(const XChunk& x, int e, int (&a)[4], int (&b)[4]) {
  const int4 va = *reinterpret_cast<const int4*>(x.a + e), vb = *reinterpret_cast<const int4*>(x.b + e);
  a[0] = va.x, a[1] = va.y, a[2] = va.z, a[3] = va.w;
  b[0] = vb.x, b[1] = vb.y, b[2] = vb.z, b[3] = vb.w;
}

// Σ q·x̃ over one 32-element block of 4-bit-or-wider quants: lo[k] holds
// elements 4k.. and hi[k] elements 16 + 4k.. as bytes (non-negative, < 128);
// bias z is subtracted through the block's level sum. Returns the two levels'
// combined integer sum, as q8x2 gives it, minus z·s.
__device__ __forceinline__ float block32(const uint32_t (&lo)[4], const uint32_t (&hi)[4], const XChunk& x, int e,
                                         int z) {
  int a0[4], b0[4], a1[4], b1[4];
  x_words(x, e, a0, b0);
  x_words(x, e + 16, a1, b1);
  int a = 0, b = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    a = dp4a(lo[k], a0[k], a), b = dp4a(lo[k], b0[k], b);
    a = dp4a(hi[k], a1[k], a), b = dp4a(hi[k], b1[k], b);
  }
  return fmaf(static_cast<float>(-z), x.s[e / 32], q8x2(a, b));
}

// StreamChunk<T>: kBytes, the chunk's bytes (256 elements); Ctx, what a
// thread holds for the whole kernel (the IQ4_NL table for IQ4_XS), built by
// context(tables) once, and dot(w, x, ctx): Σ w·x̃ over the chunk at w (shared
// memory) with the activations x. Types without tables take NoTables.
template <DType T>
struct StreamChunk;

struct NoTables {
  static constexpr bool kTables = false;  // launch_quant_gemv_stream skips staging the tables
  using Ctx = dev::NoCtx;
  __device__ static Ctx context(const IqTables&) { return {}; }
};

// Q4_0: 8 blocks of 18 bytes (f16 d, 16 bytes of nibbles: low → elements
// 0..15, high → 16..31), 144 bytes, block i at byte 18i.
template <>
struct StreamChunk<DType::Q4_0> : NoTables {
  static constexpr int kBytes = 144;
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    uint32_t r[36];
    lds_words(w, r);
    const uint32_t mk = 0x0F0F0F0Fu;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t lo[4], hi[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t q = word_at(r, 18 * i + 2 + 4 * k);
        lo[k] = q & mk, hi[k] = (q >> 4) & mk;
      }
      acc = fmaf(f16_bits(half_at(r, 18 * i)) * x.dx[i], block32(lo, hi, x, 32 * i, 8), acc);
    }
    return acc;
  }
};

// Q5_0: 8 blocks of 22 bytes (f16 d, u32 qh: bit j is element j's 5th bit,
// 16 bytes of nibbles as Q4_0), 176 bytes, block i at byte 22i.
template <>
struct StreamChunk<DType::Q5_0> : NoTables {
  static constexpr int kBytes = 176;
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    uint32_t r[44];
    lds_words(w, r);
    const uint32_t mk = 0x0F0F0F0Fu;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t qh = word_at(r, 22 * i + 2);
      uint32_t lo[4], hi[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t q = word_at(r, 22 * i + 6 + 4 * k);
        lo[k] = (q & mk) | (dev::spread4((qh >> (4 * k)) & 0xF) << 4);
        hi[k] = ((q >> 4) & mk) | (dev::spread4((qh >> (16 + 4 * k)) & 0xF) << 4);
      }
      acc = fmaf(f16_bits(half_at(r, 22 * i)) * x.dx[i], block32(lo, hi, x, 32 * i, 16), acc);
    }
    return acc;
  }
};

// Q8_0: 8 blocks of 34 bytes (f16 d, 32 signed bytes), 272 bytes.
template <>
struct StreamChunk<DType::Q8_0> : NoTables {
  static constexpr int kBytes = 272;
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    uint32_t r[68];
    lds_words(w, r);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      int a0[4], b0[4], a1[4], b1[4];
      x_words(x, 32 * i, a0, b0);
      x_words(x, 32 * i + 16, a1, b1);
      int a = 0, b = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t q0 = word_at(r, 34 * i + 2 + 4 * k), q1 = word_at(r, 34 * i + 18 + 4 * k);
        a = dp4a(q0, a0[k], a), b = dp4a(q0, b0[k], b);
        a = dp4a(q1, a1[k], a), b = dp4a(q1, b1[k], b);
      }
      acc = fmaf(f16_bits(half_at(r, 34 * i)) * x.dx[i], q8x2(a, b), acc);
    }
    return acc;
  }
};

// Q4_K and Q5_K: a 256-element block, head = f16 d, f16 dmin, 12 bytes of
// 6-bit scales and mins; group g (64 elements) takes sub-blocks 2g (low
// nibbles of qs bytes 32g..32g+31) and 2g + 1 (high nibbles).
__device__ __forceinline__ float kquant_group(const uint4& head, int g, float s0, float s1, const XChunk& x) {
  const float d = f16_bits(head.x), dmin = f16_bits(head.x >> 16);
  float sc0, m0, sc1, m1;
  dev::scale_min_k4_regs(2 * g, head.y, head.z, head.w, sc0, m0);
  dev::scale_min_k4_regs(2 * g + 1, head.y, head.z, head.w, sc1, m1);
  const int j = 2 * g;
  return x.dx[j] * (d * sc0 * s0 - dmin * m0 * x.s[j]) + x.dx[j + 1] * (d * sc1 * s1 - dmin * m1 * x.s[j + 1]);
}
// Σ q·x̃ of 32 elements whose quants are the 8 words q (bytes < 128), at element e.
__device__ __forceinline__ float sum32(const uint32_t (&q)[8], const XChunk& x, int e) {
  int a0[4], b0[4], a1[4], b1[4];
  x_words(x, e, a0, b0);
  x_words(x, e + 16, a1, b1);
  int a = 0, b = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    a = dp4a(q[k], a0[k], a), b = dp4a(q[k], b0[k], b);
    a = dp4a(q[4 + k], a1[k], a), b = dp4a(q[4 + k], b1[k], b);
  }
  return q8x2(a, b);
}

template <>
struct StreamChunk<DType::Q4_K> : NoTables {
  static constexpr int kBytes = 144;
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    const uint4 head = lds16(w);
    const uint32_t mk = 0x0F0F0F0Fu;
    float acc = 0.0f;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      uint32_t q[8];
      lds_words(w + 16 + 32 * g, q);
      uint32_t lo[8], hi[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) lo[k] = q[k] & mk, hi[k] = (q[k] >> 4) & mk;
      acc += kquant_group(head, g, sum32(lo, x, 64 * g), sum32(hi, x, 64 * g + 32), x);
    }
    return acc;
  }
};

// Q5_K: head, qh[32] (bit c of qh[l] is the 5th bit of element l of
// sub-block c), qs[128] as Q4_K; 176 bytes.
template <>
struct StreamChunk<DType::Q5_K> : NoTables {
  static constexpr int kBytes = 176;
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    const uint4 head = lds16(w);
    uint32_t h[8];
    lds_words(w + 16, h);
    const uint32_t mk = 0x0F0F0F0Fu, one = 0x01010101u;
    float acc = 0.0f;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      uint32_t q[8];
      lds_words(w + 48 + 32 * g, q);
      uint32_t lo[8], hi[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        lo[k] = (q[k] & mk) | (((h[k] >> (2 * g)) & one) << 4);
        hi[k] = ((q[k] >> 4) & mk) | (((h[k] >> (2 * g + 1)) & one) << 4);
      }
      acc += kquant_group(head, g, sum32(lo, x, 64 * g), sum32(hi, x, 64 * g + 32), x);
    }
    return acc;
  }
};

// Q6_K: 210 bytes, u8 ql[128] @0, u8 qh[64] @128, i8 scales[16] @192, f16 d
// @208. Block j = 4n + g of the chunk (half n, group g; 32 elements): element l
// is the low nibble (g ≥ 2: the high one) of ql[64n + 32(g % 2) + l] with bits
// 2g, 2g + 1 of qh[32n + l] above it, a quant q in 0..63, and scale byte
// 8n + 2g + l / 16: w = d·scale·(q − 32). Two scales per block of x, so the
// bias goes through the level sums of each block's first 16 elements (Σa, Σb
// by __dp4a with ones) and the block's level sum s for the other 16.
// Chunks are 210 bytes apart, so only 2-byte aligned: every field is read
// through the aligned 8-byte words that hold it (lds_raw8, word_a2).
//
// The phase of a 2-byte-aligned address p: off = p mod 8 (0, 2, 4, 6).
struct Phase2 {
  bool up;      // off ≥ 4: the wanted bytes start in the upper word of an 8-byte load
  uint32_t sh;  // 8·(off mod 4): 0 or 16
};
// raw[] = the aligned 8-byte words from p (8-byte aligned) on.
template <int N>
__device__ __forceinline__ void lds_raw8(const uint8_t* p, uint32_t (&raw)[N]) {
  static_assert(N % 2 == 0, "whole 8-byte loads");
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const uint2 v = *reinterpret_cast<const uint2*>(p + 8 * i);
    raw[2 * i] = v.x, raw[2 * i + 1] = v.y;
  }
}
// Word k (bytes 4k..4k + 3) of the run whose aligned 8-byte words are raw[]:
// a select and a funnel shift (k is a constant once unrolled: registers only).
template <int N>
__device__ __forceinline__ uint32_t word_a2(const uint32_t (&raw)[N], int k, Phase2 ph) {
  const uint32_t c0 = ph.up ? raw[k + 1] : raw[k], c1 = ph.up ? raw[k + 2] : raw[k + 1];
  return __funnelshift_r(c0, c1, ph.sh);
}

template <>
struct StreamChunk<DType::Q6_K> : NoTables {
  static constexpr int kBytes = 210;
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    // Rows start 16-byte aligned (the pitch), so w mod 8 is the chunk's
    // offset mod 8; base = w − off stays a shared-memory pointer.
    const int off = static_cast<int>(reinterpret_cast<uintptr_t>(w) & 7);
    const uint8_t* base = w - off;
    const Phase2 ph{off >= 4, 8u * static_cast<uint32_t>(off & 3)};
    // Scales (bytes 192..207) and d (208..209): three 8-byte words from
    // base + 192, which end at most 6 bytes past the chunk (inside the row's
    // pitch, or the next chunk).
    uint32_t rs[6];
    lds_raw8(base + 192, rs);
    const float d = f16_bits((ph.up ? rs[5] : rs[4]) >> ph.sh);
    const uint32_t mk = 0x0F0F0F0Fu, m2 = 0x30303030u, ones = 0x01010101u, flip = 0x80808080u;
    float acc = 0.0f;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      uint32_t rl[18], rh[10];  // ql[64n .. 64n + 64) and qh[32n .. 32n + 32), one 8-byte word more each
      lds_raw8(base + 64 * n, rl);
      lds_raw8(base + 128 + 32 * n, rh);
      uint32_t ql[16], qh[8];  // each word once: groups g and g + 2 share ql, all four qh
#pragma unroll
      for (int k = 0; k < 16; ++k) ql[k] = word_a2(rl, k, ph);
#pragma unroll
      for (int k = 0; k < 8; ++k) qh[k] = word_a2(rh, k, ph);
      // Half n's 8 signed scales, bytes flipped to unsigned (byte_minus takes 128 off again).
      const uint32_t sw[2] = {word_a2(rs, 2 * n, ph) ^ flip, word_a2(rs, 2 * n + 1, ph) ^ flip};
#pragma unroll
      for (int g = 0; g < 4; ++g) {
        const int j = 4 * n + g;
        uint32_t q[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const uint32_t l = ql[8 * (g % 2) + k], h = qh[k];
          // bits 2g, 2g + 1 of each qh byte to bits 4, 5
          const uint32_t hb = g < 2 ? h << (4 - 2 * g) : h >> (2 * g - 4);
          q[k] = ((g >= 2 ? l >> 4 : l) & mk) | (hb & m2);
        }
        int a0[4], b0[4], a1[4], b1[4];
        x_words(x, 32 * j, a0, b0);
        x_words(x, 32 * j + 16, a1, b1);
        int sa = 0, sb = 0;  // Σa, Σb over the block's first 16 elements
#pragma unroll
        for (int k = 0; k < 4; ++k) sa = dp4a(ones, a0[k], sa), sb = dp4a(ones, b0[k], sb);
        // First 16: Σ (q − 32)·a. Last 16: Σ q·a + 32·Σ_first a, whose
        // combined levels less 32·s are Σ (q − 32)·x̃ over the last 16.
        int ia0 = -32 * sa, ib0 = -32 * sb, ia1 = 32 * sa, ib1 = 32 * sb;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          ia0 = dp4a(q[k], a0[k], ia0), ib0 = dp4a(q[k], b0[k], ib0);
          ia1 = dp4a(q[4 + k], a1[k], ia1), ib1 = dp4a(q[4 + k], b1[k], ib1);
        }
        // Scales 8n + 2g and 8n + 2g + 1: bytes 2(g % 2), 2(g % 2) + 1 of word g / 2.
        const float sc0 = dev::byte_minus(sw[g / 2], 2 * (g % 2), 128.0f);
        const float sc1 = dev::byte_minus(sw[g / 2], 2 * (g % 2) + 1, 128.0f);
        const float t0 = q8x2(ia0, ib0), t1 = fmaf(-32.0f, x.s[j], q8x2(ia1, ib1));
        acc = fmaf(x.dx[j], fmaf(sc1, t1, sc0 * t0), acc);
      }
    }
    return d * acc;
  }
};

// IQ4_XS: 136 bytes, f16 d @0, u16 scales_h @2, u8 scales_l[4] @4, qs[128] @8;
// block ib (32 elements): qs bytes 16ib + i hold elements i (low nibble) and
// 16 + i (high), indices into kvalues_iq4nl; scale ls = nibble ib of scales_l
// | bits 2ib, 2ib + 1 of scales_h above it: w = d·(ls − 32)·kvalues[idx].
// Chunks are 136 bytes apart: 8-byte aligned, read by 8-byte loads. The table
// is the one staged for the unit kernels (IqTables::kvalues_iq4nl), held in
// four registers and indexed by byte permutes as GemvUnit<IQ4_XS> does, eight
// nibbles at a time here.
template <>
struct StreamChunk<DType::IQ4_XS> {
  static constexpr int kBytes = 136;
  static constexpr bool kTables = true;
  using Ctx = dev::GemvUnit<DType::IQ4_XS>::Ctx;
  __device__ static Ctx context(const IqTables& t) { return dev::GemvUnit<DType::IQ4_XS>::context(t); }
  // The table values of q's eight nibbles as signed bytes: lo those of the low
  // nibbles (bytes 0..3 in order), hi those of the high ones. A selector nibble
  // keeps bit 3 clear (set, it would replicate a sign): the low 3 bits of an
  // index pick a byte of tab[0..1] and of tab[2..3], and its bit 3 then picks
  // between the two.
  __device__ static void lookup8(const Ctx& c, uint32_t q, uint32_t& lo, uint32_t& hi) {
    const uint32_t i3 = q & 0x77777777u;
    const uint32_t pick = 0x32103210u | ((q >> 1) & 0x44444444u);  // nibble i: i mod 4, + 4 for an index ≥ 8
    // Nibbles 0..3 (bytes 0 and 1: low, high, low, high), then 4..7 (bytes 2, 3).
    const uint32_t v0 =
        __byte_perm(__byte_perm(c.tab[0], c.tab[1], i3), __byte_perm(c.tab[2], c.tab[3], i3), pick);
    const uint32_t v1 = __byte_perm(__byte_perm(c.tab[0], c.tab[1], i3 >> 16),
                                    __byte_perm(c.tab[2], c.tab[3], i3 >> 16), pick >> 16);
    lo = __byte_perm(v0, v1, 0x6420);
    hi = __byte_perm(v0, v1, 0x7531);
  }
  __device__ static float dot(const uint8_t* w, const XChunk& x, const Ctx& c) {
    uint32_t r[34];
    lds_raw8(w, r);
    const uint32_t scales_h = r[0] >> 16, scales_l = r[1];
    float acc = 0.0f;
#pragma unroll
    for (int ib = 0; ib < 8; ++ib) {
      int a0[4], b0[4], a1[4], b1[4];
      x_words(x, 32 * ib, a0, b0);
      x_words(x, 32 * ib + 16, a1, b1);
      int a = 0, b = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        uint32_t lo, hi;
        lookup8(c, r[2 + 4 * ib + k], lo, hi);
        a = dp4a(lo, a0[k], a), b = dp4a(lo, b0[k], b);
        a = dp4a(hi, a1[k], a), b = dp4a(hi, b1[k], b);
      }
      const int ls = ((scales_l >> (4 * ib)) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
      acc = fmaf(x.dx[ib] * dev::i2f(ls - 32), q8x2(a, b), acc);
    }
    return f16_bits(r[0]) * acc;
  }
};

template <typename F>
bool visit_stream_chunk(DType t, F&& f) {
  switch (t) {
#define RLX_SC(X) \
  case DType::X: f(StreamChunk<DType::X>{}); return true;
    RLX_SC(Q4_0) RLX_SC(Q5_0) RLX_SC(Q8_0) RLX_SC(Q4_K) RLX_SC(Q5_K) RLX_SC(Q6_K) RLX_SC(IQ4_XS)
#undef RLX_SC
    default: return false;
  }
}

struct StreamPlan {
  int tr = 0, stages = 0, pitch = 0, grid = 0;
  size_t smem = 0;
};

// Shared memory: the stages' mbarriers, then the stages, then x.
constexpr int kBarBytes = 128;

template <class C>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_stream_kernel(const uint8_t* __restrict__ w, const void* __restrict__ x, void* __restrict__ y, int64_t n,
                       int64_t k, int64_t row_bytes, int tr, int stages, int pitch, FloatKind io, bool x_vec,
                       IqTables tables) {
  extern __shared__ int4 stream_smem[];
  auto* bars = reinterpret_cast<uint64_t*>(stream_smem);
  auto* smem = reinterpret_cast<uint8_t*>(stream_smem) + kBarBytes;
  const int64_t stage_bytes = int64_t{tr} * pitch;
  auto* xa = reinterpret_cast<int8_t*>(smem + stages * stage_bytes);
  int8_t* xb = xa + k;
  auto* dx = reinterpret_cast<float*>(xb + k);
  float* xs = dx + k / 32;
  float* red = xs + k / 32;  // [kThreads]

  dev::pdl_trigger();  // the next GEMV's CTAs may become resident and request their weights now
  const int64_t r_begin = n * blockIdx.x / gridDim.x, r_end = n * (blockIdx.x + 1) / gridDim.x;
  const int tiles = static_cast<int>((r_end - r_begin + tr - 1) / tr);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) dev::mbar_init(&bars[s], 1);
    dev::mbar_fence_init();
  }
  __syncthreads();
  // Tile t's rows into stage t mod stages: warp 0 requests a copy per row,
  // counted on the stage's mbarrier. Nothing past the last tile.
  auto issue = [&](int t) {
    if (threadIdx.x >= 32 || t >= tiles) return;
    const int64_t r0 = r_begin + int64_t{t} * tr;
    const int rows = static_cast<int>(std::min<int64_t>(tr, r_end - r0));
    uint8_t* st = smem + (t % stages) * stage_bytes;
    const uint8_t* src = w + r0 * row_bytes;
    if (threadIdx.x == 0) dev::mbar_arrive_expect_tx(&bars[t % stages], static_cast<uint32_t>(rows * row_bytes));
    __syncwarp();
    for (int row = threadIdx.x; row < rows; row += 32)
      dev::bulk_copy_g2s(st + row * pitch, src + int64_t{row} * row_bytes, static_cast<uint32_t>(row_bytes),
                         &bars[t % stages]);
  };
  for (int t = 0; t < stages; ++t) issue(t);  // weights: no kernel writes them
  const typename C::Ctx ctx = C::context(tables);  // staged once per device, never written by a kernel
  dev::pdl_wait();
  quantize_x<2>(x, 1, k, io, x_vec, xa, xb, dx, xs);

  const int chunks = static_cast<int>(k / kChunk);
  const int slots = kThreads / tr;
  const int my_row = threadIdx.x % tr, my_slot = threadIdx.x / tr;
  for (int t = 0; t < tiles; ++t) {
    __syncthreads();  // x, the first time; red is free again after
    dev::mbar_wait(&bars[t % stages], static_cast<uint32_t>((t / stages) & 1));
    const int64_t r0 = r_begin + int64_t{t} * tr;
    const int rows = static_cast<int>(std::min<int64_t>(tr, r_end - r0));
    const uint8_t* row = smem + (t % stages) * stage_bytes + my_row * pitch;
    float acc = 0.0f;
    if (my_row < rows) {
#pragma unroll 1
      for (int c = my_slot; c < chunks; c += slots) {
        const int e = c * kChunk;
        acc += C::dot(row + c * C::kBytes, XChunk{xa + e, xb + e, dx + e / 32, xs + e / 32}, ctx);
      }
    }
    red[threadIdx.x] = acc;
    __syncthreads();  // every thread is done with the stage and its partial sum is in red
    issue(t + stages);  // every thread is done with stage t mod stages
    if (threadIdx.x < rows) {
      float s = 0.0f;
      for (int v = 0; v < slots; ++v) s += red[v * tr + threadIdx.x];
      store_from_f32(y, r0 + threadIdx.x, s, io);
    }
  }
}

// Rows per tile: 256 / tr threads share a row, enough that each takes one
// chunk where K allows (up to 32 per row); tiles small enough for two stages
// where 8 rows allow it. Where a CTA's rows would take two such tiles and
// twice the rows fit in one stage, it takes them as one tile instead, two
// chunks a thread: one block-wide reduction fewer after the wait (H200, 4096²
// in a CUDA graph: Q4_0 4.39 → 4.08 µs, Q4_K 4.51 → 4.27, Q5_K 5.06 → 4.72,
// IQ4_XS 5.78 → 5.42; Q6_K's and Q8_0's rows are too long for it, and where a
// CTA has fewer rows than a tile, 1024 × 3072, the doubled tile measured
// 0.1-0.6 µs slower). Stages: as many as fit the budget with x, up to 4 and
// the tiles a CTA has. Within kSmemBudget a CTA fits twice in an SM, so the
// next GEMV's CTA can be resident, its weights in flight, while this one
// computes; rows too long for two stages there take the larger budget.
StreamPlan plan_stream(int64_t n, int64_t k, int64_t row_bytes, int64_t budget = kSmemBudget) {
  StreamPlan p;
  const int64_t chunks = k / kChunk;
  int slots = 1;
  while (slots < 32 && slots < chunks) slots *= 2;
  p.tr = kThreads / slots;
  p.pitch = static_cast<int>((row_bytes + 127) / 128 * 128 + 16);
  const size_t x_bytes = static_cast<size_t>(2 * k + 2 * (k / 32) * 4 + kThreads * 4);
  const int64_t room = budget - kBarBytes - static_cast<int64_t>(x_bytes);
  p.grid = static_cast<int>(std::min<int64_t>(sm_count(), n));
  const int64_t rows_per_cta = (n + p.grid - 1) / p.grid;
  if (p.tr < kThreads && rows_per_cta > p.tr && rows_per_cta <= 2 * p.tr &&
      2 * int64_t{p.tr} * p.pitch <= std::min(kTileMax, room))
    p.tr *= 2;
  else
    while (p.tr > 8 && int64_t{p.tr} * p.pitch > std::min(kTileMax, room / 2)) p.tr /= 2;
  const int64_t tiles = (rows_per_cta + p.tr - 1) / p.tr;
  const int64_t tile_bytes = int64_t{p.tr} * p.pitch;
  p.stages = static_cast<int>(std::clamp<int64_t>(room / tile_bytes, 0, std::min<int64_t>(kMaxStages, tiles)));
  p.smem = static_cast<size_t>(kBarBytes + p.stages * tile_bytes) + x_bytes;
  // (Taking the larger budget also where 8-row tiles leave threads without a
  // chunk, K = 4096 for Q8_0 and Q6_K, measured 7.74 / 8.29 µs against
  // 7.81 / 7.80 on the H200: not done.)
  if (budget == kSmemBudget && p.stages < std::min<int64_t>(2, tiles)) return plan_stream(n, k, row_bytes, kSmemMax);
  return p;
}

}  // namespace

const char* quant_gemv_stream_unsupported(DType w_type, const void* w, int64_t m, int64_t n, int64_t k) {
  if (m != 1) return "m is not 1";
  bool known = false;
  visit_stream_chunk(w_type, [&](auto) { known = true; });
  if (!known) return "no streaming chunk decoder for this type";
  if (k % kChunk != 0) return "K is not a multiple of 256";
  // Rows must be whole 16-byte granules (the tile copies): 8 Q6_K blocks
  // (1,680 bytes) and 2 IQ4_XS blocks (272 bytes) are the fewest that are.
  if (w_type == DType::Q6_K && k % 2048 != 0)
    return "rows are not 16-byte aligned: Q6_K needs K a multiple of 2048 (8 blocks of 210 bytes)";
  if (w_type == DType::IQ4_XS && k % 512 != 0)
    return "rows are not 16-byte aligned: IQ4_XS needs K a multiple of 512 (2 blocks of 136 bytes)";
  const int64_t row_bytes = dtype_bytes(w_type, k);
  if (row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0) return "rows are not 16-byte aligned";
  if (n < 1 || n >= (int64_t{1} << 31) || row_bytes / 16 * 256 >= (int64_t{1} << 31)) return "too many rows";
  if (plan_stream(n, k, row_bytes).stages < 1) return "a tile of rows and x do not fit in shared memory";
  return nullptr;
}

// RLX_CUDA_GEMV_STREAM=auto takes the streaming kernel for m = 1 and 1 MB or
// more of weights (H200, CUDA graphs, session 24, % of the 4.22 TB/s copy,
// against the unit kernels: 4096² Q4_0 51.1 / 19.0%, Q4_K 48.2 / 33.1, Q5_K
// 54.0 / 36.4, Q6_K 42.6 / 31.6, Q8_0 54.4 / 49.3, IQ4_XS 36.3 / 23.4;
// 1024 × 3072 Q4_0 14.7 / 5.7, Q4_K 14.2 / 11.9, Q8_0 28.5 / 12.4). Gemma 3
// 270M's layers (under 1 MB) keep the unit kernels, which were tuned on its
// decode. 1 takes it wherever it can run; 0 never, nor does
// RLX_CUDA_GEMV_Q8=0, which asks for f32 activations.
bool quant_gemv_stream_applies(DType w_type, const void* w, int64_t m, int64_t n, int64_t k) {
  const std::string mode = env_string("RLX_CUDA_GEMV_STREAM");
  RLX_CHECK_AS(InvalidArgument, mode == "auto" || mode == "1" || mode == "0", "RLX_CUDA_GEMV_STREAM='", mode,
               "' must be auto, 1 or 0");
  if (mode == "0" || !quant_gemv_q8_allowed() || quant_gemv_stream_unsupported(w_type, w, m, n, k)) return false;
  // IQ4_XS's chunk (table lookups, ~800 instructions) lost to the unit kernel
  // at 1024 x 3072 (1.7 MB: 3.71 against 3.52 µs) and won at 4096² (8.9 MB:
  // 5.83 against 9.05 µs) on the H200; the others win from 1 MB.
  const int64_t min_bytes = w_type == DType::IQ4_XS ? int64_t{4} << 20 : int64_t{1} << 20;
  return mode == "1" || n * dtype_bytes(w_type, k) >= min_bytes;
}

void launch_quant_gemv_stream(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t n, int64_t k,
                              cudaStream_t stream) {
  const char* why = quant_gemv_stream_unsupported(w_type, w, 1, n, k);
  RLX_CHECK_AS(Unsupported, !why, "quantized gemv (streaming): ", dtype_name(w_type), " [", n, ", ", k, "]: ",
               why ? why : "");
  const FloatKind io = float_kind(x_dtype, "quantized gemv");
  const int64_t row_bytes = dtype_bytes(w_type, k);
  const StreamPlan p = plan_stream(n, k, row_bytes);
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  visit_stream_chunk(w_type, [&](auto c) {
    using C = decltype(c);
    auto kernel = gemv_stream_kernel<C>;
    IqTables tables{};
    if constexpr (C::kTables) tables = tables_for_current_device();
    RLX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kSmemMax + 16 * 1024)));
    kernel<<<p.grid, kThreads, p.smem, stream>>>(static_cast<const uint8_t*>(w), x, y, n, k, row_bytes, p.tr,
                                                  p.stages, p.pitch, io, x_vec, tables);
  });
  RLX_CUDA_CHECK_LAUNCH("DequantMatMul (streaming gemv)");
}

}  // namespace rlx::cuda
