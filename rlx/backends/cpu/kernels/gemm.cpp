// f32 GEMM for the CPU backend.
//
// Paths, chosen per problem:
//  - OpenBLAS cblas_sgemm for large problems on machines without AVX-512
//    (built with RLX_HAVE_BLAS, RLX_CPU_BLAS=1, M·N·K ≥ 64³ per GEMM, ≥ 256³
//    when batched). Called from this thread only, one call per batch;
//    OpenBLAS runs its own threads (sized once to our pool's size). A batch
//    whose B is shared and A not transposed is folded into one GEMM by the
//    caller (matmul.cpp).
//  - Built-in blocked kernel otherwise: an mr×nr register tile (12×32 with
//    AVX-512 FMA, else 6×16 on AVX2/baseline vectors) accumulating over k in
//    order. B is packed into zero-padded [kc][nr] micro-panels (16×16
//    register transposes for a transposed B on AVX-512); A is read in place,
//    mr rows of stride lda, when its rows are contiguous, and copied into
//    row-major zero-padded panels otherwise (a transposed A, the last partial
//    panel). Packing reads strided views, so transposes (and attention's
//    head-strided Q/K/V through gemm_serial) cost nothing extra.
//    One GEMM (batch 1, the weight matmuls): all of B is packed once, in
//    parallel, then tasks of kMC rows × a range of column panels sweep the
//    B panels per K block of kKC (each panel reused from L1 across the
//    block's row panels).
//    Batched GEMMs: tasks of kMC×kNC output tiles (× batch), each packing
//    its own A and B blocks.
//  - Row-streaming GEMV for M < 4 (decode): no packing, B is read once;
//    i-k-j axpy for row-major B, 8-lane dot products for transposed B.
// The bias+activation epilogue runs on each finished task's block or tile,
// while it is hot.
#include "rlx/backends/cpu/kernels/gemm.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/vmath.h"
#include "rlx/core/env.h"

#ifdef RLX_HAVE_BLAS
#include <cblas.h>
#endif

