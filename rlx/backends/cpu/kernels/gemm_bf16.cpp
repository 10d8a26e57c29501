// bf16 GEMMs for the CPU backend's bf16 matmuls: C = A · B (+ bias,
// activation), bf16 in and out, f32 accumulation, one rounding. Two kernels
// read the same packed B: Intel AMX tiles (Sapphire Rapids and later) and,
// where AMX is absent or not granted, AVX512-BF16's VDPBF16PS (Zen 4/5,
// Cooper Lake), which adds two bf16 products to each f32 lane: twice the
// multiply-adds of an f32 FMA per instruction, and no f32 staging of A or B.
//
// TDPBF16PS adds a 16 × 32 bf16 tile of A (16 rows of 32 k) times a 32 × 16
// tile of B into a 16 × 16 f32 tile, B's tile stored as 16 rows of column
// pairs ("VNNI": row r holds B(2r, n), B(2r + 1, n) for n = 0..15). Eight tile
// registers: four accumulate a 32 × 32 block of C, two hold A's rows 0-15 and
// 16-31, two B's columns 0-15 and 16-31; each 32-deep step loads four tiles
// for four products. A VNNI tile row is also one 512-bit register of 16
// column pairs, which is what VDPBF16PS takes: its kernel holds up to 12 rows
// × 32 columns of C in 24 registers and, per pair of k, loads B's two rows of
// the block and broadcasts each A row's pair.
//
// B is packed to VNNI (zero-padded past N and K) in parallel: once per call,
// or, for a param, once until the param is next written (its ParamCache).
// AMX: a task owns 32-row blocks of A: it copies a block into a zero-padded
// [32][K rounded up to 32] buffer (tails need no other path), sweeps every
// 32-column block of C, adds bias to the f32 block, applies the activation
// and rounds to bf16 into C (no f32 copy of C is written). Reading a Linear
// weight ([N, K]) in place as the A-side tile, with A's block packed instead,
// measured 5-12% slower end to end (strided tile rows; the packed B is
// contiguous). Products of bf16 values are exact in f32; both instructions
// sum pairs before accumulating and flush denormals, so sums differ from the
// f32 kernel's in the last bits of f32, far below bf16's precision.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "rlx/backends/cpu/kernels/gemm.h"
#include "rlx/core/env.h"
#include "rlx/core/error.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(RLX_NO_MULTIVERSION) && (defined(__clang__) || __GNUC__ >= 11)
#define RLX_CPU_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace rlx::cpu {
namespace {

std::string avx512_bf16_mode() {
  std::string mode = env_string("RLX_CPU_AVX512_BF16");
  RLX_CHECK_AS(InvalidArgument, mode == "auto" || mode == "1" || mode == "0", "RLX_CPU_AVX512_BF16='", mode,
               "' must be auto, 1 or 0");
  return mode;
}

}  // namespace

// VDPBF16PS reads the bf16 weights once and wastes no tile rows on a short
// A, but it runs at about 0.7 of the f32 FMA's multiply-adds, while AMX
// takes a 32-row block in the time of any shorter one. GFLOP/s, VDPBF16PS /
// AMX, M × 4096², on a 16-thread AMX Xeon (docs/performance.md, fifty-third
// session) at 2, 4, 8 and 16 threads: M = 4: 123 / 84, 197 / 169, 363 / 256,
// 626 / 407; M = 8: 117 / 154, 246 / 341, 410 / 395, 884 / 922; the 2-core
// development machine alike (4: 132-137 / 96-120, 8: 177 / 207-218). Both
// kernels split a short A's columns across the threads, so the crossover does
// not move with them. Without AMX, VDPBF16PS against the staged f32 kernel:
// ahead up to 32 rows and more (32 × 4096² 904 / 610 on 16 threads). AMD's
// Zen 4 runs VDPBF16PS at the FMA's rate, so twice its multiply-adds: on the
// 2-core development machine 263-374 against 102-188 GFLOP/s at 64-512 rows,
// and `rlx embed --dtype bf16` 499-520 against 276-316 texts/s (fifty-ninth
// session); there it takes every row count.
Bf16Gemm bf16_gemm_for(int64_t M) {
  const bool amx = amx_bf16_available();
  const bool every_m = avx512_bf16_mode() == "1" || (avx512_bf16_mode() == "auto" && avx512_bf16_full_rate());
  if (avx512_bf16_available() && (every_m || M <= (amx ? 4 : 32))) return Bf16Gemm::Avx512;
  return amx ? Bf16Gemm::Amx : Bf16Gemm::None;
}

