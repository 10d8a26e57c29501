// Device decoders for every GGUF block type (and the plain f32/f16/bf16
// storage types), shared by dequantization, the quantized GEMV and the
// quantized-table gather (kernels/quant.cu).
//
// One shape of interface for all: `QuantBlock<DType>` has
//   kBlockElems, kBlockBytes  the block layout (rlx/core/dtype.h agrees),
//   kChunk                    elements produced per decode call (32 for every
//                             block type, 1 for the scalar types),
//   decode(blk, chunk, t, out) writes elements [chunk·kChunk, (chunk+1)·kChunk)
//                             of the block at `blk` to out[], in GGUF order.
// Byte layouts and formulas are those of the CPU reference
// (rlx/formats/quant.cpp, quant_k.cpp, quant_iq.cpp) and of ggml-common.h.
//
// FMA policy: results must equal the CPU dequantizer bit for bit. nvcc
// contracts a*b+c into one FMA by default, so every multiply, add and subtract
// of a dequantization formula is written as __fmul_rn / __fadd_rn / __fsub_rn
// (never contracted), in the CPU code's order of operations. Integer → float
// and f16 → f32 conversions are exact.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/core/dtype.h"

namespace rlx::cuda::dev {

// The lattice and non-linear value tables, staged once per device from
// rlx/formats/quant_tables.h (kernels/quant.cu); passed to kernels by value.
struct IqTables {
  const uint64_t* iq2xxs_grid;  // [256]
  const uint64_t* iq2xs_grid;   // [512]
  const uint64_t* iq2s_grid;    // [1024]
  const uint32_t* iq3xxs_grid;  // [256]
  const uint32_t* iq3s_grid;    // [512]
  const uint64_t* iq1s_grid;    // [2048]
  const uint8_t* ksigns_iq2xs;  // [128]
  const int8_t* kvalues_iq4nl;  // [16]
  const int8_t* kvalues_mxfp4;  // [16]
};

// ---- small helpers -----------------------------------------------------------

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
// A u32 at an address that is only 2-byte aligned (most block sizes are even).
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) {
  return static_cast<uint32_t>(ld_u16(p)) | (static_cast<uint32_t>(ld_u16(p + 2)) << 16);
}
__device__ __forceinline__ float ld_f16(const uint8_t* p) { return __half2float(__ushort_as_half(ld_u16(p))); }

// N bytes starting at a `A`-byte-aligned address, loaded A bytes at a time.
template <int N, int A>
__device__ __forceinline__ void ld_bytes(const uint8_t* p, uint8_t (&o)[N]) {
  static_assert(N % A == 0);
  if constexpr (A == 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = p[i];
  } else if constexpr (A == 2) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const uint16_t v = ld_u16(p + i);
      o[i] = static_cast<uint8_t>(v);
      o[i + 1] = static_cast<uint8_t>(v >> 8);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const uint32_t v = *reinterpret_cast<const uint32_t*>(p + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) o[i + k] = static_cast<uint8_t>(v >> (8 * k));
    }
  }
}

__device__ __forceinline__ uint8_t grid_byte(uint64_t row, int j) { return static_cast<uint8_t>(row >> (8 * j)); }
__device__ __forceinline__ float sign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.0f : 1.0f; }

// ggml_e8m0_to_fp32_half: 2^(e - 128), built from bits.
__device__ __forceinline__ float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return __uint_as_float(bits);
}

// ggml_ue4m3_to_fp32 halved (bit 7 ignored, 0x7F decodes as 0); exact.
__device__ __forceinline__ float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const uint32_t exp = (x >> 3) & 0xF, man = x & 7;
  if (exp == 0) return mul(static_cast<float>(man), 0.0009765625f);  // man · 2^-9 · 0.5
  return __uint_as_float(((exp + 119u) << 23) | (man << 20));        // (1 + man/8) · 2^(exp-7) · 0.5
}

template <DType T> struct QuantBlock;

// ---- scalar storage types ------------------------------------------------------