namespace rlx::cpu {
namespace {

constexpr int64_t kKC = 256;  // K block
constexpr int64_t kMC = 144;  // task rows (a multiple of every kernel's mr)
constexpr int64_t kNC = 256;  // batched task columns (a multiple of every kernel's nr)
constexpr int64_t kMaxMR = 12, kMaxNR = 32;
constexpr int64_t kGemvMaxM = 3;
constexpr int64_t kGemvCols = 64;
constexpr int64_t kBlasMinWork = 64 * 64 * 64;
// Batched problems run one sgemm per batch from this thread; below this size
// per GEMM, OpenBLAS's per-call threading costs more than the built-in
// kernel's parallelism over batches and tiles.
constexpr int64_t kBlasMinWorkBatched = 256 * 256 * 256;
constexpr int64_t kSerialWork = 32 * 32 * 32;  // below this, threads cost more than they save

typedef float v8f __attribute__((vector_size(32)));

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline const float* a_base(const GemmProblem& p, int64_t bi) { return p.a + (p.a_off ? p.a_off[bi] : 0); }
inline const float* b_base(const GemmProblem& p, int64_t bi) { return p.b + (p.b_off ? p.b_off[bi] : 0); }

// A matrix view: element (r, c) at p[r·rs + c·cs].
struct View {
  const float* p;
  int64_t rs, cs;
  float at(int64_t r, int64_t c) const { return p[r * rs + c * cs]; }
};

// C[mr × nr] (row stride ldc) = (accumulate ? C : 0) + A · Bpanel[kc][nr], A(r, k) = a[r·lda + k],
// each element summed over k in order.
using MicroFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc,
                         bool accumulate);
struct MicroKernel {
  int64_t mr, nr;
  MicroFn fn;
};

RLX_CPU_MULTIVERSION
void micro_6x16(int64_t kc, const float* __restrict ap, int64_t lda, const float* __restrict bp, float* __restrict c,
                int64_t ldc, bool accumulate) {
  v8f t[6][2] = {};
  if (accumulate)
    for (int r = 0; r < 6; ++r) std::memcpy(t[r], c + r * ldc, sizeof(t[r]));
  for (int64_t k = 0; k < kc; ++k) {
    v8f b0, b1;
    std::memcpy(&b0, bp + k * 16, sizeof(b0));
    std::memcpy(&b1, bp + k * 16 + 8, sizeof(b1));
    for (int r = 0; r < 6; ++r) {
      const float a = ap[r * lda + k];
      t[r][0] += a * b0;
      t[r][1] += a * b1;
    }
  }
  for (int r = 0; r < 6; ++r) std::memcpy(c + r * ldc, t[r], sizeof(t[r]));
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(RLX_NO_MULTIVERSION)
#define RLX_GEMM_AVX512 1
// 24 of the 32 zmm registers accumulate; per k two B loads and 12
// broadcasts feed 24 FMAs.
__attribute__((target("avx512f"))) void micro_12x32(int64_t kc, const float* __restrict ap, int64_t lda,
                                                    const float* __restrict bp, float* __restrict c, int64_t ldc,
                                                    bool accumulate) {
  __m512 t[12][2];
#pragma GCC unroll 12
  for (int r = 0; r < 12; ++r) {
    t[r][0] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    t[r][1] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
  }
  // Four row bases, so each broadcast is one base + {0, 1, 2}·lda address.
  const float* a0 = ap;
  const float* a3 = ap + 3 * lda;
  const float* a6 = ap + 6 * lda;
  const float* a9 = ap + 9 * lda;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(bp + k * 32), b1 = _mm512_loadu_ps(bp + k * 32 + 16);
    const float* rows[12] = {a0, a0 + lda, a0 + 2 * lda, a3, a3 + lda, a3 + 2 * lda,
                             a6, a6 + lda, a6 + 2 * lda, a9, a9 + lda, a9 + 2 * lda};
#pragma GCC unroll 12
    for (int r = 0; r < 12; ++r) {
      const __m512 av = _mm512_set1_ps(rows[r][k]);
      t[r][0] = _mm512_fmadd_ps(av, b0, t[r][0]);
      t[r][1] = _mm512_fmadd_ps(av, b1, t[r][1]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < 12; ++r) {
    _mm512_storeu_ps(c + r * ldc, t[r][0]);
    _mm512_storeu_ps(c + r * ldc + 16, t[r][1]);
  }
}

// Index vectors of transpose16's stage d = 1 << s: lo picks (i, j) → row i
// keeps its element j when bit d of j is clear, else takes row i+d's j−d;
// hi is the mirror for row i+d.
struct TransposeIdx {
  alignas(64) int32_t lo[4][16];
  alignas(64) int32_t hi[4][16];
};
constexpr TransposeIdx make_transpose_idx() {
  TransposeIdx t{};
  for (int s = 0; s < 4; ++s)
    for (int j = 0; j < 16; ++j) {
      const int d = 1 << s;
      t.lo[s][j] = (j & d) ? 16 + j - d : j;
      t.hi[s][j] = (j & d) ? 16 + j : j + d;
    }
  return t;
}
constexpr TransposeIdx kTransposeIdx = make_transpose_idx();

// out[j] = column j of the 16×16 block whose rows are r[0..15]: four
// butterfly stages, stage d swapping the off-diagonal d×d blocks of each
// 2d×2d block (two-source permutes; no undefined-lane intrinsics).
__attribute__((target("avx512f"))) inline void transpose16(const __m512 r[16], __m512 out[16]) {
  for (int i = 0; i < 16; ++i) out[i] = r[i];
  for (int s = 0; s < 4; ++s) {
    const int d = 1 << s;
    const __m512i lo = _mm512_load_si512(kTransposeIdx.lo[s]), hi = _mm512_load_si512(kTransposeIdx.hi[s]);
    for (int i = 0; i < 16; ++i) {
      if (i & d) continue;
      const __m512 a = out[i], b = out[i + d];
      out[i] = _mm512_permutex2var_ps(a, lo, b);
      out[i + d] = _mm512_permutex2var_ps(a, hi, b);
    }
  }
}

// d[k·nr + j] = src[j·ld + k] for j < 16, k < kc (16 columns of a transposed
// B into a micro-panel), 16 k at a time through register transposes.
__attribute__((target("avx512f"))) void pack_b_transposed16(const float* src, int64_t ld, int64_t kc, float* d,
                                                            int64_t nr) {
  int64_t k = 0;
  for (; k + 16 <= kc; k += 16) {
    __m512 r[16], t[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(src + j * ld + k);
    transpose16(r, t);
    for (int kk = 0; kk < 16; ++kk) _mm512_storeu_ps(d + (k + kk) * nr, t[kk]);
  }
  for (; k < kc; ++k)
    for (int j = 0; j < 16; ++j) d[k * nr + j] = src[j * ld + k];
}
#endif

// The kernel for this machine, chosen once.
const MicroKernel& micro_kernel() {
  static const MicroKernel k = [] {
#ifdef RLX_GEMM_AVX512
    if (__builtin_cpu_supports("avx512f")) return MicroKernel{12, 32, micro_12x32};
#endif
    return MicroKernel{6, 16, micro_6x16};
  }();
  return k;
}

// B(k0.., j0..) → nr-column micro-panels: panel q holds columns j0+q·nr.. as
// [kc][nr], zero padded past nc. Reads follow B's contiguous direction.
void pack_b(View b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float* dst) {
  for (int64_t jp = 0; jp < nc; jp += nr) {
    const int64_t w = std::min(nr, nc - jp);
    float* d = dst + jp * kc;
    if (w < nr)
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t j = w; j < nr; ++j) d[k * nr + j] = 0.0f;
    if (b.cs == 1) {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = b.p + (k0 + k) * b.rs + j0 + jp;
        for (int64_t j = 0; j < w; ++j) d[k * nr + j] = src[j];
      }
      continue;
    }
    int64_t j = 0;
#ifdef RLX_GEMM_AVX512
    if (b.rs == 1 && nr % 16 == 0 && __builtin_cpu_supports("avx512f"))
      for (; j + 16 <= w; j += 16) pack_b_transposed16(b.p + (j0 + jp + j) * b.cs + k0, b.cs, kc, d + j, nr);
#endif
    for (; j < w; ++j)
      for (int64_t k = 0; k < kc; ++k) d[k * nr + j] = b.at(k0 + k, j0 + jp + j);
  }
}

// Rows [i0, i0+rows) × columns [k0, k0+kc) of A → row-major dst with row
// stride kc, zero rows up to a multiple of mr.
void pack_a_rows(View a, int64_t i0, int64_t rows, int64_t k0, int64_t kc, int64_t mr, float* dst) {
  const int64_t padded = (rows + mr - 1) / mr * mr;
  std::fill(dst + rows * kc, dst + padded * kc, 0.0f);
  if (a.cs == 1) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(a.p + (i0 + r) * a.rs + k0, kc, dst + r * kc);
  } else {
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t r = 0; r < rows; ++r) dst[r * kc + k] = a.at(i0 + r, k0 + k);
  }
}

