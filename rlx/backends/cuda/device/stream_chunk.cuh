// The streaming GEMV's chunk decoders (kernels/gemv_stream.cu): Σ w·x̃ over
// one 256-element chunk of a quantized row in shared memory against
// activations quantized to two int8 levels (gemv_common.cuh's quantize_x),
// shared with the benchmarks that stream weights the same way.
//
// StreamChunk<T>::dot(w, x, ctx) takes w 16-byte aligned (Q6_K: 2-byte,
// IQ4_XS: 8-byte). The 32-element-block types (Q4_0, Q5_0, Q8_0) also take
// dot<kBlocks, kLoad>: kBlocks blocks from w aligned to kLoad (16 or 8)
// bytes, for rows whose length is not a whole number of 256-element chunks
// or of 16-byte granules (K = 640).
#pragma once
#include <cstdint>

#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/core/dtype.h"

namespace rlx::cuda::dev::stream {

using dev::dp4a;
using dev::f16_bits;
using dev::IqTables;
using dev::q8x2;

// The activations of one chunk in shared memory: a and b the two int8 levels,
// dx and s (level sums) of its 8 blocks of 32.
struct XChunk {
  const int8_t* a;
  const int8_t* b;
  const float* dx;
  const float* s;
};

__device__ __forceinline__ uint4 lds16(const void* p) { return *reinterpret_cast<const uint4*>(p); }

// Words of a kLoad-byte-aligned run of kWords words, loaded kLoad (16 or 8) bytes at a time.
template <int kWords, int kLoad = 16>
__device__ __forceinline__ void lds_words(const uint8_t* p, uint32_t (&r)[kWords]) {
  static_assert(kLoad == 16 || kLoad == 8, "16- or 8-byte loads");
  static_assert(kWords % (kLoad / 4) == 0, "whole loads");
  if constexpr (kLoad == 16) {
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 v = lds16(p + 16 * i);
      r[4 * i] = v.x, r[4 * i + 1] = v.y, r[4 * i + 2] = v.z, r[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kWords / 2; ++i) {
      const uint2 v = *reinterpret_cast<const uint2*>(p + 8 * i);
      r[2 * i] = v.x, r[2 * i + 1] = v.y;
    }
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
  template <int kBlocks = 8, int kLoad = 16>
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    static_assert(18 * kBlocks % kLoad == 0, "whole loads");
    uint32_t r[18 * kBlocks / 4];
    lds_words<18 * kBlocks / 4, kLoad>(w, r);
    const uint32_t mk = 0x0F0F0F0Fu;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) {
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
  template <int kBlocks = 8, int kLoad = 16>
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    static_assert(22 * kBlocks % kLoad == 0, "whole loads");
    uint32_t r[22 * kBlocks / 4];
    lds_words<22 * kBlocks / 4, kLoad>(w, r);
    const uint32_t mk = 0x0F0F0F0Fu;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) {
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
  template <int kBlocks = 8, int kLoad = 16>
  __device__ static float dot(const uint8_t* w, const XChunk& x, Ctx) {
    static_assert(34 * kBlocks % kLoad == 0, "whole loads");
    uint32_t r[34 * kBlocks / 4];
    lds_words<34 * kBlocks / 4, kLoad>(w, r);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) {
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

}  // namespace rlx::cuda::dev::stream
