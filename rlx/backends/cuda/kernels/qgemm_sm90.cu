// The quantized prefill GEMM on Hopper: y [M, N] = x [M, K] · dequant(W)ᵀ for
// f16/bf16 x and GGUF rows W [N, K], the weights decoded straight into the
// tensor cores' register operand: no dequantized copy of W exists anywhere,
// in global or shared memory.
//
// The CTA computes yᵀ for a tile of 128 weight rows × kN tokens (128, or 256
// once m > 128) with two warpgroups. Warpgroup w multiplies its 64 weight
// rows (wgmma's A, from registers) by x's slab (B: kN tokens × 64 of K,
// K-major, brought by TMA into 128-byte-swizzled shared memory, as in
// gemm_sm90.cu) with wgmma m64nNk16. When the tiles fill at most half the
// SMs, a (1, 1, 2) cluster splits K: rank 1 adds its partial sums into rank
// 0's shared memory (DSMEM). The CTA's weight rows arrive 256 of K at a time (a chunk: whole
// blocks of every type) in a ring of kWStages shared-memory stages: one TMA
// box per chunk where W's rows are 16-byte aligned, else copied by every
// thread with cp.async. A thread's share of A for one k16 step is two
// weight rows at columns 2t, 2t+1, 2t+8, 2t+9 (t = lane mod 4): four
// quantized codes per row, which a type's Frag<W> reads from the staged chunk
// and maps affinely. The codes become f16/bf16 exactly as (magic | c) − magic
// and one fused multiply-add of the pair rounds them once: about three
// instructions a weight, each weight decoded once per 128 tokens.
//
// The A registers of a slab are read by the tensor cores asynchronously, so
// two register sets alternate: the set of slab kb is written only after the
// wgmma of slab kb − 2 has retired (wgmma.wait_group 1 at slab kb − 1), and
// pinned live until then so the compiler cannot reuse it.
//
// Status (H200, f16 x, cold weights, CUDA graphs; bench/quant_bench.cu):
// at m = 512, N = K = 4096, 29.9 µs for Q4_0, 32.0 for Q5_0, 31.9 for Q8_0,
// 33.5 for Q4_K and 44.7 for Q6_K, against 35.2-38.3 µs for dequantize +
// cuBLASLt (1.07-1.20x; Q6_K 0.87x); at m = 128, 1.13-1.18x for the 32-element
// types, 0.94-0.97x for Q4_K and Q6_K. With few CTAs or a short K each
// (m = 256, 2048², K = 1024, Gemma 3 270M's projections) it is 0.5-0.99x: the
// fill and the serial K loop of one tile per SM dominate.
// quant_gemm_sm90_preferred() encodes where it wins; DequantMatMul follows it
// by default (RLX_CUDA_QGEMM=auto).
// docs/performance.md has the history (designs 1-3: 146 down to 41 µs).

// Numerics: each weight is (c − zero)·s + o in x's dtype with s and o rounded
// to it first: bit-identical to launch_dequantize for Q4_0, Q5_0 and Q8_0 in f16
// (o = 0, s = the block's f16 scale), within a few units in the last place of
// |c·s| + |o| for Q4_K and Q6_K (s = d·scale rounded first); bf16 with 8-bit
// codes (Q8_0) goes through f32.
// Products accumulate in f32; y is rounded once.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/cp_async.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/wgmma.cuh"
#include "rlx/backends/cuda/kernels/gemm_sm90.h"
#include "rlx/backends/cuda/kernels/quant.h"