// One K block of A rows [i0, i0+mc) as the kernels read it: full panels at
// rows + ir·lda; the last partial panel (mc not a multiple of mr) in edge,
// mr rows of stride kc.
struct ABlock {
  const float* rows;
  int64_t lda;
  const float* edge;
};

ABlock prepare_a(View a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int64_t mr, float* buf) {
  const int64_t full = mc / mr * mr;
  if (a.cs == 1) {  // rows contiguous: read in place
    if (full < mc) pack_a_rows(a, i0 + full, mc - full, k0, kc, mr, buf);
    return {a.p + i0 * a.rs + k0, a.rs, full < mc ? buf : nullptr};
  }
  pack_a_rows(a, i0, mc, k0, kc, mr, buf);
  return {buf, kc, full < mc ? buf + full * kc : nullptr};
}

// C[mc × w] (row stride ldc) (+)= A block · one packed B panel, w ≤ nr
// valid columns; partial tiles go through a local tile.
void panel_column(const MicroKernel& uk, int64_t kc, const ABlock& a, const float* bp, int64_t mc, int64_t w, float* c,
                  int64_t ldc, bool accumulate) {
  alignas(64) float tile[kMaxMR * kMaxNR];
  for (int64_t ir = 0; ir < mc; ir += uk.mr) {
    const int64_t h = std::min(uk.mr, mc - ir);
    const float* ap = h == uk.mr ? a.rows + ir * a.lda : a.edge;
    const int64_t lda = h == uk.mr ? a.lda : kc;
    float* cp = c + ir * ldc;
    if (h == uk.mr && w == uk.nr) {
      uk.fn(kc, ap, lda, bp, cp, ldc, accumulate);
      continue;
    }
    std::fill_n(tile, uk.mr * uk.nr, 0.0f);
    if (accumulate)
      for (int64_t r = 0; r < h; ++r) std::copy_n(cp + r * ldc, w, tile + r * uk.nr);
    uk.fn(kc, ap, lda, bp, tile, uk.nr, accumulate);
    for (int64_t r = 0; r < h; ++r) std::copy_n(tile + r * uk.nr, w, cp + r * ldc);
  }
}

