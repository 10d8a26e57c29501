// Sanity checks of the CPU elementwise, movement, selection and reduction
// kernels against straightforward double-precision references on random data:
// odd shapes, broadcasting, f16/bf16 storage, integer paths and error cases.
// (The cross-op, cross-backend conformance harness lives in tests/ops.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/sampling_rng.h"
#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

using namespace rlx;

namespace {

using Dims = std::vector<int64_t>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<Tensor> run_graph(const Graph& g, const std::vector<Tensor>& inputs) {
  Session s("cpu");
  CompileOptions o;
  o.fuse = false;
  return s.compile(g, o)->run(inputs);
}

using rlx::test::error_of;

int64_t numel(const Dims& d) { return shape_numel(d); }

std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -3.0, double hi = 3.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<double> random_ints(int64_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// The value `v` takes when stored in `t` (the test's independent reference
// for Cast): floats round to nearest even, ints truncate and saturate, NaN → 0.
double convert(double v, DType t) {
  auto sat = [&](double lo, double hi) {
    if (std::isnan(v)) return 0.0;
    return std::clamp(std::trunc(v), lo, hi);
  };
  switch (t) {
    case DType::F64:
      return v;
    case DType::F32:
      return static_cast<float>(v);
    case DType::F16:
      return f16_to_f32(f32_to_f16(static_cast<float>(v)));
    case DType::BF16:
      return bf16_to_f32(f32_to_bf16(static_cast<float>(v)));
    case DType::F8E4M3:
      return fp8_e4m3_to_f32(f32_to_fp8_e4m3(static_cast<float>(v)));
    case DType::F8E5M2:
      return fp8_e5m2_to_f32(f32_to_fp8_e5m2(static_cast<float>(v)));
    case DType::I8:
      return sat(-128, 127);
    case DType::U8:
      return sat(0, 255);
    case DType::I16:
      return sat(-32768, 32767);
    case DType::I32:
      return sat(-2147483648.0, 2147483647.0);
    case DType::I64:
      return sat(-9223372036854775808.0, 9223372036854775807.0);
    case DType::Bool:
      return v != 0.0 ? 1.0 : 0.0;
    default:
      throw Unsupported("convert");
  }
}

// A tensor of dtype `t` holding convert(values[i], t).
Tensor make(DType t, const Dims& shape, const std::vector<double>& values) {
  Tensor x = Tensor::empty(t, shape);
  void* p = x.raw_mut();
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = convert(values[i], t);
    switch (t) {
      case DType::F64:
        static_cast<double*>(p)[i] = v;
        break;
      case DType::F32:
        static_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case DType::F16:
        static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v));
        break;
      case DType::BF16:
        static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v));
        break;
      case DType::F8E4M3:
        static_cast<uint8_t*>(p)[i] = f32_to_fp8_e4m3(static_cast<float>(v));
        break;
      case DType::F8E5M2:
        static_cast<uint8_t*>(p)[i] = f32_to_fp8_e5m2(static_cast<float>(v));
        break;
      case DType::I8:
        static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
        break;
      case DType::U8:
      case DType::Bool:
        static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
        break;
      case DType::I16:
        static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
        break;
      case DType::I32:
        static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
        break;
      case DType::I64:
        static_cast<int64_t*>(p)[i] =
            v >= 9223372036854775807.0 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(v);
        break;
      default:
        throw Unsupported("make");
    }
  }
  return x;
}

// |got − ref| ≤ atol + rtol·|ref| (NaN matches NaN, equal infinities match).
void expect_close(const Tensor& got, const std::vector<double>& ref, double atol, double rtol,
                  const std::string& what) {
  const auto g = got.to_f64();
  ASSERT_EQ(g.size(), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = (std::isnan(ref[i]) && std::isnan(g[i])) || g[i] == ref[i] ||
                    std::fabs(g[i] - ref[i]) <= atol + rtol * std::fabs(ref[i]);
    if (!ok && bad++ < 5) ADD_FAILURE() << what << " [" << i << "]: got " << g[i] << ", want " << ref[i];
  }
}

void expect_exact(const Tensor& got, const std::vector<double>& ref, const std::string& what) {
  expect_close(got, ref, 0.0, 0.0, what);
}

struct Tol {
  double atol, rtol;
};
Tol tol_for(DType t) {
  switch (t) {
    case DType::F16:
      return {2e-3, 2e-3};
    case DType::BF16:
      return {2e-2, 1e-2};
    default:
      return {1e-6, 2e-6};
  }
}

// Flat index into an operand of dims `in` broadcast to `out`, for output element `flat`.
int64_t bcast_index(const Dims& out, const Dims& in, int64_t flat) {
  int64_t idx = 0, stride = 1;
  auto j = static_cast<int64_t>(in.size()) - 1;
  for (auto i = static_cast<int64_t>(out.size()) - 1; i >= 0; --i, --j) {
    const int64_t c = flat % out[static_cast<size_t>(i)];
    flat /= out[static_cast<size_t>(i)];
    if (j < 0) continue;
    if (in[static_cast<size_t>(j)] != 1) idx += c * stride;
    stride *= in[static_cast<size_t>(j)];
  }
  return idx;
}

Dims broadcast_dims(const Dims& a, const Dims& b) {
  Dims o(std::max(a.size(), b.size()));
  for (size_t i = 0; i < o.size(); ++i) {
    const int64_t da = i < o.size() - a.size() ? 1 : a[i - (o.size() - a.size())];
    const int64_t db = i < o.size() - b.size() ? 1 : b[i - (o.size() - b.size())];
    o[i] = std::max(da, db);
  }
  return o;
}

Shape to_shape(const Dims& d) { return Shape(d.begin(), d.end()); }

// ------------------------------------------------------------------ Unary

double unary_ref(UnaryFn f, double x) {
  switch (f) {
    case UnaryFn::GeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case UnaryFn::GeluTanh:
      return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case UnaryFn::Silu:
      return x / (1.0 + std::exp(-x));
    case UnaryFn::Relu:
      return x > 0 ? x : 0.0;
    case UnaryFn::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryFn::Tanh:
      return std::tanh(x);
    case UnaryFn::Exp:
      return std::exp(x);
    case UnaryFn::Log:
      return std::log(x);
    case UnaryFn::Sqrt:
      return std::sqrt(x);
    case UnaryFn::Rsqrt:
      return 1.0 / std::sqrt(x);
    case UnaryFn::Neg:
      return -x;
    case UnaryFn::Abs:
      return std::fabs(x);
    case UnaryFn::Sin:
      return std::sin(x);
    case UnaryFn::Cos:
      return std::cos(x);
  }
  return kNaN;
}

