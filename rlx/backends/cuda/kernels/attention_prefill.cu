// Attention prefill: FlashAttention-2 style forward on tensor cores (f16/bf16,
// D ∈ {32, 64, 128, 256}), f32 accumulation, online softmax in the log2 domain.
//
// Algorithm. One CTA (4 or 8 warps, see PrefillShape) owns BM = 16·MT·warps
// query rows of one (batch, head); warp w owns MT consecutive m16 fragments.
// The CTA walks the key range its rows can see (causal / sliding window /
// kv_len clip the range, so fully masked key tiles are never loaded) in tiles
// of BN keys:
//   S = Q·Kᵀ           mma.sync m16n8k16; Q fragments by ldmatrix (kept in
//                      registers, or re-read per k-step at D = 256 general),
//                      K fragments by ldmatrix (non-transposed: K rows are n)
//   S → logits         scale·log2e (or softcap·log2e·tanh, + bias, key mask);
//                      positional masks only on tiles that cross a boundary
//   online softmax     row max across the quad by shuffles; O rescaled; P by
//                      ex2.approx.{f16,bf16}x2 (two scores per instruction,
//                      packed as the next MMA's operand), row sums by an MMA
//                      of P against ones (see kHalfExp)
//   O += P·V           P re-packed from the S accumulators as A fragments in
//                      registers (no smem round trip), V by ldmatrix.trans
// then O / l (0 when nothing was visible) is staged through the warp's own Q
// rows in smem and written with 16-byte stores.
//
// Memory plan. Q tile [BM][D] and two stages of (K [BN][D], V [BN][D]) in
// shared memory, rows padded by 16 bytes (stride D + 8 elements) so the 8 row
// addresses of every ldmatrix phase fall in distinct banks. Global → shared
// with cp.async 16-byte copies, coalesced along D; rows past Lq / kv_len are
// zero-filled, never read. Q and the first two key tiles are requested
// together, and tile j + 2 as soon as every warp is done with tile j, so a
// sequence of up to 2·BN keys (embedding models) waits for memory once, and a
// long one always has the next tile in flight while this one computes. Each
// tile costs two __syncthreads. K/V are read once per (CTA, tile): the
// m-tiles of one head run next to each other (m fastest in the grid), so the
// other CTAs of that head (and the other heads of a GQA group) hit L2. Under
// causal masks CTAs are launched heaviest-first to shorten the tail.
//
// Work items are (m-tile, head, batch), one per CTA of a (m-tiles, H, B)
// grid (a 1-D grid, decoded by division, past 65,535 heads or batch rows).
// A key mask that is a prefix of the keys in most batch rows (right padding)
// comes as lengths plus key_mask_rows (AttentionParams::key_mask_scratch):
// the mask-free kernel skips the padded tiles of those rows and applies the
// mask per score, like a positional mask, in the others.
#include <algorithm>
#include <type_traits>

#include "rlx/backends/cuda/kernels/attention.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/attention.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"