namespace rlx::cuda {
namespace {

using namespace dev;

constexpr int kRows = 128;            // weight rows per CTA: two warpgroups of 64
constexpr int kBK = kWgmmaSlabK, kThreads = 256, kWarps = kThreads / 32;
constexpr int kSmemLimit = 227 * 1024, kSmemSlack = 2048;  // per CTA; barriers and alignment

// Fragment reads, from the weight chunk staged in shared memory.
__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const unsigned short*>(p); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) { return *reinterpret_cast<const unsigned*>(p); }
__device__ __forceinline__ float f16_bits_to_float(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
// Bytes p[0], p[1], p[8], p[9] (p even) of a row; join() makes them one word
// interleaved as p[0], p[8], p[1], p[9] (p[0] lowest): the even bytes are
// then the pair (p[0], p[1]) of one A register and the odd bytes that of the
// other, each in the low byte of a 16-bit half, where one LOP3 or PRMT can
// put the exponent of the decoding magic beside it.
struct Pair08 {
  uint32_t lo, hi;
  __device__ void load(const uint8_t* p) {
    lo = ld_u16(p);
    hi = ld_u16(p + 8);
  }
  __device__ uint32_t join() const { return __byte_perm(lo, hi, 0x5140); }
};

// ---- per-type fragments ----------------------------------------------------------------
//
// kChunkBytes: a row's bytes for kChunkK elements (whole blocks; 256 but for
// Q6_K, whose 210-byte blocks go in pairs to keep chunks 4-byte aligned), the
// unit staged in shared memory. Frag<W>::load(chunk, kb, t, raw): what thread
// column t needs of slab kb (elements 64kb..64kb+63) of a row's staged chunk.
// For k16 step j (elements 16j + {2t, 2t+1, 2t+8, 2t+9}):
//   codes(raw, j, u, sh): the four codes c in the fields of u that
//     Pair08::join() gives, in bits sh.. of each byte (4-bit codes: sh = 0 or
//     4) or as whole bytes (kByteCodes), none above kMaxCode;
//   affine(raw, j, s, o): each element is (c − kZero)·s + o;
//   kF16Scale: o = 0 and s is the f16 whose bits scale_bits(raw, j) holds;
//   kChunkScales: s and o per 32-element sub-block come from chunk_scales<T>(
//     row's chunk, t, s2, o2), which thread t of a quad computes for sub-blocks
//     2t and 2t + 1 once per chunk and the quad shares by shuffles (the four
//     threads of a quad hold the same two rows).
// Layouts as QuantBlock<W>.
template <DType W>
struct Frag {
  static constexpr bool kDefined = false;
};

// Legacy 32-element blocks with an f16 scale d first: a slab is two blocks
// (k16 steps 0-1 and 2-3), s = d and o = 0.
struct BlockScaleF16 {
  static constexpr bool kDefined = true, kF16Scale = true, kChunkScales = false;
  template <class Raw>
  __device__ static uint32_t scale_bits(const Raw& r, int j) {
    return r.d[j / 2];
  }
  template <class Raw>
  __device__ static void affine(const Raw& r, int j, float& s, float& o) {
    s = f16_bits_to_float(r.d[j / 2]);
    o = 0.0f;
  }
};

template <>
struct Frag<DType::Q4_0> : BlockScaleF16 {  // 18 B: f16 d, u8 qs[16]; element e < 16 low nibble of qs[e], e + 16 high
  static constexpr bool kByteCodes = false;
  static constexpr uint32_t kZero = 8, kMaxCode = 15;
  static constexpr int kChunkK = 256, kChunkBytes = 8 * 18;
  struct Raw {
    Pair08 q[2];
    uint32_t d[2];
  };
  __device__ static void load(const uint8_t* row, int kb, int t, Raw& r) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const uint8_t* blk = row + (2 * kb + b) * 18;
      r.d[b] = ld_u16(blk);
      r.q[b].load(blk + 2 + 2 * t);
    }
  }
  __device__ static void codes(const Raw& r, int j, uint32_t& u, int& sh) {
    u = r.q[j / 2].join();
    sh = 4 * (j % 2);
  }
};

template <>
struct Frag<DType::Q8_0> : BlockScaleF16 {  // 34 B: f16 d, i8 qs[32]: q·d as ((q + 128) − 128)·d
  static constexpr bool kByteCodes = true;
  static constexpr uint32_t kZero = 128, kMaxCode = 255;
  static constexpr int kChunkK = 256, kChunkBytes = 8 * 34;
  struct Raw {
    Pair08 q[4];
    uint32_t d[2];
  };
  __device__ static void load(const uint8_t* row, int kb, int t, Raw& r) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const uint8_t* blk = row + (2 * kb + b) * 34;
      r.d[b] = ld_u16(blk);
      r.q[2 * b].load(blk + 2 + 2 * t);
      r.q[2 * b + 1].load(blk + 18 + 2 * t);
    }
  }
  __device__ static void codes(const Raw& r, int j, uint32_t& u, int& sh) {
    u = r.q[j].join() ^ 0x80808080u;
    sh = 0;
  }
};

template <>
struct Frag<DType::Q5_0> : BlockScaleF16 {  // 22 B: f16 d, u8 qh[4], u8 qs[16]: element e < 16 is the low nibble of qs[e]
                            // with bit e of qh above it, e + 16 the high nibble with bit e + 16; (q − 16)·d
  static constexpr bool kByteCodes = true;
  static constexpr uint32_t kZero = 16, kMaxCode = 31;
  static constexpr int kChunkK = 256, kChunkBytes = 8 * 22;
  struct Raw {
    Pair08 q[2];
    uint32_t qh[2];  // qh >> 2t: bits 0, 1, 8, 9 are elements 2t, 2t+1, 2t+8, 2t+9 (+16 above)
    uint32_t d[2];
  };
  __device__ static void load(const uint8_t* row, int kb, int t, Raw& r) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const uint8_t* blk = row + (2 * kb + b) * 22;  // 2-byte aligned
      r.d[b] = ld_u16(blk);
      r.qh[b] = (ld_u16(blk + 2) | (ld_u16(blk + 4) << 16)) >> (2 * t);
      r.q[b].load(blk + 6 + 2 * t);
    }
  }
  __device__ static void codes(const Raw& r, int j, uint32_t& u, int& sh) {
    const int half = j % 2;
    const uint32_t low = (r.q[j / 2].join() >> (4 * half)) & 0x0F0F0F0Fu;
    const uint32_t x = r.qh[j / 2] >> (16 * half);
    // Bit 4 of each interleaved byte: elements 2t, 2t+8 (bits 0, 8 of x), 2t+1, 2t+9 (bits 1, 9).
    u = low | ((x & 0x101u) << 4) | ((x & 0x202u) << 19);
    sh = 0;
  }
};