#ifdef RLX_CPU_AMX
namespace {

constexpr int64_t kStep = 32;                       // K per tile product, and the C block's side
constexpr int64_t kTileBytes = 16 * 64;             // one tile register's 1 KB
constexpr int64_t kStepBytes = 2 * kTileBytes;      // one packed 32-deep step of a column block
constexpr int64_t kStepElems = kStepBytes / 2;      // in bf16

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Whether the CPU has AMX-TILE and AMX-BF16 and Linux lets this process use
// the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, once per process).
bool amx_usable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tile = (edx >> 24) & 1, bf16 = (edx >> 22) & 1;
  if (!tile || !bf16) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Palette 1 with every tile 16 rows × 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = 64;
      rows[t] = 16;
    }
  }
};

// The VNNI form of 32 columns j0..j0+31 of Y(k, j) = y[k·k_stride + j·j_stride]
// (K × J), all of K: steps of two tiles (columns 16h..16h+15), tile row r,
// column c, element e being Y(32·ks + 2r + e, j0 + 16h + c); zeros past K, J.
void pack_vnni(const uint16_t* y, int64_t k_stride, int64_t j_stride, int64_t K, int64_t J, int64_t j0,
               uint16_t* dst) {
  const int64_t steps = round_up(K, kStep) / kStep;
  for (int64_t ks = 0; ks < steps; ++ks)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t r = 0; r < 16; ++r)
        for (int64_t c = 0; c < 16; ++c, dst += 2) {
          const int64_t k = ks * kStep + 2 * r, j = j0 + 16 * h + c;
          dst[0] = j < J && k < K ? y[k * k_stride + j * j_stride] : uint16_t{0};
          dst[1] = j < J && k + 1 < K ? y[(k + 1) * k_stride + j * j_stride] : uint16_t{0};
        }
}

// The 32 × 32 f32 block at `staged` + bias, activation, rounded into C's
// rows m0.. and columns n0...
void store_block(const GemmBf16Problem& p, float* staged, int64_t m0, int64_t rows, int64_t n0) {
  const int64_t cols = std::min(kStep, p.N - n0);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = staged + r * kStep;
    bias_act_row_for_bf16(row, p.bias ? p.bias + n0 : nullptr, cols, p.act);
    f32_to_bf16_n(row, p.c + (m0 + r) * p.N + n0, cols);
  }
}

// Both kernels' work split: tasks of `task_rows` rows × a range of `per`
// column blocks, as many ranges as give about four tasks per thread where
// the rows alone give fewer (a short A would otherwise keep one thread busy).
struct TaskGrid {
  int64_t row_tasks, col_tasks, per;
  TaskGrid(int64_t M, int64_t blocks, int64_t task_rows, int threads) {
    row_tasks = (M + task_rows - 1) / task_rows;
    const int64_t groups = std::clamp<int64_t>((4 * int64_t{threads} + row_tasks - 1) / row_tasks, 1, blocks);
    per = (blocks + groups - 1) / groups;
    col_tasks = (blocks + per - 1) / per;
  }
};

