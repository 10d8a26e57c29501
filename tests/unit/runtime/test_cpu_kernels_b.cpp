// CPU kernels: MatMul, FusedMatMulBiasAct, the norms, Attention, Rope and the
// fused GLUs, each checked against a plain double-precision reference on
// random data (odd sizes). Inputs are rounded to their storage dtype first,
// so the reference sees exactly what the kernel sees; tolerances then only
// cover f32 arithmetic and the output's rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/gemm.h"
#include "rlx/backends/cpu/kernels/vmath.h"
#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

namespace rlx {
namespace {

using test::ScopedEnv;

// ---------------------------------------------------------------- helpers

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// A random tensor stored as `dtype` and its exact values as doubles.
struct Data {
  Tensor t;
  std::vector<double> v;
};

Data random_tensor(DType dtype, std::vector<int64_t> shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  auto vals = random_values(static_cast<size_t>(numel(shape)), seed, lo, hi);
  Tensor t = Tensor::from(vals, shape).to(dtype);
  return {t, t.to_f64()};
}

Shape shape_of(const std::vector<int64_t>& dims) { return make_shape(dims); }

// Per-dtype tolerance of the output: |got − ref| ≤ atol + rtol·|ref|.
struct Tol {
  double atol, rtol;
};
Tol tol_for(DType t, double f32_tol = 2e-5) {
  switch (t) {
    case DType::F16: return {2e-3, 2e-3};
    case DType::BF16: return {1.5e-2, 1e-2};
    default: return {f32_tol, f32_tol};
  }
}

void expect_close(const Tensor& got, const std::vector<double>& ref, Tol tol, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(ref.size())) << what;
  const auto g = got.to_f64();
  int bad = 0;
  double worst = 0.0;
  std::ostringstream first;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(g[i] - ref[i]);
    const double lim = tol.atol + tol.rtol * std::fabs(ref[i]);
    if (!(err <= lim)) {
      if (bad < 6) first << "\n  [" << i << "] got " << g[i] << " want " << ref[i] << " (err " << err << ")";
      ++bad;
    }
    worst = std::max(worst, err);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " outside atol " << tol.atol << " rtol "
                    << tol.rtol << ", max err " << worst << first.str();
}

// Compiles `g` for the CPU and runs it on `inputs` (declaration order).
Tensor run1(const Graph& g, const std::vector<Tensor>& inputs) {
  Session s("cpu");
  auto exe = s.compile(g);
  auto outs = exe->run(inputs);
  EXPECT_EQ(outs.size(), 1u);
  return outs.at(0);
}


constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

// ---------------------------------------------------------------- matmul

double act_ref(Activation a, double x) {
  switch (a) {
    case Activation::None: return x;
    case Activation::Relu: return x > 0 ? x : 0;
    case Activation::Silu: return x / (1 + std::exp(-x));
    case Activation::GeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

// Reference batched matmul with numpy broadcasting over batch dims.
std::vector<double> matmul_ref(const std::vector<double>& a, std::vector<int64_t> ad, const std::vector<double>& b,
                               std::vector<int64_t> bd, bool ta, bool tb, const std::vector<double>* bias,
                               Activation act, std::vector<int64_t>* out_dims) {
  const int64_t M = ta ? ad[ad.size() - 1] : ad[ad.size() - 2];
  const int64_t K = ta ? ad[ad.size() - 2] : ad[ad.size() - 1];
  const int64_t N = tb ? bd[bd.size() - 2] : bd[bd.size() - 1];
  std::vector<int64_t> abat(ad.begin(), ad.end() - 2), bbat(bd.begin(), bd.end() - 2);
  const size_t r = std::max(abat.size(), bbat.size());
  abat.insert(abat.begin(), r - abat.size(), 1);
  bbat.insert(bbat.begin(), r - bbat.size(), 1);
  std::vector<int64_t> obat(r);
  for (size_t i = 0; i < r; ++i) obat[i] = std::max(abat[i], bbat[i]);
  const int64_t nb = numel(obat);
  std::vector<double> out(static_cast<size_t>(nb * M * N));
  for (int64_t t = 0; t < nb; ++t) {
    int64_t rem = t, aoff = 0, boff = 0, as = 1, bs = 1;
    for (size_t i = r; i-- > 0;) {
      const int64_t idx = rem % obat[i];
      rem /= obat[i];
      aoff += (abat[i] == 1 ? 0 : idx) * as;
      boff += (bbat[i] == 1 ? 0 : idx) * bs;
      as *= abat[i];
      bs *= bbat[i];
    }
    const double* A = a.data() + aoff * M * K;
    const double* B = b.data() + boff * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += (ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
        if (bias) s += (*bias)[static_cast<size_t>(n)];
        out[static_cast<size_t>((t * M + m) * N + n)] = act_ref(act, s);
      }
  }
  if (out_dims) {
    *out_dims = obat;
    out_dims->push_back(M);
    out_dims->push_back(N);
  }
  return out;
}

// f32 matmul error grows with K; scale the tolerance by √K·|values|.
Tol matmul_tol(DType t, int64_t K) {
  Tol tol = tol_for(t);
  if (t == DType::F32) tol = {2e-6 * std::sqrt(static_cast<double>(K)) + 1e-6, 1e-5};
  return tol;
}

void check_matmul(DType dt, std::vector<int64_t> ad, std::vector<int64_t> bd, bool ta, bool tb, uint32_t seed) {
  auto A = random_tensor(dt, ad, seed);
  auto B = random_tensor(dt, bd, seed + 1);
  Graph g;
  auto a = input(g, "a", dt, shape_of(ad));
  auto b = input(g, "b", dt, shape_of(bd));
  output("y", matmul(a, b, MatMulAttrs{ta, tb}));
  std::vector<int64_t> od;
  auto ref = matmul_ref(A.v, ad, B.v, bd, ta, tb, nullptr, Activation::None, &od);
  Tensor y = run1(g, {A.t, B.t});
  EXPECT_EQ(y.shape(), od);
  EXPECT_EQ(y.dtype(), dt);
  const int64_t K = ta ? ad[ad.size() - 2] : ad.back();
  expect_close(y, ref, matmul_tol(dt, K),
               str("matmul ", dt, " A", shape_str(ad), " B", shape_str(bd), " ta=", ta, " tb=", tb));
}

TEST(CpuKernelsB, MatMulSmallAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<int64_t> ad = ta ? std::vector<int64_t>{13, 7} : std::vector<int64_t>{7, 13};
      std::vector<int64_t> bd = tb ? std::vector<int64_t>{11, 13} : std::vector<int64_t>{13, 11};
      check_matmul(DType::F32, ad, bd, ta, tb, 10);
    }
}

// Large enough for BLAS (M·N·K ≥ 64³), run once with and once without it;
// sizes cross the built-in kernel's K, row and column blocks.
TEST(CpuKernelsB, MatMulBlasAndBuiltinPaths) {
  for (const char* blas : {"1", "0"}) {
    ScopedEnv env("RLX_CPU_BLAS", blas);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t M = 151, K = 301, N = 263;
        std::vector<int64_t> ad = ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K};
        std::vector<int64_t> bd = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
        SCOPED_TRACE(str("RLX_CPU_BLAS=", blas));
        check_matmul(DType::F32, ad, bd, ta, tb, 20);
      }
  }
}

