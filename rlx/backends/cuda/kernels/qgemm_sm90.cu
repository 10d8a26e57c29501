// The quantized prefill GEMM on Hopper: y [M, N] = x [M, K] · dequant(W)ᵀ for
// f16/bf16 x and GGUF rows W [N, K], with the weights dequantized in shared
// memory: no f16 copy of W is ever written to global memory.
//
// The CTA is rlx's wgmma GEMM (gemm_sm90.cu; helpers in device/wgmma.cuh)
// with two more warpgroups. The two consumer warpgroups are unchanged: a
// 128 × 128 tile of y, K in slabs of 64, x's slab by TMA, wgmma reading both
// operands from 128-byte-swizzled shared memory. The producer warpgroups fill
// B: two threads own row r of the tile. The producers stream the tile's
// quantized rows into a ring in shared memory with coalesced 4-byte cp.async
// copies (see UnitBytes), whole blocks a few slabs ahead (a unit: one block of 256 elements, or the two
// 32-element blocks of a slab), then for each slab each thread decodes 32
// weights and writes them as four 16-byte chunks, chunk c at c ^ (r mod 8),
// the layout TMA's 128-byte swizzle would have produced. A proxy fence orders
// those stores before the wgmma's reads; one arrival per producer warp on the
// stage's `full` barrier joins the TMA's byte count.
//
// Decoding is what bounds this kernel (each weight is decoded once per
// 128-row tile of x), so it avoids int → float conversions: a type's Codes
// give each element as a small integer u and an affine map u·s + o (s, o per
// 16 or 32 elements); (magic | u) − magic makes u exact in f16 (bf16), and
// one fused multiply-add of a pair rounds it once: two instructions a weight.
// Weights therefore differ from the dequantizer's (rounded to x's dtype) only
// through s and o being rounded to x's dtype first: bit-identical for
// Q4_0/Q5_0/Q8_0 in f16 (s = d and o = −8d, −16d, −128d are exact), within
// a few units in the last place of |u·s| + |o| otherwise. Types without
// Codes keep dequantize + cuBLASLt.
//
// Status (H200, m = 512, N = K = 4096): correct for every shape the tests
// try, but 91-146 µs against 39-41 µs for dequantize + cuBLASLt, so it is
// opt-in (RLX_CUDA_QGEMM=1). Nsight Compute: the consumers wait on `full`
// three quarters of their time; the producers issue ~540 instructions per 32
// weights (addressing, bounds checks and the copies' bookkeeping around ~90
// of decoding), and each weight is decoded once per 128-row tile of x (4× at
// m = 512). The next steps are a cluster of the M tiles sharing one decode
// (distributed shared memory) and a leaner producer loop.
//
// The copies are word-aligned: a unit's bytes are fetched from the 16-byte
// boundary below them (the weights' base is 16-byte aligned) and decoded at
// that offset. The last word of the weights reads only the bytes that exist.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

constexpr int kBM = kWgmmaTileM, kBN = kWgmmaTileN, kBK = kWgmmaSlabK;
constexpr int kConsumers = 256, kProducers = 2 * kBN, kThreads = kConsumers + kProducers;
constexpr int kConsumerWarps = kConsumers / 32, kProducerWarps = kProducers / 32;
constexpr int kStages = 4;
constexpr int kTileBytes = kBM * kBK * 2;  // one operand's slab: 16 KB
constexpr int kStageBytes = 2 * kTileBytes;  // x's slab, then the dequantized weights'
static_assert(kBM * kWgmmaOutStride * 2 <= kStages * kStageBytes, "the staged C tile reuses the stages");

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- a row's bytes in the ring ------------------------------------------------------
//
// A unit of row r sits in its ring slot at words r·kStride.. (counted from the
// 16-byte boundary below the unit), kStride odd: the 32 rows of a warp
// reading the same byte of their units hit 32 different banks, and the
// producers copy the slot in row-major word order, so a warp's copies read
// consecutive global words. Offsets x are within the unit's bytes; 16- and
// 32-bit reads are at even x (every block size here is even).
struct UnitBytes {
  const unsigned char* base;  // the row's words in the slot
  int mis;                     // the unit's offset past its 16-byte boundary
  __device__ __forceinline__ uint32_t u16(int x) const {
    return *reinterpret_cast<const uint16_t*>(base + x + mis);
  }
  __device__ __forceinline__ uint32_t u32(int x) const {
    if (((x + mis) & 3) == 0) return *reinterpret_cast<const uint32_t*>(base + x + mis);
    return u16(x) | (u16(x + 2) << 16);
  }
  __device__ __forceinline__ float f16(int x) const { return __half2float(__ushort_as_half(static_cast<uint16_t>(u16(x)))); }
};