template <> struct QuantBlock<DType::F32> {
  static constexpr int kBlockElems = 1, kBlockBytes = 4, kChunk = 1;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[1]) {
    y[0] = *reinterpret_cast<const float*>(b);
  }
};
template <> struct QuantBlock<DType::F16> {
  static constexpr int kBlockElems = 1, kBlockBytes = 2, kChunk = 1;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[1]) { y[0] = ld_f16(b); }
};
template <> struct QuantBlock<DType::BF16> {
  static constexpr int kBlockElems = 1, kBlockBytes = 2, kChunk = 1;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[1]) {
    y[0] = __uint_as_float(static_cast<uint32_t>(ld_u16(b)) << 16);
  }
};

// ---- 32-element legacy blocks ------------------------------------------------
// Nibble j of qs holds element j (low) and element j + 16 (high).

template <> struct QuantBlock<DType::Q4_0> {  // f16 d, u8 qs[16]; (q - 8) * d
  static constexpr int kBlockElems = 32, kBlockBytes = 18, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b);
    uint8_t q[16];
    ld_bytes<16, 2>(b + 2, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      y[j] = mul(static_cast<float>((q[j] & 0xF) - 8), d);
      y[j + 16] = mul(static_cast<float>((q[j] >> 4) - 8), d);
    }
  }
};

template <> struct QuantBlock<DType::Q4_1> {  // f16 d, f16 m, u8 qs[16]; q * d + m
  static constexpr int kBlockElems = 32, kBlockBytes = 20, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b), m = ld_f16(b + 2);
    uint8_t q[16];
    ld_bytes<16, 4>(b + 4, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      y[j] = add(mul(static_cast<float>(q[j] & 0xF), d), m);
      y[j + 16] = add(mul(static_cast<float>(q[j] >> 4), d), m);
    }
  }
};

template <> struct QuantBlock<DType::Q5_0> {  // f16 d, u32 qh, u8 qs[16]; (q - 16) * d
  static constexpr int kBlockElems = 32, kBlockBytes = 22, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b);
    const uint32_t qh = ld_u32_a2(b + 2);
    uint8_t q[16];
    ld_bytes<16, 2>(b + 6, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = mul(static_cast<float>(((q[j] & 0xF) | h0) - 16), d);
      y[j + 16] = mul(static_cast<float>(((q[j] >> 4) | h1) - 16), d);
    }
  }
};

template <> struct QuantBlock<DType::Q5_1> {  // f16 d, f16 m, u32 qh, u8 qs[16]; q * d + m
  static constexpr int kBlockElems = 32, kBlockBytes = 24, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b), m = ld_f16(b + 2);
    const uint32_t qh = *reinterpret_cast<const uint32_t*>(b + 4);
    uint8_t q[16];
    ld_bytes<16, 4>(b + 8, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = add(mul(static_cast<float>((q[j] & 0xF) | h0), d), m);
      y[j + 16] = add(mul(static_cast<float>((q[j] >> 4) | h1), d), m);
    }
  }
};

template <> struct QuantBlock<DType::Q8_0> {  // f16 d, i8 qs[32]; q * d
  static constexpr int kBlockElems = 32, kBlockBytes = 34, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b);
    uint8_t q[32];
    ld_bytes<32, 2>(b + 2, q);
#pragma unroll
    for (int j = 0; j < 32; ++j) y[j] = mul(static_cast<float>(static_cast<int8_t>(q[j])), d);
  }
};

template <> struct QuantBlock<DType::Q8_1> {  // f16 d, f16 s, i8 qs[32]; q * d
  static constexpr int kBlockElems = 32, kBlockBytes = 36, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b);
    uint8_t q[32];
    ld_bytes<32, 4>(b + 4, q);
#pragma unroll
    for (int j = 0; j < 32; ++j) y[j] = mul(static_cast<float>(static_cast<int8_t>(q[j])), d);
  }
};

// ---- K-quants: 256-element super-blocks, decoded 32 elements (chunk c) at a time.

