// The Fft op on the CPU beyond the conformance table: every length up to 130
// (each radix pass and Bluestein's path), lengths up to 2^20 checked bin by
// bin against direct sums, many rows across threads, symbolic batches, the
// f16 policy, and the errors a wrong graph gets.
//
// The CPU transform computes in double and rounds once, so results must equal
// the float64 sums to within the rounding of an f32 output.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <functional>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using cf = std::complex<float>;
using cd = std::complex<double>;

std::vector<cf> random_complex(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<cf> v(n);
  for (auto& x : v) x = {d(rng), d(rng)};
  return v;
}

// Σ_j x_j·e^{∓2πi·jk/n} in double, the angle reduced mod n first.
cd direct_bin(const cf* x, int64_t n, int64_t k, bool inverse) {
  cd acc{0.0, 0.0};
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t j = 0; j < n; ++j) {
    const double t = sign * 2.0 * std::numbers::pi * static_cast<double>((j * k) % n) / static_cast<double>(n);
    acc += cd(x[j]) * cd(std::cos(t), std::sin(t));
  }
  return acc;
}

// got within f32 rounding of want: each part off by at most 2^-23 of its
// magnitude, plus 1e-12 of the largest bin (double-precision sums).
void expect_bin(cf got, cd want, double largest, const std::string& where) {
  const double slack = 1e-12 * largest;
  EXPECT_LE(std::abs(got.real() - want.real()), 1.2e-7 * std::abs(want.real()) + slack)
      << where << ": got " << got << ", want " << want;
  EXPECT_LE(std::abs(got.imag() - want.imag()), 1.2e-7 * std::abs(want.imag()) + slack)
      << where << ": got " << got << ", want " << want;
}

std::shared_ptr<Executable> compile_c2c(int64_t rows, int64_t n, bool inverse, Session& s) {
  Graph g;
  Value x = input(g, "x", DType::C64, {rows, n});
  output("y", inverse ? ifft(x, FftNorm::Forward) : fft(x));  // both unscaled: direct sums
  return s.compile(g);
}

TEST(Fft, EveryLengthUpTo130MatchesDirectSums) {
  Session s("cpu");
  for (int64_t n = 1; n <= 130; ++n) {
    for (bool inverse : {false, true}) {
      const int64_t rows = 2;
      auto x = random_complex(static_cast<size_t>(rows * n), static_cast<uint32_t>(n * 2 + inverse));
      Tensor y = compile_c2c(rows, n, inverse, s)->run({Tensor::from(x, {rows, n})})[0];
      ASSERT_EQ(y.dtype(), DType::C64);
      const cf* got = y.data<cf>();
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<cd> want(static_cast<size_t>(n));
        double largest = 0.0;
        for (int64_t k = 0; k < n; ++k) {
          want[static_cast<size_t>(k)] = direct_bin(&x[static_cast<size_t>(r * n)], n, k, inverse);
          largest = std::max(largest, std::abs(want[static_cast<size_t>(k)]));
        }
        for (int64_t k = 0; k < n; ++k)
          expect_bin(got[r * n + k], want[static_cast<size_t>(k)], largest,
                     "n=" + std::to_string(n) + (inverse ? " inverse" : "") + " bin " + std::to_string(k));
      }
      if (HasFailure()) return;
    }
  }
}

// Long transforms, 48 bins each against O(n) direct sums, and the round trip.
TEST(Fft, LongLengthsMatchDirectSumsAndRoundTrip) {
  Session s("cpu");
  // 2^20, 3^10, 2·3·5·7·11·13·17, 31² (direct prime passes), the prime 65537
  // and 2·40961 (Bluestein at two sizes).
  for (int64_t n : {int64_t{1} << 20, int64_t{59049}, int64_t{510510}, int64_t{961}, int64_t{65537}, int64_t{81922}}) {
    auto x = random_complex(static_cast<size_t>(n), static_cast<uint32_t>(n));
    Graph g;
    Value in = input(g, "x", DType::C64, {1, n});
    Value X = fft(in);
    output("X", X);
    output("back", ifft(X));
    auto outs = s.compile(g)->run({Tensor::from(x, {1, n})});
    const cf* got = outs[0].data<cf>();
    std::mt19937 rng(7);
    std::vector<int64_t> bins = {0, 1, n - 1, n / 2};
    while (bins.size() < 48) bins.push_back(static_cast<int64_t>(rng() % static_cast<uint32_t>(n)));
    const double largest = std::sqrt(static_cast<double>(n)) * 8.0;  // a bound on |X_k| for |x_j| ≤ √2, typical
    for (int64_t k : bins)
      expect_bin(got[k], direct_bin(x.data(), n, k, false), largest, "n=" + std::to_string(n) + " bin " + std::to_string(k));
    const cf* back = outs[1].data<cf>();
    double worst = 0.0;
    for (int64_t j = 0; j < n; ++j) worst = std::max(worst, static_cast<double>(std::abs(back[j] - x[static_cast<size_t>(j)])));
    EXPECT_LE(worst, 1e-6) << "n=" << n << ": ifft(fft(x)) differs from x";
  }
}