TEST(CpuKernelsB, MatMulBatchedBroadcast) {
  for (const char* blas : {"1", "0"}) {
    ScopedEnv env("RLX_CPU_BLAS", blas);
    check_matmul(DType::F32, {2, 1, 5, 7}, {3, 7, 4}, false, false, 30);
    check_matmul(DType::F32, {2, 1, 7, 5}, {3, 4, 7}, true, true, 31);
    check_matmul(DType::F32, {3, 9, 33}, {33, 17}, false, false, 32);   // B shared: folded into one GEMM
    check_matmul(DType::F32, {3, 33, 9}, {33, 17}, true, false, 33);    // transposed A: per batch
    check_matmul(DType::F32, {5, 70, 65}, {1, 66, 65}, false, true, 34);  // per-batch, BLAS-sized
    check_matmul(DType::F32, {4, 70, 65}, {4, 65, 66}, false, false, 35);
  }
}

// M < 4 uses the row-streaming GEMV; M = 4, 5 the register tile with padding.
TEST(CpuKernelsB, MatMulShortRows) {
  for (int64_t M : {1, 2, 3, 4, 5, 7})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(str("M=", M));
      check_matmul(DType::F32, {M, 300}, tb ? std::vector<int64_t>{257, 300} : std::vector<int64_t>{300, 257}, false,
                   tb, 40);
      check_matmul(DType::F32, {300, M}, {300, 129}, true, false, 41);
    }
  check_matmul(DType::F32, {2, 1, 129}, {2, 129, 65}, false, false, 42);
  check_matmul(DType::F32, {1, 5}, {5, 1}, false, false, 43);
}

TEST(CpuKernelsB, MatMulHalfStorage) {
  for (DType dt : {DType::F16, DType::BF16})
    for (const char* blas : {"1", "0"}) {
      ScopedEnv env("RLX_CPU_BLAS", blas);
      check_matmul(dt, {3, 37, 29}, {29, 41}, false, false, 50);
      check_matmul(dt, {2, 80, 70}, {2, 90, 70}, false, true, 51);
      check_matmul(dt, {1, 200}, {200, 77}, false, false, 52);
    }
}

TEST(CpuKernelsB, FusedMatMulBiasAct) {
  const Activation acts[] = {Activation::None, Activation::Relu, Activation::Silu, Activation::GeluErf,
                             Activation::GeluTanh};
  for (DType dt : kFloatTypes)
    for (DType bias_dt : {dt, DType::F32})
      for (Activation act : acts)
        for (bool tb : {false, true})
          for (const char* blas : {"1", "0"}) {
            ScopedEnv env("RLX_CPU_BLAS", blas);
            const int64_t M = 67, K = 75, N = 61;  // 306k ≥ 64³: BLAS when on
            std::vector<int64_t> ad{M, K};
            std::vector<int64_t> bd = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
            auto A = random_tensor(dt, ad, 60);
            auto B = random_tensor(dt, bd, 61, -0.3f, 0.3f);
            auto C = random_tensor(bias_dt, {N}, 62);
            Graph g;
            auto a = input(g, "a", dt, shape_of(ad));
            auto b = input(g, "b", dt, shape_of(bd));
            auto c = input(g, "c", bias_dt, shape_of({N}));
            output("y", matmul_bias_act(a, b, c, act, tb));
            auto ref = matmul_ref(A.v, ad, B.v, bd, false, tb, &C.v, act, nullptr);
            Tensor y = run1(g, {A.t, B.t, C.t});
            expect_close(y, ref, matmul_tol(dt, K),
                         str("matmul_bias_act ", dt, " bias ", bias_dt, " ", activation_name(act), " tb=", tb,
                             " blas=", blas));
          }
}

// The two GELU forms differ by up to ~1e-3 around |x| ≈ 2; make sure each
// activation is the one asked for, not its neighbour.
TEST(CpuKernelsB, GeluTanhIsNotGeluErf) {
  Graph g;
  auto a = input(g, "a", DType::F32, shape_of({1, 1}));
  auto b = input(g, "b", DType::F32, shape_of({1, 8}));
  auto c = input(g, "c", DType::F32, shape_of({8}));
  output("y", matmul_bias_act(a, b, c, Activation::GeluTanh));
  std::vector<float> xs = {-3.0f, -2.5f, -2.0f, -1.0f, 0.5f, 1.5f, 2.0f, 3.0f};
  Tensor y = run1(g, {Tensor::from(std::vector<float>{1.0f}, {1, 1}), Tensor::from(xs, {1, 8}),
                      Tensor::from(std::vector<float>(8, 0.0f), {8})});
  auto got = y.to_f64();
  double max_diff_to_erf = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(got[i], act_ref(Activation::GeluTanh, xs[i]), 1e-6);
    max_diff_to_erf = std::max(max_diff_to_erf, std::fabs(got[i] - act_ref(Activation::GeluErf, xs[i])));
  }
  EXPECT_GT(max_diff_to_erf, 1e-4);
}