// Q4_K / Q5_K packed 6-bit scale and min of sub-block j (0..7).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q2_K (84 B): u8 scales[16] @0, u8 qs[64] @16, f16 d @80, f16 dmin @82.
// Chunk c: half c/4, 2-bit plane 2·(c%4) of qs[32·half ..+32], scales 2c, 2c+1.
template <> struct QuantBlock<DType::Q2_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 84, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
    const int shift = 2 * (c % 4);
    uint8_t q[32];
    ld_bytes<32, 4>(b + 16 + 32 * (c / 4), q);
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const int sc = b[2 * c + part];
      const float dl = mul(d, static_cast<float>(sc & 0xF)), ml = mul(dmin, static_cast<float>(sc >> 4));
#pragma unroll
      for (int l = 0; l < 16; ++l)
        y[16 * part + l] = sub(mul(dl, static_cast<float>((q[16 * part + l] >> shift) & 3)), ml);
    }
  }
};

// Q3_K (110 B): u8 hmask[32] @0, u8 qs[64] @32, u8 scales[12] @96, f16 d @108.
// Chunk c: 2-bit plane 2·(c%4) of qs[32·(c/4)..], high bit c of hmask, scales 2c, 2c+1.
template <> struct QuantBlock<DType::Q3_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 110, kChunk = 32;
  __device__ static int scale(int j, const uint8_t* s) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
  }
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b + 108);
    const int shift = 2 * (c % 4);
    uint8_t q[32], hm[32];
    ld_bytes<32, 2>(b + 32 + 32 * (c / 4), q);
    ld_bytes<32, 2>(b, hm);
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const float dl = mul(d, static_cast<float>(scale(2 * c + part, b + 96)));
#pragma unroll
      for (int l = 16 * part; l < 16 * part + 16; ++l) {
        const int v = ((q[l] >> shift) & 3) - (((hm[l] >> c) & 1) ? 0 : 4);
        y[l] = mul(dl, static_cast<float>(v));
      }
    }
  }
};

// Q4_K (144 B): f16 d @0, f16 dmin @2, u8 scales[12] @4, u8 qs[128] @16.
// Chunk c: nibble (c odd: high) of qs[32·(c/2)..+32], scale/min c.
template <> struct QuantBlock<DType::Q4_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 144, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b), dmin = ld_f16(b + 2);
    uint8_t s[12], q[32];
    ld_bytes<12, 4>(b + 4, s);
    ld_bytes<32, 4>(b + 16 + 32 * (c / 2), q);
    int sc, m;
    scale_min_k4(c, s, sc, m);
    const float dl = mul(d, static_cast<float>(sc)), ml = mul(dmin, static_cast<float>(m));
    const int shift = 4 * (c % 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) y[l] = sub(mul(dl, static_cast<float>((q[l] >> shift) & 0xF)), ml);
  }
};

// Q5_K (176 B): f16 d @0, f16 dmin @2, u8 scales[12] @4, u8 qh[32] @16, u8 qs[128] @48.
template <> struct QuantBlock<DType::Q5_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 176, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b), dmin = ld_f16(b + 2);
    uint8_t s[12], qh[32], q[32];
    ld_bytes<12, 4>(b + 4, s);
    ld_bytes<32, 4>(b + 16, qh);
    ld_bytes<32, 4>(b + 48 + 32 * (c / 2), q);
    int sc, m;
    scale_min_k4(c, s, sc, m);
    const float dl = mul(d, static_cast<float>(sc)), ml = mul(dmin, static_cast<float>(m));
    const int shift = 4 * (c % 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0xF) + (((qh[l] >> c) & 1) ? 16 : 0);
      y[l] = sub(mul(dl, static_cast<float>(v)), ml);
    }
  }
};