constexpr UnaryFn kUnaryFns[] = {UnaryFn::GeluErf, UnaryFn::GeluTanh, UnaryFn::Silu, UnaryFn::Relu, UnaryFn::Sigmoid,
                                 UnaryFn::Tanh,    UnaryFn::Exp,      UnaryFn::Log,  UnaryFn::Sqrt, UnaryFn::Rsqrt,
                                 UnaryFn::Neg,     UnaryFn::Abs,      UnaryFn::Sin,  UnaryFn::Cos};

}  // namespace

TEST(CpuKernelsA, UnaryEveryFnAndStorage) {
  const Dims shape{3, 5, 7};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (UnaryFn f : kUnaryFns) {
      const bool positive = f == UnaryFn::Log || f == UnaryFn::Sqrt || f == UnaryFn::Rsqrt;
      const Tensor x = make(t, shape, random_values(numel(shape), 7, positive ? 0.1 : -4.0, 4.0));
      Graph g;
      output("y", unary(f, input(g, "x", t, to_shape(shape))));
      const Tensor y = run_graph(g, {x})[0];
      ASSERT_EQ(y.dtype(), t);
      std::vector<double> ref;
      for (double v : x.to_f64()) ref.push_back(convert(unary_ref(f, v), t));
      const Tol tol = tol_for(t);
      expect_close(y, ref, tol.atol, tol.rtol, str(unary_name(f), " ", t));
    }
  }
}

TEST(CpuKernelsA, UnaryEdgeCases) {
  const std::vector<double> xs{-100.0, -30.0, 0.0, 1.0, 30.0, 100.0};
  auto run = [&](UnaryFn f) {
    Graph g;
    output("y", unary(f, input(g, "x", DType::F32, {6})));
    return run_graph(g, {make(DType::F32, {6}, xs)})[0].to_f64();
  };
  // Stable sigmoid/silu: no NaN or inf at large |x|.
  const auto silu = run(UnaryFn::Silu);
  EXPECT_LE(std::fabs(silu[0]), 1e-40);  // −100·e^−100, a denormal
  EXPECT_FLOAT_EQ(static_cast<float>(silu[5]), 100.0f);
  const auto sig = run(UnaryFn::Sigmoid);
  EXPECT_LE(sig[0], 1e-40);
  EXPECT_EQ(sig[5], 1.0);
  // GeluErf and GeluTanh are different functions.
  const auto ge = run(UnaryFn::GeluErf), gt = run(UnaryFn::GeluTanh);
  EXPECT_NEAR(ge[3], 0.8413447460685429, 1e-6);
  EXPECT_NEAR(gt[3], 0.8411919906082768, 1e-6);
}

// ------------------------------------------------------------------ Binary

namespace {

double binary_ref(BinaryFn f, double a, double b) {
  switch (f) {
    case BinaryFn::Add:
      return a + b;
    case BinaryFn::Sub:
      return a - b;
    case BinaryFn::Mul:
      return a * b;
    case BinaryFn::Div:
      return a / b;
    case BinaryFn::Max:
      return std::max(a, b);
    case BinaryFn::Min:
      return std::min(a, b);
    case BinaryFn::Pow:
      return std::pow(a, b);
  }
  return kNaN;
}

// Truncating integer division with x / 0 = 0.
double int_binary_ref(BinaryFn f, double a, double b) {
  if (f == BinaryFn::Div) return b == 0 ? 0.0 : std::trunc(a / b);
  return binary_ref(f, a, b);
}

const std::vector<std::pair<Dims, Dims>> kBroadcastCases = {
    {{3, 5, 7}, {3, 5, 7}},       {{2, 3, 4}, {3, 1}}, {{1}, {2, 3, 5}}, {{4, 1, 5}, {3, 1}},
    {{2, 1, 3, 1}, {1, 4, 1, 6}}, {{6, 1}, {1, 9}},    {{}, {2, 3}}};

}  // namespace

TEST(CpuKernelsA, BinaryFloatBroadcasting) {
  constexpr BinaryFn fns[] = {BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div,
                              BinaryFn::Max, BinaryFn::Min, BinaryFn::Pow};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (const auto& [da, db] : kBroadcastCases) {
      for (BinaryFn f : fns) {
        const bool pow = f == BinaryFn::Pow;
        const Tensor a = make(t, da, random_values(numel(da), 1, pow ? 0.5 : -3.0, 3.0));
        const Tensor b = make(t, db, random_values(numel(db), 2, pow ? -2.0 : 0.5, 2.0));
        Graph g;
        auto ia = input(g, "a", t, to_shape(da));
        auto ib = input(g, "b", t, to_shape(db));
        output("y", binary(f, ia, ib));
        const Tensor y = run_graph(g, {a, b})[0];
        const Dims od = broadcast_dims(da, db);
        ASSERT_EQ(y.shape(), od);
        const auto av = a.to_f64(), bv = b.to_f64();
        std::vector<double> ref;
        for (int64_t i = 0; i < numel(od); ++i)
          ref.push_back(convert(binary_ref(f, av[static_cast<size_t>(bcast_index(od, da, i))],
                                           bv[static_cast<size_t>(bcast_index(od, db, i))]),
                                t));
        const Tol tol = tol_for(t);
        expect_close(y, ref, tol.atol, tol.rtol, str(binary_name(f), " ", t, " ", shape_str(da), " ", shape_str(db)));
      }
    }
  }
}

TEST(CpuKernelsA, BinaryMaxMinPropagateNaN) {
  Graph g;
  auto a = input(g, "a", DType::F32, {3});
  auto b = input(g, "b", DType::F32, {3});
  output("max", binary(BinaryFn::Max, a, b));
  output("min", binary(BinaryFn::Min, a, b));
  auto r = run_graph(g, {make(DType::F32, {3}, {kNaN, 1.0, 2.0}), make(DType::F32, {3}, {1.0, kNaN, 3.0})});
  expect_exact(r[0], {kNaN, kNaN, 3.0}, "max");
  expect_exact(r[1], {kNaN, kNaN, 2.0}, "min");
}

TEST(CpuKernelsA, BinaryIntegers) {
  constexpr BinaryFn fns[] = {BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div, BinaryFn::Max, BinaryFn::Min};
  for (DType t : {DType::I32, DType::I64, DType::I16, DType::I8}) {
    for (const auto& [da, db] : kBroadcastCases) {
      for (BinaryFn f : fns) {
        const Tensor a = make(t, da, random_ints(numel(da), 3, -9, 9));
        const Tensor b = make(t, db, random_ints(numel(db), 4, -4, 4));  // includes zeros
        Graph g;
        auto ia = input(g, "a", t, to_shape(da));
        auto ib = input(g, "b", t, to_shape(db));
        output("y", binary(f, ia, ib));
        const Tensor y = run_graph(g, {a, b})[0];
        const Dims od = broadcast_dims(da, db);
        const auto av = a.to_f64(), bv = b.to_f64();
        std::vector<double> ref;
        for (int64_t i = 0; i < numel(od); ++i)
          ref.push_back(int_binary_ref(f, av[static_cast<size_t>(bcast_index(od, da, i))],
                                       bv[static_cast<size_t>(bcast_index(od, db, i))]));
        expect_exact(y, ref, str(binary_name(f), " ", t, " ", shape_str(da), " ", shape_str(db)));
      }
    }
  }
}

