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

#include "rlx/backends/cuda/device/fp8.cuh"
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
// fp8 weights (DequantMatMul with f8e4m3 / f8e5m2 W), exact.
template <> struct QuantBlock<DType::F8E4M3> {
  static constexpr int kBlockElems = 1, kBlockBytes = 1, kChunk = 1;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[1]) { y[0] = e4m3_to_f32(b[0]); }
};
template <> struct QuantBlock<DType::F8E5M2> {
  static constexpr int kBlockElems = 1, kBlockBytes = 1, kChunk = 1;
  __device__ static void decode(const uint8_t* b, int, const IqTables&, float (&y)[1]) { y[0] = e5m2_to_f32(b[0]); }
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

// ---- 1-bit --------------------------------------------------------------------

// Q1_0 (18 B, 128 elements): f16 d @0, u8 qs[16] @2; element j is +d when bit
// j % 8 of qs[j / 8] is set, −d otherwise. Chunk c: qs bytes 4c..4c+3.
template <> struct QuantBlock<DType::Q1_0> {
  static constexpr int kBlockElems = 128, kBlockBytes = 18, kChunk = 32;
  __device__ static void decode(const uint8_t* b, int c, const IqTables&, float (&y)[32]) {
    const float d = ld_f16(b);
    const uint32_t bits = ld_u32_a2(b + 2 + 4 * c);
#pragma unroll
    for (int j = 0; j < 32; ++j) y[j] = (bits >> j) & 1u ? d : -d;
  }
};

// Calls f(QuantBlock<T>{}) for the runtime dtype `t`; returns false when no
// decoder exists. Used by host launchers in .cu files.
template <typename F>
bool visit_quant_block(DType t, F&& f) {
  switch (t) {
#define RLX_QB(X) \
  case DType::X: f(QuantBlock<DType::X>{}); return true;
    RLX_QB(F32) RLX_QB(F16) RLX_QB(BF16) RLX_QB(F8E4M3) RLX_QB(F8E5M2)
    RLX_QB(Q4_0) RLX_QB(Q4_1) RLX_QB(Q5_0) RLX_QB(Q5_1) RLX_QB(Q8_0) RLX_QB(Q8_1)
    RLX_QB(Q2_K) RLX_QB(Q3_K) RLX_QB(Q4_K) RLX_QB(Q5_K) RLX_QB(Q6_K) RLX_QB(Q8_K)
    RLX_QB(IQ2_XXS) RLX_QB(IQ2_XS) RLX_QB(IQ2_S) RLX_QB(IQ3_XXS) RLX_QB(IQ3_S) RLX_QB(IQ1_S) RLX_QB(IQ1_M)
    RLX_QB(IQ4_NL) RLX_QB(IQ4_XS) RLX_QB(TQ1_0) RLX_QB(TQ2_0) RLX_QB(MXFP4) RLX_QB(NVFP4) RLX_QB(Q1_0)
#undef RLX_QB
    default: return false;
  }
}


// ---- GEMV units: coalesced wide loads and I2F-free decoding ---------------------
//
// The fused GEMV reads each weight byte once, so its speed is that of its
// loads. `GemvUnit<DType>` splits a block into kUnits units; consecutive
// threads take consecutive units of the same block, so a warp's loads cover a
// contiguous run of bytes, and each unit is fetched with the widest aligned
// loads its layout allows (kAlign: the alignment every block address must
// have; the launcher checks it and otherwise uses the QuantBlock path).
// A unit's elements are kRuns runs of kRunLen consecutive elements; run r of
// unit j starts at element run_start(j, r) of the block.
//   load(blk, j)          fetches unit j's bytes (Raw) — issued for several
//                         rows before any is used, so loads overlap;
//   dot(raw, c, x, xs)    Σ w·x over the unit, x[r][i] the activations of
//                         run r and xs[r] = Σ_i x[r][i] (for the "− min" terms).
//   values(raw, c, v)     the unit's dequantized values, bit-exact with the
//                         CPU (the FMA policy above), for dequantization.
// Quants become floats without I2F: the bits 0x4B0000bb are the float
// 2^23 + bb, so one byte permute and one subtract give bb − bias exactly.
// dot() factors the block scales out of the sums; it is not bit-exact with
// the dequantizer (the GEMV is checked against float64 with a tolerance).

// Byte i of w as the exact float w_i − bias (0 ≤ bias < 2^23).
__device__ __forceinline__ float byte_minus(uint32_t w, int i, float bias) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u + i)) - (8388608.0f + bias);
}