// Q6_K (210 B): u8 ql[128] @0, u8 qh[64] @128, i8 scales[16] @192, f16 d @208.
// Element 128n + 32g + l: nibble (g ≥ 2: high) of ql[64n + 32(g%2) + l], bits
// 2g..2g+1 of qh[32n + l], scale 8n + l/16 + 2g. Chunk c: n = c/4, g = c%4.
template <> struct QuantBlock<DType::Q6_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 210, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b + 208);
    const int n = c / 4, g = c % 4;
    uint8_t ql[32], qh[32];
    ld_bytes<32, 2>(b + 64 * n + 32 * (g % 2), ql);
    ld_bytes<32, 2>(b + 128 + 32 * n, qh);
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n + 2 * g);
    const float d0 = mul(d, static_cast<float>(sc[0])), d1 = mul(d, static_cast<float>(sc[1]));
    const int lo_shift = g >= 2 ? 4 : 0;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int q = (((ql[l] >> lo_shift) & 0xF) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
      y[l] = mul(l < 16 ? d0 : d1, static_cast<float>(q));
    }
  }
};

// Q8_K (292 B): f32 d @0, i8 qs[256] @4, i16 bsums[16] @260.
template <> struct QuantBlock<DType::Q8_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 292, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = *reinterpret_cast<const float*>(b);
    uint8_t q[32];
    ld_bytes<32, 4>(b + 4 + 32 * c, q);
#pragma unroll
    for (int j = 0; j < 32; ++j) y[j] = mul(d, static_cast<float>(static_cast<int8_t>(q[j])));
  }
};

// ---- lattice (IQ) formats: chunk c is sub-block ib = c (32 elements = 4 groups of 8).

// Eight grid values with their signs: (db · grid) · sign, the CPU's order.
__device__ __forceinline__ void emit8(float* y, float db, uint64_t row, uint8_t signs) {
#pragma unroll
  for (int j = 0; j < 8; ++j) y[j] = mul(mul(db, static_cast<float>(grid_byte(row, j))), sign_of(signs, j));
}

// IQ2_XXS (66 B): f16 d @0, per sub-block 4 grid bytes + u32 (4×7 sign bits, 4-bit scale) @2+8ib.
template <> struct QuantBlock<DType::IQ2_XXS> {
  static constexpr int kBlockElems = 256, kBlockBytes = 66, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int ib, const IqTables& t, float (&y)[32]) {
    const float d = ld_f16(b);
    const uint8_t* q = b + 2 + 8 * ib;
    const uint32_t idx = ld_u32_a2(q), aux = ld_u32_a2(q + 4);
    const float db = mul(mul(d, add(0.5f, static_cast<float>(aux >> 28))), 0.25f);
#pragma unroll
    for (int l = 0; l < 4; ++l)
      emit8(y + 8 * l, db, t.iq2xxs_grid[(idx >> (8 * l)) & 0xFF], t.ksigns_iq2xs[(aux >> (7 * l)) & 127]);
  }
};

// IQ2_XS (74 B): f16 d @0, u16 qs[32] @2 (9-bit grid index, 7-bit sign index), u8 scales[8] @66.
template <> struct QuantBlock<DType::IQ2_XS> {
  static constexpr int kBlockElems = 256, kBlockBytes = 74, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int ib, const IqTables& t, float (&y)[32]) {
    const float d = ld_f16(b);
    const uint8_t sc = b[66 + ib];
    const float db0 = mul(mul(d, add(0.5f, static_cast<float>(sc & 0xF))), 0.25f);
    const float db1 = mul(mul(d, add(0.5f, static_cast<float>(sc >> 4))), 0.25f);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = ld_u16(b + 2 + 2 * (4 * ib + l));
      emit8(y + 8 * l, l < 2 ? db0 : db1, t.iq2xs_grid[q & 511], t.ksigns_iq2xs[q >> 9]);
    }
  }
};