// The private GEMM entry, both paths on the same problems (plus epilogue):
// single and batched (per-batch A, B shared by offset 0), every transpose.
TEST(CpuKernelsB, GemmPathsAgree) {
  const int64_t M = 97, N = 131, K = 263;
  for (int64_t batch : {1, 3})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        auto A = random_values(static_cast<size_t>(batch * M * K), 70);
        auto B = random_values(static_cast<size_t>(K * N), 71);
        auto bias = random_values(static_cast<size_t>(N), 72);
        std::vector<double> bd(B.begin(), B.end()), biasd(bias.begin(), bias.end());
        std::vector<double> ref;
        for (int64_t i = 0; i < batch; ++i) {
          std::vector<double> ai(A.begin() + i * M * K, A.begin() + (i + 1) * M * K);
          auto r = matmul_ref(ai, ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K}, bd,
                              tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, ta, tb, &biasd,
                              Activation::Silu, nullptr);
          ref.insert(ref.end(), r.begin(), r.end());
        }
        std::vector<int64_t> a_off, b_off(static_cast<size_t>(batch), 0);
        for (int64_t i = 0; i < batch; ++i) a_off.push_back(i * M * K);
        for (auto want : {cpu::GemmPath::Blas, cpu::GemmPath::Builtin}) {
          std::vector<float> C(static_cast<size_t>(batch * M * N), std::nanf(""));
          cpu::GemmProblem p;
          p.M = M, p.N = N, p.K = K, p.trans_a = ta, p.trans_b = tb, p.batch = batch;
          p.a = A.data(), p.a_off = a_off.data(), p.b = B.data(), p.b_off = b_off.data(), p.c = C.data();
          p.bias = bias.data(), p.act = Activation::Silu;
          auto path = cpu::gemm_f32(cpu::ThreadPool::global(), p, want);
          EXPECT_EQ(path, want == cpu::GemmPath::Blas && !cpu::blas_built_in() ? cpu::GemmPath::Builtin : want);
          expect_close(Tensor::from(C, {batch * M, N}), ref, matmul_tol(DType::F32, K),
                       str("gemm_f32 batch ", batch, " ta ", ta, " tb ", tb,
                           want == cpu::GemmPath::Blas ? " blas" : " builtin"));
        }
      }
}

// gemm_serial on strided views (as attention uses it): C = A·Bᵀ where A's
// rows and B's rows sit inside wider rows.
TEST(CpuKernelsB, GemmSerialStrided) {
  const int64_t M = 45, N = 300, K = 70, lda = 3 * K, ldb = 2 * K;
  auto A = random_values(static_cast<size_t>(M * lda), 73);
  auto B = random_values(static_cast<size_t>(N * ldb), 74);
  std::vector<float> C(static_cast<size_t>(M * (N + 5)), std::nanf(""));
  cpu::GemmScratch scratch;
  cpu::gemm_serial(M, N, K, A.data() + K, lda, 1, B.data() + 3, 1, ldb, C.data(), N + 5, scratch);
  std::vector<double> ref, got;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += static_cast<double>(A[static_cast<size_t>(m * lda + K + k)]) * B[static_cast<size_t>(n * ldb + 3 + k)];
      ref.push_back(s);
      got.push_back(C[static_cast<size_t>(m * (N + 5) + n)]);
    }
  expect_close(Tensor::from(got, {M, N}), ref, matmul_tol(DType::F32, K), "gemm_serial strided");
}

// A bf16 kernel alone (AMX's 32 × 32 blocks, VDPBF16PS's 12-row groups of
// 48-row tasks, 16-pair steps and odd K): M, N, K below, at and past each
// block; both B layouts; A rows at a longer stride; bias and activation;
// against float64 on the bf16 inputs, with C's rows past M left untouched.
void check_bf16_gemm(void (*gemm)(cpu::ThreadPool&, const cpu::GemmBf16Problem&), const char* name,
                     std::initializer_list<int64_t> ms, std::initializer_list<int64_t> ks) {
  auto& pool = cpu::ThreadPool::global();
  uint32_t seed = 80;
  for (int64_t M : ms)
    for (int64_t K : ks)
      for (int64_t N : {1, 17, 32, 45, 300})
        for (bool tb : {false, true}) {
          const bool fused = (M + K + N) % 2 == 1;  // half the shapes with bias + GELU
          const int64_t lda = K + (N % 2) * 3;
          auto A = random_tensor(DType::BF16, {M, lda}, ++seed);
          auto B = random_tensor(DType::BF16, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, ++seed);
          auto bias = random_values(static_cast<size_t>(N), ++seed);
          std::vector<uint16_t> C(static_cast<size_t>((M + 1) * N), 0x7fc1);  // a NaN sentinel row past M
          cpu::GemmBf16Problem p;
          p.M = M;
          p.N = N;
          p.K = K;
          p.lda = lda;
          p.trans_b = tb;
          p.a = static_cast<const uint16_t*>(A.t.raw());
          p.b = static_cast<const uint16_t*>(B.t.raw());
          p.c = C.data();
          p.bias = fused ? bias.data() : nullptr;
          p.act = fused ? Activation::GeluErf : Activation::None;
          gemm(pool, p);
          std::vector<double> a_used;  // the first K of each row
          for (int64_t m = 0; m < M; ++m)
            a_used.insert(a_used.end(), A.v.begin() + m * lda, A.v.begin() + m * lda + K);
          std::vector<double> bias_d(bias.begin(), bias.end());
          auto ref = matmul_ref(a_used, {M, K}, B.v, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N},
                                false, tb, fused ? &bias_d : nullptr, p.act, nullptr);
          Tensor got = Tensor::empty(DType::BF16, {M, N});
          std::memcpy(got.raw_mut(), C.data(), static_cast<size_t>(M * N) * 2);
          const std::string what =
              str(name, " M=", M, " K=", K, " N=", N, " lda=", lda, " tb=", tb, fused ? " bias+gelu" : "");
          expect_close(got, ref, tol_for(DType::BF16), what);
          for (int64_t n = 0; n < N; ++n) ASSERT_EQ(C[static_cast<size_t>(M * N + n)], 0x7fc1) << what;
        }
}

TEST(CpuKernelsB, GemmBf16AmxMatchesFloat64) {
  if (!cpu::amx_bf16_available()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or RLX_CPU_AMX=0)";
  check_bf16_gemm(cpu::gemm_bf16_amx, "amx", {1, 31, 32, 33, 97}, {1, 31, 32, 33, 300});
}