// 8 (16) bytes at a 2-byte-aligned address, from the aligned 8-byte words that
// hold them (a word holding none of them is never read): 2 (3) 8-byte loads
// instead of 4 (8) 2-byte ones, then funnel shifts. The last word can reach
// up to 6 bytes past the wanted ones: see units_stay_inside.
__device__ __forceinline__ uint2 ld8_a2(const uint8_t* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint2*>(a & ~uintptr_t{7});
  const uint32_t off = a & 7, sh = 8 * (off & 3);
  const uint2 lo = __ldg(w), hi = off ? __ldg(w + 1) : make_uint2(0, 0);
  const bool up = off >= 4;  // the first wanted byte is in the upper half of lo
  const uint32_t c0 = up ? lo.y : lo.x, c1 = up ? hi.x : lo.y, c2 = up ? hi.y : hi.x;
  return make_uint2(__funnelshift_r(c0, c1, sh), __funnelshift_r(c1, c2, sh));
}
__device__ __forceinline__ uint4 ld16_a2(const uint8_t* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint2*>(a & ~uintptr_t{7});
  const uint32_t off = a & 7, sh = 8 * (off & 3);
  const uint2 w0 = __ldg(w), w1 = __ldg(w + 1), w2 = off ? __ldg(w + 2) : make_uint2(0, 0);
  const bool up = off >= 4;
  const uint32_t c0 = up ? w0.y : w0.x, c1 = up ? w1.x : w0.y, c2 = up ? w1.y : w1.x, c3 = up ? w2.x : w1.y,
                 c4 = up ? w2.y : w2.x;
  return make_uint4(__funnelshift_r(c0, c1, sh), __funnelshift_r(c1, c2, sh), __funnelshift_r(c2, c3, sh),
                    __funnelshift_r(c3, c4, sh));
}
__device__ __forceinline__ float f16_bits(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<uint16_t>(h)));
}
// Σ_i q_i·x_i over the four bytes of w (quants q_i = byte − bias).
__device__ __forceinline__ float dot4(uint32_t w, float bias, const float* x, float s) {
#pragma unroll
  for (int i = 0; i < 4; ++i) s = fmaf(byte_minus(w, i, bias), x[i], s);
  return s;
}
// Bit i (0..3) of h moved to bit 8i: one bit per byte.
__device__ __forceinline__ uint32_t spread4(uint32_t h) { return (h * 0x00204081u) & 0x01010101u; }

// ---- int8 dot products (the q8 GEMV, gemv_q8.cu) --------------------------------
// dot_q8(raw, c, xa, xb, dx, sa, sb) is Σ w·x̃ over the unit, where x̃ are the
// activations in two int8 levels per 32-element block: x̃ = dx·(kQ8Ratio·a +
// b), a = round(x / (kQ8Ratio·dx)) and b the rounded remainder, so x̃ is
// within dx/2 of x. xa[r] and xb[r] hold run r's a and b packed four to a
// word, dx[r] the scale of the 32-element block that holds run r, sa[r] and
// sb[r] = Σ a and Σ b over run r (only read by units with kQ8Sums: their
// quants carry a bias, Σ (q − z)·a = Σ q·a − z·Σ a). Quants enter __dp4a as
// non-negative bytes (< 128) or as their own signed bytes; the integer sums
// are exact, and each run's two levels meet in one float multiply-add.
inline constexpr int kQ8Ratio = 250;  // |remainder| ≤ kQ8Ratio·dx/2 rounds to |b| ≤ 125 < 127
__device__ __forceinline__ int dp4a(uint32_t a, int b, int c) { return __dp4a(static_cast<int>(a), b, c); }
// v as a float for |v| < 2^22, without I2F (a quarter-rate instruction on
// Hopper): 0x4B400000 is 1.5·2^23, whose ulp is 1.
__device__ __forceinline__ float i2f(int v) { return __int_as_float(0x4B400000 + v) - 12582912.0f; }
// The two levels' sums combined: kQ8Ratio·a + b (|a|, |b| < 2^22).
__device__ __forceinline__ float q8x2(int a, int b) { return fmaf(static_cast<float>(kQ8Ratio), i2f(a), i2f(b)); }

struct NoCtx {};

template <DType T> struct GemvUnit;