namespace rlx::cuda {
namespace {

using namespace dev;

// Softmax numerators in the 16-bit type itself: the exponent arguments of two
// scores are rounded to T, and one ex2.approx.{f16,bf16}x2 gives both P
// values already packed as the P·V MMA's A operand (half the MUFU work of two
// exp2f, no separate pack). The row sums then come from the same rounded P,
// by one more MMA against a B fragment of ones per 16 keys, instead of a
// float add per score and a quad reduction. sm_90 (bf16x2 needs it); not the
// D = 32 general variant (see prefill_item).
constexpr bool kHalfExp = true;

// Tile shape per head dim and variant (kGeneral: softcap / bias / key mask).
//   kWarps  warps per CTA; MT: m16 fragments per warp (rows per warp / 16);
//   BN      keys per tile; kQInRegs: Q fragments stay in registers.
// Registers ≈ MT·D/2 (O) + MT·BN/2 (S) + MT·D/4 (Q if kept) + addressing;
// every variant must fit 255 without spilling (ptxas -warn-spills is an error
// in this build), which rules out FA2's 4 warps × 32 rows at D = 128.
// (ptxas 13.0, sm_90a, registers: non-general / general)
template <int D, bool kGeneral, bool kShort = false> struct PrefillShape;
// D = 32 does little MMA work per score, so latency (not the tensor cores)
// bounds it: one m16 fragment per warp keeps registers low and many CTAs
// resident per SM (short embedding sequences run 2× faster than with MT = 2):
// five at 96 registers; the general variant spills there even with 32-key
// tiles, so it keeps four.  (96 / 128)
template <bool G> struct PrefillShape<32, G> {
  static constexpr int kWarps = 4, MT = 1, BN = G ? 32 : 64, kMinBlocks = G ? 4 : 5;
  static constexpr bool kQInRegs = true;
};
template <bool G> struct PrefillShape<64, G> {  // 247 / 232
  static constexpr int kWarps = 4, MT = 2, BN = G ? 32 : 64, kMinBlocks = 2;
  static constexpr bool kQInRegs = true;
};
// D = 64 over at most kShortKeys keys (embedding models, short prompts): one
// fragment per warp and four CTAs per SM, as at D = 32. Measured on an H100
// (session 44, 256 × 12 heads × 128 keys): 79.6 against 80.9 µs without a
// mask, 72.5 against 82.1 with per-sequence lengths, BERT-base 1 × 16 tokens
// 0.430 against 0.437-0.444 ms end to end; at 512 and 4096 keys MT = 2 stays
// ahead (up to 14%), so longer ranges keep it.  (126)
template <> struct PrefillShape<64, false, true> {
  static constexpr int kWarps = 4, MT = 1, BN = 64, kMinBlocks = 4;
  static constexpr bool kQInRegs = true;
};
constexpr int kShortKeys = 128;
template <bool G> struct PrefillShape<128, G> {  // 215 / 231
  static constexpr int kWarps = 8, MT = 1, BN = 64, kMinBlocks = 1;
  static constexpr bool kQInRegs = true;
};
template <bool G> struct PrefillShape<256, G> {  // 255 / 249
  static constexpr int kWarps = 8, MT = 1, BN = 32, kMinBlocks = 1;
  static constexpr bool kQInRegs = !G;
};

template <typename T, int D, bool kGeneral, bool kShort = false>
struct Prefill {
  using Shape = PrefillShape<D, kGeneral, kShort>;
  static constexpr int kWarps = Shape::kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = Shape::kMinBlocks;
  static constexpr int MT = Shape::MT;
  static constexpr int BN = Shape::BN;
  static constexpr int BM = 16 * MT * kWarps;
  static constexpr int kStride = D + 8;  // padded smem row, elements
  static constexpr bool kQInRegs = Shape::kQInRegs;
  static constexpr int kSmemBytes = (BM + 4 * BN) * kStride * static_cast<int>(sizeof(T));
};

// One work item: m-tile m_back (counted back from the last, heaviest, tile)
// of head h of batch row b.
template <typename T, int D, bool kGeneral, bool kShort>
__device__ __forceinline__ void prefill_item(const AttnArgs& a, int m_back, int h, int b, unsigned char* smem) {
  using P = Prefill<T, D, kGeneral, kShort>;
  constexpr int MT = P::MT, BN = P::BN, BM = P::BM, S = P::kStride;
  constexpr int NT = BN / 8;  // score n8 tiles per row fragment
  constexpr int DT = D / 8;   // output n8 tiles
  constexpr int KS = D / 16;  // k16 steps of Q·Kᵀ
  constexpr bool kQInRegs = P::kQInRegs;
  // D = 32 general spills with the row-sum MMA's accumulators (128 registers).
  constexpr bool kHalf = kHalfExp && !(kGeneral && D == 32);

  T* sQ = reinterpret_cast<T*>(smem);
  T* sKV = sQ + BM * S;  // stage s: K at sKV + s·2·BN·S, V BN·S after it

  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;

  const int mb = (a.Lq + BM - 1) / BM - 1 - m_back;  // heaviest (last) tiles first
  const int kvh = h / a.group;
  // The row's length and its mask flag are requested together, before Q:
  // each is an L2 round trip ahead of the key tiles (attn_kv_len's clamp
  // branched on the first, which kept the second and Q waiting for it).
  const int kv_raw = a.kv_len != nullptr ? __ldg(a.kv_len + b * a.kv_len_b_stride) : a.Lk;
  // This row's key mask is not a prefix: applied per score (mask-free kernel only).
  const int mask_row = !kGeneral && a.key_mask_rows != nullptr ? __ldg(a.key_mask_rows + b) : 0;
  const int m0 = mb * BM;
  cp_async_rows<T, D, BM, P::kThreads>(sQ, static_cast<const T*>(a.q) + b * a.q_batch_stride + int64_t{h} * D,
                                       a.q_row_stride, m0, a.Lq, tid);
  const int kvlen = min(max(kv_raw, 0), a.Lk);
  const bool key_masked = mask_row != 0;
  const int m_last = min(m0 + BM, a.Lq) - 1;
  const int64_t qoff = static_cast<int64_t>(kvlen) - a.Lq;  // q_pos = i + qoff

  const T* kg = static_cast<const T*>(a.k) + b * a.k_batch_stride + static_cast<int64_t>(kvh) * D;
  const T* vg = static_cast<const T*>(a.v) + b * a.v_batch_stride + static_cast<int64_t>(kvh) * D;
  const int64_t o_stride = static_cast<int64_t>(a.H) * D;
  T* og = static_cast<T*>(a.out) + static_cast<int64_t>(b) * a.Lq * o_stride + static_cast<int64_t>(h) * D;

  // Keys any row of this tile can see.
  int64_t n_hi = kvlen, n_lo = 0;
  if (a.causal) {
    n_hi = min(n_hi, m_last + qoff + 1);
    if (a.window > 0) n_lo = max(int64_t{0}, m0 + qoff - a.window + 1);
  }
  if (n_hi <= n_lo) {  // nothing visible: the rows are zeros
    cp_async_commit();
    cp_async_wait<0>();  // Q's copies land before the CTA's shared memory is released
    for (int c = tid; c < BM * (D / 8); c += P::kThreads) {
      const int i = m0 + c / (D / 8);
      if (i < a.Lq) *reinterpret_cast<uint4*>(og + i * o_stride + (c % (D / 8)) * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  const int n_start = static_cast<int>(n_lo / BN) * BN;
  const int ntiles = static_cast<int>((n_hi - n_start + BN - 1) / BN);

  // ldmatrix lane → (row, col) offsets. A (Q) and V.trans share one pattern.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
  const int w_row0 = warp * 16 * MT;
  const uint32_t sQ_a = smem_u32(sQ + (w_row0 + a_row) * S + a_col);
  const uint32_t sK_a0 = smem_u32(sKV + k_row * S + k_col);
  const uint32_t sV_a0 = smem_u32(sKV + BN * S + a_row * S + a_col);
  constexpr uint32_t kStageBytes = 2 * BN * S * sizeof(T);
  auto load_kv = [&](int t) {
    T* st = sKV + (t & 1) * 2 * BN * S;
    cp_async_rows<T, D, BN, P::kThreads>(st, kg, a.k_row_stride, n_start + t * BN, kvlen, tid);
    cp_async_rows<T, D, BN, P::kThreads>(st + BN * S, vg, a.v_row_stride, n_start + t * BN, kvlen, tid);
  };

  // Groups: g0 = Q (requested above) + tile 0, g1 = tile 1, then g(t+2) after tile t (empty
  // when there is none), so "tile t landed" is always wait_group 1.
  load_kv(0);
  cp_async_commit();
  if (ntiles > 1) load_kv(1);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  // Key tiles inside [mask_lo, mask_hi) are visible to every row of the CTA.
  int mask_lo = 0, mask_hi = kvlen;
  if (a.causal) {
    mask_hi = static_cast<int>(max(int64_t{0}, min(int64_t{kvlen}, m0 + qoff + 1)));
    if (a.window > 0) mask_lo = static_cast<int>(min(int64_t{kvlen}, max(int64_t{0}, m_last + qoff - a.window + 1)));
  }

  uint32_t qf[kQInRegs ? MT : 1][kQInRegs ? KS : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) ldmatrix_x4(qf[mt][kk], sQ_a + (mt * 16 * S + kk * 16) * 2);
  }

  float acc[MT][DT][4];
  float row_m[MT][2], row_l[MT][2];
  float lsum[kHalf ? MT : 1][4];  // kHalf: P·ones, rows g (0, 1) and g + 8 (2, 3)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.0f;
    row_m[mt][0] = row_m[mt][1] = -INFINITY;
    row_l[mt][0] = row_l[mt][1] = 0.0f;
    if constexpr (kHalf) lsum[mt][0] = lsum[mt][1] = lsum[mt][2] = lsum[mt][3] = 0.0f;
  }

  const bool fold = !kGeneral && a.scale_log2 > 0.0f;
  const float mul = fold ? a.scale_log2 : 1.0f;
  for (int t = 0; t < ntiles; ++t) {
    const int n0 = n_start + t * BN;
    if (t > 0) {
      cp_async_wait<1>();  // tile t landed (t + 1 may still be in flight)
      __syncthreads();
    }
    const uint32_t sK_a = sK_a0 + (t & 1) * kStageBytes, sV_a = sV_a0 + (t & 1) * kStageBytes;

    // S = Q·K_tᵀ
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int x = 0; x < 4; ++x) qa[mt][x] = qf[mt][kk][x];
        } else {
          ldmatrix_x4(qa[mt], sQ_a + (mt * 16 * S + kk * 16) * 2);
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, sK_a + (np * 16 * S + kk * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(s[mt][2 * np], qa[mt], kb[0], kb[1]);
          mma_16816<T>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }

    // Logits (log2 domain), then positional masks on tiles that cross a boundary.
    // Without per-element logit work and with a positive scale, the scores
    // stay raw: the row max is scaled once per row and the scale rides in the
    // exponent's FMA (one multiply per score fewer).
    bool keep[kGeneral ? NT : 1][2];  // per key column: in range and kept by the key mask
    if constexpr (kGeneral) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) keep[j][c] = attn_key_kept(a, b, n0 + j * 8 + 2 * t4 + c, kvlen);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (kGeneral) {
            const int i = m0 + w_row0 + mt * 16 + g + (e >> 1) * 8;
            const int key = n0 + j * 8 + 2 * t4 + (e & 1);
            s[mt][j][e] = (i < a.Lq && keep[j][e & 1]) ? attn_logit<T>(a, s[mt][j][e], b, h, i, key) : -INFINITY;
          } else if (!fold) {
            s[mt][j][e] *= a.scale_log2;
          }
        }
    if (key_masked || n0 < mask_lo || n0 + BN > mask_hi) {
      uint32_t kept = ~0u;  // bit 2j + c: key column j·8 + 2·t4 + c is kept by the key mask
      if (key_masked) {
        const uint8_t* km = a.key_mask + b * a.key_mask_b_stride + n0 + 2 * t4;
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            if (n0 + j * 8 + 2 * t4 + c < kvlen && __ldg(km + j * 8 + c) == 0) kept &= ~(1u << (2 * j + c));
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const int2 range = attn_key_range(a, m0 + w_row0 + mt * 16 + g + rr * 8 + qoff, kvlen);
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int key = n0 + j * 8 + 2 * t4 + c;
              if (key < range.x || key >= range.y || !((kept >> (2 * j + c)) & 1u)) s[mt][j][2 * rr + c] = -INFINITY;
            }
        }
    }