// ---- codes: 32 elements of a row as small integers and affine maps ------------------
//
// Codes<W>::get(b, x, c, u, s, o): chunk c (elements 32c..32c+31) of the block
// at unit offset x as bytes u (element 4i + j in byte j of u[i]) with element
// 16g + i equal to u · s[g] + o[g]. kWide: codes up to 255 (else below 128).
// Layouts as QuantBlock<W> (device/quant_blocks.cuh). Only the block types
// listed here take this GEMM; the others keep dequantize + cuBLASLt.
template <DType W>
struct Codes {
  static constexpr bool kDefined = false;
};

__device__ __forceinline__ uint32_t nibbles(uint32_t w, int shift) { return (w >> shift) & 0x0F0F0F0Fu; }
// Bits 0..3 of x to bit 4 of bytes 0..3 (the four shifted copies of x do not overlap).
__device__ __forceinline__ uint32_t high_bits4(uint32_t x) { return ((x * 0x00204081u) & 0x01010101u) << 4; }

// The 32-element legacy blocks: f16 d @0, optional f16 m @2, optional u32 qh,
// then u8 qs[16] with element j in the low nibble of qs[j] and j + 16 in the high.
template <int kQh, int kQs, bool kMin, int kZero>  // qh offset (-1: none), qs offset, m @2?, q offset
struct LegacyCodes {
  static constexpr bool kDefined = true, kWide = false;
  __device__ static void get(const UnitBytes& b, int x, int, uint32_t (&u)[8], float (&s)[2], float (&o)[2]) {
    const float d = b.f16(x);
    const uint32_t qh = kQh >= 0 ? b.u32(x + kQh) : 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = b.u32(x + kQs + 4 * i);
      u[i] = nibbles(q, 0);
      u[i + 4] = nibbles(q, 4);
      if constexpr (kQh >= 0) {
        u[i] |= high_bits4(qh >> (4 * i) & 0xF);
        u[i + 4] |= high_bits4(qh >> (16 + 4 * i) & 0xF);
      }
    }
    s[0] = s[1] = d;
    o[0] = o[1] = kMin ? b.f16(x + 2) : -static_cast<float>(kZero) * d;
  }
};
template <> struct Codes<DType::Q4_0> : LegacyCodes<-1, 2, false, 8> {};   // (q − 8)·d
template <> struct Codes<DType::Q4_1> : LegacyCodes<-1, 4, true, 0> {};    // q·d + m
template <> struct Codes<DType::Q5_0> : LegacyCodes<2, 6, false, 16> {};   // (q − 16)·d
template <> struct Codes<DType::Q5_1> : LegacyCodes<4, 8, true, 0> {};     // q·d + m

template <>
struct Codes<DType::Q8_0> {  // f16 d, i8 qs[32]: q·d, as (q + 128)·d − 128·d
  static constexpr bool kDefined = true, kWide = true;
  __device__ static void get(const UnitBytes& b, int x, int, uint32_t (&u)[8], float (&s)[2], float (&o)[2]) {
    const float d = b.f16(x);
#pragma unroll
    for (int i = 0; i < 8; ++i) u[i] = b.u32(x + 2 + 4 * i) ^ 0x80808080u;
    s[0] = s[1] = d;
    o[0] = o[1] = -128.0f * d;
  }
};