// Tasks [first, last) of the grid g (32-row blocks of C); bp is B packed by pack_vnni.
__attribute__((target("amx-tile,amx-bf16"))) void amx_tasks(const GemmBf16Problem& p, const uint16_t* bp,
                                                            const TaskGrid& g, int64_t first, int64_t last) {
  const int64_t Kp = round_up(p.K, kStep), steps = Kp / kStep, blocks = round_up(p.N, kStep) / kStep;
  std::vector<uint16_t> a(static_cast<size_t>(kStep * Kp));  // zeros: columns past K stay so
  alignas(64) float staged[kStep * kStep];
  const TileConfig config;
  _tile_loadconfig(&config);
  int64_t staged_mb = -1;  // the row block whose A is in `a`
  for (int64_t t = first; t < last; ++t) {
    const int64_t mb = t / g.col_tasks, nb0 = (t % g.col_tasks) * g.per, nb1 = std::min(blocks, nb0 + g.per);
    const int64_t m0 = mb * kStep, rows = std::min(kStep, p.M - m0);
    if (mb != staged_mb) {
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(a.data() + r * Kp, p.a + (m0 + r) * p.lda, static_cast<size_t>(p.K) * 2);
      std::fill(a.begin() + rows * Kp, a.end(), uint16_t{0});  // rows past M (the last block)
      staged_mb = mb;
    }
    for (int64_t nb = nb0; nb < nb1; ++nb) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const uint16_t* b = bp + nb * steps * kStepElems;
      for (int64_t ks = 0; ks < steps; ++ks, b += kStepElems) {
        _tile_loadd(4, a.data() + ks * kStep, Kp * 2);
        _tile_loadd(5, a.data() + 16 * Kp + ks * kStep, Kp * 2);
        _tile_loadd(6, b, 64);
        _tile_loadd(7, b + kTileBytes / 2, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, staged, kStep * 4);
      _tile_stored(1, staged + 16, kStep * 4);
      _tile_stored(2, staged + 16 * kStep, kStep * 4);
      _tile_stored(3, staged + 16 * kStep + 16, kStep * 4);
      store_block(p, staged, m0, rows, nb * kStep);
    }
  }
  _tile_release();
}

// AVX512F (with the OS's zmm state, which __builtin_cpu_supports checks) and
// AVX512_BF16 (CPUID leaf 7, subleaf 1, EAX bit 5).
bool avx512_bf16_usable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__builtin_cpu_supports("avx512f") || !__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax >> 5) & 1;
}

// Every AVX512-BF16 CPU AMD makes (Zen 4 on) issues VDPBF16PS at the FMA's
// rate; Intel's (Cooper Lake, Sapphire Rapids) at about 0.7 of it.
bool amd_cpu() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string(vendor) == "AuthenticAMD";
}

constexpr int64_t kDpRows = 12;      // C rows one VDPBF16PS call holds: 24 of the 32 registers
constexpr int64_t kDpTaskRows = 48;  // rows a task sweeps each column block with (the block stays in L1/L2)

// staged[r·32 + j] = Σ_k A(r, k) · B(k, j) for r < R and the packed column
// block bp, over `pairs` pairs of k; A's row r at a + r·lda, read as 32-bit
// pairs (2·pairs elements of it).
template <int R>
__attribute__((target("avx512f,avx512bf16"))) void dp_rows(const uint16_t* a, int64_t lda, const uint16_t* bp,
                                                           int64_t pairs, float* staged) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < pairs; k0 += 16, bp += kStepElems) {
    const int64_t n = std::min<int64_t>(16, pairs - k0);
    for (int64_t i = 0; i < n; ++i) {
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + i * 32);
      const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + kTileBytes / 2 + i * 32);
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, a + r * lda + 2 * (k0 + i), sizeof(pair));
        const __m512bh ar = (__m512bh)_mm512_set1_epi32(pair);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_store_ps(staged + r * kStep, acc[r][0]);
    _mm512_store_ps(staged + r * kStep + 16, acc[r][1]);
  }
}

using DpRowsFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*);
constexpr DpRowsFn kDpRowsFns[kDpRows] = {dp_rows<1>, dp_rows<2>, dp_rows<3>, dp_rows<4>,  dp_rows<5>,  dp_rows<6>,
                                          dp_rows<7>, dp_rows<8>, dp_rows<9>, dp_rows<10>, dp_rows<11>, dp_rows<12>};

// Rows [m0, m1) × column blocks [nb0, nb1) of C by VDPBF16PS; bp as pack_vnni packs it.
void dp_task(const GemmBf16Problem& p, const uint16_t* bp, int64_t m0, int64_t m1, int64_t nb0, int64_t nb1) {
  const int64_t steps = round_up(p.K, kStep) / kStep, pairs = (p.K + 1) / 2;
  const uint16_t* a = p.a + m0 * p.lda;
  int64_t lda = p.lda;
  std::vector<uint16_t> padded;
  if (p.K % 2) {  // the last pair's second element lies past the row: a copy with a zero there
    lda = p.K + 1;
    padded.assign(static_cast<size_t>((m1 - m0) * lda), uint16_t{0});
    for (int64_t r = 0; r < m1 - m0; ++r)
      std::memcpy(padded.data() + r * lda, a + r * p.lda, static_cast<size_t>(p.K) * 2);
    a = padded.data();
  }
  alignas(64) float staged[kDpRows * kStep];
  for (int64_t nb = nb0; nb < nb1; ++nb)
    for (int64_t i0 = m0; i0 < m1; i0 += kDpRows) {
      const int64_t rows = std::min(kDpRows, m1 - i0);
      kDpRowsFns[rows - 1](a + (i0 - m0) * lda, lda, bp + nb * steps * kStepElems, pairs, staged);
      store_block(p, staged, i0, rows, nb * kStep);
    }
}

}  // namespace

