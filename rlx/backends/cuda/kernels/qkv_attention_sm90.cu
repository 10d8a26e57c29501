// Fused QKV projection + attention for short sequences (qkv_attention_sm90.h).
//
// Work. CTA (group g, pack c) computes columns 64g .. 64g + 63 of Q, K and V
// for the rows of S = ⌊128 / L⌋ consecutive sequences (the pack: rows
// c·S·L .., at least 65 of the 128 a CTA computes are used), then attention
// for the 64 / D heads those columns hold, each query seeing the keys of its
// own sequence only. The groups of one pack are adjacent in the grid, so its
// rows of X are read from memory once and from L2 by the others; W (a few
// hundred KB) stays in L2.
//
// Projection, as the classic GEMM (gemm_sm90.cu): two warpgroups, each 64
// rows × 192 columns by wgmma m64n192k16 (96 accumulators a thread); K in
// slabs of 64, issued by thread 0 as TMA copies of X's 128 rows (rows past
// the tensor zero, rows of the next pack computed and never used) and of
// W's three 64-row blocks (Q, K, V), into two stages of 40 KB. Two stages
// keep a CTA at 83 KB of shared memory and 128 registers a thread, so two
// CTAs share an SM and one's attention overlaps the other's MMAs.
//
// Q, K and V (+ bias, rounded to T as the unfused projection stores them)
// are staged over the stages, per head as [128 rows][D + 8] (the padding
// makes the fragment writes and every ldmatrix phase conflict-free).
//
// Attention, as the prefill kernel's (attention_prefill.cu) mask-free form:
// warp w owns query rows 16w .. 16w + 15 of each of the CTA's heads; keys in
// tiles of 64 (those holding its sequences' keys) straight from the staged K
// and V: S = Q·Kᵀ by
// mma.sync m16n8k16, online softmax in the log2 domain with the scale in the
// exponent's FMA, P by ex2.approx.{f16,bf16}x2 packed as the P·V operand, row
// sums by an MMA of P against ones. Keys of another sequence of the pack,
// past the pack, or hidden by the key mask score −inf (one byte per key,
// its sequence in the pack or 0xFF, compared with the row's); a row that
// sees no key is zeros. O / l is staged over
// the warp's own Q rows and written with 16-byte stores, 128 bytes a row.
#include "rlx/backends/cuda/kernels/qkv_attention_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/attention.cuh"
#include "rlx/backends/cuda/device/bulk_copy.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/device/wgmma.cuh"
#include "rlx/backends/cuda/kernels/gemm_sm90.h"
#include "rlx/core/error.h"

namespace rlx::cuda {
namespace {

using namespace dev;

constexpr int kRows = 128;  // query and key rows a CTA holds: the longest sequence
constexpr int kCols = 64;   // columns of each of Q, K, V a CTA computes: 64 / D heads
constexpr int kN = 3 * kCols;
constexpr int kBK = 64, kThreads = 256, kStages = 2;
constexpr int kSlabA = kRows * kBK * 2;  // 16 KB
constexpr int kBlockB = kCols * kBK * 2;  // 8 KB: one of W's three 64-row blocks
constexpr int kStageBytes = kSlabA + 3 * kBlockB;

template <int D>
struct QkvShape {
  static constexpr int G = kCols / D;  // heads per CTA
  static constexpr int S = D + 8;      // staged row, elements
  static constexpr int kHeadBytes = kRows * S * 2;
  static_assert(3 * G * kHeadBytes <= kStages * kStageBytes, "Q, K and V are staged over the stages");
};
// Stages, the key-visibility bytes, 2·kStages mbarriers, slack to align the stages to 1024 bytes.
constexpr int kSmemBytes = kStages * kStageBytes + kRows + 2 * kStages * 8 + 1024;

struct QkvKernelArgs {
  const void* bias;
  const uint8_t* key_mask;
  void* out;
  int q_row, k_row, v_row;
  int L, K, groups;
  int seqs;      // sequences per CTA (the pack)
  int64_t rows;  // B·L
  float scale_log2;
};

constexpr uint8_t kHidden = 0xFF;  // key_seq of a key no row sees

// Attention of one head (staged at sQ/sK/sV, shared addresses) for this
// warp's 16 query rows over key tiles [t0, t1) of 64; key j is seen by rows
// of sequence key_seq[j] of the pack. O / l goes back over those rows of sQ.
template <typename T, int D, int kKeyTile>
__device__ __forceinline__ void attend(uint32_t sQ, uint32_t sK, uint32_t sV, const uint8_t* key_seq, bool masked,
                                       int t0, int t1, int L, float mul, int warp, int lane) {
  constexpr int S = QkvShape<D>::S, KS = D / 16, NT = kKeyTile / 8, DT = D / 8;
  const int g = lane >> 2, t4 = lane & 3;
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;

  uint32_t qf[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) ldmatrix_x4(qf[kk], sQ + ((16 * warp + a_row) * S + a_col + kk * 16) * 2);

  float acc[DT][4], lsum[4] = {0.0f, 0.0f, 0.0f, 0.0f}, row_m[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;

  const int row_seq[2] = {(16 * warp + g) / L, (16 * warp + g + 8) / L};
  for (int n0 = t0 * kKeyTile; n0 < t1 * kKeyTile; n0 += kKeyTile) {
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, sK + ((n0 + np * 16 + k_row) * S + k_col + kk * 16) * 2);
        mma_16816<T>(s[2 * np], qf[kk], kb[0], kb[1]);
        mma_16816<T>(s[2 * np + 1], qf[kk], kb[2], kb[3]);
      }
    if (masked) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int ks = key_seq[n0 + 8 * j + 2 * t4 + c];
          if (ks != row_seq[0]) s[j][c] = -INFINITY;
          if (ks != row_seq[1]) s[j][2 + c] = -INFINITY;
        }
    }

