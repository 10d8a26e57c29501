// f32 GEMM for the CPU backend.
//
// Paths, chosen per problem:
//  - OpenBLAS cblas_sgemm for large problems (built with RLX_HAVE_BLAS,
//    RLX_CPU_BLAS=1, M·N·K ≥ 64³ per GEMM, ≥ 256³ when batched). Called from
//    this thread only, one call per batch; OpenBLAS runs its own threads
//    (sized once to our pool's size). A batch whose B is shared and A not
//    transposed is folded into one GEMM by the caller (matmul.cpp).
//  - Built-in blocked kernel otherwise. Work is split into tasks of
//    kMC×kNC output tiles (× batch) run on the pool. Per task and per K block
//    of kKC: B is packed into kNR-column micro-panels ([kc][kNR], zero padded)
//    and A into kMR-row micro-panels ([kc][kMR]); a kMR×kNR register tile then
//    accumulates over k in order, so each C element is a sequential f32 sum.
//    A tile (6 KiB) stays in L1, the packed B block (256 KiB) in L2. Packing
//    reads strided views, so transposes (and attention's head-strided Q/K/V
//    through gemm_serial) cost nothing extra.
//  - Row-streaming GEMV for M < 4 (decode): no packing, B is read once;
//    i-k-j axpy for row-major B, 8-lane dot products for transposed B.
// The bias+activation epilogue runs on each finished tile, while it is hot.
#include "rlx/backends/cpu/kernels/gemm.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <vector>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/core/env.h"

#ifdef RLX_HAVE_BLAS
#include <cblas.h>
#endif

namespace rlx::cpu {
namespace {

constexpr int64_t kMR = 6;    // register tile rows
constexpr int64_t kNR = 16;   // register tile columns (two 8-float vectors)
constexpr int64_t kKC = 256;  // K block
constexpr int64_t kMC = 72;   // task tile rows (a multiple of kMR)
constexpr int64_t kNC = 256;  // task tile columns (a multiple of kNR)
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

// B(k0.., j0..) → micro-panels: panel q holds columns j0+q·kNR.. as [kc][kNR],
// zero padded past nc. Reads follow B's contiguous direction.
void pack_b(View b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  for (int64_t jp = 0; jp < nc; jp += kNR) {
    const int64_t w = std::min(kNR, nc - jp);
    float* d = dst + jp * kc;
    if (w < kNR)
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t j = w; j < kNR; ++j) d[k * kNR + j] = 0.0f;
    if (b.cs == 1) {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = b.p + (k0 + k) * b.rs + j0 + jp;
        for (int64_t j = 0; j < w; ++j) d[k * kNR + j] = src[j];
      }
    } else {
      for (int64_t j = 0; j < w; ++j)
        for (int64_t k = 0; k < kc; ++k) d[k * kNR + j] = b.at(k0 + k, j0 + jp + j);
    }
  }
}

// A(i0.., k0..) → micro-panels: panel q holds rows i0+q·kMR.. as [kc][kMR],
// zero padded past mc.
void pack_a(View a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* dst) {
  for (int64_t ip = 0; ip < mc; ip += kMR) {
    const int64_t h = std::min(kMR, mc - ip);
    float* d = dst + ip * kc;
    if (h < kMR)
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t r = h; r < kMR; ++r) d[k * kMR + r] = 0.0f;
    if (a.cs == 1) {
      for (int64_t r = 0; r < h; ++r) {
        const float* src = a.p + (i0 + ip + r) * a.rs + k0;
        for (int64_t k = 0; k < kc; ++k) d[k * kMR + r] = src[k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t r = 0; r < h; ++r) d[k * kMR + r] = a.at(i0 + ip + r, k0 + k);
    }
  }
}

// tile[kMR][kNR] += Apanel[kc][kMR] · Bpanel[kc][kNR], k in order.
RLX_CPU_MULTIVERSION
void micro_kernel(int64_t kc, const float* __restrict ap, const float* __restrict bp, float* __restrict tile) {
  v8f c[kMR][2];
  std::memcpy(c, tile, sizeof(c));
  for (int64_t k = 0; k < kc; ++k) {
    v8f b0, b1;
    std::memcpy(&b0, bp + k * kNR, sizeof(b0));
    std::memcpy(&b1, bp + k * kNR + 8, sizeof(b1));
    const float* a = ap + k * kMR;
    for (int r = 0; r < kMR; ++r) {
      c[r][0] += a[r] * b0;
      c[r][1] += a[r] * b1;
    }
  }
  std::memcpy(tile, c, sizeof(c));
}