TEST(CpuKernelsA, IntegerOverflowAndDivisionAreDefined) {
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  Graph g;
  auto a = input(g, "a", DType::I32, {4});
  auto b = input(g, "b", DType::I32, {4});
  output("div", a / b);
  output("add", a + b);
  auto r = run_graph(g, {Tensor::from(std::vector<int32_t>{kMin, 7, -7, kMax}, {4}),
                         Tensor::from(std::vector<int32_t>{-1, 0, 2, 1}, {4})});
  EXPECT_EQ(r[0].to_vector<int32_t>(), (std::vector<int32_t>{kMin, 0, -3, kMax}));
  EXPECT_EQ(r[1].to_vector<int32_t>(), (std::vector<int32_t>{kMax, 7, -5, kMin}));
  Graph g64;
  auto a64 = input(g64, "a", DType::I64, {2});
  auto b64 = input(g64, "b", DType::I64, {2});
  output("div", a64 / b64);
  const int64_t m64 = std::numeric_limits<int64_t>::min();
  auto r64 = run_graph(
      g64, {Tensor::from(std::vector<int64_t>{m64, -9}, {2}), Tensor::from(std::vector<int64_t>{-1, 0}, {2})});
  EXPECT_EQ(r64[0].to_vector<int64_t>(), (std::vector<int64_t>{m64, 0}));
}

// ------------------------------------------------------------------ Compare / Where

TEST(CpuKernelsA, CompareAllTypesWithBroadcast) {
  constexpr CompareFn fns[] = {CompareFn::Eq, CompareFn::Ne, CompareFn::Lt,
                               CompareFn::Le, CompareFn::Gt, CompareFn::Ge};
  const Dims da{2, 3, 4}, db{3, 1};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool, DType::F64}) {
    const int hi = t == DType::Bool ? 1 : 2;
    auto av = random_ints(numel(da), 5, 0, hi), bv = random_ints(numel(db), 6, 0, hi);
    if (is_float(t)) av[3] = kNaN;
    const Tensor a = make(t, da, av), b = make(t, db, bv);
    for (CompareFn f : fns) {
      Graph g;
      auto ia = input(g, "a", t, to_shape(da));
      auto ib = input(g, "b", t, to_shape(db));
      output("y", compare(f, ia, ib));
      const Tensor y = run_graph(g, {a, b})[0];
      ASSERT_EQ(y.dtype(), DType::Bool);
      const Dims od = broadcast_dims(da, db);
      std::vector<double> ref;
      for (int64_t i = 0; i < numel(od); ++i) {
        const double x = a.to_f64()[static_cast<size_t>(bcast_index(od, da, i))];
        const double z = b.to_f64()[static_cast<size_t>(bcast_index(od, db, i))];
        bool r = false;
        switch (f) {
          case CompareFn::Eq:
            r = x == z;
            break;
          case CompareFn::Ne:
            r = x != z;
            break;
          case CompareFn::Lt:
            r = x < z;
            break;
          case CompareFn::Le:
            r = x <= z;
            break;
          case CompareFn::Gt:
            r = x > z;
            break;
          case CompareFn::Ge:
            r = x >= z;
            break;
        }
        ref.push_back(r);
      }
      expect_exact(y, ref, str(compare_name(f), " ", t));
    }
  }
}

TEST(CpuKernelsA, WhereBroadcastsAllThree) {
  const Dims dc{3, 1}, da{4}, db{2, 1, 1}, od{2, 3, 4};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8}) {
    const Tensor c = make(DType::Bool, dc, {1, 0, 1});
    const Tensor a = make(t, da, random_ints(4, 8, 0, 50));
    const Tensor b = make(t, db, random_ints(2, 9, 60, 100));
    Graph g;
    auto ic = input(g, "c", DType::Bool, to_shape(dc));
    auto ia = input(g, "a", t, to_shape(da));
    auto ib = input(g, "b", t, to_shape(db));
    output("y", where(ic, ia, ib));
    const Tensor y = run_graph(g, {c, a, b})[0];
    ASSERT_EQ(y.shape(), od);
    std::vector<double> ref;
    for (int64_t i = 0; i < numel(od); ++i)
      ref.push_back(c.to_f64()[static_cast<size_t>(bcast_index(od, dc, i))]
                        ? a.to_f64()[static_cast<size_t>(bcast_index(od, da, i))]
                        : b.to_f64()[static_cast<size_t>(bcast_index(od, db, i))]);
    expect_exact(y, ref, str("where ", t));
  }
}

// ------------------------------------------------------------------ Cast

TEST(CpuKernelsA, CastEveryPair) {
  constexpr DType types[] = {DType::F32, DType::F16, DType::BF16, DType::F64,  DType::I8,     DType::U8,
                             DType::I16, DType::I32, DType::I64,  DType::Bool, DType::F8E4M3, DType::F8E5M2};
  const std::vector<double> values{0.0, 1.0, -2.0, 3.5, -0.5, 96.0, 200.0, -300.0};
  for (DType from : types) {
    std::vector<double> src;
    for (double v : values) src.push_back(convert(v, from));
    const Tensor x = make(from, {2, 4}, src);
    for (DType to : types) {
      Graph g;
      output("y", cast(input(g, "x", from, {2, 4}), to));
      const Tensor y = run_graph(g, {x})[0];
      ASSERT_EQ(y.dtype(), to);
      std::vector<double> ref;
      for (double v : src) ref.push_back(convert(v, to));
      expect_exact(y, ref, str("cast ", from, " -> ", to));
    }
  }
}

TEST(CpuKernelsA, CastSaturatesTruncatesAndRoundsOnce) {
  const std::vector<double> v{1e10, -1e10, kNaN, 2.9, -2.9, kInf, -kInf, 0.0};
  Graph g;
  auto x = input(g, "x", DType::F32, {8});
  output("i32", cast(x, DType::I32));
  output("u8", cast(x, DType::U8));
  output("i64", cast(x, DType::I64));
  output("b", cast(x, DType::Bool));
  output("i8", cast(cast(x, DType::I64), DType::I8));
  auto r = run_graph(g, {make(DType::F32, {8}, v)});
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(r[0].to_vector<int32_t>(), (std::vector<int32_t>{kMax, kMin, 0, 2, -2, kMax, kMin, 0}));
  EXPECT_EQ(r[1].to_vector<uint8_t>(), (std::vector<uint8_t>{255, 0, 0, 2, 0, 255, 0, 0}));
  EXPECT_EQ(r[2].to_vector<int64_t>(),
            (std::vector<int64_t>{10000000000LL, -10000000000LL, 0, 2, -2, std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min(), 0}));
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), r[3].raw(), 8);
  EXPECT_EQ(b, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(r[4].to_vector<int8_t>(), (std::vector<int8_t>{127, -128, 0, 2, -2, 127, -128, 0}));

  // f64 → f16 rounds once: 1 + 2^-11 + 2^-40 is just above the midpoint
  // between 1 and 1 + 2^-10, so it rounds up (via f32 it would tie to 1).
  Graph g2;
  output("h", cast(input(g2, "x", DType::F64, {1}), DType::F16));
  auto h =
      run_graph(g2, {Tensor::from(std::vector<double>{1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)}, {1})})[0];
  uint16_t bits;
  std::memcpy(&bits, h.raw(), 2);
  EXPECT_EQ(bits, 0x3C01);
}