    // Online softmax, rows g (rr = 0) and g + 8 (rr = 1); s[j][2rr] then holds the packed P pair.
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < NT; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * rr], s[j][2 * rr + 1]));
      const float m_new = fmaxf(row_m[rr], quad_max(mx) * mul);
      const float base = attn_row_base(m_new);
      const float alpha = exp2f(row_m[rr] - base);
      row_m[rr] = m_new;
#pragma unroll
      for (int j = 0; j < NT; ++j)
        s[j][2 * rr] =
            __uint_as_float(exp2_x2<T>(fmaf(s[j][2 * rr], mul, -base), fmaf(s[j][2 * rr + 1], mul, -base)));
      lsum[2 * rr] *= alpha;
      lsum[2 * rr + 1] *= alpha;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        acc[dt][2 * rr] *= alpha;
        acc[dt][2 * rr + 1] *= alpha;
      }
    }

    // O += P·V; P's accumulator layout is the A fragment layout.
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = __float_as_uint(s[2 * kk][0]);
      pa[1] = __float_as_uint(s[2 * kk][2]);
      pa[2] = __float_as_uint(s[2 * kk + 1][0]);
      pa[3] = __float_as_uint(s[2 * kk + 1][2]);
      mma_16816<T>(lsum, pa, kOnes2<T>, kOnes2<T>);  // every column: the row's sum
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, sV + ((n0 + kk * 16 + a_row) * S + a_col + dp * 16) * 2);
        mma_16816<T>(acc[2 * dp], pa, vb[0], vb[1]);
        mma_16816<T>(acc[2 * dp + 1], pa, vb[2], vb[3]);
      }
    }
  }

  // Only this warp reads its Q rows: O / l goes over them.
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const float l = lsum[2 * rr];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const uint32_t row = sQ + ((16 * warp + g + 8 * rr) * S + 2 * t4) * 2;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      st_shared_u32(row + dt * 16, pack2<T>(acc[dt][2 * rr] * inv, acc[dt][2 * rr + 1] * inv));
  }
}