// IQ2_S (82 B): f16 d @0, u8 qs[32] @2, u8 signs[32] @34, u8 qh[8] @66, u8 scales[8] @74.
template <> struct QuantBlock<DType::IQ2_S> {
  static constexpr int kBlockElems = 256, kBlockBytes = 82, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int ib, const IqTables& t, float (&y)[32]) {
    const float d = ld_f16(b);
    const uint8_t sc = b[74 + ib], qh = b[66 + ib];
    const float db0 = mul(mul(d, add(0.5f, static_cast<float>(sc & 0xF))), 0.25f);
    const float db1 = mul(mul(d, add(0.5f, static_cast<float>(sc >> 4))), 0.25f);
    uint8_t qs[4], signs[4];
    ld_bytes<4, 2>(b + 2 + 4 * ib, qs);
    ld_bytes<4, 2>(b + 34 + 4 * ib, signs);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int idx = qs[l] | ((qh << (8 - 2 * l)) & 0x300);
      emit8(y + 8 * l, l < 2 ? db0 : db1, t.iq2s_grid[idx], signs[l]);
    }
  }
};

// IQ3_XXS (98 B): f16 d @0, u8 qs[64] @2, u32 scales_and_signs[8] @66.
template <> struct QuantBlock<DType::IQ3_XXS> {
  static constexpr int kBlockElems = 256, kBlockBytes = 98, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int ib, const IqTables& t, float (&y)[32]) {
    const float d = ld_f16(b);
    uint8_t qs[8];
    ld_bytes<8, 2>(b + 2 + 8 * ib, qs);
    const uint32_t aux = ld_u32_a2(b + 66 + 4 * ib);
    const float db = mul(mul(d, add(0.5f, static_cast<float>(aux >> 28))), 0.5f);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint8_t s = t.ksigns_iq2xs[(aux >> (7 * l)) & 127];
      const uint32_t g1 = t.iq3xxs_grid[qs[2 * l]], g2 = t.iq3xxs_grid[qs[2 * l + 1]];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        y[8 * l + j] = mul(mul(db, static_cast<float>(grid_byte(g1, j))), sign_of(s, j));
        y[8 * l + j + 4] = mul(mul(db, static_cast<float>(grid_byte(g2, j))), sign_of(s, j + 4));
      }
    }
  }
};

// IQ3_S (110 B): f16 d @0, u8 qs[64] @2, u8 qh[8] @66, u8 signs[32] @74, u8 scales[4] @106.
template <> struct QuantBlock<DType::IQ3_S> {
  static constexpr int kBlockElems = 256, kBlockBytes = 110, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int ib, const IqTables& t, float (&y)[32]) {
    const float d = ld_f16(b);
    uint8_t qs[8], signs[4];
    ld_bytes<8, 2>(b + 2 + 8 * ib, qs);
    ld_bytes<4, 2>(b + 74 + 4 * ib, signs);
    const uint8_t qh = b[66 + ib], sc = b[106 + ib / 2];
    const float db = mul(d, static_cast<float>(1 + 2 * (ib % 2 ? sc >> 4 : sc & 0xF)));
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      // The 9th bit of the two grid indices of group l: qh bits 2l and 2l+1.
      const uint32_t g1 = t.iq3s_grid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)];
      const uint32_t g2 = t.iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        y[8 * l + j] = mul(mul(db, static_cast<float>(grid_byte(g1, j))), sign_of(signs[l], j));
        y[8 * l + j + 4] = mul(mul(db, static_cast<float>(grid_byte(g2, j))), sign_of(signs[l], j + 4));
      }
    }
  }
};

constexpr float kIq1Delta = 0.125f;  // IQ1S_DELTA

// IQ1_S (50 B): f16 d @0, u8 qs[32] @2, u16 qh[8] @34.
template <> struct QuantBlock<DType::IQ1_S> {
  static constexpr int kBlockElems = 256, kBlockBytes = 50, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int ib, const IqTables& t, float (&y)[32]) {
    const float d = ld_f16(b);
    uint8_t qs[4];
    ld_bytes<4, 2>(b + 2 + 4 * ib, qs);
    const uint16_t qh = ld_u16(b + 34 + 2 * ib);
    const float dl = mul(d, static_cast<float>(2 * ((qh >> 12) & 7) + 1));
    const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint64_t row = t.iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        y[8 * l + j] = mul(dl, add(static_cast<float>(static_cast<int8_t>(grid_byte(row, j))), delta));
    }
  }
};