// ------------------------------------------------------------------ Movement

TEST(CpuKernelsA, ReshapeIsAViewAndCopiesWhenNotAliased) {
  Graph g;
  auto x = input(g, "x", DType::F32, {2, 6});
  output("r", reshape(x, {3, 4}));
  output("s", reshape(unary(UnaryFn::Neg, x), {4, 3}));
  const auto v = random_values(12, 11);
  auto r = run_graph(g, {make(DType::F32, {2, 6}, v)});
  EXPECT_EQ(r[0].shape(), (Dims{3, 4}));
  std::vector<double> vf;
  for (double d : v) vf.push_back(static_cast<float>(d));
  expect_exact(r[0], vf, "reshape of input");
  std::vector<double> neg;
  for (double d : v) neg.push_back(-static_cast<double>(static_cast<float>(d)));
  expect_exact(r[1], neg, "reshape of computed value");

  // Called directly with distinct buffers, the kernel copies.
  cpu::register_all_kernels();
  const NodeId id = g.outputs()[0].second;
  const KernelEntry* k = KernelRegistry::global().find(cpu::kCpuBackend, g, id);
  ASSERT_NE(k, nullptr);
  std::vector<float> src(12), dst(12, 0.0f);
  std::iota(src.begin(), src.end(), 1.0f);
  cpu::KernelArgs args(g, id, {src.data()}, dst.data(), cpu::ThreadPool::global());
  std::any_cast<const cpu::CpuKernel&>(k->impl)(args);
  EXPECT_EQ(dst, src);
}