// Q4_K / Q5_K: scale and min of sub-block c from the 12 packed bytes @4
// (scale_min_k4's layout), picked out of three words with shifts: a byte
// array indexed by the runtime c would live in local memory.
__device__ __forceinline__ void k4_scale_min(const UnitBytes& b, int x, int c, float& s, float& o) {
  const uint32_t w0 = b.u32(x + 4), w1 = b.u32(x + 8), w2 = b.u32(x + 12);
  const int sh = 8 * (c & 3);
  uint32_t scale, min;
  if (c < 4) {
    scale = (w0 >> sh) & 63;
    min = (w1 >> sh) & 63;
  } else {
    scale = ((w2 >> sh) & 0xF) | (((w0 >> sh) >> 6 & 3) << 4);
    min = ((w2 >> sh) >> 4 & 0xF) | (((w1 >> sh) >> 6 & 3) << 4);
  }
  s = b.f16(x) * static_cast<float>(scale);
  o = -(b.f16(x + 2) * static_cast<float>(min));
}

template <>
struct Codes<DType::Q4_K> {  // chunk c: nibble (c odd: high) of qs[32·(c/2)..] @16; d·sc·q − dmin·m
  static constexpr bool kDefined = true, kWide = false;
  __device__ static void get(const UnitBytes& b, int x, int c, uint32_t (&u)[8], float (&s)[2], float (&o)[2]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) u[i] = nibbles(b.u32(x + 16 + 32 * (c / 2) + 4 * i), 4 * (c % 2));
    k4_scale_min(b, x, c, s[0], o[0]);
    s[1] = s[0];
    o[1] = o[0];
  }
};

template <>
struct Codes<DType::Q5_K> {  // as Q4_K (qs @48) with bit c of qh[l] @16 as the fifth bit
  static constexpr bool kDefined = true, kWide = false;
  __device__ static void get(const UnitBytes& b, int x, int c, uint32_t (&u)[8], float (&s)[2], float (&o)[2]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      u[i] = nibbles(b.u32(x + 48 + 32 * (c / 2) + 4 * i), 4 * (c % 2)) |
             (((b.u32(x + 16 + 4 * i) >> c) & 0x01010101u) << 4);
    k4_scale_min(b, x, c, s[0], o[0]);
    s[1] = s[0];
    o[1] = o[0];
  }
};

template <>
struct Codes<DType::Q6_K> {  // d·sc·(q − 32), a scale per 16 elements
  static constexpr bool kDefined = true, kWide = false;
  __device__ static void get(const UnitBytes& b, int x, int c, uint32_t (&u)[8], float (&s)[2], float (&o)[2]) {
    const int n = c / 4, g = c % 4;
    const int ql = x + 64 * n + 32 * (g % 2), qh = x + 128 + 32 * n;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      u[i] = nibbles(b.u32(ql + 4 * i), g >= 2 ? 4 : 0) | (((b.u32(qh + 4 * i) >> (2 * g)) & 0x03030303u) << 4);
    const float d = b.f16(x + 208);
    const uint32_t sc = b.u16(x + 192 + 8 * n + 2 * g);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s[h] = d * static_cast<float>(static_cast<int8_t>(sc >> (8 * h)));
      o[h] = -32.0f * s[h];
    }
  }
};

// Codes → 16 registers of two T each (elements 2i, 2i + 1 in register i).
// Codes below 2^10 (f16) or 2^7 (bf16) are exact as (magic | code) − magic;
// one fused multiply-add of the pair then rounds once. bf16 with 8-bit codes
// goes through f32 instead.
template <typename T, bool kWide>
__device__ __forceinline__ void codes_to_pairs(const uint32_t (&u)[8], const float (&s)[2], const float (&o)[2],
                                               uint32_t (&out)[16]) {
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (!kHalf && kWide) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        float w[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float code = __uint_as_float(0x4B000000u | ((u[i] >> (16 * p + 8 * j)) & 0xFF)) - 8388608.0f;
          w[j] = fmaf(code, s[i / 4], o[i / 4]);
        }
        out[2 * i + p] = pack2<T>(w[0], w[1]);
      }
  } else {
    using T2 = std::conditional_t<kHalf, __half2, __nv_bfloat162>;
    constexpr uint32_t kMagic = kHalf ? 0x64006400u : 0x43004300u;  // 1024 / 128 in both halves
    const uint32_t magic_bits = kMagic;
    const T2 magic = *reinterpret_cast<const T2*>(&magic_bits);
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      T2 s2, o2;
      if constexpr (kHalf) {
        s2 = __float2half2_rn(s[g]);
        o2 = __float2half2_rn(o[g]);
      } else {
        s2 = __float2bfloat162_rn(s[g]);
        o2 = __float2bfloat162_rn(o[g]);
      }
#pragma unroll
      for (int i = 4 * g; i < 4 * g + 4; ++i)
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const uint32_t bits = __byte_perm(u[i], 0, p ? 0x4342 : 0x4140) | kMagic;  // bytes 2p, 2p+1 → halves
          const T2 v = __hfma2(__hsub2(*reinterpret_cast<const T2*>(&bits), magic), s2, o2);
          out[2 * i + p] = *reinterpret_cast<const uint32_t*>(&v);
        }
    }
  }
}