template <>
struct Frag<DType::Q6_K> {  // 210 B: u8 ql[128], u8 qh[64], i8 scales[16], f16 d; (q − 32)·d·scale per 16
  // Element 128n + 64r + 32f + l (l < 32): low nibble of ql[64n + 32f + l] (high nibble for r = 1)
  // with bits 2(2r + f).. of qh[32n + l] above it; scale scales[8n + l / 16 + 2(2r + f)].
  static constexpr bool kDefined = true, kByteCodes = true, kF16Scale = false, kChunkScales = false;
  static constexpr uint32_t kZero = 32, kMaxCode = 63;
  static constexpr int kChunkK = 512, kChunkBytes = 2 * 210;
  struct Raw {
    Pair08 ql[4];  // steps j: ql[64n + 32(j / 2) + 16(j % 2) + 2t..]
    Pair08 qh[2];  // j % 2: qh[32n + 16(j % 2) + 2t..]
    uint32_t sc[4];  // step j's scale byte
    uint32_t d;
    int r;  // the slab is elements 128n + 64r.. of its block
  };
  __device__ static void load(const uint8_t* chunk, int kb, int t, Raw& raw) {
    const uint8_t* blk = chunk + (kb / 4) * 210;  // 2-byte aligned
    const int n = (kb % 4) / 2, r = kb % 2;
    raw.r = r;
    raw.d = ld_u16(blk + 208);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      raw.ql[j].load(blk + 64 * n + 32 * (j / 2) + 16 * (j % 2) + 2 * t);
      raw.sc[j] = blk[192 + 8 * n + j % 2 + 2 * (2 * r + j / 2)];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) raw.qh[h].load(blk + 128 + 32 * n + 16 * h + 2 * t);
  }
  __device__ static void codes(const Raw& raw, int j, uint32_t& u, int& sh) {
    const uint32_t low = (raw.ql[j].join() >> (4 * raw.r)) & 0x0F0F0F0Fu;
    const uint32_t high = ((raw.qh[j % 2].join() >> (2 * (2 * raw.r + j / 2))) & 0x03030303u) << 4;
    u = low | high;
    sh = 0;
  }
  __device__ static uint32_t scale_bits(const Raw&, int) { return 0; }
  __device__ static void affine(const Raw& raw, int j, float& s, float& o) {
    s = f16_bits_to_float(raw.d) * static_cast<float>(static_cast<int8_t>(raw.sc[j]));
    o = 0.0f;
  }
};

template <>
struct Frag<DType::Q4_K> {  // 144 B: f16 d, f16 dmin, u8 scales[12], u8 qs[128]; a chunk is one block
  static constexpr bool kDefined = true, kByteCodes = false, kF16Scale = false, kChunkScales = true;
  static constexpr uint32_t kZero = 0, kMaxCode = 15;
  static constexpr int kChunkK = 256, kChunkBytes = 144;
  struct Raw {
    Pair08 q[2];  // bytes 2t.. of the slab's 32 qs bytes (steps 0, 2), and 16 + 2t.. (steps 1, 3)
  };
  __device__ static void load(const uint8_t* blk, int kb, int t, Raw& r) {
    const int p = kb % 4;
    r.q[0].load(blk + 16 + 32 * p + 2 * t);
    r.q[1].load(blk + 32 + 32 * p + 2 * t);
  }
  __device__ static void codes(const Raw& r, int j, uint32_t& u, int& sh) {
    u = r.q[j % 2].join();
    sh = 4 * (j / 2);
  }
  __device__ static uint32_t scale_bits(const Raw&, int) { return 0; }
  __device__ static void affine(const Raw&, int, float& s, float& o) { s = o = 0.0f; }  // kChunkScales
  // Sub-blocks 2t + h: ggml's scale_min_k4 on the twelve scale bytes, s = d·scale, o = −dmin·min.
  template <typename T>
  __device__ static void chunk_scales(const uint8_t* blk, int t, uint32_t (&s2)[2], uint32_t (&o2)[2]) {
    const uint32_t dm = ld_u32(blk);
    const float d = f16_bits_to_float(dm), dmin = f16_bits_to_float(dm >> 16);
    const uint8_t* sc = blk + 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int scale, min;
      scale_min_k4(2 * t + h, sc, scale, min);
      const float s = d * static_cast<float>(scale), o = -(dmin * static_cast<float>(min));
      s2[h] = pack2<T>(s, s);
      o2[h] = pack2<T>(o, o);
    }
  }
};