TEST(CpuKernelsA, TransposeAnyPermAndDtype) {
  const Dims d{2, 3, 4, 5};
  std::vector<int> perm{0, 1, 2, 3};
  for (DType t : {DType::F32, DType::F16, DType::I64, DType::U8, DType::F64}) {
    const auto v = random_ints(numel(d), 12, 0, 100);
    const Tensor x = make(t, d, v);
    do {
      Graph g;
      output("y", transpose(input(g, "x", t, to_shape(d)), perm));
      const Tensor y = run_graph(g, {x})[0];
      Dims od;
      for (int p : perm) od.push_back(d[static_cast<size_t>(p)]);
      ASSERT_EQ(y.shape(), od);
      std::vector<double> ref(static_cast<size_t>(numel(d)));
      for (int64_t i = 0; i < numel(od); ++i) {
        // output multi-index → input flat index
        int64_t rem = i, in_flat = 0;
        std::vector<int64_t> oi(4);
        for (int k = 3; k >= 0; --k) {
          oi[static_cast<size_t>(k)] = rem % od[static_cast<size_t>(k)];
          rem /= od[static_cast<size_t>(k)];
        }
        std::vector<int64_t> ii(4);
        for (size_t k = 0; k < 4; ++k) ii[static_cast<size_t>(perm[k])] = oi[k];
        for (size_t k = 0; k < 4; ++k) in_flat = in_flat * d[k] + ii[k];
        ref[static_cast<size_t>(i)] = v[static_cast<size_t>(in_flat)];
      }
      expect_exact(y, ref, str("transpose ", t, " perm ", perm[0], perm[1], perm[2], perm[3]));
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(CpuKernelsA, NarrowEveryAxis) {
  const Dims d{3, 4, 5};
  const auto v = random_ints(numel(d), 13, -50, 50);
  for (DType t : {DType::F32, DType::BF16, DType::I32}) {
    for (int axis = 0; axis < 3; ++axis) {
      const int64_t start = 1, len = d[static_cast<size_t>(axis)] - 2;
      Graph g;
      output("y", narrow(input(g, "x", t, to_shape(d)), axis, start, len));
      const Tensor y = run_graph(g, {make(t, d, v)})[0];
      std::vector<double> ref;
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t k = 0; k < 5; ++k) {
            const int64_t c = axis == 0 ? i : axis == 1 ? j : k;
            if (c >= start && c < start + len) ref.push_back(v[static_cast<size_t>((i * 4 + j) * 5 + k)]);
          }
      expect_exact(y, ref, str("narrow ", t, " axis ", axis));
    }
  }
}

TEST(CpuKernelsA, ConcatVariadicEveryAxis) {
  for (DType t : {DType::I32, DType::F16, DType::F32}) {
    for (int axis = 0; axis < 3; ++axis) {
      std::vector<Dims> shapes;
      for (int64_t n : {1, 3, 2}) {
        Dims s{2, 3, 4};
        s[static_cast<size_t>(axis)] = n;
        shapes.push_back(s);
      }
      Graph g;
      std::vector<Value> xs;
      std::vector<Tensor> ins;
      std::vector<std::vector<double>> vals;
      for (size_t i = 0; i < shapes.size(); ++i) {
        xs.push_back(input(g, str("x", i), t, to_shape(shapes[i])));
        vals.push_back(random_ints(numel(shapes[i]), static_cast<uint32_t>(20 + i), -99, 99));
        ins.push_back(make(t, shapes[i], vals.back()));
      }
      output("y", concat(xs, axis));
      const Tensor y = run_graph(g, ins)[0];
      Dims od{2, 3, 4};
      od[static_cast<size_t>(axis)] = 6;
      ASSERT_EQ(y.shape(), od);
      std::vector<double> ref;
      for (int64_t i = 0; i < od[0]; ++i)
        for (int64_t j = 0; j < od[1]; ++j)
          for (int64_t k = 0; k < od[2]; ++k) {
            int64_t idx[3] = {i, j, k};
            size_t which = 0;
            while (idx[axis] >= shapes[which][static_cast<size_t>(axis)])
              idx[axis] -= shapes[which++][static_cast<size_t>(axis)];
            const Dims& s = shapes[which];
            ref.push_back(vals[which][static_cast<size_t>((idx[0] * s[1] + idx[1]) * s[2] + idx[2])]);
          }
      expect_exact(y, ref, str("concat ", t, " axis ", axis));
    }
  }
}

TEST(CpuKernelsA, ExpandBroadcastCopy) {
  const Dims d{3, 1}, od{2, 3, 4};
  const auto v = random_ints(3, 14, 0, 9);
  for (DType t : {DType::F32, DType::I64, DType::Bool}) {
    Graph g;
    output("y", expand(input(g, "x", t, to_shape(d)), to_shape(od)));
    const Tensor x = make(t, d, v);
    const Tensor y = run_graph(g, {x})[0];
    std::vector<double> ref;
    for (int64_t i = 0; i < numel(od); ++i) ref.push_back(x.to_f64()[static_cast<size_t>(bcast_index(od, d, i))]);
    expect_exact(y, ref, str("expand ", t));
  }
}

TEST(CpuKernelsA, GatherRowsAndBadIndex) {
  const Dims table{10, 2, 3};
  const auto tv = random_values(numel(table), 15);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    for (DType it : {DType::I32, DType::I64}) {
      Graph g;
      auto itab = input(g, "table", t, to_shape(table));
      auto iids = input(g, "ids", it, {2, 3});
      output("y", op(OpKind::Gather, NoAttrs{}, {itab, iids}, "embed"));
      const Tensor tab = make(t, table, tv);
      const std::vector<double> ids{9, 0, 3, 3, 7, 1};
      const Tensor y = run_graph(g, {tab, make(it, {2, 3}, ids)})[0];
      ASSERT_EQ(y.shape(), (Dims{2, 3, 2, 3}));
      std::vector<double> ref;
      for (double id : ids)
        for (int64_t j = 0; j < 6; ++j)
          ref.push_back(tab.to_f64()[static_cast<size_t>(static_cast<int64_t>(id) * 6 + j)]);
      expect_exact(y, ref, str("gather ", t, " ", it));

      for (double bad : {10.0, -1.0}) {
        const std::string err = error_of([&] { run_graph(g, {tab, make(it, {2, 3}, {0, 1, 2, bad, 4, 5})}); });
        EXPECT_NE(err.find("Gather 'embed'"), std::string::npos) << err;
        EXPECT_NE(err.find(str("index ", static_cast<int64_t>(bad), " at position 3")), std::string::npos) << err;
        EXPECT_NE(err.find("table of 10 rows"), std::string::npos) << err;
      }
    }
  }
}

TEST(CpuKernelsA, WriteSliceIntoStateAndBadOffset) {
  Graph g;
  auto st = state(g, "cache", DType::F32, {2, 6, 3});
  auto upd = input(g, "upd", DType::F32, {2, 2, 3});
  auto off = input(g, "off", DType::I32, {1});
  output("y", op(OpKind::WriteSlice, WriteSliceAttrs{1}, {st, upd, off}, "kv_write"));
  Session s("cpu");
  auto exe = s.compile(g);
  const auto u1 = random_values(12, 16), u2 = random_values(12, 17);
  exe->run({make(DType::F32, {2, 2, 3}, u1), Tensor::from(std::vector<int32_t>{1}, {1})});
  const Tensor y = exe->run({make(DType::F32, {2, 2, 3}, u2), Tensor::from(std::vector<int32_t>{4}, {1})})[0];
  std::vector<double> ref(36, 0.0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t l = 0; l < 2; ++l)
      for (int64_t c = 0; c < 3; ++c) {
        ref[static_cast<size_t>((b * 6 + 1 + l) * 3 + c)] =
            static_cast<float>(u1[static_cast<size_t>((b * 2 + l) * 3 + c)]);
        ref[static_cast<size_t>((b * 6 + 4 + l) * 3 + c)] =
            static_cast<float>(u2[static_cast<size_t>((b * 2 + l) * 3 + c)]);
      }
  expect_exact(y, ref, "write_slice output");
  expect_exact(exe->read_state("cache"), ref, "write_slice state");

  for (int32_t bad : {5, -1}) {
    const std::string err = error_of([&] {
      exe->run({make(DType::F32, {2, 2, 3}, u1), Tensor::from(std::vector<int32_t>{bad}, {1})});
    });
    EXPECT_NE(err.find("WriteSlice 'kv_write'"), std::string::npos) << err;
    EXPECT_NE(err.find(str("offset ", bad, " + update length 2")), std::string::npos) << err;
  }
  expect_exact(exe->read_state("cache"), ref, "state untouched by a rejected write");
}

// ------------------------------------------------------------------ Selection

TEST(CpuKernelsA, ArgMaxAnyAxisTiesAndNaN) {
  const Dims d{3, 4, 5};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    auto v = random_ints(numel(d), 18, 0, 4);  // many ties
    if (is_float(t)) v[7] = kNaN;
    const Tensor x = make(t, d, v);
    const auto xv = x.to_f64();
    for (int axis = 0; axis < 3; ++axis) {
      for (bool keep : {false, true}) {
        Graph g;
        output("y", argmax(input(g, "x", t, to_shape(d)), axis, keep));
        const Tensor y = run_graph(g, {x})[0];
        Dims od = d;
        od[static_cast<size_t>(axis)] = 1;
        if (!keep) od.erase(od.begin() + axis);
        ASSERT_EQ(y.shape(), od);
        std::vector<double> ref;
        for (int64_t i = 0; i < (axis == 0 ? 1 : 3); ++i)
          for (int64_t j = 0; j < (axis == 1 ? 1 : 4); ++j)
            for (int64_t k = 0; k < (axis == 2 ? 1 : 5); ++k) {
              int64_t best = -1;
              double bv = 0;
              for (int64_t a = 0; a < d[static_cast<size_t>(axis)]; ++a) {
                const int64_t ii = axis == 0 ? a : i, jj = axis == 1 ? a : j, kk = axis == 2 ? a : k;
                const double val = xv[static_cast<size_t>((ii * 4 + jj) * 5 + kk)];
                const bool above = best < 0 || (!std::isnan(bv) && (std::isnan(val) || val > bv));
                if (above) {
                  best = a;
                  bv = val;
                }
              }
              ref.push_back(static_cast<double>(best));
            }
        expect_exact(y, ref, str("argmax ", t, " axis ", axis, keep ? " keepdims" : ""));
      }
    }
  }
}

TEST(CpuKernelsA, ArgMaxWideStridedAxis) {
  // Strided axis with more than 64 columns (several lane blocks).
  const Dims d{2, 7, 150};
  const auto v = random_values(numel(d), 19);
  Graph g;
  output("y", argmax(input(g, "x", DType::F32, to_shape(d)), 1));
  const Tensor y = run_graph(g, {make(DType::F32, d, v)})[0];
  std::vector<double> ref;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 150; ++k) {
      int64_t best = 0;
      for (int64_t a = 1; a < 7; ++a)
        if (static_cast<float>(v[static_cast<size_t>((i * 7 + a) * 150 + k)]) >
            static_cast<float>(v[static_cast<size_t>((i * 7 + best) * 150 + k)]))
          best = a;
      ref.push_back(static_cast<double>(best));
    }
  expect_exact(y, ref, "argmax strided");
}