// C[mc × nc] (row stride ldc) = A(i0.., :) · B(:, j0..) over all K, for
// mc ≤ kMC and nc ≤ kNC; c points at C(i0, j0). Packs its own blocks.
void gemm_tile(View a, View b, int64_t K, int64_t i0, int64_t mc, int64_t j0, int64_t nc, float* c, int64_t ldc,
               GemmScratch& s) {
  const MicroKernel& uk = micro_kernel();
  if (K == 0)
    for (int64_t i = 0; i < mc; ++i) std::fill_n(c + i * ldc, nc, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    pack_b(b, k0, kc, j0, nc, uk.nr, s.b.data());
    const ABlock ab = prepare_a(a, i0, mc, k0, kc, uk.mr, s.a.data());
    for (int64_t jr = 0; jr < nc; jr += uk.nr)
      panel_column(uk, kc, ab, s.b.data() + jr * kc, mc, std::min(uk.nr, nc - jr), c + jr, ldc, k0 > 0);
  }
}

View a_view(const GemmProblem& p, int64_t bi) {
  return p.trans_a ? View{a_base(p, bi), 1, p.M} : View{a_base(p, bi), p.K, 1};
}
View b_view(const GemmProblem& p, int64_t bi) {
  return p.trans_b ? View{b_base(p, bi), 1, p.K} : View{b_base(p, bi), p.N, 1};
}

// Bias and activation on a row of p's C: columns j0 .. j0 + n.
void bias_act(const GemmProblem& p, float* row, int64_t j0, int64_t n) {
  const float* bias = p.bias ? p.bias + j0 : nullptr;
  p.rounds_to_bf16 ? bias_act_row_for_bf16(row, bias, n, p.act) : bias_act_row(row, bias, n, p.act);
}

void epilogue(const GemmProblem& p, float* c, int64_t rows, int64_t j0, int64_t nc) {
  if (p.bias || p.act != Activation::None)
    for (int64_t i = 0; i < rows; ++i) bias_act(p, c + i * p.N, j0, nc);
}

// One task tile of the batched GEMM, with its epilogue.
void blocked_tile(const GemmProblem& p, int64_t bi, int64_t i0, int64_t mc, int64_t j0, int64_t nc, GemmScratch& s) {
  float* c = p.c + bi * p.M * p.N + i0 * p.N + j0;
  gemm_tile(a_view(p, bi), b_view(p, bi), p.K, i0, mc, j0, nc, c, p.N, s);
  epilogue(p, c, mc, j0, nc);
}