// Q4_0 unit j (0, 1): qs bytes 8j..8j+7 → elements 8j.. (low) and 16+8j.. (high).
template <> struct GemvUnit<DType::Q4_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 18, kUnits = 2, kRuns = 2, kRunLen = 8, kAlign = 2;
  struct Raw { uint32_t d; uint2 q; };
  using Ctx = NoCtx;
  __device__ static Ctx context(const IqTables&) { return {}; }
  __device__ static int run_start(int j, int r) { return 8 * j + 16 * r; }
  __device__ static Raw load(const uint8_t* b, int j) { return {ld_u16(b), ld8_a2(b + 2 + 8 * j)}; }
  __device__ static float dot(const Raw& u, const Ctx&, const float (&x)[2][8], const float (&)[2]) {
    const uint32_t m = 0x0F0F0F0Fu;
    float s = dot4(u.q.x & m, 8.0f, x[0], 0.0f);
    s = dot4(u.q.y & m, 8.0f, x[0] + 4, s);
    s = dot4((u.q.x >> 4) & m, 8.0f, x[1], s);
    s = dot4((u.q.y >> 4) & m, 8.0f, x[1] + 4, s);
    return s * f16_bits(u.d);
  }
  static constexpr bool kQ8Sums = true;
  static constexpr bool kQ8Default = false;  // RLX_CUDA_GEMV_Q8=auto (gemv_q8.cu)
  // Both runs lie in one 32-element block: one scale, one conversion.
  __device__ static float dot_q8(const Raw& u, const Ctx&, const int (&xa)[2][2], const int (&xb)[2][2],
                                 const float (&dx)[2], const int (&sa)[2], const int (&sb)[2]) {
    const uint32_t m = 0x0F0F0F0Fu;
    const uint32_t w[4] = {u.q.x & m, u.q.y & m, (u.q.x >> 4) & m, (u.q.y >> 4) & m};
    int a = -8 * (sa[0] + sa[1]), b = -8 * (sb[0] + sb[1]);
#pragma unroll
    for (int i = 0; i < 4; ++i) a = dp4a(w[i], xa[i / 2][i % 2], a), b = dp4a(w[i], xb[i / 2][i % 2], b);
    return f16_bits(u.d) * dx[0] * q8x2(a, b);
  }
  __device__ static void values(const Raw& u, const Ctx&, float (&v)[2][8]) {
    const uint32_t m = 0x0F0F0F0Fu, w[4] = {u.q.x & m, u.q.y & m, (u.q.x >> 4) & m, (u.q.y >> 4) & m};
    const float d = f16_bits(u.d);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i / 8][i % 8] = mul(byte_minus(w[i / 4], i % 4, 8.0f), d);
  }
};

// Q5_0 unit j: as Q4_0, the 5th bit of element e is bit e of qh.
template <> struct GemvUnit<DType::Q5_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 22, kUnits = 2, kRuns = 2, kRunLen = 8, kAlign = 2;
  struct Raw { uint32_t d, qh; uint2 q; int j; };
  using Ctx = NoCtx;
  __device__ static Ctx context(const IqTables&) { return {}; }
  __device__ static int run_start(int j, int r) { return 8 * j + 16 * r; }
  __device__ static Raw load(const uint8_t* b, int j) { return {ld_u16(b), ld_u32_a2(b + 2), ld8_a2(b + 6 + 8 * j), j}; }
  __device__ static float dot(const Raw& u, const Ctx&, const float (&x)[2][8], const float (&)[2]) {
    const uint32_t m = 0x0F0F0F0Fu, h = u.qh >> (8 * u.j);  // bit i: element 8j + i (+16 at bit 16 + i)
    float s = dot4((u.q.x & m) | (spread4(h & 0xF) << 4), 16.0f, x[0], 0.0f);
    s = dot4((u.q.y & m) | (spread4((h >> 4) & 0xF) << 4), 16.0f, x[0] + 4, s);
    s = dot4(((u.q.x >> 4) & m) | (spread4((h >> 16) & 0xF) << 4), 16.0f, x[1], s);
    s = dot4(((u.q.y >> 4) & m) | (spread4((h >> 20) & 0xF) << 4), 16.0f, x[1] + 4, s);
    return s * f16_bits(u.d);
  }
  static constexpr bool kQ8Sums = true;
  static constexpr bool kQ8Default = false;  // RLX_CUDA_GEMV_Q8=auto (gemv_q8.cu)
  __device__ static float dot_q8(const Raw& u, const Ctx&, const int (&xa)[2][2], const int (&xb)[2][2],
                                 const float (&dx)[2], const int (&sa)[2], const int (&sb)[2]) {
    const uint32_t m = 0x0F0F0F0Fu, h = u.qh >> (8 * u.j);
    const uint32_t w[4] = {(u.q.x & m) | (spread4(h & 0xF) << 4), (u.q.y & m) | (spread4((h >> 4) & 0xF) << 4),
                           ((u.q.x >> 4) & m) | (spread4((h >> 16) & 0xF) << 4),
                           ((u.q.y >> 4) & m) | (spread4((h >> 20) & 0xF) << 4)};
    int a = -16 * (sa[0] + sa[1]), b = -16 * (sb[0] + sb[1]);
#pragma unroll
    for (int i = 0; i < 4; ++i) a = dp4a(w[i], xa[i / 2][i % 2], a), b = dp4a(w[i], xb[i / 2][i % 2], b);
    return f16_bits(u.d) * dx[0] * q8x2(a, b);
  }
  __device__ static void values(const Raw& u, const Ctx&, float (&v)[2][8]) {
    const uint32_t m = 0x0F0F0F0Fu, h = u.qh >> (8 * u.j);
    const uint32_t w[4] = {(u.q.x & m) | (spread4(h & 0xF) << 4), (u.q.y & m) | (spread4((h >> 4) & 0xF) << 4),
                           ((u.q.x >> 4) & m) | (spread4((h >> 16) & 0xF) << 4),
                           ((u.q.y >> 4) & m) | (spread4((h >> 20) & 0xF) << 4)};
    const float d = f16_bits(u.d);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i / 8][i % 8] = mul(byte_minus(w[i / 4], i % 4, 16.0f), d);
  }
};