// Many short rows split across the thread pool, and a symbolic batch.
TEST(Fft, ManyRowsAndSymbolicBatch) {
  Session s("cpu");
  Graph g;
  output("y", fft(input(g, "x", DType::C64, {"B", 48})));
  auto exe = s.compile(g);
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{2000}}) {
    auto x = random_complex(static_cast<size_t>(rows * 48), static_cast<uint32_t>(rows));
    Tensor y = exe->run({Tensor::from(x, {rows, 48})})[0];
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{rows, 48}));
    const cf* got = y.data<cf>();
    for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 37))
      for (int64_t k = 0; k < 48; ++k)
        expect_bin(got[r * 48 + k], direct_bin(&x[static_cast<size_t>(r * 48)], 48, k, false), 48.0,
                   "row " + std::to_string(r) + " of " + std::to_string(rows));
  }
}

// rfft then irfft restores a real signal, from f32 and (under the f16 policy)
// from f16 storage, whose rounding is the only difference allowed.
TEST(Fft, RealRoundTripAndHalfPolicy) {
  for (DType policy : {DType::F32, DType::F16}) {
    for (int64_t n : {int64_t{255}, int64_t{256}}) {
      Session s("cpu");
      Graph g;
      Value x = input(g, "x", DType::F32, {4, n});
      output("back", irfft(rfft(x), n));
      output("bins", view_as_real(rfft(x)));
      CompileOptions opts;
      opts.precision = policy;
      auto exe = s.compile(g, opts);
      std::mt19937 rng(static_cast<uint32_t>(n));
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      std::vector<float> v(static_cast<size_t>(4 * n));
      for (auto& e : v) e = d(rng);
      auto outs = exe->run({Tensor::from(v, {4, n})});
      ASSERT_EQ(outs[0].dtype(), DType::F32);
      ASSERT_EQ(outs[1].shape(), (std::vector<int64_t>{4, n / 2 + 1, 2}));
      const std::vector<double> back = outs[0].to_f64();
      const double tol = policy == DType::F32 ? 1e-6 : 1e-3;  // f16 keeps 11 bits of x
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_NEAR(back[i], v[i], tol) << "policy " << policy << " n=" << n << " element " << i;
    }
  }
}

void expect_compile_error(const std::function<void(Graph&)>& build, const std::string& needle) {
  Graph g;
  try {
    build(g);
    Session("cpu").compile(g);
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Fft, WrongGraphsAreNamedErrors) {
  expect_compile_error([](Graph& g) { output("y", fft(input(g, "x", DType::F32, {4, 8}))); },
                       "complex fft input must be c64, got f32");
  expect_compile_error(
      [](Graph& g) { output("y", irfft(view_as_complex(input(g, "x", DType::F32, {4, 6, 2})), 16)); },
      "a real-output fft of n = 16 takes 9 bins");
  expect_compile_error([](Graph& g) { output("y", rfft(input(g, "x", DType::F32, {4, "N"}))); },
                       "real fft needs a static length");
  expect_compile_error([](Graph& g) { output("y", fft(input(g, "x", DType::C64, {4, 0}))); },
                       "fft length must be >= 1");
  expect_compile_error([](Graph& g) { output("y", rfft(input(g, "x", DType::I32, {8}))); }, "must be f32/f16/bf16/f64");
  expect_compile_error(
      [](Graph& g) { output("y", op(OpKind::Fft, FftAttrs{.inverse = true, .real_input = true}, {input(g, "x", DType::F32, {8})})); },
      "forward only");
  expect_compile_error([](Graph& g) { output("y", view_as_complex(input(g, "x", DType::F32, {4, 3}))); },
                       "bitcast f32 to c64 needs a last dim of 2");
  expect_compile_error([](Graph& g) { output("y", bitcast(input(g, "x", DType::Q4_0, {4, 32}), DType::F32)); },
                       "bitcast needs scalar types");
}

// Equal-size bitcasts keep the shape and the bits.
TEST(Fft, BitcastKeepsTheBits) {
  Graph g;
  output("y", bitcast(input(g, "x", DType::F32, {3}), DType::I32));
  const std::vector<float> v = {1.0f, -2.5f, 3.0e-39f};
  Tensor y = Session("cpu").compile(g)->run({Tensor::from(v, {3})})[0];
  ASSERT_EQ(y.dtype(), DType::I32);
  for (size_t i = 0; i < v.size(); ++i) {
    int32_t bits;
    std::memcpy(&bits, &v[i], sizeof bits);
    EXPECT_EQ(y.data<int32_t>()[i], bits);
  }
}

}  // namespace
}  // namespace rlx