// Columns [j0, j0+nc) of every row of a short (M < 4) problem.
RLX_CPU_MULTIVERSION
void gemv_block(const GemmProblem& p, int64_t bi, int64_t j0, int64_t nc, float* arow_buf) {
  const float* a = a_base(p, bi);
  const float* b = b_base(p, bi);
  float* c = p.c + bi * p.M * p.N;
  const float* rows[kGemvMaxM];
  for (int64_t i = 0; i < p.M; ++i) {
    if (!p.trans_a) {
      rows[i] = a + i * p.K;
    } else {
      float* dst = arow_buf + i * p.K;
      for (int64_t k = 0; k < p.K; ++k) dst[k] = a[k * p.M + i];
      rows[i] = dst;
    }
  }
  if (!p.trans_b) {
    for (int64_t i = 0; i < p.M; ++i) std::fill_n(c + i * p.N + j0, nc, 0.0f);
    for (int64_t k = 0; k < p.K; ++k) {
      const float* brow = b + k * p.N + j0;
      for (int64_t i = 0; i < p.M; ++i) axpy(c + i * p.N + j0, rows[i][k], brow, nc);
    }
  } else {
    for (int64_t j = 0; j < nc; ++j) {
      const float* bcol = b + (j0 + j) * p.K;
      for (int64_t i = 0; i < p.M; ++i) c[i * p.N + j0 + j] = dot8(rows[i], bcol, p.K);
    }
  }
  epilogue(p, c + j0, p.M, j0, nc);
}

// Packed B of one GEMM: K block kb (rows k0..) at k0·npad, panel q of it at q·nr·kc.
int64_t packed_b_cols(const GemmProblem& p) { return ceil_div(p.N, micro_kernel().nr) * micro_kernel().nr; }

void pack_all_b(ThreadPool& pool, const GemmProblem& p, float* pb) {
  const MicroKernel& uk = micro_kernel();
  const int64_t np = ceil_div(p.N, uk.nr), npad = np * uk.nr, nkb = ceil_div(p.K, kKC);
  const View bv = b_view(p, 0);
  pool.parallel_for(nkb * np, p.M * p.N * p.K < kSerialWork ? nkb * np : 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t k0 = (t / np) * kKC, kc = std::min(kKC, p.K - k0), q = t % np;
      pack_b(bv, k0, kc, q * uk.nr, std::min(uk.nr, p.N - q * uk.nr), uk.nr, pb + k0 * npad + q * uk.nr * kc);
    }
  });
}

// One GEMM (batch 1): B packed once (or taken packed), then row blocks × column ranges.
void run_packed(ThreadPool& pool, const GemmProblem& p) {
  const MicroKernel& uk = micro_kernel();
  const int64_t M = p.M, N = p.N, K = p.K;
  const int64_t np = ceil_div(N, uk.nr), npad = np * uk.nr;
  const bool serial = M * N * K < kSerialWork;
  const float* pb = p.b_packed;
  if (!pb) {
    // Kept per thread and grown only, so steady-state runs do not fault pages.
    thread_local std::vector<float> packed_b;
    if (packed_b.size() < static_cast<size_t>(K * npad)) packed_b.resize(static_cast<size_t>(K * npad));
    pack_all_b(pool, p, packed_b.data());
    pb = packed_b.data();
  }
  const View av = a_view(p, 0);
  // Column ranges: enough tasks for about four per thread.
  const int64_t mt = ceil_div(M, kMC);
  const int64_t want = std::clamp<int64_t>(ceil_div(4 * int64_t{pool.size()}, mt), 1, np);
  const int64_t per = ceil_div(np, want), nt = ceil_div(np, per);
  pool.parallel_for(mt * nt, serial ? mt * nt : 1, [&](int64_t t0, int64_t t1) {
    GemmScratch s;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t / nt) * kMC, mc = std::min(kMC, M - i0);
      const int64_t q0 = (t % nt) * per, q1 = std::min(np, q0 + per);
      float* c = p.c + i0 * N;
      if (K == 0) {
        for (int64_t i = 0; i < mc; ++i) std::fill_n(c + i * N + q0 * uk.nr, std::min(N, q1 * uk.nr) - q0 * uk.nr, 0.0f);
        epilogue(p, c + q0 * uk.nr, mc, q0 * uk.nr, std::min(N, q1 * uk.nr) - q0 * uk.nr);
        continue;
      }
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kc = std::min(kKC, K - k0);
        const bool last = k0 + kc == K;
        const ABlock ab = prepare_a(av, i0, mc, k0, kc, uk.mr, s.a.data());
        for (int64_t q = q0; q < q1; ++q) {
          const int64_t j0 = q * uk.nr, w = std::min(uk.nr, N - j0);
          panel_column(uk, kc, ab, pb + k0 * npad + q * uk.nr * kc, mc, w, c + j0, N, k0 > 0);
        }
        // On the task's whole column range (still in L2): long rows vectorize
        // better than one nr-wide panel at a time.
        if (last) epilogue(p, c + q0 * uk.nr, mc, q0 * uk.nr, std::min(N, q1 * uk.nr) - q0 * uk.nr);
      }
    }
  });
}