// Q8_0 unit j: qs bytes 16j..16j+15 = elements 16j..; signed bytes flipped to
// unsigned (x ^ 0x80 = x + 128) for the float trick.
template <> struct GemvUnit<DType::Q8_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 34, kUnits = 2, kRuns = 1, kRunLen = 16, kAlign = 2;
  struct Raw { uint32_t d; uint4 q; };
  using Ctx = NoCtx;
  __device__ static Ctx context(const IqTables&) { return {}; }
  __device__ static int run_start(int j, int) { return 16 * j; }
  __device__ static Raw load(const uint8_t* b, int j) { return {ld_u16(b), ld16_a2(b + 2 + 16 * j)}; }
  __device__ static float dot(const Raw& u, const Ctx&, const float (&x)[1][16], const float (&)[1]) {
    const uint32_t f = 0x80808080u;
    float s = dot4(u.q.x ^ f, 128.0f, x[0], 0.0f);
    s = dot4(u.q.y ^ f, 128.0f, x[0] + 4, s);
    s = dot4(u.q.z ^ f, 128.0f, x[0] + 8, s);
    s = dot4(u.q.w ^ f, 128.0f, x[0] + 12, s);
    return s * f16_bits(u.d);
  }
  static constexpr bool kQ8Sums = false;
  static constexpr bool kQ8Default = true;  // RLX_CUDA_GEMV_Q8=auto (gemv_q8.cu)
  __device__ static float dot_q8(const Raw& u, const Ctx&, const int (&xa)[1][4], const int (&xb)[1][4],
                                 const float (&dx)[1], const int (&)[1], const int (&)[1]) {
    const uint32_t w[4] = {u.q.x, u.q.y, u.q.z, u.q.w};  // signed bytes already
    int a = 0, b = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) a = dp4a(w[i], xa[0][i], a), b = dp4a(w[i], xb[0][i], b);
    return f16_bits(u.d) * dx[0] * q8x2(a, b);
  }
  __device__ static void values(const Raw& u, const Ctx&, float (&v)[1][16]) {
    const uint32_t f = 0x80808080u, w[4] = {u.q.x ^ f, u.q.y ^ f, u.q.z ^ f, u.q.w ^ f};
    const float d = f16_bits(u.d);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[0][i] = mul(byte_minus(w[i / 4], i % 4, 128.0f), d);
  }
};

// Byte i (0..11) of the 12 K-quant scale bytes held in three words.
__device__ __forceinline__ int scale_byte(uint32_t s0, uint32_t s1, uint32_t s2, int i) {
  const uint32_t w = i < 4 ? s0 : i < 8 ? s1 : s2;
  return (w >> (8 * (i & 3))) & 0xFF;
}
// scale_min_k4 on scale bytes held in registers.
__device__ __forceinline__ void scale_min_k4_regs(int j, uint32_t s0, uint32_t s1, uint32_t s2, float& sc, float& m) {
  int a, b;
  if (j < 4) {
    a = scale_byte(s0, s1, s2, j) & 63;
    b = scale_byte(s0, s1, s2, j + 4) & 63;
  } else {
    const int hi = scale_byte(s0, s1, s2, j + 4);
    a = (hi & 0xF) | ((scale_byte(s0, s1, s2, j - 4) >> 6) << 4);
    b = (hi >> 4) | ((scale_byte(s0, s1, s2, j) >> 6) << 4);
  }
  sc = static_cast<float>(a);
  m = static_cast<float>(b);
}
// Σ over 16 bytes (four words) of q_i·x_i, q_i = byte & mask after a shift.
__device__ __forceinline__ float dot16(const uint32_t (&w)[4], const float* x, float bias) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) s = dot4(w[k], bias, x + 4 * k, s);
  return s;
}

// The scales of a Q4_K/Q5_K unit's two runs (dot_q8): run r is sub-block
// 2g + r, x's 32-element block 2g + r, with its own scale and min.
struct KQuantScales {
  float d, dmin, sc0, m0, sc1, m1;
  __device__ KQuantScales(const uint4& head, int g) : d(f16_bits(head.x)), dmin(f16_bits(head.x >> 16)) {
    scale_min_k4_regs(2 * g, head.y, head.z, head.w, sc0, m0);
    scale_min_k4_regs(2 * g + 1, head.y, head.z, head.w, sc1, m1);
  }
  // Σ w·x̃ from the runs' integer sums.
  __device__ float q8_sum(const float (&dx)[2], int a0, int b0, int a1, int b1, const int (&sa)[2],
                          const int (&sb)[2]) const {
    return dx[0] * (d * sc0 * q8x2(a0, b0) - dmin * m0 * q8x2(sa[0], sb[0])) +
           dx[1] * (d * sc1 * q8x2(a1, b1) - dmin * m1 * q8x2(sa[1], sb[1]));
  }
};