TEST(CpuKernelsA, ArgMaxLongRowsTiesZerosAndNaN) {
  // Rows of 1003 (the vectorized last-axis path, with a tail): ties of the
  // maximum, -0 before +0, a NaN (ranks first), all -inf, the maximum in the tail.
  const int64_t n = 1003;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = random_ints(6 * n, 27, -50, 50);
  for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(n + j)] = -1.0;
  v[static_cast<size_t>(n + 500)] = -0.0;
  v[static_cast<size_t>(n + 700)] = 0.0;
  v[static_cast<size_t>(2 * n + 900)] = kNaN;
  v[static_cast<size_t>(2 * n + 950)] = kNaN;
  for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(3 * n + j)] = -inf;
  v[static_cast<size_t>(4 * n + n - 1)] = 99.0;
  v[static_cast<size_t>(5 * n + 3)] = 60.0;
  v[static_cast<size_t>(5 * n + 800)] = 60.0;
  for (DType t : {DType::F32, DType::BF16}) {
    const Tensor x = make(t, {6, n}, v);
    const auto xv = x.to_f64();
    Graph g;
    output("y", argmax(input(g, "x", t, {6, n}), 1));
    const Tensor y = run_graph(g, {x})[0];
    std::vector<double> ref;
    for (int64_t r = 0; r < 6; ++r) {
      int64_t best = 0;
      for (int64_t j = 1; j < n; ++j) {
        const double bv = xv[static_cast<size_t>(r * n + best)], val = xv[static_cast<size_t>(r * n + j)];
        if (!std::isnan(bv) && (std::isnan(val) || val > bv)) best = j;
      }
      ref.push_back(static_cast<double>(best));
    }
    EXPECT_EQ(ref[1], 500.0);
    EXPECT_EQ(ref[2], 900.0);
    EXPECT_EQ(ref[3], 0.0);
    EXPECT_EQ(ref[4], static_cast<double>(n - 1));
    EXPECT_EQ(ref[5], 3.0);
    expect_exact(y, ref, str("argmax long rows ", t));
  }
}

TEST(CpuKernelsA, TopKValuesAndIndices) {
  const Dims d{3, 2, 17};
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor x = make(t, d, random_ints(numel(d), 21, -5, 5));  // ties
    const auto xv = x.to_f64();
    for (int k : {1, 4, 17}) {
      Graph g;
      auto xi = input(g, "x", t, to_shape(d));
      output("v", topk(xi, k, false));
      output("i", topk(xi, k, true));
      auto r = run_graph(g, {x});
      ASSERT_EQ(r[0].dtype(), t);
      ASSERT_EQ(r[1].dtype(), DType::I32);
      std::vector<double> rv, ri;
      for (int64_t row = 0; row < 6; ++row) {
        std::vector<int64_t> idx(17);
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int64_t p, int64_t q) {
          return xv[static_cast<size_t>(row * 17 + p)] > xv[static_cast<size_t>(row * 17 + q)];
        });
        for (int j = 0; j < k; ++j) {
          ri.push_back(static_cast<double>(idx[static_cast<size_t>(j)]));
          rv.push_back(xv[static_cast<size_t>(row * 17 + idx[static_cast<size_t>(j)])]);
        }
      }
      expect_exact(r[0], rv, str("topk values ", t, " k=", k));
      expect_exact(r[1], ri, str("topk indices ", t, " k=", k));
    }
  }
}

namespace {

// The documented Sample algorithm, written independently of the kernel.
int32_t sample_ref(const std::vector<double>& logits, const SampleAttrs& a, uint32_t step, uint32_t row) {
  const size_t n = logits.size();
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t p, size_t q) { return logits[p] > logits[q]; });
  if (a.temperature == 0.0f) return static_cast<int32_t>(idx[0]);
  const size_t k = a.top_k == 0 ? n : std::min<size_t>(static_cast<size_t>(a.top_k), n);
  const double top = logits[idx[0]];
  auto w = [&](size_t j) { return std::exp((logits[j] - top) / static_cast<double>(a.temperature)); };
  std::vector<bool> kept(n, false);
  for (size_t j = 0; j < k; ++j) kept[idx[j]] = true;
  double total = 0;  // index order
  for (size_t j = 0; j < n; ++j)
    if (kept[j]) total += w(j);
  std::vector<double> cum(k);  // selection order
  double c = 0;
  for (size_t j = 0; j < k; ++j) cum[j] = c += w(idx[j]);
  size_t keep = k;
  double mass = total;
  if (a.top_p < 1.0f) {
    keep = 1;
    while (keep < k && cum[keep - 1] < static_cast<double>(a.top_p) * total) ++keep;
    mass = cum[keep - 1];
  }
  const double target = static_cast<double>(sample_uniform(a.seed, step, row)) * mass;
  for (size_t j = 0; j < keep; ++j)
    if (cum[j] > target) return static_cast<int32_t>(idx[j]);
  for (size_t j = keep - 1; j > 0; --j)
    if (cum[j] > cum[j - 1]) return static_cast<int32_t>(idx[j]);
  return static_cast<int32_t>(idx[0]);
}

}  // namespace