template <typename T, int D, int kKeyTile>
__global__ void __launch_bounds__(kThreads, 2)
    qkv_attention_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         const QkvKernelArgs p) {
  using Sh = QkvShape<D>;
  constexpr int G = Sh::G, S = Sh::S;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  uint8_t* key_seq = smem + kStages * kStageBytes;  // [kRows]: key j's sequence in the pack, or kHidden
  uint64_t* full = reinterpret_cast<uint64_t*>(key_seq + kRows);
  uint64_t* empty = full + kStages;

  const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, warp = tid >> 5, lane = tid & 31;
  const int grp = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.groups));
  const int pack = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.groups));
  const int m0 = pack * p.seqs * p.L, nk = (p.K + kBK - 1) / kBK;
  const int rows = static_cast<int>(min(static_cast<int64_t>(p.seqs * p.L), p.rows - m0));  // rows of this pack
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kThreads / 32);
    }
    mbar_fence_init();
  }
  __syncthreads();
  pdl_begin();  // X (and the key mask) may be earlier kernels' outputs

  auto issue = [&](int kb) {
    const int s = kb % kStages;
    unsigned char* st = smem + s * kStageBytes;
    mbar_arrive_expect_tx(&full[s], kStageBytes);
    tma_load_2d(st, &map_x, kb * kBK, m0, &full[s]);
    tma_load_2d(st + kSlabA, &map_w, kb * kBK, p.q_row + grp * kCols, &full[s]);
    tma_load_2d(st + kSlabA + kBlockB, &map_w, kb * kBK, p.k_row + grp * kCols, &full[s]);
    tma_load_2d(st + kSlabA + 2 * kBlockB, &map_w, kb * kBK, p.v_row + grp * kCols, &full[s]);
  };
  if (tid == 0)
    for (int kb = 0; kb < kStages && kb < nk; ++kb) issue(kb);
  if (tid < kRows) {  // the key mask [B, L] is row-major: key j of the pack is element m0 + j
    const bool seen = tid < rows && (p.key_mask == nullptr || p.key_mask[static_cast<int64_t>(m0) + tid] != 0);
    key_seq[tid] = seen ? static_cast<uint8_t>(tid / p.L) : kHidden;
  }

  float acc[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.0f;
  for (int kb = 0; kb < nk; ++kb) {
    const int s = kb % kStages;
    mbar_wait(&full[s], static_cast<uint32_t>(kb / kStages) & 1);
    const uint32_t st = smem_u32(smem + s * kStageBytes);
    const uint64_t da = wgmma_desc(st + static_cast<uint32_t>(wg * 64 * 128));
    const uint64_t db = wgmma_desc(st + kSlabA);
    wgmma_fence();
    pin(acc);
#pragma unroll
    for (int k = 0; k < kBK / 16; ++k) wgmma_m64n192k16<T>(acc, da + 2 * k, db + 2 * k, kb > 0 || k > 0);
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
  __syncthreads();  // every warpgroup is done reading the stages: stage Q, K, V over them

  // Fragment i: row 16·warp + g (+8 for i % 4 ≥ 2), column 8·(i / 4) + 2·t4 + i % 2 of the 192;
  // column c is section c / 64 (Q, K, V), head (c mod 64) / D, dim c mod D.
  {
    const int g = lane >> 2, t4 = lane & 3;
    const T* bias = static_cast<const T*>(p.bias);
    const uint32_t base = smem_u32(smem);
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      const int sec = j / (kCols / 8), cc = 8 * (j % (kCols / 8)) + 2 * t4;
      const int head = cc / D, d = cc % D;
      float2 bv = make_float2(0.0f, 0.0f);
      if (bias != nullptr) {
        const int row0 = sec == 0 ? p.q_row : sec == 1 ? p.k_row : p.v_row;
        bv = unpack2<T>(*reinterpret_cast<const uint32_t*>(bias + row0 + grp * kCols + cc));
      }
      const uint32_t head_base = base + static_cast<uint32_t>((sec * G + head) * Sh::kHeadBytes);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // K and V rows past the pack are zeros: a hidden key's P is 0, and 0 · V must not be NaN.
        const int row = 16 * warp + g + 8 * h;
        const uint32_t v =
            sec == 0 || row < rows ? pack2<T>(acc[4 * j + 2 * h] + bv.x, acc[4 * j + 2 * h + 1] + bv.y) : 0u;
        st_shared_u32(head_base + (row * S + d) * 2, v);
      }
    }
  }
  __syncthreads();  // Q, K, V staged

  // Warp w's rows 16w .. 16w + 15 (those in the pack) see the keys of their
  // sequences: key tiles t0 .. t1 − 1. Without a hidden key in those tiles
  // (one full sequence, no mask), no score needs masking.
  if (16 * warp < rows) {
    const int last = min(16 * warp + 15, rows - 1);
    const int k0 = 16 * warp / p.L * p.L, k1 = min(rows, (last / p.L + 1) * p.L);
    const int t0 = k0 / kKeyTile, t1 = (k1 + kKeyTile - 1) / kKeyTile;
    bool masked = false;
    for (int j = t0 * kKeyTile + lane; j < t1 * kKeyTile; j += 32) masked |= key_seq[j] != 0;
    masked = __any_sync(0xffffffffu, masked) || p.seqs > 1;
    const uint32_t base = smem_u32(smem);
#pragma unroll
    for (int head = 0; head < G; ++head)
      attend<T, D, kKeyTile>(base + head * Sh::kHeadBytes, base + (G + head) * Sh::kHeadBytes,
                             base + (2 * G + head) * Sh::kHeadBytes, key_seq, masked, t0, t1, p.L, p.scale_log2,
                             warp, lane);
  }
  __syncthreads();  // O staged over Q

  // Row r, chunk c (8 elements) of the CTA's 64 output columns: head c·8 / D.
  T* out = static_cast<T*>(p.out);
  const int64_t ld = static_cast<int64_t>(p.groups) * kCols;
  const T* sO = reinterpret_cast<const T*>(smem);
  for (int idx = tid; idx < kRows * (kCols / 8); idx += kThreads) {
    const int r = idx / (kCols / 8), c = (idx % (kCols / 8)) * 8;
    if (r < rows)
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(m0 + r) * ld + grp * kCols + c) =
          *reinterpret_cast<const uint4*>(sO + (c / D) * (Sh::kHeadBytes / 2) + r * S + c % D);
  }
}