// Q4_K unit j (0..7): qs bytes 16j..16j+15, i.e. l = 16(j%2).. of group g = j/2:
// low nibbles → sub-block 2g (elements 64g + l), high → 2g+1 (64g + 32 + l).
// 144-byte blocks: 16-byte loads when the weights are 16-byte aligned.
template <> struct GemvUnit<DType::Q4_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 144, kUnits = 8, kRuns = 2, kRunLen = 16, kAlign = 16;
  struct Raw { uint4 head, q; int j; };  // head: d, dmin (f16 pair), scales[12]
  using Ctx = NoCtx;
  __device__ static Ctx context(const IqTables&) { return {}; }
  __device__ static int run_start(int j, int r) { return 64 * (j / 2) + 16 * (j % 2) + 32 * r; }
  __device__ static Raw load(const uint8_t* b, int j) {
    return {__ldg(reinterpret_cast<const uint4*>(b)), __ldg(reinterpret_cast<const uint4*>(b + 16 + 16 * j)), j};
  }
  __device__ static float dot(const Raw& u, const Ctx&, const float (&x)[2][16], const float (&xs)[2]) {
    const float d = f16_bits(u.head.x), dmin = f16_bits(u.head.x >> 16);
    const int g = u.j / 2;
    float sc0, m0, sc1, m1;
    scale_min_k4_regs(2 * g, u.head.y, u.head.z, u.head.w, sc0, m0);
    scale_min_k4_regs(2 * g + 1, u.head.y, u.head.z, u.head.w, sc1, m1);
    const uint32_t mk = 0x0F0F0F0Fu;
    const uint32_t lo[4] = {u.q.x & mk, u.q.y & mk, u.q.z & mk, u.q.w & mk};
    const uint32_t hi[4] = {(u.q.x >> 4) & mk, (u.q.y >> 4) & mk, (u.q.z >> 4) & mk, (u.q.w >> 4) & mk};
    const float s0 = dot16(lo, x[0], 0.0f), s1 = dot16(hi, x[1], 0.0f);
    return d * (sc0 * s0 + sc1 * s1) - dmin * (m0 * xs[0] + m1 * xs[1]);
  }
  static constexpr bool kQ8Sums = true;
  static constexpr bool kQ8Default = true;  // RLX_CUDA_GEMV_Q8=auto (gemv_q8.cu)
  __device__ static float dot_q8(const Raw& u, const Ctx&, const int (&xa)[2][4], const int (&xb)[2][4],
                                 const float (&dx)[2], const int (&sa)[2], const int (&sb)[2]) {
    const KQuantScales ks(u.head, u.j / 2);
    const uint32_t mk = 0x0F0F0F0Fu, q[4] = {u.q.x, u.q.y, u.q.z, u.q.w};
    int a0 = 0, b0 = 0, a1 = 0, b1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = q[k] & mk, hi = (q[k] >> 4) & mk;
      a0 = dp4a(lo, xa[0][k], a0), b0 = dp4a(lo, xb[0][k], b0);
      a1 = dp4a(hi, xa[1][k], a1), b1 = dp4a(hi, xb[1][k], b1);
    }
    return ks.q8_sum(dx, a0, b0, a1, b1, sa, sb);
  }
  __device__ static void values(const Raw& u, const Ctx&, float (&v)[2][16]) {
    const float d = f16_bits(u.head.x), dmin = f16_bits(u.head.x >> 16);
    const uint32_t mk = 0x0F0F0F0Fu, q[4] = {u.q.x, u.q.y, u.q.z, u.q.w};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sc, m;
      scale_min_k4_regs(2 * (u.j / 2) + r, u.head.y, u.head.z, u.head.w, sc, m);
      const float dl = mul(d, sc), ml = mul(dmin, m);
#pragma unroll
      for (int i = 0; i < 16; ++i) v[r][i] = sub(mul(dl, byte_minus((q[i / 4] >> (4 * r)) & mk, i % 4, 0.0f)), ml);
    }
  }
};