void run_builtin(ThreadPool& pool, const GemmProblem& p) {
  const int64_t work = p.M * p.N * std::max<int64_t>(p.K, 1);
  if (p.M < kGemvMaxM + 1) {
    const int64_t nblk = ceil_div(p.N, kGemvCols);
    const int64_t tasks = p.batch * nblk;
    pool.parallel_for(tasks, work * p.batch < kSerialWork ? tasks : 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> arow(p.trans_a ? static_cast<size_t>(p.M * p.K) : 0);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t bi = t / nblk, j0 = (t % nblk) * kGemvCols;
        gemv_block(p, bi, j0, std::min(kGemvCols, p.N - j0), arow.data());
      }
    });
    return;
  }
  if (p.batch == 1) {
    run_packed(pool, p);
    return;
  }
  const int64_t mt = ceil_div(p.M, kMC), nt = ceil_div(p.N, kNC);
  const int64_t tasks = p.batch * mt * nt;
  pool.parallel_for(tasks, work * p.batch < kSerialWork ? tasks : 1, [&](int64_t t0, int64_t t1) {
    GemmScratch s;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / (mt * nt), r = t % (mt * nt);
      const int64_t i0 = (r / nt) * kMC, j0 = (r % nt) * kNC;
      blocked_tile(p, bi, i0, std::min(kMC, p.M - i0), j0, std::min(kNC, p.N - j0), s);
    }
  });
}

#ifdef RLX_HAVE_BLAS
void run_blas(ThreadPool& pool, const GemmProblem& p) {
  static std::once_flag threads_once;
  std::call_once(threads_once, [&] { openblas_set_num_threads(pool.size()); });
  const auto M = static_cast<blasint>(p.M), N = static_cast<blasint>(p.N), K = static_cast<blasint>(p.K);
  for (int64_t bi = 0; bi < p.batch; ++bi)
    cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                1.0f, a_base(p, bi), p.trans_a ? M : K, b_base(p, bi), p.trans_b ? K : N, 0.0f,
                p.c + bi * p.M * p.N, N);
  if (p.bias || p.act != Activation::None) {
    const int64_t rows = p.batch * p.M;
    pool.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(p.N, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) bias_act(p, p.c + r * p.N, 0, p.N);
    });
  }
}
#endif

}  // namespace

GemmScratch::GemmScratch() : a(static_cast<size_t>(kKC * kMC)), b(static_cast<size_t>(kKC * kNC)) {}

void gemm_serial(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                 int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, GemmScratch& s) {
  const View av{a, a_rs, a_cs}, bv{b, b_rs, b_cs};
  for (int64_t i0 = 0; i0 < M; i0 += kMC)
    for (int64_t j0 = 0; j0 < N; j0 += kNC)
      gemm_tile(av, bv, K, i0, std::min(kMC, M - i0), j0, std::min(kNC, N - j0), c + i0 * ldc + j0, ldc, s);
}