bool amx_bf16_available() {
  static const bool usable = amx_usable();
  return usable && env_bool("RLX_CPU_AMX");
}

bool avx512_bf16_available() {
  static const bool usable = avx512_bf16_usable();
  return usable && avx512_bf16_mode() != "0";
}

bool avx512_bf16_full_rate() {
  static const bool amd = amd_cpu();
  return amd && avx512_bf16_available();
}

std::vector<uint16_t> bf16_pack_b(ThreadPool& pool, const GemmBf16Problem& p) {
  const int64_t steps = round_up(p.K, kStep) / kStep, blocks = round_up(p.N, kStep) / kStep;
  std::vector<uint16_t> bp(static_cast<size_t>(blocks * steps * kStepElems));
  const int64_t k_stride = p.trans_b ? 1 : p.N, n_stride = p.trans_b ? p.K : 1;
  pool.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nb = begin; nb < end; ++nb)
      pack_vnni(p.b, k_stride, n_stride, p.K, p.N, nb * kStep, bp.data() + nb * steps * kStepElems);
  });
  return bp;
}

namespace {

// p.b_packed, or B packed into `storage` by this call.
const uint16_t* packed_b(ThreadPool& pool, const GemmBf16Problem& p, std::vector<uint16_t>& storage) {
  if (p.b_packed) return p.b_packed;
  storage = bf16_pack_b(pool, p);
  return storage.data();
}

}  // namespace

void gemm_bf16_amx(ThreadPool& pool, const GemmBf16Problem& p) {
  RLX_CHECK(amx_bf16_available(), "gemm_bf16_amx: AMX-BF16 is not usable here");
  if (p.M <= 0 || p.N <= 0) return;
  std::vector<uint16_t> storage;
  const uint16_t* bp = packed_b(pool, p, storage);
  const TaskGrid g(p.M, round_up(p.N, kStep) / kStep, kStep, pool.size());
  pool.parallel_for(g.row_tasks * g.col_tasks, 1, [&](int64_t begin, int64_t end) { amx_tasks(p, bp, g, begin, end); });
}

void gemm_bf16_avx512(ThreadPool& pool, const GemmBf16Problem& p) {
  RLX_CHECK(avx512_bf16_available(), "gemm_bf16_avx512: AVX512-BF16 is not usable here");
  if (p.M <= 0 || p.N <= 0) return;
  std::vector<uint16_t> storage;
  const uint16_t* bp = packed_b(pool, p, storage);
  const int64_t blocks = round_up(p.N, kStep) / kStep;
  const TaskGrid g(p.M, blocks, kDpTaskRows, pool.size());
  pool.parallel_for(g.row_tasks * g.col_tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t m0 = (t / g.col_tasks) * kDpTaskRows, nb0 = (t % g.col_tasks) * g.per;
      dp_task(p, bp, m0, std::min(p.M, m0 + kDpTaskRows), nb0, std::min(blocks, nb0 + g.per));
    }
  });
}

#else

bool amx_bf16_available() { return false; }
bool avx512_bf16_available() { return false; }
bool avx512_bf16_full_rate() { return false; }

void gemm_bf16_amx(ThreadPool&, const GemmBf16Problem&) {
  RLX_CHECK(false, "gemm_bf16_amx: this build has no AMX code (x86-64 Linux with GCC ≥ 11 or Clang)");
}

void gemm_bf16_avx512(ThreadPool&, const GemmBf16Problem&) {
  RLX_CHECK(false, "gemm_bf16_avx512: this build has no AVX512-BF16 code (x86-64 Linux with GCC ≥ 11 or Clang)");
}

std::vector<uint16_t> bf16_pack_b(ThreadPool&, const GemmBf16Problem&) {
  RLX_CHECK(false, "bf16_pack_b: this build has no bf16 GEMM code (x86-64 Linux with GCC ≥ 11 or Clang)");
  return {};
}

#endif

}  // namespace rlx::cpu