// Q5_K unit j: as Q4_K; the 5th bit of element l of sub-block c is bit c of qh[l].
template <> struct GemvUnit<DType::Q5_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 176, kUnits = 8, kRuns = 2, kRunLen = 16, kAlign = 16;
  struct Raw { uint4 head, qh, q; int j; };
  using Ctx = NoCtx;
  __device__ static Ctx context(const IqTables&) { return {}; }
  __device__ static int run_start(int j, int r) { return 64 * (j / 2) + 16 * (j % 2) + 32 * r; }
  __device__ static Raw load(const uint8_t* b, int j) {
    return {__ldg(reinterpret_cast<const uint4*>(b)), __ldg(reinterpret_cast<const uint4*>(b + 16 + 16 * (j % 2))),
            __ldg(reinterpret_cast<const uint4*>(b + 48 + 16 * j)), j};
  }
  __device__ static float dot(const Raw& u, const Ctx&, const float (&x)[2][16], const float (&xs)[2]) {
    const float d = f16_bits(u.head.x), dmin = f16_bits(u.head.x >> 16);
    const int g = u.j / 2;
    float sc0, m0, sc1, m1;
    scale_min_k4_regs(2 * g, u.head.y, u.head.z, u.head.w, sc0, m0);
    scale_min_k4_regs(2 * g + 1, u.head.y, u.head.z, u.head.w, sc1, m1);
    const uint32_t mk = 0x0F0F0F0Fu, b1 = 0x01010101u;
    const uint32_t q[4] = {u.q.x, u.q.y, u.q.z, u.q.w}, h[4] = {u.qh.x, u.qh.y, u.qh.z, u.qh.w};
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      lo[k] = (q[k] & mk) | (((h[k] >> (2 * g)) & b1) << 4);
      hi[k] = ((q[k] >> 4) & mk) | (((h[k] >> (2 * g + 1)) & b1) << 4);
    }
    const float s0 = dot16(lo, x[0], 0.0f), s1 = dot16(hi, x[1], 0.0f);
    return d * (sc0 * s0 + sc1 * s1) - dmin * (m0 * xs[0] + m1 * xs[1]);
  }
  static constexpr bool kQ8Sums = true;
  static constexpr bool kQ8Default = true;  // RLX_CUDA_GEMV_Q8=auto (gemv_q8.cu)
  __device__ static float dot_q8(const Raw& u, const Ctx&, const int (&xa)[2][4], const int (&xb)[2][4],
                                 const float (&dx)[2], const int (&sa)[2], const int (&sb)[2]) {
    const int g = u.j / 2;
    const KQuantScales ks(u.head, g);
    const uint32_t mk = 0x0F0F0F0Fu, one = 0x01010101u;
    const uint32_t q[4] = {u.q.x, u.q.y, u.q.z, u.q.w}, h[4] = {u.qh.x, u.qh.y, u.qh.z, u.qh.w};
    int a0 = 0, b0 = 0, a1 = 0, b1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = (q[k] & mk) | (((h[k] >> (2 * g)) & one) << 4);
      const uint32_t hi = ((q[k] >> 4) & mk) | (((h[k] >> (2 * g + 1)) & one) << 4);
      a0 = dp4a(lo, xa[0][k], a0), b0 = dp4a(lo, xb[0][k], b0);
      a1 = dp4a(hi, xa[1][k], a1), b1 = dp4a(hi, xb[1][k], b1);
    }
    return ks.q8_sum(dx, a0, b0, a1, b1, sa, sb);
  }
  __device__ static void values(const Raw& u, const Ctx&, float (&v)[2][16]) {
    const float d = f16_bits(u.head.x), dmin = f16_bits(u.head.x >> 16);
    const uint32_t mk = 0x0F0F0F0Fu, q[4] = {u.q.x, u.q.y, u.q.z, u.q.w}, h[4] = {u.qh.x, u.qh.y, u.qh.z, u.qh.w};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int c = 2 * (u.j / 2) + r;  // sub-block
      float sc, m;
      scale_min_k4_regs(c, u.head.y, u.head.z, u.head.w, sc, m);
      const float dl = mul(d, sc), ml = mul(dmin, m);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t w = ((q[i / 4] >> (4 * r)) & mk) | (((h[i / 4] >> c) & 0x01010101u) << 4);
        v[r][i] = sub(mul(dl, byte_minus(w, i % 4, 0.0f)), ml);
      }
    }
  }
};