template <typename T>
using Pair2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
template <typename T>
__device__ __forceinline__ Pair2<T> as_pair(uint32_t bits) {
  return *reinterpret_cast<const Pair2<T>*>(&bits);
}
template <typename T>
__device__ __forceinline__ uint32_t pair_bits(Pair2<T> v) {
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Step j's four codes of one row → its two A registers: (2t, 2t+1) and (2t+8, 2t+9).
// Codes become T exactly as (magic | c) − magic, magic = 1024 (f16) or 128
// (bf16) whose ulp is 1; subtracting magic + kZero instead leaves c − kZero,
// also exact, so one multiply-add rounds each weight once.
// s2_bits, o2_bits: the pair scale and offset where the type has kChunkScales.
template <typename T, DType W>
__device__ __forceinline__ void codes_to_a(const typename Frag<W>::Raw& r, int j, uint32_t s2_bits, uint32_t o2_bits,
                                           uint32_t& lo, uint32_t& hi) {
  using F = Frag<W>;
  constexpr bool kHalf = std::is_same_v<T, __half>;
  constexpr bool kScaleBits = kHalf && F::kF16Scale;  // the pair scale is the block's f16 bits
  uint32_t u;
  int sh;
  F::codes(r, j, u, sh);
  if constexpr (!kHalf && F::kMaxCode >= 128) {  // not exact in bf16 after the magic: through f32
    float s, o;
    F::affine(r, j, s, o);
    float w[4];  // in the order of u's bytes: 2t, 2t+8, 2t+1, 2t+9
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650 + i)) - (8388608.0f + F::kZero), s, o);
    lo = pack2<T>(w[0], w[2]);
    hi = pack2<T>(w[1], w[3]);
  } else {
    constexpr uint32_t kMagic = kHalf ? 0x64006400u : 0x43004300u;
    constexpr uint32_t kBias = kHalf ? 0x64006400u + F::kZero * 0x00010001u  // 1024 + kZero (ulp 1)
                                     : 0x43004300u + F::kZero * 0x00010001u;  // 128 + kZero (kZero < 128)
    static_assert(kHalf || F::kZero < 128, "bf16's magic keeps codes below 128 exact");
    uint32_t bl, bh;
    if constexpr (F::kByteCodes) {  // whole bytes beside the magic's high byte
      bl = __byte_perm(u, kMagic, 0x7250);
      bh = __byte_perm(u, kMagic, 0x7351);
    } else {
      bl = ((u >> sh) & 0x000F000Fu) | kMagic;
      bh = ((u >> (sh + 8)) & 0x000F000Fu) | kMagic;
    }
    Pair2<T> s2, o2;
    if constexpr (F::kChunkScales) {
      s2 = as_pair<T>(s2_bits);
      o2 = as_pair<T>(o2_bits);
    } else if constexpr (kScaleBits) {
      s2 = as_pair<T>(__byte_perm(F::scale_bits(r, j), 0, 0x1010));
      o2 = as_pair<T>(0u);
    } else {
      float s, o;
      F::affine(r, j, s, o);
      s2 = as_pair<T>(pack2<T>(s, s));
      o2 = as_pair<T>(pack2<T>(o, o));
    }
    lo = pair_bits<T>(__hfma2(__hsub2(as_pair<T>(bl), as_pair<T>(kBias)), s2, o2));
    hi = pair_bits<T>(__hfma2(__hsub2(as_pair<T>(bh), as_pair<T>(kBias)), s2, o2));
  }
}

// Per chunk, where the type has kChunkScales: [row a/b][h] pair scales and
// offsets of sub-blocks 2t + h (t = this thread's column in its quad).
struct ChunkScales {
  uint32_t s[2][2], o[2][2];
};

// A slab's A registers for both rows of this thread: a[j] for k16 step j.
// p: the slab within its chunk.
template <typename T, DType W>
__device__ __forceinline__ void slab_to_a(const typename Frag<W>::Raw& ra, const typename Frag<W>::Raw& rb,
                                          const ChunkScales& cs, int p, uint32_t (&a)[4][4]) {
  uint32_t s[2][2] = {}, o[2][2] = {};  // [row][h]: sub-block 2p + h, from quad thread p
  if constexpr (Frag<W>::kChunkScales) {
    const int src = (static_cast<int>(threadIdx.x) & 31 & ~3) | p;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        s[r][h] = __shfl_sync(0xFFFFFFFFu, cs.s[r][h], src);
        o[r][h] = __shfl_sync(0xFFFFFFFFu, cs.o[r][h], src);
      }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    codes_to_a<T, W>(ra, j, s[0][j / 2], o[0][j / 2], a[j][0], a[j][2]);
    codes_to_a<T, W>(rb, j, s[1][j / 2], o[1][j / 2], a[j][1], a[j][3]);
  }
}

__device__ __forceinline__ void pin_a(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[j][i])::"memory");
}

// Stages for kN tokens per CTA: x's slabs (kN × 64, 16 or 32 KB), four, or
// three where two weight stages would not fit beside four; then up to four
// weight chunks of kRows rows (Q8_0 at kN = 128: 4 × 34 KB; Q6_K at 256: 2 × 53 KB).
template <int kN>
constexpr int x_tile_bytes() {
  return kN * kBK * 2;
}
template <DType W, int kN>
constexpr int x_stages() {
  return kSmemLimit - 4 * x_tile_bytes<kN>() - kSmemSlack >= 2 * kRows * Frag<W>::kChunkBytes ? 4 : 3;
}
template <DType W, int kN>
constexpr int w_stages() {
  constexpr int budget = kSmemLimit - x_stages<W, kN>() * x_tile_bytes<kN>() - kSmemSlack;
  constexpr int fit = budget / (kRows * Frag<W>::kChunkBytes);
  static_assert(fit >= 2, "two weight stages fit");
  return fit < 4 ? fit : 4;
}

// Shared memory: the x stages, the weight stages, the barriers, slack to
// align the stages to 1024 bytes. After the main loop the stages hold the
// split-K partial sums (kRows × kN f32), then the staged C tile.
template <DType W, int kN>
constexpr int smem_bytes() {
  constexpr int stages = x_stages<W, kN>() * x_tile_bytes<kN>() + w_stages<W, kN>() * kRows * Frag<W>::kChunkBytes;
  static_assert(kRows * kN * 4 <= stages && kN * kWgmmaOutStride * 2 <= stages, "the epilogue reuses the stages");
  return stages + (2 * x_stages<W, kN>() + w_stages<W, kN>()) * 8 + 1024;
}

template <int kVec>
__device__ __forceinline__ void cp_async_small(uint32_t dst, const void* src) {
  static_assert(kVec == 4 || kVec == 8, "16-byte-aligned rows go by TMA");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(kVec) : "memory");
}