// Keys a tile: all 128 at once (one softmax pass, no rescaling) for one
// sequence a CTA at D = 32; 64 otherwise (D = 64 would spill at 128 keys,
// and a pack's rows see only their own sequence's tiles).
int key_tile(int D, int L) { return D == 32 && L > 64 ? 128 : 64; }

template <typename T>
const void* kernel_for(int D, int kt) {
  if (D == 64) return reinterpret_cast<const void*>(qkv_attention_kernel<T, 64, 64>);
  return kt == 128 ? reinterpret_cast<const void*>(qkv_attention_kernel<T, 32, 128>)
                   : reinterpret_cast<const void*>(qkv_attention_kernel<T, 32, 64>);
}
const void* kernel_for(DType t, int D, int kt) {
  return t == DType::F16 ? kernel_for<__half>(D, kt) : kernel_for<__nv_bfloat16>(D, kt);
}

}  // namespace

int64_t sm90_qkv_attention_ctas(const QkvAttentionArgs& a) {
  const int64_t seqs = kRows / std::max(a.L, 1);
  return (a.B + seqs - 1) / seqs * (int64_t{a.H} * a.D / kCols);
}

const char* sm90_qkv_attention_unsupported(const QkvAttentionArgs& a) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) return "dtype is not f16/bf16";
  if (a.D != 32 && a.D != 64) return "head_dim is not 32 or 64";
  if (a.H <= 0 || (int64_t{a.H} * a.D) % kCols != 0) return "heads × head_dim is not a multiple of 64";
  if (a.L <= 0 || a.L > kRows) return "the sequence is longer than 128 tokens";
  if (a.B <= 0 || a.K <= 0) return "empty";
  if (a.K % 8 != 0) return "K is not a multiple of 8";
  if (!(a.scale > 0.0f)) return "the scale is not positive";
  const int64_t cols = int64_t{a.H} * a.D;
  for (int64_t r : {a.q_row, a.k_row, a.v_row})
    if (r < 0 || r % 2 != 0 || r + cols > a.w_rows) return "a Q/K/V row range is outside W or odd";
  if (a.B * a.L > (int64_t{1} << 31) - kRows || a.w_rows > (int64_t{1} << 31) || a.K > (int64_t{1} << 30) ||
      a.B * (cols / kCols) > (int64_t{1} << 31) - 1)
    return "too large";
  if (a.X == nullptr || a.W == nullptr || a.out == nullptr) return "a required operand is null";
  if (!sm90_aligned(a.X, 16) || !sm90_aligned(a.W, 16) || !sm90_aligned(a.out, 16))
    return "X, W or out is not 16-byte aligned";
  if (a.bias != nullptr && !sm90_aligned(a.bias, 4)) return "the bias is not 4-byte aligned";
  return nullptr;
}

bool sm90_qkv_attention_available(int device) {
  static Sm90Availability known;
  return known(device, [] {
    bool ok = true;
    for (int D : {32, 64})
      for (int kt : {64, 128})
        for (DType t : {DType::F16, DType::BF16})
          ok = ok && sm90_kernel_loads(kernel_for(t, D, kt), kSmemBytes, kThreads);
    return ok;
  });
}

void launch_sm90_qkv_attention(const QkvAttentionArgs& a, cudaStream_t stream) {
  const std::string what = str("sm90 qkv projection + attention ", dtype_name(a.dtype), " B=", a.B, " L=", a.L,
                               " K=", a.K, " H=", a.H, " D=", a.D);
  if (const char* why = sm90_qkv_attention_unsupported(a)) throw Unsupported(str(what, ": ", why));
  CUtensorMap map_x = sm90_slab_map(a.dtype, a.X, a.B * a.L, a.K, a.K, kRows, what);
  CUtensorMap map_w = sm90_slab_map(a.dtype, a.W, a.w_rows, a.K, a.K, kCols, what);
  const int groups = a.H * a.D / kCols, seqs = kRows / a.L;
  QkvKernelArgs k{a.bias, a.key_mask, a.out, static_cast<int>(a.q_row), static_cast<int>(a.k_row),
                  static_cast<int>(a.v_row), a.L, a.K, groups, seqs, a.B * a.L, a.scale * kLog2e};
  void* args[] = {&map_x, &map_w, &k};
  sm90_launch(kernel_for(a.dtype, a.D, key_tile(a.D, a.L)), static_cast<unsigned>(sm90_qkv_attention_ctas(a)),
              kThreads, kSmemBytes, stream, args, what);
}

}  // namespace rlx::cuda