TEST(CpuKernelsB, GemmBf16Avx512MatchesFloat64) {
  if (!cpu::avx512_bf16_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU (or RLX_CPU_AVX512_BF16=0)";
  check_bf16_gemm(cpu::gemm_bf16_avx512, "avx512-bf16", {1, 5, 12, 13, 48, 49, 97}, {1, 2, 31, 32, 33, 300});
}

// A bf16 graph's matmuls take a bf16 kernel (AMX, else VDPBF16PS) where one
// runs and the f32 kernel on staged operands with both off; each rounds one
// f32 sum, so they may differ by one bf16 step where the sums straddle a
// rounding boundary.
TEST(CpuKernelsB, Bf16MatMulKernelsAgreeWithStagedPath) {
  const int64_t B = 3, M = 41, K = 200, N = 70;
  auto X = random_tensor(DType::BF16, {B, M, K}, 90);
  auto W = random_tensor(DType::BF16, {N, K}, 91, -0.2f, 0.2f);
  auto C = random_tensor(DType::F32, {N}, 92);
  Graph g;
  auto x = input(g, "x", DType::BF16, shape_of({B, M, K}));
  auto w = input(g, "w", DType::BF16, shape_of({N, K}));
  auto c = input(g, "c", DType::F32, shape_of({N}));
  output("y", matmul_bias_act(x, w, c, Activation::GeluErf, true));
  auto ref = matmul_ref(X.v, {B, M, K}, W.v, {N, K}, false, true, &C.v, Activation::GeluErf, nullptr);
  Tensor staged;
  {
    ScopedEnv no_amx("RLX_CPU_AMX", "0"), no_avx512("RLX_CPU_AVX512_BF16", "0");
    staged = run1(g, {X.t, W.t, C.t});
  }
  expect_close(staged, ref, tol_for(DType::BF16), "staged");
  int kernels = 0;
  for (const char* kernel : {"amx", "avx512-bf16"}) {
    const bool amx = std::string(kernel) == "amx";
    ScopedEnv use_amx("RLX_CPU_AMX", amx ? "1" : "0"), use_avx512("RLX_CPU_AVX512_BF16", amx ? "0" : "1");
    if (!(amx ? cpu::amx_bf16_available() : cpu::avx512_bf16_available())) continue;
    ++kernels;
    const Tensor got = run1(g, {X.t, W.t, C.t});
    expect_close(got, ref, tol_for(DType::BF16), kernel);
    const auto* a = static_cast<const uint16_t*>(got.raw());
    const auto* s = static_cast<const uint16_t*>(staged.raw());
    int steps_apart = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const int d = std::abs(static_cast<int>(a[i]) - static_cast<int>(s[i]));
      ASSERT_LE(d, 1) << kernel << " element " << i << ": " << a[i] << " against " << s[i];
      steps_apart += d;
    }
    EXPECT_LT(steps_apart, got.numel() / 100) << kernel << " and staged bf16 results should almost always be equal";
  }
  if (kernels == 0) GTEST_SKIP() << "no bf16 kernel (AMX or AVX512-BF16) on this CPU; the staged path was checked";
}

// A bf16 weight is packed for the bf16 kernels once and kept with the param;
// setting the param again must drop the packed copy. Two shapes of one
// Executable share it; each run against float64 on the weights of the time,
// on each bf16 kernel the CPU has, and under the default rule, which on an
// AMX CPU takes M = 3 by VDPBF16PS and M = 70 on AMX from one packed copy.
TEST(CpuKernelsB, Bf16WeightPackedOnceAndRepackedWhenSet) {
  const int64_t K = 96, N = 40;
  int kernels = 0;
  for (const char* kernel : {"amx", "avx512-bf16", "auto"}) {
    const std::string k = kernel;
    ScopedEnv use_amx("RLX_CPU_AMX", k == "avx512-bf16" ? "0" : "1"),
        use_avx512("RLX_CPU_AVX512_BF16", k == "amx" ? "0" : k == "auto" ? "auto" : "1");
    if (!(k == "amx" ? cpu::amx_bf16_available() : cpu::avx512_bf16_available())) continue;
    ++kernels;
    Graph g;
    auto x = input(g, "x", DType::BF16, {"M", K});
    auto w = param(g, "w", DType::BF16, shape_of({N, K}));
    output("y", matmul(x, w, MatMulAttrs{false, true}));
    Session s("cpu");
    auto exe = s.compile(g);
    uint32_t seed = 100;
    for (int version = 0; version < 3; ++version) {
      auto W = random_tensor(DType::BF16, {N, K}, ++seed);
      exe->set_param("w", W.t);
      for (int64_t M : {3, 70, 3}) {
        auto X = random_tensor(DType::BF16, {M, K}, ++seed);
        const Tensor y = exe->run({X.t})[0];
        auto ref = matmul_ref(X.v, {M, K}, W.v, {N, K}, false, true, nullptr, Activation::None, nullptr);
        expect_close(y, ref, tol_for(DType::BF16), str(kernel, " weights version ", version, " M=", M));
      }
    }
  }
  if (kernels == 0) GTEST_SKIP() << "no bf16 kernel (AMX or AVX512-BF16) on this CPU";
}