TEST(CpuKernelsA, SampleUniformIsDeterministicAndSpread) {
  EXPECT_EQ(sample_uniform(1, 2, 3), sample_uniform(1, 2, 3));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(1, 2, 4));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(1, 3, 3));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(2, 2, 3));
  double sum = 0;
  for (uint32_t i = 0; i < 10000; ++i) {
    const float u = sample_uniform(42, 0, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
}

TEST(CpuKernelsA, SampleMatchesReference) {
  const Dims d{64, 50};
  const auto v = random_values(numel(d), 22, -4.0, 4.0);
  const std::vector<SampleAttrs> cases = {{0.0f, 0, 1.0f, 1}, {1.0f, 0, 1.0f, 2},  {0.7f, 5, 1.0f, 3},
                                          {1.3f, 0, 0.6f, 4}, {1.0f, 10, 0.9f, 5}, {1.0f, 1, 1.0f, 6}};
  for (DType t : {DType::F32, DType::BF16}) {
    const Tensor x = make(t, d, v);
    const auto xv = x.to_f64();
    for (const SampleAttrs& a : cases) {
      for (int32_t step : {0, 7}) {
        Graph g;
        auto ix = input(g, "x", t, to_shape(d));
        auto istep = input(g, "step", DType::I32, {1});
        output("y", sample(ix, a, istep));
        const Tensor y = run_graph(g, {x, Tensor::from(std::vector<int32_t>{step}, {1})})[0];
        ASSERT_EQ(y.dtype(), DType::I32);
        std::vector<double> ref;
        for (int64_t r = 0; r < 64; ++r) {
          std::vector<double> row(xv.begin() + r * 50, xv.begin() + (r + 1) * 50);
          // the kernel computes from f32 values; float → double is exact
          for (auto& z : row) z = static_cast<float>(z);
          ref.push_back(sample_ref(row, a, static_cast<uint32_t>(step), static_cast<uint32_t>(r)));
        }
        expect_exact(y, ref, str("sample ", t, " T=", a.temperature, " k=", a.top_k, " p=", a.top_p, " step ", step));
      }
    }
  }
}

TEST(CpuKernelsA, SampleLargeVocabMatchesReference) {
  // V > 256 so the sorted prefix grows in steps; flat and peaked logits; top_k
  // on both sides of the kernel's heap limit (1024).
  const Dims d{6, 3001};
  for (double scale : {0.2, 8.0}) {
    const auto v = random_values(numel(d), 26, -scale, scale);
    const Tensor x = make(DType::F32, d, v);
    for (const SampleAttrs& a : std::vector<SampleAttrs>{{1.0f, 0, 1.0f, 7}, {0.8f, 0, 0.95f, 8}, {1.0f, 700, 0.99f, 9},
                                                         {1.0f, 1000, 1.0f, 10}, {1.0f, 2000, 0.9f, 11},
                                                         {0.9f, 40, 0.95f, 12}}) {
      Graph g;
      output("y", sample(input(g, "x", DType::F32, to_shape(d)), a));
      const Tensor y = run_graph(g, {x})[0];
      std::vector<double> ref;
      for (int64_t r = 0; r < d[0]; ++r) {
        std::vector<double> row;
        for (int64_t j = 0; j < d[1]; ++j) row.push_back(static_cast<float>(v[static_cast<size_t>(r * d[1] + j)]));
        ref.push_back(sample_ref(row, a, 0, static_cast<uint32_t>(r)));
      }
      expect_exact(y, ref, str("sample V=3001 scale ", scale, " k=", a.top_k, " p=", a.top_p));
    }
  }
}

TEST(CpuKernelsA, SampleDistributionTopKTopP) {
  // Every row has probabilities 0.5, 0.3, 0.15, 0.05 (shuffled positions).
  const int64_t rows = 20000;
  const std::vector<double> probs{0.15, 0.5, 0.05, 0.3};
  std::vector<double> v;
  for (int64_t r = 0; r < rows; ++r)
    for (double p : probs) v.push_back(std::log(p));
  const Tensor x = make(DType::F32, {rows, 4}, v);
  auto freq = [&](SampleAttrs a) {
    Graph g;
    output("y", sample(input(g, "x", DType::F32, {rows, 4}), a));
    const auto ids = run_graph(g, {x})[0].to_vector<int32_t>();
    std::vector<double> f(4, 0.0);
    for (int32_t id : ids) f[static_cast<size_t>(id)] += 1.0 / rows;
    return f;
  };
  const auto all = freq({1.0f, 0, 1.0f, 9});
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(all[i], probs[i], 0.015) << i;
  const auto k2 = freq({1.0f, 2, 1.0f, 10});  // {0.5, 0.3} renormalized
  EXPECT_NEAR(k2[1], 0.625, 0.015);
  EXPECT_NEAR(k2[3], 0.375, 0.015);
  EXPECT_EQ(k2[0] + k2[2], 0.0);
  const auto p7 = freq({1.0f, 0, 0.7f, 11});  // 0.5 < 0.7 ≤ 0.8: the top two
  EXPECT_NEAR(p7[1], 0.625, 0.015);
  EXPECT_EQ(p7[0] + p7[2], 0.0);
  const auto p4 = freq({1.0f, 0, 0.4f, 12});  // the top token alone reaches 0.4
  EXPECT_NEAR(p4[1], 1.0, 1e-9);
}

// ------------------------------------------------------------------ Reduction

namespace {

std::vector<double> softmax_ref(const std::vector<double>& x, const Dims& d, int axis) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= d[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < d.size(); ++i) inner *= d[i];
  const int64_t len = d[static_cast<size_t>(axis)];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t j) { return static_cast<size_t>((o * len + j) * inner + c); };
      double m = -kInf, s = 0;
      for (int64_t j = 0; j < len; ++j) m = std::max(m, x[at(j)]);
      for (int64_t j = 0; j < len; ++j) s += m == -kInf ? 0.0 : std::exp(x[at(j)] - m);
      for (int64_t j = 0; j < len; ++j) y[at(j)] = m == -kInf ? 0.0 : std::exp(x[at(j)] - m) / s;
    }
  return y;
}

}  // namespace

TEST(CpuKernelsA, SoftmaxAnyAxisAndMaskedRows) {
  const Dims d{3, 4, 5};
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    auto v = random_values(numel(d), 23, -10.0, 10.0);
    for (size_t j = 0; j < 5; ++j) v[j] = -kInf;  // row [0, 0, :] fully masked
    v[10] = 1000.0;                               // large logits stay finite
    const Tensor x = make(t, d, v);
    for (int axis : {0, 1, 2}) {
      Graph g;
      output("y", softmax(input(g, "x", t, to_shape(d)), axis == 2 ? -1 : axis));
      const Tensor y = run_graph(g, {x})[0];
      std::vector<double> ref = softmax_ref(x.to_f64(), d, axis);
      for (auto& r : ref) r = convert(r, t);
      const Tol tol = tol_for(t);
      expect_close(y, ref, tol.atol, tol.rtol, str("softmax ", t, " axis ", axis));
    }
  }
}

namespace {

// Reference reduce: double accumulation for floats, exact for ints (values are small).
std::vector<double> reduce_ref(const std::vector<double>& x, const Dims& d, const std::vector<int>& axes, ReduceFn f,
                               bool integer) {
  std::vector<bool> red(d.size(), false);
  for (int a : axes) red[static_cast<size_t>(a)] = true;
  int64_t n_out = 1, count = 1;
  for (size_t i = 0; i < d.size(); ++i) (red[i] ? count : n_out) *= d[i];
  std::vector<double> acc(static_cast<size_t>(n_out), f == ReduceFn::Max ? -kInf : f == ReduceFn::Min ? kInf : 0.0);
  for (int64_t flat = 0; flat < static_cast<int64_t>(x.size()); ++flat) {
    int64_t rem = flat, o = 0, ostride = 1;
    for (size_t i = d.size(); i-- > 0;) {
      const int64_t c = rem % d[i];
      rem /= d[i];
      if (!red[i]) {
        o += c * ostride;
        ostride *= d[i];
      }
    }
    double& a = acc[static_cast<size_t>(o)];
    const double v = x[static_cast<size_t>(flat)];
    if (f == ReduceFn::Max)
      a = std::max(a, v);
    else if (f == ReduceFn::Min)
      a = std::min(a, v);
    else
      a += v;
  }
  if (f == ReduceFn::Mean)
    for (auto& a : acc) a = integer ? std::trunc(a / static_cast<double>(count)) : a / static_cast<double>(count);
  return acc;
}

}  // namespace