template <class Q>
struct BlockTypeOf;
template <DType T>
struct BlockTypeOf<QuantBlock<T>> {
  static constexpr DType value = T;
};

// The producers' ring for weight type W.
template <DType W>
struct Ring {
  using QB = QuantBlock<W>;
  static constexpr int kBE = QB::kBlockElems, kBB = QB::kBlockBytes;
  static constexpr int kSpan = kBE > kBK ? kBE : kBK;  // row elements per unit
  static constexpr int kSlabs = kSpan / kBK;           // slabs per unit
  static constexpr int kSpanBytes = kSpan / kBE * kBB;
  // A unit's bytes plus up to 15 bytes of misalignment, in whole words; rows
  // an odd number of words apart.
  static constexpr int kWords = (kSpanBytes + 15 + 3) / 4, kStride = kWords | 1;
  static constexpr int kSlotBytes = kStride * 4 * kBN;
  // Units in the ring: at least three slabs of look-ahead.
  static constexpr int kUnits = kSlabs >= 4 ? 2 : kSlabs == 2 ? 3 : 4;
  static constexpr int kBytes = kUnits * kSlotBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + kBytes + 2 * kStages * 8 + 1024;
  static_assert(kSpan % kBE == 0 && kSpan % kBK == 0 && kBE % 32 == 0 && kBB % 2 == 0, "a block type decoded 32 at a time");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

__device__ __forceinline__ void producers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kProducers) : "memory"); }

// Producer thread p: row r = p mod 128 of the tile, elements 32h..32h+31 of
// each slab, h = p / 128. All producers copy every unit together (coalesced
// reads), hence the producer barriers around a unit's arrival.
template <typename T, DType W>
__device__ __forceinline__ void produce(const uint8_t* __restrict__ w, int64_t row_bytes, int N, int K, int n0, int nk,
                                        unsigned char* smem, unsigned char* ring, uint64_t* full, uint64_t* empty,
                                        int p) {
  using R = Ring<W>;
  const int r = p % kBN, h = p / kBN;
  const int n = n0 + r;
  const bool live = n < N;
  const int64_t w_bytes = static_cast<int64_t>(N) * row_bytes, row_off = static_cast<int64_t>(n) * row_bytes;
  const int units = (K + R::kSpan - 1) / R::kSpan;
  // Unit u of the tile's rows in slot u % kUnits, copied by all producers in
  // row-major word order (word i of row q by producer (q·kWords + i) mod 256).
  auto fetch = [&](int u) {
    if (u < units) {
      const uint32_t slot = smem_u32(ring + (u % R::kUnits) * R::kSlotBytes);
#pragma unroll 4
      for (int idx = p; idx < kBN * R::kWords; idx += kProducers) {
        const int q = idx / R::kWords, i = idx - q * R::kWords;
        if (n0 + q >= N) break;  // idx only grows
        const int64_t off = static_cast<int64_t>(n0 + q) * row_bytes + static_cast<int64_t>(u) * R::kSpanBytes;
        const int64_t end = off + min64(R::kSpanBytes, row_bytes - static_cast<int64_t>(u) * R::kSpanBytes);
        const int64_t at = (off & ~int64_t{15}) + 4 * i;
        if (at < end)
          cp_async_4_partial(slot + (q * R::kStride + i) * 4, w + at, static_cast<uint32_t>(min64(4, w_bytes - at)));
      }
    }
    cp_async_commit();  // always: the group count stays uniform
  };

  for (int u = 0; u + 1 < R::kUnits; ++u) fetch(u);
  for (int kb = 0; kb < nk; ++kb) {
    const int u = kb / R::kSlabs;
    if (kb % R::kSlabs == 0) {
      if (kb > 0) producers_sync();  // unit u - 1 decoded by both threads: its slot is free
      fetch(u + R::kUnits - 1);
      cp_async_wait<R::kUnits - 1>();  // this thread's copies of unit u landed
      producers_sync();                // and everyone else's
    }
    const int s = kb % kStages;
    if (kb >= kStages) mbar_wait(&empty[s], static_cast<uint32_t>(kb / kStages - 1) & 1);

    uint32_t pairs[16];
    const int e = kb * kBK + 32 * h;  // first element of this thread's chunk in the row
    if (live && e < K) {
      const int64_t unit_off = row_off + static_cast<int64_t>(u) * R::kSpanBytes;
      const UnitBytes bytes{ring + (u % R::kUnits) * R::kSlotBytes + r * R::kStride * 4, static_cast<int>(unit_off & 15)};
      const int eu = e - u * R::kSpan;
      uint32_t codes[8];
      float sc[2], off[2];
      Codes<W>::get(bytes, (eu / R::kBE) * R::kBB, (eu % R::kBE) / 32, codes, sc, off);
      codes_to_pairs<T, Codes<W>::kWide>(codes, sc, off, pairs);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) pairs[i] = 0;
    }
    unsigned char* dst = smem + s * kStageBytes + kTileBytes + r * 128;
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<uint4*>(dst + (((4 * h + q) ^ (r & 7)) << 4)) =
          make_uint4(pairs[4 * q], pairs[4 * q + 1], pairs[4 * q + 2], pairs[4 * q + 3]);
    fence_proxy_async_smem();  // the wgmma reads these bytes through the async proxy
    __syncwarp();
    if ((p & 31) == 0) mbar_arrive(&full[s]);
  }
  cp_async_wait<0>();
}