    // Online softmax: rows g and g + 8 of every m fragment.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NT; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * rr], s[mt][j][2 * rr + 1]));
        const float m_new = fmaxf(row_m[mt][rr], quad_max(mx) * mul);
        const float base = attn_row_base(m_new);
        const float alpha = exp2f(row_m[mt][rr] - base);
        row_m[mt][rr] = m_new;
        if constexpr (kHalf) {
          // s[..][2rr] holds the packed pair's bits from here on.
#pragma unroll
          for (int j = 0; j < NT; ++j)
            s[mt][j][2 * rr] = __uint_as_float(
                exp2_x2<T>(fmaf(s[mt][j][2 * rr], mul, -base), fmaf(s[mt][j][2 * rr + 1], mul, -base)));
          lsum[mt][2 * rr] *= alpha;
          lsum[mt][2 * rr + 1] *= alpha;
        } else {
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            s[mt][j][2 * rr] = exp2f(fmaf(s[mt][j][2 * rr], mul, -base));
            s[mt][j][2 * rr + 1] = exp2f(fmaf(s[mt][j][2 * rr + 1], mul, -base));
            sum += s[mt][j][2 * rr] + s[mt][j][2 * rr + 1];
          }
          row_l[mt][rr] = row_l[mt][rr] * alpha + sum;  // per-lane partial; quad-reduced at the end
        }
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          acc[mt][dt][2 * rr] *= alpha;
          acc[mt][dt][2 * rr + 1] *= alpha;
        }
      }

    // O += P·V_t; P's accumulator layout is exactly the A fragment layout.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kHalf) {
          pa[mt][0] = __float_as_uint(s[mt][2 * kk][0]);
          pa[mt][1] = __float_as_uint(s[mt][2 * kk][2]);
          pa[mt][2] = __float_as_uint(s[mt][2 * kk + 1][0]);
          pa[mt][3] = __float_as_uint(s[mt][2 * kk + 1][2]);
          mma_16816<T>(lsum[mt], pa[mt], kOnes2<T>, kOnes2<T>);  // every column: the row's sum
        } else {
          pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, sV_a + (kk * 16 * S + dp * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(acc[mt][2 * dp], pa[mt], vb[0], vb[1]);
          mma_16816<T>(acc[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage
    if (t + 2 < ntiles) load_kv(t + 2);
    cp_async_commit();
  }

  // Epilogue: normalize, stage in this warp's own Q rows, 16-byte stores.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float l;
      if constexpr (kHalf) {
        l = lsum[mt][2 * rr];
      } else {
        l = quad_sum(row_l[mt][rr]);
      }
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      T* srow = sQ + (w_row0 + mt * 16 + g + rr * 8) * S + 2 * t4;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
        *reinterpret_cast<uint32_t*>(srow + dt * 8) = pack2<T>(acc[mt][dt][2 * rr] * inv, acc[mt][dt][2 * rr + 1] * inv);
    }
  __syncwarp();
#pragma unroll
  for (int it = 0; it < MT * D / 16; ++it) {
    const int c = it * 32 + lane;
    const int r = w_row0 + c / (D / 8), ch = c % (D / 8);
    const int i = m0 + r;
    if (i < a.Lq) *reinterpret_cast<uint4*>(og + i * o_stride + ch * 8) = *reinterpret_cast<const uint4*>(sQ + r * S + ch * 8);
  }
}

template <int BM>
__host__ __device__ __forceinline__ int64_t prefill_items(const AttnArgs& a) {
  return static_cast<int64_t>((a.Lq + BM - 1) / BM) * a.H * a.B;
}

template <typename T, int D, bool kGeneral, bool kShort>
__global__ void __launch_bounds__(Prefill<T, D, kGeneral, kShort>::kThreads,
                                  Prefill<T, D, kGeneral, kShort>::kMinBlocks) attn_prefill_kernel(const AttnArgs a) {
  using P = Prefill<T, D, kGeneral, kShort>;
  dev::pdl_begin();
  extern __shared__ __align__(16) unsigned char smem[];
  if (a.grid_mhb) {
    prefill_item<T, D, kGeneral, kShort>(a, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
                                         static_cast<int>(blockIdx.z), smem);
  } else {  // one item per CTA of a 1-D grid
    const int m_tiles = (a.Lq + P::BM - 1) / P::BM;
    const int64_t item = blockIdx.x, hb = item / m_tiles;
    prefill_item<T, D, kGeneral, kShort>(a, static_cast<int>(item % m_tiles), static_cast<int>(hb % a.H),
                                         static_cast<int>(hb / a.H), smem);
  }
}

template <typename T, int D, bool kGeneral, bool kShort = false>
void launch_prefill_k(const AttnArgs& args, cudaStream_t stream) {
  using P = Prefill<T, D, kGeneral, kShort>;
  auto kernel = attn_prefill_kernel<T, D, kGeneral, kShort>;
  RLX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, P::kSmemBytes));
  AttnArgs a = args;
  const int64_t items = prefill_items<P::BM>(a);
  RLX_CHECK(items <= 0x7fffffff, "attention: prefill grid too large (", items, " blocks)");
  // One CTA per item, (m-tile, head, batch) with m fastest: the m-tiles of a
  // head share its K/V tiles in L2.
  a.grid_mhb = a.H <= 65535 && a.B <= 65535;
  const dim3 grid = a.grid_mhb ? dim3(static_cast<unsigned>((a.Lq + P::BM - 1) / P::BM), static_cast<unsigned>(a.H),
                                      static_cast<unsigned>(a.B))
                               : dim3(static_cast<unsigned>(items));
  kernel<<<grid, P::kThreads, P::kSmemBytes, stream>>>(a);
  RLX_CUDA_CHECK_LAUNCH("attention (prefill)");
}