// Chunk `chunk` (elements kChunkK·chunk..) of the CTA's kRows weight rows into a
// stage, row r at r·kChunkBytes; rows past N repeat row N − 1 (never stored).
// `valid` bytes of each row exist (less than kChunkBytes only at a row's end).
template <DType W, int kVec>
__device__ __forceinline__ void copy_chunk_vec(uint32_t stage, const uint8_t* w, int64_t row_bytes, int n0, int N,
                                               int chunk, int valid, int tid) {
  constexpr int kPerRow = Frag<W>::kChunkBytes / kVec;
  static_assert(Frag<W>::kChunkBytes % 4 == 0, "stage rows stay 4-byte aligned");
  const uint8_t* src0 = w + static_cast<int64_t>(chunk) * Frag<W>::kChunkBytes;
  for (int i = tid; i < kRows * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = (i % kPerRow) * kVec;
    if (c < valid)
      cp_async_small<kVec>(stage + r * Frag<W>::kChunkBytes + c,
                           src0 + static_cast<int64_t>(min(n0 + r, N - 1)) * row_bytes + c);
  }
}
template <DType W>
__device__ __forceinline__ void copy_chunk(int vec, uint32_t stage, const uint8_t* w, int64_t row_bytes, int n0,
                                           int N, int chunk, int nchunks, int tid) {
  if (chunk < nchunks) {
    const int64_t left = row_bytes - static_cast<int64_t>(chunk) * Frag<W>::kChunkBytes;
    const int valid = left < Frag<W>::kChunkBytes ? static_cast<int>(left) : Frag<W>::kChunkBytes;
    if (vec == 8)  // 16-byte-aligned rows go by TMA (the launcher's vec 0)
      copy_chunk_vec<W, 8>(stage, w, row_bytes, n0, N, chunk, valid, tid);
    else
      copy_chunk_vec<W, 4>(stage, w, row_bytes, n0, N, chunk, valid, tid);
  }
  cp_async_commit();  // one group per chunk, empty past the end: the waits count groups
}