// The default rule between the bf16 kernels (bf16_gemm_for): VDPBF16PS takes
// every row count on AMD (full rate), elsewhere up to 4 rows beside AMX and up
// to 32 without it (then the staged f32 kernel); the knob's 1 and 0 force or
// refuse it.
TEST(CpuKernelsB, Bf16KernelRuleFollowsRows) {
  using cpu::Bf16Gemm;
  using cpu::bf16_gemm_for;
  if (!cpu::avx512_bf16_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::string vendor;
  for (std::ifstream info("/proc/cpuinfo"); vendor.empty() && std::getline(info, vendor);)
    if (vendor.rfind("vendor_id", 0) != 0) vendor.clear();
  const bool amd = vendor.find("AuthenticAMD") != std::string::npos;
  EXPECT_EQ(cpu::avx512_bf16_full_rate(), amd) << vendor;
  {
    ScopedEnv no_amx("RLX_CPU_AMX", "0");
    EXPECT_EQ(bf16_gemm_for(32), Bf16Gemm::Avx512);
    EXPECT_EQ(bf16_gemm_for(33), amd ? Bf16Gemm::Avx512 : Bf16Gemm::None);
    EXPECT_EQ(bf16_gemm_for(4096), amd ? Bf16Gemm::Avx512 : Bf16Gemm::None);
    ScopedEnv always("RLX_CPU_AVX512_BF16", "1");
    EXPECT_EQ(bf16_gemm_for(4096), Bf16Gemm::Avx512);
  }
  {
    ScopedEnv never("RLX_CPU_AVX512_BF16", "0");
    EXPECT_FALSE(cpu::avx512_bf16_full_rate());
    EXPECT_NE(bf16_gemm_for(4096), Bf16Gemm::Avx512);
  }
  if (!cpu::amx_bf16_available()) GTEST_SKIP() << "no AMX on this CPU; the rule without it was checked";
  EXPECT_EQ(bf16_gemm_for(1), Bf16Gemm::Avx512);
  EXPECT_EQ(bf16_gemm_for(4), Bf16Gemm::Avx512);
  EXPECT_EQ(bf16_gemm_for(5), Bf16Gemm::Amx);
  ScopedEnv never("RLX_CPU_AVX512_BF16", "0");
  EXPECT_EQ(bf16_gemm_for(1), Bf16Gemm::Amx);
}

// The f32 GEMM converts and packs a 16-bit param weight once and keeps it;
// setting the param again must drop the packed copy. The packed and the
// per-call packing run the same sums, so they agree bit for bit; each run is
// also checked against float64 on the weights of the time. M = 2 takes the
// GEMV (nothing packed), the others the packed path; bf16 without its own kernels.
TEST(CpuKernelsB, HalfWeightPackedOnceAndRepackedWhenSet) {
  const int64_t K = 300, N = 75;
  ScopedEnv no_amx("RLX_CPU_AMX", "0"), no_avx512("RLX_CPU_AVX512_BF16", "0");
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (bool tb : {false, true}) {
      Graph g;
      auto x = input(g, "x", t, {"M", K});
      auto w = param(g, "w", t, tb ? shape_of({N, K}) : shape_of({K, N}));
      output("y", matmul(x, w, MatMulAttrs{false, tb}));
      Session s("cpu");
      auto exe = s.compile(g);
      uint32_t seed = 200;
      for (int version = 0; version < 3; ++version) {
        auto W = random_tensor(t, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, ++seed);
        exe->set_param("w", W.t);
        for (int64_t M : {70, 2, 13, 70}) {
          auto X = random_tensor(t, {M, K}, ++seed);
          const Tensor y = exe->run({X.t})[0];
          const std::string what = str(dtype_name(t), " tb=", tb, " weights version ", version, " M=", M);
          auto ref = matmul_ref(X.v, {M, K}, W.v, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, false,
                                tb, nullptr, Activation::None, nullptr);
          expect_close(y, ref, tol_for(t), what);
          ScopedEnv env("RLX_CPU_PACK_WEIGHTS", "0");
          const Tensor unpacked = exe->run({X.t})[0];
          ASSERT_EQ(std::memcmp(y.raw(), unpacked.raw(), y.nbytes()), 0) << what;
        }
      }
    }
}

// K = 0: nothing to pack; the product is zeros.
TEST(CpuKernelsB, HalfWeightWithNoColumnsGivesZeros) {
  Graph g;
  auto x = input(g, "x", DType::F16, shape_of({9, 0}));
  auto w = param(g, "w", DType::F16, shape_of({0, 5}));
  output("y", matmul(x, w, MatMulAttrs{}));
  Session s("cpu");
  auto exe = s.compile(g);
  exe->set_param("w", Tensor::empty(DType::F16, {0, 5}));
  const Tensor y = exe->run({Tensor::empty(DType::F16, {9, 0})})[0];
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{9, 5}));
  const auto* v = static_cast<const uint16_t*>(y.raw());
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(v[i], 0) << i;
}

// ---------------------------------------------------------------- norms

std::vector<double> norm_ref(const std::vector<double>& x, const std::vector<double>* res, const std::vector<double>& g,
                             const std::vector<double>* b, int64_t n, double eps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> s(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(r * n + i);
      s[static_cast<size_t>(i)] = x[k] + (res ? (*res)[k] : 0.0);
    }
    double mean = 0, var = 0;
    if (b) {
      for (double v : s) mean += v;
      mean /= static_cast<double>(n);
    }
    for (double v : s) var += (v - mean) * (v - mean);
    var /= static_cast<double>(n);
    const double rstd = 1 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      y[static_cast<size_t>(r * n + i)] = (s[k] - mean) * rstd * g[k] + (b ? (*b)[k] : 0.0);
    }
  }
  return y;
}

void check_norm(bool layer, bool residual, DType xt, DType gt, DType bt, std::vector<int64_t> shape, float offset,
                uint32_t seed) {
  const int64_t n = shape.back();
  const float eps = layer ? 1e-5f : 1e-6f;
  auto X = random_tensor(xt, shape, seed, offset - 1.0f, offset + 1.0f);
  auto R = random_tensor(xt, shape, seed + 1);
  auto G = random_tensor(gt, {n}, seed + 2, 0.5f, 1.5f);
  auto Bt = random_tensor(bt, {n}, seed + 3);
  Graph g;
  auto x = input(g, "x", xt, shape_of(shape));
  Value r;
  if (residual) r = input(g, "r", xt, shape_of(shape));
  auto gamma = input(g, "g", gt, shape_of({n}));
  Value beta;
  if (layer) beta = input(g, "b", bt, shape_of({n}));
  Value y = layer ? (residual ? residual_layer_norm(x, r, gamma, beta, eps) : layer_norm(x, gamma, beta, eps))
                  : (residual ? residual_rms_norm(x, r, gamma, eps) : rms_norm(x, gamma, eps));
  output("y", y);
  std::vector<Tensor> ins = {X.t};
  if (residual) ins.push_back(R.t);
  ins.push_back(G.t);
  if (layer) ins.push_back(Bt.t);
  // The fused residual sum is formed in f32 from x and r (not rounded to x's type).
  auto ref = norm_ref(X.v, residual ? &R.v : nullptr, G.v, layer ? &Bt.v : nullptr, n, eps);
  Tensor out = run1(g, ins);
  EXPECT_EQ(out.dtype(), xt);
  // Large offsets amplify f32 rounding of x itself relative to its spread.
  Tol tol = tol_for(xt, 2e-5 * (1.0 + std::fabs(offset) / 50.0));
  expect_close(out, ref,
               tol, str(layer ? "layer" : "rms", residual ? "+residual" : "", " x ", xt, " gamma ", gt, " beta ", bt,
                        " offset ", offset));
}

// The vectorized f32 → bf16 / f16 conversions (AVX512-BF16 and F16C where
// the CPU has them) against the scalar rules of rlx/core/half.h, bit for bit:
// random bits (every class), groups of 32 with and without a denormal or a
// NaN (the instructions' exceptions), and lengths off the vector width.
TEST(CpuKernelsB, HalfConversionsMatchScalarRules) {
  std::mt19937 rng(7);
  std::vector<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t special : {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x7f800000u,
                           0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x477ff000u, 0x477fefffu,
                           0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u, 0x7f7fffffu, 0x3f808000u})
    for (int rep = 0; rep < 40; ++rep) bits.push_back(special);
  for (int g = 0; g < 64; ++g)  // normal values only, then one group with a single denormal or NaN
    for (int i = 0; i < 32; ++i) {
      const float v = std::ldexp(static_cast<float>(rng() % 100000) + 1.0f, static_cast<int>(rng() % 40) - 30);
      uint32_t b;
      std::memcpy(&b, &v, 4);
      bits.push_back(g % 4 == 1 && i == 7 ? 0x00012345u : g % 4 == 2 && i == 30 ? 0x7fa00001u : b);
    }
  std::vector<float> src(bits.size());
  std::memcpy(src.data(), bits.data(), bits.size() * 4);
  for (const size_t n : {bits.size() - 5, size_t{1}, size_t{31}, size_t{33}, size_t{70}}) {
    for (const size_t off : {size_t{0}, size_t{5}}) {  // n + off ≤ bits.size()
      std::vector<uint16_t> b16(n + 1, 0xabcd), h16(n + 1, 0xabcd);
      cpu::f32_to_bf16_n(src.data() + off, b16.data(), static_cast<int64_t>(n));
      cpu::f32_to_f16_n(src.data() + off, h16.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(b16[i], f32_to_bf16(src[off + i])) << std::hex << "bf16 of 0x" << bits[off + i];
        ASSERT_EQ(h16[i], f32_to_f16(src[off + i])) << std::hex << "f16 of 0x" << bits[off + i];
      }
      EXPECT_EQ(b16[n], 0xabcd) << "written past n";
      EXPECT_EQ(h16[n], 0xabcd) << "written past n";
    }
  }
}