// softcap, bias or a key mask (unless given per row, key_mask_rows) select the
// general variant (per-element logit work); otherwise D = 64 over at most
// kShortKeys keys takes the short shape.
template <typename T, int D>
void launch_prefill_t(const AttnArgs& a, cudaStream_t stream) {
  if (a.softcap > 0.0f || a.bias != nullptr || (a.key_mask != nullptr && a.key_mask_rows == nullptr)) {
    launch_prefill_k<T, D, true>(a, stream);
  } else if constexpr (D == 64) {
    if (a.Lk <= kShortKeys) launch_prefill_k<T, D, false, true>(a, stream);
    else launch_prefill_k<T, D, false>(a, stream);
  } else {
    launch_prefill_k<T, D, false>(a, stream);
  }
}

template <typename T>
void launch_prefill_dtype(const AttnArgs& a, cudaStream_t stream) {
  switch (a.D) {
    case 32: launch_prefill_t<T, 32>(a, stream); return;
    case 64: launch_prefill_t<T, 64>(a, stream); return;
    case 128: launch_prefill_t<T, 128>(a, stream); return;
    case 256: launch_prefill_t<T, 256>(a, stream); return;
    default: throw Unsupported(str("attention: prefill kernel has no head_dim ", a.D));
  }
}

template <int D>
constexpr int prefill_smem() {
  return std::max({Prefill<__half, D, false>::kSmemBytes, Prefill<__half, D, true>::kSmemBytes,
                   Prefill<__half, D, false, D == 64>::kSmemBytes});
}

}  // namespace

namespace detail {

bool attention_prefill_supported(DType dtype, int D, size_t smem_optin_bytes) {
  if (dtype != DType::F16 && dtype != DType::BF16) return false;
  int smem = 0;
  switch (D) {
    case 32: smem = prefill_smem<32>(); break;
    case 64: smem = prefill_smem<64>(); break;
    case 128: smem = prefill_smem<128>(); break;
    case 256: smem = prefill_smem<256>(); break;
    default: return false;
  }
  return static_cast<size_t>(smem) <= smem_optin_bytes;
}

void launch_attention_prefill(DType dtype, const dev::AttnArgs& a, cudaStream_t stream) {
  if (dtype == DType::F16) {
    launch_prefill_dtype<__half>(a, stream);
  } else if (dtype == DType::BF16) {
    launch_prefill_dtype<__nv_bfloat16>(a, stream);
  } else {
    throw Unsupported(str("attention: prefill kernel has no ", dtype_name(dtype), " variant"));
  }
}

}  // namespace detail
}  // namespace rlx::cuda