// C[mc × nc] (row stride ldc) = A(i0.., :) · B(:, j0..) over all K, for
// mc ≤ kMC and nc ≤ kNC; c points at C(i0, j0).
void gemm_tile(View a, View b, int64_t K, int64_t i0, int64_t mc, int64_t j0, int64_t nc, float* c, int64_t ldc,
               GemmScratch& s) {
  alignas(64) float tile[kMR * kNR];
  if (K == 0)
    for (int64_t i = 0; i < mc; ++i) std::fill_n(c + i * ldc, nc, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    pack_b(b, k0, kc, j0, nc, s.b.data());
    pack_a(a, i0, mc, k0, kc, s.a.data());
    for (int64_t ir = 0; ir < mc; ir += kMR) {
      const int64_t h = std::min(kMR, mc - ir);
      for (int64_t jr = 0; jr < nc; jr += kNR) {
        const int64_t w = std::min(kNR, nc - jr);
        float* cp = c + ir * ldc + jr;
        std::fill_n(tile, kMR * kNR, 0.0f);
        if (k0 > 0)
          for (int64_t r = 0; r < h; ++r) std::copy_n(cp + r * ldc, w, tile + r * kNR);
        micro_kernel(kc, s.a.data() + ir * kc, s.b.data() + jr * kc, tile);
        for (int64_t r = 0; r < h; ++r) std::copy_n(tile + r * kNR, w, cp + r * ldc);
      }
    }
  }
}

View a_view(const GemmProblem& p, int64_t bi) {
  return p.trans_a ? View{a_base(p, bi), 1, p.M} : View{a_base(p, bi), p.K, 1};
}
View b_view(const GemmProblem& p, int64_t bi) {
  return p.trans_b ? View{b_base(p, bi), 1, p.K} : View{b_base(p, bi), p.N, 1};
}

// One task tile of the parallel GEMM, with its epilogue.
void blocked_tile(const GemmProblem& p, int64_t bi, int64_t i0, int64_t mc, int64_t j0, int64_t nc, GemmScratch& s) {
  float* c = p.c + bi * p.M * p.N + i0 * p.N + j0;
  gemm_tile(a_view(p, bi), b_view(p, bi), p.K, i0, mc, j0, nc, c, p.N, s);
  if (p.bias || p.act != Activation::None)
    for (int64_t i = 0; i < mc; ++i) bias_act_row(c + i * p.N, p.bias ? p.bias + j0 : nullptr, nc, p.act);
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
  if (p.bias || p.act != Activation::None)
    for (int64_t i = 0; i < p.M; ++i) bias_act_row(c + i * p.N + j0, p.bias ? p.bias + j0 : nullptr, nc, p.act);
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
      for (int64_t r = r0; r < r1; ++r) bias_act_row(p.c + r * p.N, p.bias, p.N, p.act);
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

void bias_act_row(float* c, const float* bias, int64_t n, Activation act) {
  if (bias)
    for (int64_t j = 0; j < n; ++j) c[j] += bias[j];
  switch (act) {
    case Activation::None: return;
    case Activation::Relu:
      for (int64_t j = 0; j < n; ++j) c[j] = c[j] > 0.0f ? c[j] : 0.0f;
      return;
    case Activation::Silu:
      for (int64_t j = 0; j < n; ++j) c[j] = c[j] / (1.0f + std::exp(-c[j]));
      return;
    case Activation::GeluErf:
      for (int64_t j = 0; j < n; ++j) c[j] = gelu_erf(c[j]);
      return;
    case Activation::GeluTanh:
      for (int64_t j = 0; j < n; ++j) c[j] = gelu_tanh(c[j]);
      return;
  }
}

GemmPath gemm_f32(ThreadPool& pool, const GemmProblem& p, GemmPath want) {
  if (p.batch <= 0 || p.M <= 0 || p.N <= 0) return GemmPath::Builtin;
#ifdef RLX_HAVE_BLAS
  const bool fits_int = p.M <= INT_MAX && p.N <= INT_MAX && p.K <= INT_MAX && p.K > 0;
  bool blas = false;
  if (want == GemmPath::Blas) blas = fits_int;
  else if (want == GemmPath::Auto)
    blas = fits_int && p.M * p.N * p.K >= (p.batch == 1 ? kBlasMinWork : kBlasMinWorkBatched) &&
           env_bool("RLX_CPU_BLAS");
  if (blas) {
    run_blas(pool, p);
    return GemmPath::Blas;
  }
#else
  (void)want;
#endif
  run_builtin(pool, p);
  return GemmPath::Builtin;
}

}  // namespace rlx::cpu