// The cheaper GELU-erf of bf16 results (AMX matmul epilogues) against the
// exact GELU (erfc in double) rounded to bf16, in bf16 ulps of the exact value.
TEST(CpuKernelsB, GeluErfForBf16NearExact) {
  double worst_core = 0.0, worst_tail = 0.0;
  auto check = [&](float x) {
    const double exact = 0.5 * x * std::erfc(-static_cast<double>(x) / std::sqrt(2.0));
    if (std::fabs(exact) <= 1e-6) return;
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 7);
    const double err = std::fabs(bf16_to_f32(f32_to_bf16(cpu::gelu_erf_for_bf16(x))) - exact) / ulp;
    (std::fabs(x) < 4.0f ? worst_core : worst_tail) = std::max(std::fabs(x) < 4.0f ? worst_core : worst_tail, err);
  };
  for (int i = 0; i <= 2000000; ++i) check(-30.0f + 60.0f * static_cast<float>(i) / 2000000.0f);
  for (int e = -40; e < 5; ++e)
    for (int i = 0; i < 2000; ++i)
      for (float sign : {-1.0f, 1.0f}) check(sign * std::ldexp(1.0f + static_cast<float>(i) / 2000.0f, e));
  EXPECT_LE(worst_core, 0.6) << "|x| < 4";
  EXPECT_LE(worst_tail, 3.0) << "|x| >= 4, |GELU| > 1e-6";
  EXPECT_EQ(cpu::gelu_erf_for_bf16(0.0f), 0.0f);
  EXPECT_EQ(cpu::gelu_erf_for_bf16(7.0f), 7.0f);
  EXPECT_EQ(cpu::gelu_erf_for_bf16(1e30f), 1e30f);
  EXPECT_EQ(cpu::gelu_erf_for_bf16(INFINITY), INFINITY);
  EXPECT_EQ(cpu::gelu_erf_for_bf16(-12.0f), 0.0f);
  EXPECT_EQ(cpu::gelu_erf_for_bf16(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(cpu::gelu_erf_for_bf16(NAN)));
}

// Staging buffers come back to a pool and are handed out again, smallest
// fitting first, without zero-filling.
TEST(CpuKernelsB, StagingBuffersAreReused) {
  cpu::StagingBuffer::trim();  // earlier tests' buffers
  const float* big_ptr = nullptr;
  const float* small_ptr = nullptr;
  {
    cpu::StagingBuffer big(1 << 20), small(1000);
    big.data()[(1 << 20) - 1] = 1.0f;
    small.data()[999] = 2.0f;
    big_ptr = big.data();
    small_ptr = small.data();
  }
  cpu::StagingBuffer a(900);  // the smallest free buffer that fits
  EXPECT_EQ(a.data(), small_ptr);
  cpu::StagingBuffer b(5000);
  EXPECT_EQ(b.data(), big_ptr);
  EXPECT_EQ(b.data()[(1 << 20) - 1], 1.0f) << "kept as it was, not zero-filled";
  cpu::StagingBuffer moved = std::move(b);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(moved.data(), big_ptr);
}

TEST(CpuKernelsB, NormsAllDtypeCombos) {
  for (bool layer : {true, false})
    for (bool residual : {false, true})
      for (DType xt : kFloatTypes)
        for (DType gt : kFloatTypes) {
          check_norm(layer, residual, xt, gt, gt, {3, 5, 129}, 0.0f, 80);
          const DType other = xt == DType::F32 ? DType::BF16 : DType::F32;
          if (layer) check_norm(layer, residual, xt, gt, other, {7, 33}, 0.0f, 81);
        }
}

TEST(CpuKernelsB, LayerNormLargeMeanAndRows) {
  // Mean 300 with unit spread: a one-pass E[x²] − E[x]² in f32 would lose it.
  check_norm(true, false, DType::F32, DType::F32, DType::F32, {9, 4099}, 300.0f, 90);
  check_norm(true, true, DType::F32, DType::F32, DType::F32, {257, 1}, 0.0f, 91);  // N = 1: y = beta
  check_norm(false, false, DType::F32, DType::F32, DType::F32, {1, 1, 3}, 0.0f, 92);
}

// ---------------------------------------------------------------- attention

struct AttnCase {
  int64_t B = 2, Lq = 5, Lk = 7;
  int H = 4, Hkv = 2, D = 16;
  float scale = 0.0f, softcap = 0.0f;
  MaskKind mask = MaskKind::None;
  int64_t window = 0;
  DType dt = DType::F32;
  DType extra_dt = DType::F32;               // Custom mask or bias dtype
  std::vector<int64_t> bias_shape;           // Bias: [B|1, H|1, Lq, Lk]
  std::function<double(int64_t b, int64_t j)> keep;  // Custom mask values
};

std::string describe(const AttnCase& c) {
  return str("attention ", c.dt, " B", c.B, " Lq", c.Lq, " Lk", c.Lk, " H", c.H, "/", c.Hkv, " D", c.D, " scale ",
             c.scale, " softcap ", c.softcap, " mask ", mask_name(c.mask), " window ", c.window, " extra ", c.extra_dt);
}