// kN tokens per CTA (128, or 256 with wgmma n256: half the decode per FLOP).
// gridDim.z = split, 1 or 2: the two CTAs of a (1, 1, 2) cluster share the
// tile and take the two halves of K's chunks; rank 1 stores its partial sums
// into rank 0's shared memory (DSMEM), and rank 0 adds them and writes the tile.
template <typename T, DType W, int kN>
__global__ void __launch_bounds__(kThreads, 1)
    qgemm_sm90_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                      const uint8_t* __restrict__ w, int64_t row_bytes, int vec, T* __restrict__ C, int M, int N,
                      int K) {
  // Built for every target; the PTX helpers are empty off sm_90a, where
  // quant_gemm_sm90_unsupported() keeps it from running.
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw_addr + 1023) & ~1023u) - raw_addr);
  constexpr int kChunkBytes = Frag<W>::kChunkBytes, kStageWBytes = kRows * kChunkBytes;
  constexpr int kSlabsPerChunk = Frag<W>::kChunkK / kBK, kWStages = w_stages<W, kN>();
  constexpr int kStages = x_stages<W, kN>(), kTileBytes = x_tile_bytes<kN>(), kAcc = kN / 2;
  unsigned char* wstages = smem + kStages * kTileBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(wstages + kWStages * kStageWBytes);
  uint64_t* empty = full + kStages;
  uint64_t* wfull = empty + kStages;  // weight chunk landed (TMA path)

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = static_cast<int>(blockIdx.x) * kRows, m0 = static_cast<int>(blockIdx.y) * kN;
  // This CTA's chunks [c0, c1) and slabs [kb0, kb0 + nk); slabs and chunks
  // below are counted from there.
  const int split = static_cast<int>(gridDim.z), part = static_cast<int>(blockIdx.z);
  const int nk_all = K / kBK, nchunks_all = (nk_all + kSlabsPerChunk - 1) / kSlabsPerChunk;
  const int per = (nchunks_all + split - 1) / split;
  const int c0 = part * per, c1 = min(nchunks_all, c0 + per);
  const int kb0 = c0 * kSlabsPerChunk, nk = min(nk_all, c1 * kSlabsPerChunk) - kb0, nchunks = c1 - c0;
  // This thread's two weight rows within a stage.
  const int ra = wg * 64 + warp * 16 + g, rb = ra + 8;

  // Weight chunks 0..kWStages−1 start before the PDL wait (weights only):
  // one TMA box per chunk where W's rows allow (vec == 0), else every
  // thread's cp.async.
  const uint32_t wstage0 = smem_u32(wstages);
  const bool tma_w = vec == 0;
  auto issue_w = [&](int c) {  // one thread
    if (c < nchunks) {
      uint64_t* bar = &wfull[c % kWStages];
      mbar_arrive_expect_tx(bar, kStageWBytes);
      tma_load_2d(wstages + c % kWStages * kStageWBytes, &map_w, (c0 + c) * (kChunkBytes / 4), n0, bar);
    }
  };
  auto copy_w = [&](int c) {  // every thread
    copy_chunk<W>(vec, wstage0 + c % kWStages * kStageWBytes, w, row_bytes, n0, N, c0 + c, c1, tid);
  };
  if (!tma_w)
    for (int c = 0; c < kWStages; ++c) copy_w(c);

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kWarps);
    }
    for (int s = 0; s < kWStages; ++s) mbar_init(&wfull[s], 1);
    mbar_fence_init();
  }
  __syncthreads();
  if (tma_w && tid == 0)
    for (int c = 0; c < kWStages; ++c) issue_w(c);
  pdl_begin();  // x may be the previous kernel's output

  auto issue = [&](int kb) {
    const int s = kb % kStages;
    mbar_arrive_expect_tx(&full[s], kTileBytes);
    tma_load_2d(smem + s * kTileBytes, &map_x, (kb0 + kb) * kBK, m0, &full[s]);
  };
  if (tid == 0)
    for (int kb = 0; kb < kStages && kb < nk; ++kb) issue(kb);

  using Raw = typename Frag<W>::Raw;
  // Slab kb's A registers, decoded from its staged chunk.
  ChunkScales cs{};  // of the chunk being decoded (kChunkScales types)
  auto decode = [&](int kb, uint32_t(&a)[4][4]) {
    const unsigned char* chunk = wstages + (kb / kSlabsPerChunk) % kWStages * kStageWBytes;
    const int p = kb % kSlabsPerChunk;
    if constexpr (Frag<W>::kChunkScales) {
      if (p == 0) {
        Frag<W>::template chunk_scales<T>(chunk + ra * kChunkBytes, t, cs.s[0], cs.o[0]);
        Frag<W>::template chunk_scales<T>(chunk + rb * kChunkBytes, t, cs.s[1], cs.o[1]);
      }
    }
    Raw r_a, r_b;
    Frag<W>::load(chunk + ra * kChunkBytes, p, t, r_a);
    Frag<W>::load(chunk + rb * kChunkBytes, p, t, r_b);
    slab_to_a<T, W>(r_a, r_b, cs, p, a);
  };

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  uint32_t a_regs[2][4][4];  // slab kb's A in set kb % 2
  if (tma_w) {
    mbar_wait(&wfull[0], 0);
  } else {
    cp_async_wait<kWStages - 1>();  // chunk 0
    __syncthreads();
  }
  decode(0, a_regs[0]);

  // Slab kb with A registers `cur`; then, once slab kb − 1's wgmma retired,
  // slab kb + 1 into `next`. Before the first slab of chunk c + 1 is decoded,
  // every thread waits for its copies of that chunk and meets the others:
  // then chunk c + 1 is visible and chunk c (all decoded) is refilled.
  auto step = [&](int kb, uint32_t(&cur)[4][4], uint32_t(&next)[4][4], bool chunk_end) {
    const int s = kb % kStages;
    mbar_wait(&full[s], static_cast<uint32_t>(kb / kStages) & 1);
    const uint64_t db = wgmma_desc(smem_u32(smem + s * kTileBytes));
    wgmma_fence();
    pin(acc);
#pragma unroll
    for (int j = 0; j < kBK / 16; ++j) {
      if constexpr (kN == 256)
        wgmma_rs_m64n256k16<T>(acc, cur[j], db + 2 * j, kb > 0 || j > 0);
      else
        wgmma_rs_m64n128k16<T>(acc, cur[j], db + 2 * j, kb > 0 || j > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();  // slab kb − 1 retired: its stage and its A registers (`next`) are free
    pin(acc);
    pin_a(next);
    if (kb > 0) {
      const int ps = (kb - 1) % kStages;
      if (lane == 0) mbar_arrive(&empty[ps]);
      if (tid == 0 && kb - 1 + kStages < nk) {
        mbar_wait(&empty[ps], static_cast<uint32_t>((kb - 1) / kStages) & 1);
        issue(kb - 1 + kStages);
      }
    }
    if (kb + 1 < nk) {
      if (chunk_end) {
        const int c = kb / kSlabsPerChunk;
        if (tma_w) {
          __syncthreads();  // chunk c is decoded by all
          if (tid == 0) issue_w(c + kWStages);
          mbar_wait(&wfull[(c + 1) % kWStages], static_cast<uint32_t>((c + 1) / kWStages) & 1);
        } else {
          cp_async_wait<kWStages - 2>();  // chunk c + 1
          __syncthreads();
          copy_w(c + kWStages);
        }
      }
      decode(kb + 1, next);
    }
  };
#pragma unroll 1
  for (int kbu = 0; kbu < nk; kbu += kSlabsPerChunk) {
#pragma unroll
    for (int u = 0; u < kSlabsPerChunk; ++u)
      if (kbu + u < nk) step(kbu + u, a_regs[u % 2], a_regs[(u + 1) % 2], u == kSlabsPerChunk - 1);
  }
  wgmma_wait<0>();
  pin(acc);
  pin_a(a_regs[0]);
  pin_a(a_regs[1]);
  cp_async_wait<0>();  // the empty trailing groups
  __syncthreads();  // every warp is done with the stages: reuse them

  if (split > 1) {  // split = 2 (the launcher's choice): rank 0 adds rank 1's sums
    const bool second = cluster_rank() != 0;
    cluster_sync();  // both CTAs are past their main loops
    if (second) {
      const uint32_t dst = cluster_map(smem_u32(smem), 0);  // rank 0's stages, [kAcc / 4][kThreads] float4
#pragma unroll
      for (int i = 0; i < kAcc; i += 4)
        cluster_store4(dst + static_cast<uint32_t>(((i / 4) * kThreads + tid) * 16), acc[i], acc[i + 1], acc[i + 2],
                       acc[i + 3]);
      cluster_sync();
      return;
    }
    cluster_sync();  // rank 1's sums landed
    const float4* sums = reinterpret_cast<const float4*>(smem);
#pragma unroll
    for (int i = 0; i < kAcc; i += 4) {
      const float4 v = sums[(i / 4) * kThreads + tid];
      acc[i] += v.x;
      acc[i + 1] += v.y;
      acc[i + 2] += v.z;
      acc[i + 3] += v.w;
    }
    __syncthreads();  // the C tile overwrites the sums
  }

  // acc[i]: weight row 16·warp + g (+8 for i % 4 ≥ 2) of this warpgroup, token
  // 8·(i / 4) + 2t + i % 2; staged transposed, as y [token, weight row]. The
  // accumulators are rounded in pairs: with one cvt per element, ptxas
  // serializes every wgmma of the main loop (its note C7514).
  T* sC = reinterpret_cast<T*>(smem);
  const int row0 = wg * 64 + warp * 16 + g;
#pragma unroll
  for (int i = 0; i < kAcc; i += 2) {
    const uint32_t pair = pack2<T>(acc[i], acc[i + 1]);  // tokens 2t and 2t + 1 of one weight row
    const T* h = reinterpret_cast<const T*>(&pair);
    const int row = row0 + 8 * ((i % 4) / 2), token = 8 * (i / 4) + 2 * t;
    sC[token * kWgmmaOutStride + row] = h[0];
    sC[(token + 1) * kWgmmaOutStride + row] = h[1];
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < kN / kWgmmaTileM; ++h)
    store_c_tile(sC + h * kWgmmaTileM * kWgmmaOutStride, C, N, m0 + h * kWgmmaTileM, n0, M, N, tid, kThreads);
}

template <class Q>
struct BlockTypeOf;
template <DType T>
struct BlockTypeOf<QuantBlock<T>> {
  static constexpr DType value = T;
};

// Calls f(QuantBlock<W>{}) for the block types with a Frag; false for the others.
template <typename F>
bool visit_block_type(DType wt, F&& f) {
  bool ok = false;
  visit_quant_block(wt, [&](auto q) {
    if constexpr (Frag<BlockTypeOf<decltype(q)>::value>::kDefined) {
      ok = true;
      f(q);
    }
  });
  return ok;
}

template <DType W, int kN>
const void* kernel_for(DType xt) {
  return xt == DType::F16 ? reinterpret_cast<const void*>(&qgemm_sm90_kernel<__half, W, kN>)
                          : reinterpret_cast<const void*>(&qgemm_sm90_kernel<__nv_bfloat16, W, kN>);
}

bool kernel_ready(int device, DType wt, DType xt) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, bool> known;
  const std::pair<int, int> key{device, static_cast<int>(wt) * 4 + (xt == DType::F16 ? 0 : 1)};
  std::lock_guard lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  DeviceGuard guard(device);
  bool ok = false;
  visit_block_type(wt, [&](auto q) {
    constexpr DType W = BlockTypeOf<decltype(q)>::value;
    ok = sm90_device(device) && sm90_kernel_loads(kernel_for<W, 128>(xt), smem_bytes<W, 128>(), kThreads) &&
         sm90_kernel_loads(kernel_for<W, 256>(xt), smem_bytes<W, 256>(), kThreads);
  });
  known[key] = ok;
  return ok;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The widest cp.async (16, 8 or 4 bytes) that tiles every staged chunk of W's
// rows, the short last one included; 0 when rows are not 4-byte aligned.
int copy_width(DType wt, const void* w, int64_t row_bytes) {
  int chunk = 0;
  visit_block_type(wt, [&](auto q) { chunk = Frag<BlockTypeOf<decltype(q)>::value>::kChunkBytes; });
  const int64_t tail = row_bytes % chunk;
  for (int v : {16, 8, 4})
    if (reinterpret_cast<uintptr_t>(w) % v == 0 && row_bytes % v == 0 && chunk % v == 0 && tail % v == 0) return v;
  return 0;
}

// How the launcher tiles a problem: 128 weight rows × `tokens` per CTA, and K
// split over a 2-CTA cluster when the tiles would fill at most half the SMs
// and each CTA still gets 4 or more chunks (splitting costs about 3 µs of
// fill and DSMEM reduction, which fewer chunks do not repay).
struct LaunchShape {
  int tokens = 0, nchunks = 0, chunk_bytes = 0, split = 1;
  int64_t tiles = 0;
};
LaunchShape launch_shape(DType w_type, int64_t m, int64_t n, int64_t k, int sms) {
  LaunchShape l;
  visit_block_type(w_type, [&](auto q) {
    using F = Frag<BlockTypeOf<decltype(q)>::value>;
    l.chunk_bytes = F::kChunkBytes;
    l.nchunks = static_cast<int>((k + F::kChunkK - 1) / F::kChunkK);
  });
  auto tiles = [&](int tokens) { return (n + kRows - 1) / kRows * ((m + tokens - 1) / tokens); };
  auto split = [&](int64_t t) { return l.nchunks >= 8 && 2 * t <= sms ? 2 : 1; };
  auto busy = [&](int tokens) { return std::min<int64_t>(sms, tiles(tokens) * split(tiles(tokens))); };  // SMs with a CTA
  // 256 tokens (the MMA work of two 128-token tiles, half the decode) unless
  // 128-token tiles keep more SMs busy.
  l.tokens = m > kWgmmaTileN && busy(256) >= busy(128) ? 256 : 128;
  l.tiles = tiles(l.tokens);
  l.split = split(l.tiles);
  return l;
}

}  // namespace