template <typename T, DType W>
__global__ void __launch_bounds__(kThreads, 1)
    qgemm_sm90_kernel(const __grid_constant__ CUtensorMap map_x, const uint8_t* __restrict__ w, int64_t row_bytes,
                      T* __restrict__ C, int M, int N, int K) {
  // Built for every target; the PTX helpers are empty off sm_90a, where
  // quant_gemm_sm90_supported() keeps it from running.
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw_addr + 1023) & ~1023u) - raw_addr);
  unsigned char* ring = smem + kStages * kStageBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + Ring<W>::kBytes);
  uint64_t* empty = full + kStages;

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int n0 = static_cast<int>(blockIdx.x) * kBN, m0 = static_cast<int>(blockIdx.y) * kBM;
  const int nk = (K + kBK - 1) / kBK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1 + kProducerWarps);  // the TMA's arrival + one per producer warp
      mbar_init(&empty[s], kConsumerWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();

  float acc[kBN / 2];
  if (tid >= kConsumers) {
    // Reads only the weights, which no kernel writes: no griddepcontrol.wait,
    // so the first units stream in while the kernel before is finishing.
    produce<T, W>(w, row_bytes, N, K, n0, nk, smem, ring, full, empty, tid - kConsumers);
  } else {
    pdl_begin();  // x may be the previous kernel's output
    auto issue = [&](int kb) {
      const int s = kb % kStages;
      mbar_arrive_expect_tx(&full[s], kTileBytes);
      tma_load_2d(smem + s * kStageBytes, &map_x, kb * kBK, m0, &full[s]);
    };
    if (tid == 0)
      for (int kb = 0; kb < kStages && kb < nk; ++kb) issue(kb);
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;
    for (int kb = 0; kb < nk; ++kb) {
      const int s = kb % kStages;
      mbar_wait(&full[s], static_cast<uint32_t>(kb / kStages) & 1);
      const uint32_t st = smem_u32(smem + s * kStageBytes);
      const uint64_t da = wgmma_desc(st + static_cast<uint32_t>(wg * 64 * 128));
      const uint64_t db = wgmma_desc(st + kTileBytes);
      wgmma_fence();
      pin(acc);
#pragma unroll
      for (int k = 0; k < kBK / 16; ++k) wgmma_m64n128k16<T>(acc, da + 2 * k, db + 2 * k, kb > 0 || k > 0);
      wgmma_commit();
      wgmma_wait<1>();  // the previous slab's group is done: release its stage
      pin(acc);
      if (kb > 0) {
        const int ps = (kb - 1) % kStages;
        if (lane == 0) mbar_arrive(&empty[ps]);
        if (tid == 0 && kb - 1 + kStages < nk) {
          mbar_wait(&empty[ps], static_cast<uint32_t>((kb - 1) / kStages) & 1);
          issue(kb - 1 + kStages);
        }
      }
    }
    wgmma_wait<0>();
    pin(acc);
  }
  __syncthreads();  // every stage consumed and no producer still writing: reuse the stages for C
  if (tid < kConsumers)
    stage_c_tile<T>(acc, reinterpret_cast<uint32_t*>(smem), wg, warp, lane, [](float v, int) { return v; });
  __syncthreads();
  store_c_tile(reinterpret_cast<const T*>(smem), C, N, m0, n0, M, N, tid, kThreads);
}