TEST(CpuKernelsA, ReduceAnyAxesKeepdims) {
  const Dims d{3, 4, 5, 2};
  const std::vector<std::vector<int>> axis_sets = {{0}, {1}, {3}, {0, 2}, {1, 2}, {1, 3}, {0, 1, 2, 3}, {0, 3}};
  constexpr ReduceFn fns[] = {ReduceFn::Sum, ReduceFn::Mean, ReduceFn::Max, ReduceFn::Min};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64}) {
    const bool integer = !is_float(t);
    const Tensor x = make(t, d, integer ? random_ints(numel(d), 24, -20, 20) : random_values(numel(d), 24));
    for (const auto& axes : axis_sets) {
      for (ReduceFn f : fns) {
        for (bool keep : {false, true}) {
          Graph g;
          output("y", reduce(f, input(g, "x", t, to_shape(d)), axes, keep));
          const Tensor y = run_graph(g, {x})[0];
          Dims od;
          for (size_t i = 0; i < d.size(); ++i) {
            const bool r = std::find(axes.begin(), axes.end(), static_cast<int>(i)) != axes.end();
            if (!r)
              od.push_back(d[i]);
            else if (keep)
              od.push_back(1);
          }
          ASSERT_EQ(y.shape(), od);
          std::vector<double> ref = reduce_ref(x.to_f64(), d, axes, f, integer);
          for (auto& r : ref) r = convert(r, t);
          const Tol tol = tol_for(t);
          expect_close(y, ref, integer ? 0.0 : tol.atol, integer ? 0.0 : tol.rtol,
                       str(reduce_name(f), " ", t, " axes ", axes.size(), "@", axes[0], keep ? " keepdims" : ""));
        }
      }
    }
  }
}

TEST(CpuKernelsA, ReduceWideColumnsAndNegativeIntegerMean) {
  // Column mode with more than 64 lanes; negative axis.
  const Dims d{5, 130};
  const auto v = random_values(numel(d), 25);
  Graph g;
  output("y", reduce(ReduceFn::Sum, input(g, "x", DType::F32, to_shape(d)), {-2}));
  const Tensor x = make(DType::F32, d, v);
  expect_close(run_graph(g, {x})[0], reduce_ref(x.to_f64(), d, {0}, ReduceFn::Sum, false), 1e-5, 1e-6, "sum cols");

  Graph gi;
  output("m", reduce(ReduceFn::Mean, input(gi, "x", DType::I32, {2, 3}), {1}));
  auto m = run_graph(gi, {Tensor::from(std::vector<int32_t>{-1, -1, -2, 1, 2, 2}, {2, 3})})[0];
  EXPECT_EQ(m.to_vector<int32_t>(), (std::vector<int32_t>{-1, 1}));  // -4/3 → -1, 5/3 → 1

  Graph gn;
  output("m", reduce(ReduceFn::Max, input(gn, "x", DType::F32, {2, 2}), {1}));
  auto n = run_graph(gn, {make(DType::F32, {2, 2}, {1.0, kNaN, 3.0, 2.0})})[0];
  expect_exact(n, {kNaN, 3.0}, "max propagates NaN");
}

// Shapes large enough that parallel_for splits the work into many chunks.
TEST(CpuKernelsA, LargeShapesRunInParallelChunks) {
  const Dims da{301, 257}, db{257};
  const Tensor a = make(DType::F32, da, random_values(numel(da), 30));
  const Tensor b = make(DType::F32, db, random_values(numel(db), 31));
  Graph g;
  auto ia = input(g, "a", DType::F32, to_shape(da));
  auto ib = input(g, "b", DType::F32, to_shape(db));
  auto sum = ia + ib;
  output("add", sum);
  output("t", transpose(ia, {1, 0}));
  output("sm0", softmax(ia, 0));
  output("sm1", softmax(ia, 1));
  output("r0", reduce(ReduceFn::Sum, ia, {0}));
  output("r1", reduce(ReduceFn::Max, ia, {1}));
  output("am0", argmax(ia, 0));
  output("i32", cast(unary(UnaryFn::Exp, ia), DType::I32));
  output("cat", concat({ia, sum}, 1));
  output("tk", topk(ia, 3, true));
  auto r = run_graph(g, {a, b});
  const auto av = a.to_f64(), bv = b.to_f64();
  std::vector<double> add, t, i32, cat, tk;
  for (int64_t i = 0; i < numel(da); ++i)
    add.push_back(static_cast<float>(av[static_cast<size_t>(i)] + bv[static_cast<size_t>(i % 257)]));
  for (int64_t j = 0; j < 257; ++j)
    for (int64_t i = 0; i < 301; ++i) t.push_back(av[static_cast<size_t>(i * 257 + j)]);
  for (double v : av) i32.push_back(std::trunc(static_cast<float>(std::exp(v))));
  for (int64_t i = 0; i < 301; ++i) {
    for (int64_t j = 0; j < 257; ++j) cat.push_back(av[static_cast<size_t>(i * 257 + j)]);
    for (int64_t j = 0; j < 257; ++j) cat.push_back(add[static_cast<size_t>(i * 257 + j)]);
    std::vector<int64_t> idx(257);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t p, int64_t q) {
      return av[static_cast<size_t>(i * 257 + p)] > av[static_cast<size_t>(i * 257 + q)];
    });
    for (int j = 0; j < 3; ++j) tk.push_back(static_cast<double>(idx[static_cast<size_t>(j)]));
  }
  std::vector<double> am0;
  for (int64_t j = 0; j < 257; ++j) {
    int64_t best = 0;
    for (int64_t i = 1; i < 301; ++i)
      if (av[static_cast<size_t>(i * 257 + j)] > av[static_cast<size_t>(best * 257 + j)]) best = i;
    am0.push_back(static_cast<double>(best));
  }
  expect_close(r[0], add, 0, 0, "add");
  expect_exact(r[1], t, "transpose");
  expect_close(r[2], softmax_ref(av, da, 0), 1e-7, 1e-5, "softmax axis 0");
  expect_close(r[3], softmax_ref(av, da, 1), 1e-7, 1e-5, "softmax axis 1");
  expect_close(r[4], reduce_ref(av, da, {0}, ReduceFn::Sum, false), 1e-5, 1e-6, "sum axis 0");
  expect_exact(r[5], reduce_ref(av, da, {1}, ReduceFn::Max, false), "max axis 1");
  expect_exact(r[6], am0, "argmax axis 0");
  expect_exact(r[7], i32, "cast");
  expect_exact(r[8], cat, "concat");
  expect_exact(r[9], tk, "topk");
}