const char* quant_gemm_sm90_unsupported(DType w_type, DType x_dtype, const void* w, const void* x, const void* y,
                                        int64_t m, int64_t n, int64_t k) {
  if (x_dtype != DType::F16 && x_dtype != DType::BF16) return "x is not f16/bf16";
  if (!visit_block_type(w_type, [](auto) {}))
    return "no register-fragment decoder for this type (Q4_0, Q5_0, Q8_0, Q4_K and Q6_K have one)";
  if (m <= 0 || n <= 0 || k <= 0) return "empty";
  if (k % dtype_info(w_type).block_elems) return "rows are not whole blocks";
  if ((m + kWgmmaTileN - 1) / kWgmmaTileN > 65535 || m > (int64_t{1} << 30) || n > (int64_t{1} << 30) ||
      k > (int64_t{1} << 30))
    return "too large";
  if (k % kBK) return "K not a multiple of 64";
  if (n % 8) return "N not a multiple of 8";
  if (!aligned16(x) || !aligned16(y)) return "x or y is not 16-byte aligned";
  if (copy_width(w_type, w, dtype_bytes(w_type, k)) == 0) return "W's rows are not 4-byte aligned";
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  if (!kernel_ready(device, w_type, x_dtype)) return "needs compute capability 9.0 and an sm_90a build";
  return nullptr;
}