void check_attention(const AttnCase& c, uint32_t seed) {
  auto Q = random_tensor(c.dt, {c.B, c.Lq, c.H * c.D}, seed, -2, 2);
  auto K = random_tensor(c.dt, {c.B, c.Lk, c.Hkv * c.D}, seed + 1, -2, 2);
  auto V = random_tensor(c.dt, {c.B, c.Lk, c.Hkv * c.D}, seed + 2);
  Data extra;
  if (c.mask == MaskKind::Bias) extra = random_tensor(c.extra_dt, c.bias_shape, seed + 3, -3, 3);
  if (c.mask == MaskKind::Custom) {
    std::vector<float> m(static_cast<size_t>(c.B * c.Lk));
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t j = 0; j < c.Lk; ++j) m[static_cast<size_t>(b * c.Lk + j)] = static_cast<float>(c.keep(b, j));
    Tensor t = Tensor::from(m, {c.B, c.Lk}).to(c.extra_dt);
    extra = {t, t.to_f64()};
  }
  AttentionAttrs at;
  at.num_heads = c.H;
  at.num_kv_heads = c.Hkv;
  at.head_dim = c.D;
  at.scale = c.scale;
  at.softcap = c.softcap;
  at.mask = c.mask;
  at.window = c.window;
  Graph g;
  auto q = input(g, "q", c.dt, shape_of({c.B, c.Lq, c.H * c.D}));
  auto k = input(g, "k", c.dt, shape_of({c.B, c.Lk, c.Hkv * c.D}));
  auto v = input(g, "v", c.dt, shape_of({c.B, c.Lk, c.Hkv * c.D}));
  std::vector<Tensor> ins = {Q.t, K.t, V.t};
  Value m;
  if (c.mask == MaskKind::Bias || c.mask == MaskKind::Custom) {
    m = input(g, "m", c.extra_dt, shape_of(extra.t.shape()));
    ins.push_back(extra.t);
  }
  output("o", attention(q, k, v, at, m));

  // Reference: scores → softcap → bias → masks → softmax → weighted V.
  const double scale = c.scale != 0.0f ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  std::vector<double> ref(static_cast<size_t>(c.B * c.Lq * c.H * c.D), 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Lq; ++i) {
        const int64_t kh = h / (c.H / c.Hkv);
        const int64_t qpos = i + c.Lk - c.Lq;
        std::vector<double> s(static_cast<size_t>(c.Lk));
        std::vector<bool> vis(static_cast<size_t>(c.Lk), true);
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.Lk; ++j) {
          double x = 0;
          for (int64_t d = 0; d < c.D; ++d)
            x += Q.v[static_cast<size_t>(((b * c.Lq + i) * c.H + h) * c.D + d)] *
                 K.v[static_cast<size_t>(((b * c.Lk + j) * c.Hkv + kh) * c.D + d)];
          x *= scale;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          if (c.mask == MaskKind::Bias) {
            const auto& bs = c.bias_shape;
            const int64_t bb = bs[0] == 1 ? 0 : b, bh = bs[1] == 1 ? 0 : h;
            x += extra.v[static_cast<size_t>(((bb * bs[1] + bh) * c.Lq + i) * c.Lk + j)];
          }
          bool keep = true;
          if (c.mask == MaskKind::Causal) keep = j <= qpos;
          if (c.mask == MaskKind::SlidingWindow) keep = j <= qpos && qpos - j < c.window;
          if (c.mask == MaskKind::Custom) keep = extra.v[static_cast<size_t>(b * c.Lk + j)] != 0.0;
          vis[static_cast<size_t>(j)] = keep;
          s[static_cast<size_t>(j)] = x;
          if (keep) mx = std::max(mx, x);
        }
        if (mx == -INFINITY) continue;  // fully masked row: zeros
        double sum = 0;
        std::vector<double> p(static_cast<size_t>(c.Lk), 0.0);
        for (int64_t j = 0; j < c.Lk; ++j)
          if (vis[static_cast<size_t>(j)]) sum += p[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx);
        for (int64_t d = 0; d < c.D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < c.Lk; ++j)
            o += p[static_cast<size_t>(j)] * V.v[static_cast<size_t>(((b * c.Lk + j) * c.Hkv + kh) * c.D + d)];
          ref[static_cast<size_t>(((b * c.Lq + i) * c.H + h) * c.D + d)] = o / sum;
        }
      }
  Tensor o = run1(g, ins);
  EXPECT_EQ(o.dtype(), c.dt);
  EXPECT_EQ(o.shape(), (std::vector<int64_t>{c.B, c.Lq, c.H * c.D}));
  expect_close(o, ref, tol_for(c.dt, 1e-5), describe(c));
}

TEST(CpuKernelsB, AttentionNoMaskGqaScaleSoftcap) {
  for (DType dt : kFloatTypes) {
    AttnCase c;
    c.dt = dt;
    check_attention(c, 100);  // H=4, Hkv=2
    c.H = 6, c.Hkv = 1, c.D = 13, c.scale = 0.3f;
    check_attention(c, 101);  // MQA, odd head_dim, explicit scale
    c.H = 3, c.Hkv = 3, c.softcap = 2.5f, c.scale = 0.9f;
    check_attention(c, 102);  // softcap bites (|scores| up to ~10)
  }
}

TEST(CpuKernelsB, AttentionCausalAndSlidingWindow) {
  for (DType dt : kFloatTypes) {
    AttnCase c;
    c.dt = dt;
    c.mask = MaskKind::Causal;
    check_attention(c, 110);  // Lq < Lk: bottom-right aligned
    c.Lq = 9, c.Lk = 9;
    check_attention(c, 111);
    c.Lq = 6, c.Lk = 4;  // Lq > Lk: the first two query rows see nothing → zeros
    check_attention(c, 112);
    c.mask = MaskKind::SlidingWindow;
    for (int64_t w : {1, 3, 100}) {
      c.window = w, c.Lq = 11, c.Lk = 17, c.softcap = w == 3 ? 4.0f : 0.0f;
      check_attention(c, 113);
    }
  }
}

TEST(CpuKernelsB, AttentionCustomMaskDtypes) {
  for (DType mt : {DType::Bool, DType::U8, DType::I32, DType::F32, DType::F16, DType::BF16})
    for (DType dt : {DType::F32, DType::BF16}) {
      AttnCase c;
      c.dt = dt;
      c.B = 3, c.Lq = 4, c.Lk = 19;
      c.mask = MaskKind::Custom;
      c.extra_dt = mt;
      // Batch 1 is fully masked (zeros); others drop a pattern of keys.
      c.keep = [](int64_t b, int64_t j) { return b == 1 ? 0.0 : ((j * 7 + b) % 3 != 0 ? 1.0 : 0.0); };
      check_attention(c, 120);
    }
}