// Calls f(QuantBlock<W>{}) for the block types with Codes; false for the others.
template <typename F>
bool visit_block_type(DType wt, F&& f) {
  bool ok = false;
  visit_quant_block(wt, [&](auto q) {
    if constexpr (Codes<BlockTypeOf<decltype(q)>::value>::kDefined) {
      ok = true;
      f(q);
    }
  });
  return ok;
}

template <DType W>
const void* kernel_for(DType xt) {
  return xt == DType::F16 ? reinterpret_cast<const void*>(&qgemm_sm90_kernel<__half, W>)
                          : reinterpret_cast<const void*>(&qgemm_sm90_kernel<__nv_bfloat16, W>);
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
    ok = sm90_device(device) && sm90_kernel_loads(kernel_for<W>(xt), Ring<W>::kSmemBytes);
  });
  known[key] = ok;
  return ok;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

const char* quant_gemm_sm90_unsupported(DType w_type, DType x_dtype, const void* w, const void* x, const void* y,
                                        int64_t m, int64_t n, int64_t k) {
  if (x_dtype != DType::F16 && x_dtype != DType::BF16) return "x is not f16/bf16";
  if (!visit_block_type(w_type, [](auto) {}))
    return "no shared-memory decoder for this type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K have one)";
  if (m <= 0 || n <= 0 || k <= 0) return "empty";
  if (k % dtype_info(w_type).block_elems) return "rows are not whole blocks";
  if ((m + kBM - 1) / kBM > 65535 || (n + kBN - 1) / kBN > (int64_t{1} << 31) - 1 || m > (int64_t{1} << 30) ||
      n > (int64_t{1} << 30) || k > (int64_t{1} << 30))
    return "too large";
  if (n % 8 || k % 8) return "N or K not a multiple of 8";
  if (!aligned16(w) || !aligned16(x) || !aligned16(y)) return "an operand is not 16-byte aligned";
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  if (!kernel_ready(device, w_type, x_dtype)) return "needs compute capability 9.0 and an sm_90a build";
  return nullptr;
}

void launch_quant_gemm_sm90(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m, int64_t n,
                            int64_t k, cudaStream_t stream) {
  if (const char* why = quant_gemm_sm90_unsupported(w_type, x_dtype, w, x, y, m, n, k))
    throw Unsupported(str("quantized gemm (sm90) ", dtype_name(w_type), " x ", dtype_name(x_dtype), " m=", m, " n=", n,
                          " k=", k, ": ", why));
  const std::string what = str("quantized gemm (sm90) ", dtype_name(w_type), " m=", m, " n=", n, " k=", k);
  CUtensorMap map_x = sm90_slab_map(x_dtype, x, m, k, k, kBM, what);
  const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN), static_cast<unsigned>((m + kBM - 1) / kBM));
  int64_t row_bytes = dtype_bytes(w_type, k);
  int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  const void* wp = w;
  void* yp = y;
  void* args[] = {&map_x, &wp, &row_bytes, &yp, &M, &N, &K};
  visit_block_type(w_type, [&](auto q) {
    constexpr DType W = BlockTypeOf<decltype(q)>::value;
    const cudaError_t err =
        cudaLaunchKernel(kernel_for<W>(x_dtype), grid, dim3(kThreads), args, Ring<W>::kSmemBytes, stream);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw DeviceError(str(what, ": launch failed: ", cudaGetErrorString(err)));
    }
  });
}

}  // namespace rlx::cuda