bool quant_gemm_sm90_preferred(DType w_type, int64_t m, int64_t n, int64_t k, int sms) {
  // Where it was measured faster than dequantize + cuBLASLt on the H200
  // (docs/performance.md, fifteenth session; graph-timed, cold weights):
  // 1.08-1.21x at m = 512 of 4096 x 4096 (256-token tiles, 128 CTAs of 8
  // chunks) and 1.0-1.17x at m = 32-128 (128-token tiles, 64 CTAs of 8
  // chunks), for Q4_0/Q5_0/Q8_0, and Q4_K at m = 512. It lost with fewer CTAs
  // or chunks (m = 256: 0.86-0.99x; 512 x 2048²: 0.64-0.73x; K = 1024:
  // 0.82-0.94x; Gemma 3 270M's projections: 0.5-0.7x), with partly filled
  // 256-token tiles (m = 384: 0.85-0.99x), at m = 16, for Q4_K at m <= 128
  // (0.83-0.96x) and for Q6_K (0.87-0.94x).
  const bool type_wins = w_type == DType::Q4_0 || w_type == DType::Q5_0 || w_type == DType::Q8_0 ||
                         (w_type == DType::Q4_K && m > kWgmmaTileN);
  if (!type_wins || m < 32 || n <= 0 || k <= 0 || sms <= 0) return false;
  const LaunchShape l = launch_shape(w_type, m, n, k, sms);
  const int64_t ctas = l.tiles * l.split;
  if (l.nchunks / l.split < 8) return false;
  if (l.tokens == 128) return 20 * ctas >= 9 * int64_t{sms};  // 64 of 132
  return m % l.tokens == 0 && 10 * ctas >= 9 * int64_t{sms};
}

void launch_quant_gemm_sm90(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m, int64_t n,
                            int64_t k, cudaStream_t stream) {
  if (const char* why = quant_gemm_sm90_unsupported(w_type, x_dtype, w, x, y, m, n, k))
    throw Unsupported(str("quantized gemm (sm90) ", dtype_name(w_type), " x ", dtype_name(x_dtype), " m=", m, " n=", n,
                          " k=", k, ": ", why));
  const std::string what = str("quantized gemm (sm90) ", dtype_name(w_type), " m=", m, " n=", n, " k=", k);
  const LaunchShape l = launch_shape(w_type, m, n, k, current_sm_count());
  const int tokens = l.tokens, chunk = l.chunk_bytes;
  const unsigned split = static_cast<unsigned>(l.split);
  int64_t row_bytes = dtype_bytes(w_type, k);
  CUtensorMap map_x = sm90_slab_map(x_dtype, x, m, k, k, tokens, what);
  const dim3 grid(static_cast<unsigned>((n + kRows - 1) / kRows), static_cast<unsigned>((m + tokens - 1) / tokens),
                  split);
  // W by TMA boxes where its rows are 16-byte aligned (vec = 0), else cp.async.
  int vec = copy_width(w_type, w, row_bytes);
  CUtensorMap map_w{};
  if (vec == 16) {
    map_w = sm90_byte_rows_map(w, n, row_bytes, kRows, chunk, what);
    vec = 0;
  }
  int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  const void* wp = w;
  void* yp = y;
  void* args[] = {&map_x, &map_w, &wp, &row_bytes, &vec, &yp, &M, &N, &K};
  visit_block_type(w_type, [&](auto q) {
    constexpr DType W = BlockTypeOf<decltype(q)>::value;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(tokens == 256 ? smem_bytes<W, 256>() : smem_bytes<W, 128>());
    cfg.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = split;
    cfg.attrs = &cluster;
    cfg.numAttrs = split > 1 ? 1 : 0;
    const void* kernel = tokens == 256 ? kernel_for<W, 256>(x_dtype) : kernel_for<W, 128>(x_dtype);
    const cudaError_t err = cudaLaunchKernelExC(&cfg, kernel, args);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw DeviceError(str(what, ": launch failed: ", cudaGetErrorString(err)));
    }
  });
}

}  // namespace rlx::cuda