TEST(CpuKernelsB, AttentionBiasBroadcasts) {
  for (DType dt : kFloatTypes)
    for (DType bt : {dt, DType::F32})
      for (auto shape : {std::vector<int64_t>{2, 4, 5, 7}, std::vector<int64_t>{1, 4, 5, 7},
                         std::vector<int64_t>{2, 1, 5, 7}, std::vector<int64_t>{1, 1, 5, 7}}) {
        AttnCase c;
        c.dt = dt;
        c.mask = MaskKind::Bias;
        c.extra_dt = bt;
        c.bias_shape = shape;
        c.softcap = shape[0] == 1 ? 3.0f : 0.0f;
        check_attention(c, 130);
      }
}

// Lq ≤ 3 takes the row (decode) path: cover every mask kind there too.
TEST(CpuKernelsB, AttentionShortQueriesEveryMask) {
  for (int64_t Lq : {1, 2, 3})
    for (MaskKind m : {MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow, MaskKind::Custom, MaskKind::Bias}) {
      AttnCase c;
      c.Lq = Lq, c.Lk = 23, c.mask = m, c.window = 5, c.softcap = 1.5f;
      c.bias_shape = {2, 1, Lq, 23};
      c.keep = [](int64_t b, int64_t j) { return (j + b) % 4 != 1 ? 1.0 : 0.0; };
      check_attention(c, 135);
    }
}

// Prefill blocks: several query blocks, key ranges wider than one GEMM tile.
TEST(CpuKernelsB, AttentionLongPrefill) {
  for (MaskKind m : {MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow}) {
    AttnCase c;
    c.B = 1, c.Lq = 70, c.Lk = 300, c.H = 4, c.Hkv = 2, c.D = 80, c.mask = m, c.window = 77;
    check_attention(c, 137);
  }
}

// Decode: one query over a long cache, causal (sees every key).
TEST(CpuKernelsB, AttentionDecodeLongContext) {
  for (DType dt : kFloatTypes)
    for (MaskKind m : {MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow}) {
      AttnCase c;
      c.dt = dt;
      c.B = 2, c.Lq = 1, c.Lk = 1000, c.H = 8, c.Hkv = 2, c.D = 64;
      c.mask = m;
      c.window = 257;
      check_attention(c, 140);
    }
}

// ---------------------------------------------------------------- rope

void check_rope(DType dt, RopePairing pairing, int64_t B, int64_t L, int64_t W, int H, int hd, int n_rot,
                int64_t src_offset, bool batched_pos, float freq_scale, uint32_t seed) {
  auto X = random_tensor(dt, {B, L, W}, seed);
  std::vector<int32_t> pos(static_cast<size_t>(batched_pos ? B * L : L));
  std::mt19937 rng(seed + 1);
  for (auto& p : pos) p = static_cast<int32_t>(rng() % 5000);
  Tensor P = Tensor::from(pos, batched_pos ? std::vector<int64_t>{B, L} : std::vector<int64_t>{L});
  RopeAttrs at;
  at.num_heads = H;
  at.head_dim = hd;
  at.n_rot = n_rot;
  at.pairing = pairing;
  at.freq_base = 10000.0f;
  at.freq_scale = freq_scale;
  at.src_offset = src_offset;
  Graph g;
  auto x = input(g, "x", dt, shape_of({B, L, W}));
  auto p = input(g, "pos", DType::I32, shape_of(P.shape()));
  output("y", rope(x, p, at));
  std::vector<double> ref(static_cast<size_t>(B * L * H * hd));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const double ps = pos[static_cast<size_t>(batched_pos ? b * L + l : l)] * static_cast<double>(freq_scale);
      for (int64_t h = 0; h < H; ++h) {
        const double* xs = X.v.data() + (b * L + l) * W + src_offset + h * hd;
        double* ys = ref.data() + ((b * L + l) * H + h) * hd;
        for (int64_t d = n_rot; d < hd; ++d) ys[d] = xs[d];
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          const double th = ps * std::pow(10000.0, -2.0 * static_cast<double>(i) / n_rot);
          const int64_t i0 = pairing == RopePairing::NeoX ? i : 2 * i;
          const int64_t i1 = pairing == RopePairing::NeoX ? i + n_rot / 2 : 2 * i + 1;
          ys[i0] = xs[i0] * std::cos(th) - xs[i1] * std::sin(th);
          ys[i1] = xs[i1] * std::cos(th) + xs[i0] * std::sin(th);
        }
      }
    }
  Tensor y = run1(g, {X.t, P});
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{B, L, int64_t{H} * hd}));
  expect_close(y, ref, tol_for(dt, 1e-6),
               str("rope ", dt, " ", rope_pairing_name(pairing), " n_rot ", n_rot, "/", hd, " offset ", src_offset));
}

TEST(CpuKernelsB, RopePairingsPartialAndStrided) {
  for (DType dt : kFloatTypes)
    for (RopePairing pr : {RopePairing::NeoX, RopePairing::Interleaved}) {
      check_rope(dt, pr, 2, 7, 3 * 24, 3, 24, 24, 0, false, 1.0f, 150);     // full rotation
      check_rope(dt, pr, 2, 5, 4 * 32, 4, 32, 10, 0, true, 0.25f, 151);     // partial, [B, L] positions
      // K out of a fused QKV row: Q = 4 heads, K = 2 heads (from column 4·20).
      check_rope(dt, pr, 3, 6, (4 + 2 + 2) * 20, 2, 20, 12, 4 * 20, false, 1.0f, 152);
    }
}

// ---------------------------------------------------------------- glu

TEST(CpuKernelsB, FusedGlu) {
  for (DType dt : kFloatTypes)
    for (int kind = 0; kind < 3; ++kind) {
      const std::vector<int64_t> shape{3, 7, 2 * 45};
      auto X = random_tensor(dt, shape, 160, -4, 4);
      Graph g;
      auto x = input(g, "x", dt, shape_of(shape));
      output("y", kind == 0 ? swiglu(x) : geglu(x, kind == 2));
      const Activation act = kind == 0 ? Activation::Silu : kind == 1 ? Activation::GeluErf : Activation::GeluTanh;
      std::vector<double> ref(static_cast<size_t>(3 * 7 * 45));
      for (size_t r = 0; r < 21; ++r)
        for (size_t j = 0; j < 45; ++j) ref[r * 45 + j] = act_ref(act, X.v[r * 90 + j]) * X.v[r * 90 + 45 + j];
      Tensor y = run1(g, {X.t});
      EXPECT_EQ(y.shape(), (std::vector<int64_t>{3, 7, 45}));
      expect_close(y, ref, tol_for(dt, 1e-5), str("glu ", kind, " ", dt));
    }
}

}  // namespace
}  // namespace rlx