// Q6_K unit j (0..7): half n = j/4, l = 8(j%4)..+8 of all four groups g, i.e.
// elements 128n + 32g + l: ql bytes 64n + l (g 0: low, 2: high) and
// 64n + 32 + l (g 1: low, 3: high), qh byte 32n + l bits 2g, 2g+1, scale
// byte 8n + l/16 + 2g. Blocks are 210 bytes: only 2-byte aligned.
template <> struct GemvUnit<DType::Q6_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 210, kUnits = 8, kRuns = 4, kRunLen = 8, kAlign = 2;
  struct Raw { uint2 qa, qb, qh, sc; uint32_t d; int j; };
  using Ctx = NoCtx;
  __device__ static Ctx context(const IqTables&) { return {}; }
  __device__ static int run_start(int j, int r) { return 128 * (j / 4) + 32 * r + 8 * (j % 4); }
  __device__ static Raw load(const uint8_t* b, int j) {
    const int n = j / 4, l = 8 * (j % 4);
    return {ld8_a2(b + 64 * n + l), ld8_a2(b + 64 * n + 32 + l), ld8_a2(b + 128 + 32 * n + l), ld8_a2(b + 192 + 8 * n),
            ld_u16(b + 208), j};
  }
  // Group g's 8 quants (0..63, as bytes of q0, q1) and its signed scale.
  __device__ static void group(const Raw& u, int g, uint32_t& q0, uint32_t& q1, int& sc) {
    const uint32_t mk = 0x0F0F0F0Fu, b3 = 0x03030303u;
    const uint2 ql = g % 2 ? u.qb : u.qa;
    const int nib = g >= 2 ? 4 : 0;
    q0 = ((ql.x >> nib) & mk) | (((u.qh.x >> (2 * g)) & b3) << 4);
    q1 = ((ql.y >> nib) & mk) | (((u.qh.y >> (2 * g)) & b3) << 4);
    const int si = (u.j % 4) / 2 + 2 * g;  // l / 16 + 2g: 0..7
    const uint32_t sw = si < 4 ? u.sc.x : u.sc.y;
    sc = static_cast<int8_t>(static_cast<uint8_t>(sw >> (8 * (si & 3))));
  }
  __device__ static float dot(const Raw& u, const Ctx&, const float (&x)[4][8], const float (&)[4]) {
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      uint32_t q0, q1;
      int sc;
      group(u, g, q0, q1, sc);
      const float part = dot4(q1, 32.0f, x[g] + 4, dot4(q0, 32.0f, x[g], 0.0f));
      s = fmaf(static_cast<float>(sc), part, s);
    }
    return s * f16_bits(u.d);
  }
  // Run g is x's 32-element block 4n + g: a scale per run.
  static constexpr bool kQ8Sums = true;
  static constexpr bool kQ8Default = false;  // RLX_CUDA_GEMV_Q8=auto (gemv_q8.cu)
  __device__ static float dot_q8(const Raw& u, const Ctx&, const int (&xa)[4][2], const int (&xb)[4][2],
                                 const float (&dx)[4], const int (&sa)[4], const int (&sb)[4]) {
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      uint32_t q0, q1;
      int sc;
      group(u, g, q0, q1, sc);
      const int pa = dp4a(q1, xa[g][1], dp4a(q0, xa[g][0], -32 * sa[g]));
      const int pb = dp4a(q1, xb[g][1], dp4a(q0, xb[g][0], -32 * sb[g]));
      s = fmaf(i2f(sc) * dx[g], q8x2(pa, pb), s);
    }
    return s * f16_bits(u.d);
  }
  __device__ static void values(const Raw& u, const Ctx&, float (&v)[4][8]) {
    const uint32_t mk = 0x0F0F0F0Fu, b3 = 0x03030303u;
    const int half_l = (u.j % 4) / 2;
    const float d = f16_bits(u.d);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const uint2 ql = g % 2 ? u.qb : u.qa;
      const int nib = g >= 2 ? 4 : 0;
      const uint32_t w[2] = {((ql.x >> nib) & mk) | (((u.qh.x >> (2 * g)) & b3) << 4),
                             ((ql.y >> nib) & mk) | (((u.qh.y >> (2 * g)) & b3) << 4)};
      const int si = half_l + 2 * g;
      const uint32_t sw = si < 4 ? u.sc.x : u.sc.y;
      const auto sc = static_cast<int8_t>(static_cast<uint8_t>(sw >> (8 * (si & 3))));
      const float dg = mul(d, static_cast<float>(sc));
#pragma unroll
      for (int i = 0; i < 8; ++i) v[g][i] = mul(dg, byte_minus(w[i / 4], i % 4, 32.0f));
    }
  }
};