bool blas_built_in() {
#ifdef RLX_HAVE_BLAS
  return true;
#else
  return false;
#endif
}

// Loops over a row: vectorized, the activations through vmath.h (libm's
// erf/exp would run one element at a time).
RLX_CPU_MULTIVERSION
void bias_act_row(float* c, const float* bias, int64_t n, Activation act) {
  if (bias)
    for (int64_t j = 0; j < n; ++j) c[j] += bias[j];
  switch (act) {
    case Activation::None: return;
    case Activation::Relu:
      for (int64_t j = 0; j < n; ++j) c[j] = c[j] > 0.0f ? c[j] : 0.0f;
      return;
    case Activation::Silu:
      for (int64_t j = 0; j < n; ++j) c[j] = silu_fast(c[j]);
      return;
    case Activation::GeluErf:
      for (int64_t j = 0; j < n; ++j) c[j] = gelu_erf_fast(c[j]);
      return;
    case Activation::GeluTanh:
      for (int64_t j = 0; j < n; ++j) c[j] = gelu_tanh_fast(c[j]);
      return;
  }
}

RLX_CPU_MULTIVERSION
void bias_act_row_for_bf16(float* c, const float* bias, int64_t n, Activation act) {
  if (act != Activation::GeluErf) return bias_act_row(c, bias, n, act);
  if (bias)
    for (int64_t j = 0; j < n; ++j) c[j] += bias[j];
  for (int64_t j = 0; j < n; ++j) c[j] = gelu_erf_for_bf16(c[j]);
}

namespace {

// Whether gemm_f32 hands p to OpenBLAS.
bool takes_blas(const GemmProblem& p, GemmPath want) {
#ifdef RLX_HAVE_BLAS
  const bool fits_int = p.M <= INT_MAX && p.N <= INT_MAX && p.K <= INT_MAX && p.K > 0;
  if (want == GemmPath::Blas) return fits_int;
  if (want == GemmPath::Builtin) return false;
  // With AVX-512 the built-in 12×32 FMA tile is as fast as OpenBLAS at
  // embedding shapes and faster end to end (no spinning BLAS threads
  // competing with the pool); bench/cpu_bench.cpp --minilm compares them.
  return fits_int && micro_kernel().nr != 32 &&
         p.M * p.N * p.K >= (p.batch == 1 ? kBlasMinWork : kBlasMinWorkBatched) && env_bool("RLX_CPU_BLAS");
#else
  (void)p, (void)want;
  return false;
#endif
}

// Whether gemm_f32(pool, p, want) runs run_packed, which packs all of B first.
bool packs_all_b(const GemmProblem& p, GemmPath want) {
  return p.batch == 1 && p.M > kGemvMaxM && p.N > 0 && !takes_blas(p, want);
}

}  // namespace

bool gemm_packs_b(const GemmProblem& p) { return packs_all_b(p, GemmPath::Auto); }

std::vector<float> gemm_pack_b(ThreadPool& pool, const GemmProblem& p) {
  std::vector<float> packed(static_cast<size_t>(p.K * packed_b_cols(p)));
  pack_all_b(pool, p, packed.data());
  return packed;
}

GemmPath gemm_f32(ThreadPool& pool, const GemmProblem& p, GemmPath want) {
  if (p.batch <= 0 || p.M <= 0 || p.N <= 0) return GemmPath::Builtin;
  RLX_CHECK(p.b || p.K == 0 || (p.b_packed && packs_all_b(p, want)),
            "gemm_f32: B is given only packed, and this problem's path reads it unpacked");
#ifdef RLX_HAVE_BLAS
  if (takes_blas(p, want)) {
    run_blas(pool, p);
    return GemmPath::Blas;
  }
#endif
  run_builtin(pool, p);
  return GemmPath::Builtin;
}

}  // namespace rlx::cpu