// IQ1_M (56 B): u8 qs[32] @0, u8 qh[16] @32, u8 scales[8] @48; the f16 d is the
// top nibbles of the four u16 scale words.
template <> struct QuantBlock<DType::IQ1_M> {
  static constexpr int kBlockElems = 256, kBlockBytes = 56, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int ib, const IqTables& t, float (&y)[32]) {
    uint16_t sc[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) sc[k] = ld_u16(b + 48 + 2 * k);
    const auto dbits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) |
                                             (sc[3] & 0xF000));
    const float d = __half2float(__ushort_as_half(dbits));
    uint8_t qs[4], qh[2];
    ld_bytes<4, 2>(b + 4 * ib, qs);
    ld_bytes<2, 2>(b + 32 + 2 * ib, qh);
    const int shift = 6 * (ib % 2);
    const float dl0 = mul(d, static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1));
    const float dl1 = mul(d, static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1));
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      // Groups 0,1 take their 3 high index bits and delta sign from qh[0]; 2,3 from qh[1].
      const uint8_t h = qh[l / 2];
      const int idx = qs[l] | ((l % 2 ? h << 4 : h << 8) & 0x700);
      const float delta = h & (l % 2 ? 0x80 : 0x08) ? -kIq1Delta : kIq1Delta;
      const uint64_t row = t.iq1s_grid[idx];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        y[8 * l + j] = mul(l < 2 ? dl0 : dl1, add(static_cast<float>(static_cast<int8_t>(grid_byte(row, j))), delta));
    }
  }
};

// IQ4_NL (18 B, 32 elements): f16 d @0, u8 qs[16] @2; d * kvalues[q].
template <> struct QuantBlock<DType::IQ4_NL> {
  static constexpr int kBlockElems = 32, kBlockBytes = 18, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int, const IqTables& t, float (&y)[32]) {
    const float d = ld_f16(b);
    uint8_t q[16];
    ld_bytes<16, 2>(b + 2, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      y[j] = mul(d, static_cast<float>(t.kvalues_iq4nl[q[j] & 0xF]));
      y[j + 16] = mul(d, static_cast<float>(t.kvalues_iq4nl[q[j] >> 4]));
    }
  }
};

// IQ4_XS (136 B): f16 d @0, u16 scales_h @2, u8 scales_l[4] @4, u8 qs[128] @8.
template <> struct QuantBlock<DType::IQ4_XS> {
  static constexpr int kBlockElems = 256, kBlockBytes = 136, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int ib, const IqTables& t, float (&y)[32]) {
    const float d = ld_f16(b);
    const uint16_t scales_h = ld_u16(b + 2);
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = mul(d, static_cast<float>(ls - 32));
    uint8_t q[16];
    ld_bytes<16, 4>(b + 8 + 16 * ib, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      y[j] = mul(dl, static_cast<float>(t.kvalues_iq4nl[q[j] & 0xF]));
      y[j + 16] = mul(dl, static_cast<float>(t.kvalues_iq4nl[q[j] >> 4]));
    }
  }
};

// ---- ternary formats --------------------------------------------------------------

// TQ1_0 (54 B): u8 qs[48] @0 (5 trits per byte), u8 qh[4] @48 (4 trits), f16 d @52.
// Element e < 160: trit e/32 of byte e%32; e < 240: trit (e-160)/16 of byte
// 32 + (e-160)%16; else trit (e-240)/4 of byte 48 + (e-240)%4.
template <> struct QuantBlock<DType::TQ1_0> {
  static constexpr int kBlockElems = 256, kBlockBytes = 54, kChunk = 32;
  __device__ static float trit(uint8_t packed, int n, float d) {
    const int pow3 = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;  // no local-memory table
    const auto q = static_cast<uint8_t>(packed * pow3);
    const int xi = (static_cast<uint16_t>(q) * 3) >> 8;
    return mul(static_cast<float>(xi - 1), d);
  }
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b + 52);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int e = 32 * c + i;
      int byte, n;
      if (e < 160) {
        byte = e % 32, n = e / 32;
      } else if (e < 240) {
        byte = 32 + (e - 160) % 16, n = (e - 160) / 16;
      } else {
        byte = 48 + (e - 240) % 4, n = (e - 240) / 4;
      }
      y[i] = trit(b[byte], n, d);
    }
  }
};