// IQ4_XS unit ib (0..7): qs bytes 16ib.. → elements 32ib + i (low), 32ib + 16 + i
// (high), looked up in kvalues_iq4nl, which lives in four registers (Ctx) and is
// indexed four nibbles at a time by byte permutes.
template <> struct GemvUnit<DType::IQ4_XS> {
  static constexpr int kBlockElems = 256, kBlockBytes = 136, kUnits = 8, kRuns = 2, kRunLen = 16, kAlign = 8;
  struct Raw { uint2 head, q0, q1; int j; };  // head: d, scales_h, scales_l[4]
  struct Ctx { uint32_t tab[4]; };
  __device__ static Ctx context(const IqTables& t) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(t.kvalues_iq4nl));
    return {{v.x, v.y, v.z, v.w}};
  }
  __device__ static int run_start(int j, int r) { return 32 * j + 16 * r; }
  __device__ static Raw load(const uint8_t* b, int j) {
    const auto* p = reinterpret_cast<const uint2*>(b + 8 + 16 * j);
    return {__ldg(reinterpret_cast<const uint2*>(b)), __ldg(p), __ldg(p + 1), j};
  }
  // Table entries for the four nibbles n (one per byte, 0..15), as signed bytes
  // flipped to unsigned (^ 0x80).
  __device__ static uint32_t lookup4(const Ctx& c, uint32_t n) {
    // Byte i's low 3 bits into nibble i (bit 3 of a selector nibble would mean "replicate the sign").
    const uint32_t n3 = n & 0x07070707u, t = n3 | (n3 >> 4);
    const uint32_t sel = (t & 0xFFu) | ((t >> 8) & 0xFF00u);
    const uint32_t lo = __byte_perm(c.tab[0], c.tab[1], sel), hi = __byte_perm(c.tab[2], c.tab[3], sel);
    const uint32_t pick_hi = ((n >> 3) & 0x01010101u) * 0xFFu;
    return ((hi & pick_hi) | (lo & ~pick_hi)) ^ 0x80808080u;
  }
  // Both runs lie in one 32-element block; table values are signed bytes.
  static constexpr bool kQ8Sums = false;
  static constexpr bool kQ8Default = true;  // RLX_CUDA_GEMV_Q8=auto (gemv_q8.cu)
  __device__ static float dot_q8(const Raw& u, const Ctx& c, const int (&xa)[2][4], const int (&xb)[2][4],
                                 const float (&dx)[2], const int (&)[2], const int (&)[2]) {
    const int ib = u.j;
    const uint32_t scales_h = u.head.x >> 16;
    const int ls = ((u.head.y >> (8 * (ib / 2) + 4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const uint32_t mk = 0x0F0F0F0Fu, q[4] = {u.q0.x, u.q0.y, u.q1.x, u.q1.y}, f = 0x80808080u;
    int a = 0, b = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = lookup4(c, q[k] & mk) ^ f, hi = lookup4(c, (q[k] >> 4) & mk) ^ f;
      a = dp4a(lo, xa[0][k], a), b = dp4a(lo, xb[0][k], b);
      a = dp4a(hi, xa[1][k], a), b = dp4a(hi, xb[1][k], b);
    }
    return f16_bits(u.head.x) * i2f(ls - 32) * dx[0] * q8x2(a, b);
  }
  __device__ static float dot(const Raw& u, const Ctx& c, const float (&x)[2][16], const float (&)[2]) {
    const int ib = u.j;
    const uint32_t scales_h = u.head.x >> 16;
    const int ls = ((u.head.y >> (8 * (ib / 2) + 4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = f16_bits(u.head.x) * static_cast<float>(ls - 32);
    const uint32_t mk = 0x0F0F0F0Fu, q[4] = {u.q0.x, u.q0.y, u.q1.x, u.q1.y};
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      lo[k] = lookup4(c, q[k] & mk);
      hi[k] = lookup4(c, (q[k] >> 4) & mk);
    }
    return dl * (dot16(lo, x[0], 128.0f) + dot16(hi, x[1], 128.0f));
  }
  __device__ static void values(const Raw& u, const Ctx& c, float (&v)[2][16]) {
    const int ib = u.j;
    const uint32_t scales_h = u.head.x >> 16;
    const int ls = ((u.head.y >> (8 * (ib / 2) + 4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = mul(f16_bits(u.head.x), static_cast<float>(ls - 32));
    const uint32_t mk = 0x0F0F0F0Fu, q[4] = {u.q0.x, u.q0.y, u.q1.x, u.q1.y};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[0][i] = mul(dl, byte_minus(lookup4(c, q[i / 4] & mk), i % 4, 128.0f));
      v[1][i] = mul(dl, byte_minus(lookup4(c, (q[i / 4] >> 4) & mk), i % 4, 128.0f));
    }
  }
};

// Whether the unit loads over `bytes` bytes of blocks at p stay inside them
// (launchers take the unit kernels only then). The loads read whole aligned
// 8-byte words around the bytes they want: inside a tensor a word only
// reaches into a neighbouring block, but the tensor's last word ends at the
// next multiple of 8, up to 6 bytes past the tensor (compute-sanitizer
// memcheck flagged that read past an allocation). With an 8-byte-aligned end
// no word leaves the tensor's end; before its start a word stays inside the
// allocation, whose start is 256-byte aligned.
inline bool units_stay_inside(const void* p, int64_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) + static_cast<uint64_t>(bytes)) % 8 == 0;
}

// Calls f(GemvUnit<T>{}) for the types with a GEMV unit; returns false for the rest.
template <typename F>
bool visit_gemv_unit(DType t, F&& f) {
  switch (t) {
#define RLX_GU(X) \
  case DType::X: f(GemvUnit<DType::X>{}); return true;
    RLX_GU(Q4_0) RLX_GU(Q5_0) RLX_GU(Q8_0) RLX_GU(Q4_K) RLX_GU(Q5_K) RLX_GU(Q6_K) RLX_GU(IQ4_XS)
#undef RLX_GU
    default: return false;
  }
}

}  // namespace rlx::cuda::dev