// TQ2_0 (66 B): u8 qs[64] @0 (2 bits per element), f16 d @64. Chunk c: 2-bit
// plane 2·(c%4) of qs[32·(c/4)..+32]; (q - 1) * d.
template <> struct QuantBlock<DType::TQ2_0> {
  static constexpr int kBlockElems = 256, kBlockBytes = 66, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b + 64);
    const int shift = 2 * (c % 4);
    uint8_t q[32];
    ld_bytes<32, 2>(b + 32 * (c / 4), q);
#pragma unroll
    for (int m = 0; m < 32; ++m) y[m] = mul(static_cast<float>(((q[m] >> shift) & 3) - 1), d);
  }
};

// ---- FP4 formats ----------------------------------------------------------------

// MXFP4 (17 B, 32 elements): u8 e (e8m0) @0, u8 qs[16] @1; kvalues[q] * 2^(e-128).
template <> struct QuantBlock<DType::MXFP4> {
  static constexpr int kBlockElems = 32, kBlockBytes = 17, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int, const IqTables& t, float (&y)[32]) {
    const float d = e8m0_half(b[0]);
    uint8_t q[16];
    ld_bytes<16, 1>(b + 1, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      y[j] = mul(static_cast<float>(t.kvalues_mxfp4[q[j] & 0xF]), d);
      y[j + 16] = mul(static_cast<float>(t.kvalues_mxfp4[q[j] >> 4]), d);
    }
  }
};

// NVFP4 (36 B, 64 elements): u8 d[4] (ue4m3, one per 16) @0, u8 qs[32] @4.
// Chunk c covers sub-blocks 2c and 2c+1.
template <> struct QuantBlock<DType::NVFP4> {
  static constexpr int kBlockElems = 64, kBlockBytes = 36, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int c, const IqTables& t, float (&y)[32]) {
    uint8_t q[16];
    ld_bytes<16, 4>(b + 4 + 16 * c, q);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float d = ue4m3_half(b[2 * c + h]);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        y[16 * h + j] = mul(static_cast<float>(t.kvalues_mxfp4[q[8 * h + j] & 0xF]), d);
        y[16 * h + j + 8] = mul(static_cast<float>(t.kvalues_mxfp4[q[8 * h + j] >> 4]), d);
      }
    }
  }
};

// Calls f(QuantBlock<T>{}) for the runtime dtype `t`; returns false when no
// decoder exists. Used by host launchers in .cu files.
template <typename F>
bool visit_quant_block(DType t, F&& f) {
  switch (t) {
#define RLX_QB(X) \
  case DType::X: f(QuantBlock<DType::X>{}); return true;
    RLX_QB(F32) RLX_QB(F16) RLX_QB(BF16)
    RLX_QB(Q4_0) RLX_QB(Q4_1) RLX_QB(Q5_0) RLX_QB(Q5_1) RLX_QB(Q8_0) RLX_QB(Q8_1)
    RLX_QB(Q2_K) RLX_QB(Q3_K) RLX_QB(Q4_K) RLX_QB(Q5_K) RLX_QB(Q6_K) RLX_QB(Q8_K)
    RLX_QB(IQ2_XXS) RLX_QB(IQ2_XS) RLX_QB(IQ2_S) RLX_QB(IQ3_XXS) RLX_QB(IQ3_S) RLX_QB(IQ1_S) RLX_QB(IQ1_M)
    RLX_QB(IQ4_NL) RLX_QB(IQ4_XS) RLX_QB(TQ1_0) RLX_QB(TQ2_0) RLX_QB(MXFP4) RLX_QB(NVFP4)
#undef RLX_QB
    default: return false;
  }
}

}  // namespace rlx::cuda::dev
