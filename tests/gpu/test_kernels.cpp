// The CUDA kernel library (norm, softmax, elementwise, reduce, rope, glu,
// movement, select) against double-precision references written here from the
// op contracts (rlx/ir/ops.h) and the CPU kernels' documented numerics.
// Inputs are random (a fresh seed per run, printed on failure), never zero,
// with odd sizes, broadcasting, misaligned pointers and f32/f16/bf16; outputs
// are poisoned with 0xFF bytes before each launch. Tolerance |got − ref| ≤
// tol·(1 + |ref|) with tol = 1e-5 (f32), 2e-3 (f16), 1.6e-2 (bf16).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "rlx/backends/cpu/kernels/sampling_rng.h"
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/kernels/glu.h"
#include "rlx/backends/cuda/kernels/movement.h"
#include "rlx/backends/cuda/kernels/norm.h"
#include "rlx/backends/cuda/kernels/reduce.h"
#include "rlx/backends/cuda/kernels/rope.h"
#include "rlx/backends/cuda/kernels/select.h"
#include "rlx/backends/cuda/kernels/softmax.h"
#include "rlx/core/half.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::cuda;
using Vd = std::vector<double>;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

using rlx::test::rng;
#define TRACE_SEED() RLX_TRACE_SEED()

// Uniform in ±[lo, hi] (never zero).
double rnd(double lo = 0.05, double hi = 2.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  return (rng()() & 1 ? 1 : -1) * d(rng());
}

// Device buffer poisoned with 0xFF; `off` bytes of leading slack for misalignment tests.
struct Buf {
  char* base = nullptr;
  size_t bytes = 0, off = 0;
  Buf(size_t n, size_t offset = 0) : bytes(n), off(offset) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&base), n + offset + 16), cudaSuccess);
    cudaMemset(base, 0xFF, n + offset + 16);
  }
  Buf(const Buf&) = delete;
  ~Buf() { cudaFree(base); }
  void* p() const { return base + off; }
  template <typename T> T* as() const { return reinterpret_cast<T*>(base + off); }
  void up(const void* src) { EXPECT_EQ(cudaMemcpy(p(), src, bytes, cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<uint8_t> down() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> h(bytes);
    EXPECT_EQ(cudaMemcpy(h.data(), p(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

size_t esz(DType t) { return static_cast<size_t>(rlx::dtype_size(t)); }
double tol_of(DType t) { return t == DType::F32 ? 1e-5 : t == DType::F16 ? 2e-3 : 1.6e-2; }

double get_f(DType t, const void* p, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const double*>(p)[i];
  }
}
void put_f(DType t, void* p, size_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    default: static_cast<double*>(p)[i] = v; break;
  }
}

// A float tensor on the device; `v` holds the exact (rounded) values.
struct FT {
  DType t;
  Vd v;
  Buf buf;
  FT(DType dt, size_t n, double lo = 0.05, double hi = 2.0, size_t off = 0)
      : t(dt), v(n), buf(n * esz(dt), off) {
    std::vector<uint8_t> h(n * esz(dt));
    for (size_t i = 0; i < n; ++i) {
      put_f(t, h.data(), i, rnd(lo, hi));
      v[i] = get_f(t, h.data(), i);
    }
    buf.up(h.data());
  }
  FT(DType dt, const Vd& vals, size_t off = 0) : t(dt), v(vals), buf(vals.size() * esz(dt), off) {
    std::vector<uint8_t> h(vals.size() * esz(dt));
    for (size_t i = 0; i < vals.size(); ++i) {
      put_f(t, h.data(), i, vals[i]);
      v[i] = get_f(t, h.data(), i);
    }
    buf.up(h.data());
  }
  void* p() const { return buf.p(); }
};

Vd read_f(DType t, const Buf& b) {
  const auto h = b.down();
  Vd v(h.size() / esz(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = get_f(t, h.data(), i);
  return v;
}
template <typename T>
std::vector<T> read_as(const Buf& b) {
  const auto h = b.down();
  std::vector<T> v(h.size() / sizeof(T));
  std::memcpy(v.data(), h.data(), v.size() * sizeof(T));
  return v;
}

void expect_close(const Vd& got, const Vd& ref, double tol, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool ok = (std::isnan(ref[i]) && std::isnan(got[i])) || got[i] == ref[i] ||
                    std::fabs(got[i] - ref[i]) <= tol * (1.0 + std::fabs(ref[i]));
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": [" << i << "] got " << got[i] << " want " << ref[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " mismatches (tol " << tol << ")";
}

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};

// ------------------------------------------------------------------ norm

TEST(CudaKernels, Norms) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  // 8192 and 8200: the last width of the packed 16-bit kernel and the first past it.
  // 128 and 384 (16-bit: a half-warp per row, 8 rows per block, here with rows
  // past the end in the last block) and 768 (three vectors per lane).
  const int64_t shapes[][2] = {{7, 33},    {9, 256},  {5, 128},  {13, 384}, {11, 768}, {3, 1000},
                               {10, 1024}, {5, 4096}, {3, 5000}, {2, 8192}, {2, 8200}, {2, 20000}};
  for (DType xt : kFloats)
    for (DType pt : {DType::F32, xt, DType::BF16})
      for (auto [rows, cols] : shapes)
        for (int variant = 0; variant < 4; ++variant) {
          const bool rms = variant & 1, resid = variant & 2;
          const size_t n = static_cast<size_t>(rows * cols);
          FT x(xt, n), r(xt, resid ? n : 1), g(pt, cols, 0.5, 1.5), b(pt, cols);
          Buf y(n * esz(xt)), s(n * esz(xt));
          const float eps = 1e-5f;
          if (rms) launch_rms_norm(xt, pt, x.p(), resid ? r.p() : nullptr, g.p(), y.p(), resid ? s.p() : nullptr, rows, cols, eps, nullptr);
          else launch_layer_norm(xt, pt, x.p(), resid ? r.p() : nullptr, g.p(), b.p(), y.p(), resid ? s.p() : nullptr, rows, cols, eps, nullptr);
          Vd ref(n), sref(n);
          for (int64_t i = 0; i < rows; ++i) {
            double mean = 0, var = 0;
            for (int64_t j = 0; j < cols; ++j) {
              const size_t k = i * cols + j;
              sref[k] = static_cast<float>(x.v[k] + (resid ? r.v[k] : 0.0));
              mean += sref[k];
            }
            mean = rms ? 0.0 : mean / cols;
            for (int64_t j = 0; j < cols; ++j) var += (sref[i * cols + j] - mean) * (sref[i * cols + j] - mean);
            const double rstd = 1.0 / std::sqrt(var / cols + eps);
            for (int64_t j = 0; j < cols; ++j) {
              const size_t k = i * cols + j;
              ref[k] = (sref[k] - mean) * rstd * g.v[j] + (rms ? 0.0 : b.v[j]);
            }
          }
          const std::string what = str(rms ? "rms" : "layer", "_norm ", dtype_name(xt), "/", dtype_name(pt), " ",
                                       rows, "x", cols, resid ? " +residual" : "");
          expect_close(read_f(xt, y), ref, tol_of(xt), what.c_str());
          if (resid) expect_close(read_f(xt, s), sref, tol_of(xt), (what + " sum_out").c_str());
        }
  // beta stored in another dtype than gamma (f16 x, f32 gamma, bf16 beta).
  for (int64_t cols : {1000, 4096}) {
    const int64_t rows = 6;
    FT x(DType::F16, rows * cols), g(DType::F32, cols), b(DType::BF16, cols);
    Buf y(rows * cols * 2);
    launch_layer_norm(DType::F16, DType::F32, x.p(), nullptr, g.p(), b.p(), y.p(), nullptr, rows, cols, 1e-5f, nullptr, DType::BF16);
    Vd ref(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j) mean += x.v[i * cols + j] / cols;
      for (int64_t j = 0; j < cols; ++j) var += (x.v[i * cols + j] - mean) * (x.v[i * cols + j] - mean) / cols;
      for (int64_t j = 0; j < cols; ++j) ref[i * cols + j] = (x.v[i * cols + j] - mean) / std::sqrt(var + 1e-5) * g.v[j] + b.v[j];
    }
    expect_close(read_f(DType::F16, y), ref, tol_of(DType::F16), "layer_norm f16 x, f32 gamma, bf16 beta");
  }
}

// ------------------------------------------------------------------ softmax

Vd softmax_ref(const Vd& x, int64_t outer, int64_t len, int64_t inner) {
  Vd y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t a) { return static_cast<size_t>((o * len + a) * inner + c); };
      double m = -INFINITY, s = 0;
      for (int64_t a = 0; a < len; ++a) m = std::max(m, x[at(a)]);
      for (int64_t a = 0; a < len; ++a) s += m == -INFINITY ? 0 : std::exp(x[at(a)] - m);
      for (int64_t a = 0; a < len; ++a) y[at(a)] = m == -INFINITY ? 0 : std::exp(x[at(a)] - m) / s;
    }
  return y;
}

TEST(CudaKernels, Softmax) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  const int64_t shapes[][2] = {{5, 37}, {9, 128}, {4, 1024}, {3, 1032}, {3, 4096}, {300, 2048},
                               {3, 8192}, {2, 9000}, {2, 20000}};
  for (DType t : kFloats)
    for (auto [rows, cols] : shapes) {
      FT x(t, static_cast<size_t>(rows * cols), 0.01, 8.0);
      Vd v = x.v;
      for (int64_t j = 0; j < cols; ++j) v[j] = -INFINITY;                // row 0 fully masked
      for (int64_t j = 0; j < cols; j += 3) v[cols + j] = -INFINITY;      // row 1 partly masked
      if (rows > 2) v[2 * cols + cols / 2] = NAN;                         // row 2: NaN → all NaN
      FT xm(t, v);
      Buf y(v.size() * esz(t));
      launch_softmax(t, xm.p(), y.p(), rows, cols, nullptr);
      expect_close(read_f(t, y), softmax_ref(xm.v, rows, cols, 1), tol_of(t), str("softmax ", dtype_name(t), " ", rows, "x", cols).c_str());
    }
  for (DType t : kFloats) {
    FT x(t, 3 * 17 * 5, 0.01, 6.0);
    Buf y(x.v.size() * esz(t));
    launch_softmax_axis(t, x.p(), y.p(), 3, 17, 5, nullptr);
    expect_close(read_f(t, y), softmax_ref(x.v, 3, 17, 5), tol_of(t), "softmax axis 1 of [3,17,5]");
  }
}

// ------------------------------------------------------------------ elementwise

double unary_ref(UnaryFn f, double x) {
  switch (f) {
    case UnaryFn::GeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryFn::GeluTanh: return 0.5 * x * (1 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case UnaryFn::Silu: return x / (1 + std::exp(-x));
    case UnaryFn::Relu: return x < 0 ? 0 : x;
    case UnaryFn::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnaryFn::Tanh: return std::tanh(x);
    case UnaryFn::Exp: return std::exp(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Sqrt: return std::sqrt(x);
    case UnaryFn::Rsqrt: return 1 / std::sqrt(x);
    case UnaryFn::Neg: return -x;
    case UnaryFn::Abs: return std::fabs(x);
    case UnaryFn::Sin: return std::sin(x);
    case UnaryFn::Cos: return std::cos(x);
  }
  return 0;
}

TEST(CudaKernels, Unary) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  for (int fi = 0; fi <= static_cast<int>(UnaryFn::Cos); ++fi) {
    const auto f = static_cast<UnaryFn>(fi);
    const bool positive = f == UnaryFn::Log || f == UnaryFn::Sqrt || f == UnaryFn::Rsqrt;
    for (DType t : kFloats)
      for (size_t off : {size_t{0}, esz(t)}) {
        Vd vals(1001);
        for (auto& e : vals) e = positive ? std::fabs(rnd(0.01, 4.0)) : rnd(0.01, 4.0);
        FT x(t, vals, off);
        Buf y(x.v.size() * esz(t), off);
        launch_unary(f, t, x.p(), y.p(), static_cast<int64_t>(x.v.size()), nullptr);
        Vd ref(x.v.size());
        for (size_t i = 0; i < ref.size(); ++i) ref[i] = unary_ref(f, x.v[i]);
        expect_close(read_f(t, y), ref, tol_of(t), str("unary ", unary_name(f), " ", dtype_name(t), " off ", off).c_str());
      }
  }
}

// Every f16 and every bf16 value through GELU-erf (its 16-bit form is its own
// erfc-based approximation): each finite input's output is within one ulp of
// the exactly computed GELU rounded to the type, +inf stays +inf, NaN stays NaN.
TEST(CudaKernels, GeluErf16BitEveryInput) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::F16, DType::BF16}) {
    const bool f16 = t == DType::F16;
    std::vector<uint16_t> in(65536);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
    Buf x(in.size() * 2), y(in.size() * 2);
    x.up(in.data());
    launch_unary(UnaryFn::GeluErf, t, x.p(), y.p(), static_cast<int64_t>(in.size()), nullptr);
    const auto raw = y.down();
    std::vector<uint16_t> out(in.size());
    std::memcpy(out.data(), raw.data(), raw.size());
    auto value = [&](uint16_t b) { return static_cast<double>(f16 ? f16_to_f32(b) : bf16_to_f32(b)); };
    // Sign-magnitude bits as an ordered integer: neighbours differ by one.
    auto key = [](uint16_t b) { return (b & 0x8000) ? -static_cast<int>(b & 0x7fff) : static_cast<int>(b & 0x7fff); };
    int bad = 0, off_by_one = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const double v = value(in[i]);
      const double got = value(out[i]);
      if (std::isnan(v)) {
        bad += !std::isnan(got);
        continue;
      }
      if (std::isinf(v)) {
        if (v > 0) bad += !(std::isinf(got) && got > 0);
        continue;
      }
      const double ref = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
      const float rf = static_cast<float>(ref);
      const uint16_t want = f16 ? f32_to_f16(rf) : f32_to_bf16(rf);
      const int d = std::abs(key(out[i]) - key(want));
      off_by_one += d == 1;
      if (d > 1 && bad++ < 10)
        ADD_FAILURE() << dtype_name(t) << " gelu(" << v << ") = " << got << ", want " << value(want) << " (" << d
                      << " ulps off)";
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
    RecordProperty(str("off_by_one_", dtype_name(t)), off_by_one);
  }
}

// Broadcast reference helper: out index → operand offset (numpy, right-aligned).
size_t bcast_off(const std::vector<int64_t>& out, const std::vector<int64_t>& in, size_t idx) {
  size_t off = 0, stride = 1;
  for (int i = static_cast<int>(out.size()) - 1, j = static_cast<int>(in.size()) - 1; i >= 0; --i, --j) {
    const int64_t c = static_cast<int64_t>(idx % out[i]);
    idx /= out[i];
    if (j < 0) continue;
    if (in[j] != 1) off += c * stride;
    stride *= in[j];
  }
  return off;
}
int64_t numel(const std::vector<int64_t>& d) { return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<>()); }

struct BCase { std::vector<int64_t> out, a, b; };
const BCase kBCases[] = {{{37, 29}, {37, 29}, {37, 29}},   {{6, 64}, {6, 64}, {64}},       {{6, 64}, {64}, {6, 64}},
                         {{5, 4, 7}, {5, 1, 7}, {1, 4, 7}}, {{9, 33}, {9, 33}, {}},         {{8, 3}, {8, 1}, {8, 3}},
                         {{2, 3, 4, 5, 3}, {2, 1, 4, 1, 3}, {3, 1, 5, 3}}, {{4, 1000}, {4, 1000}, {1000}}};

TEST(CudaKernels, BinaryFloat) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  for (const auto& c : kBCases)
    for (DType t : kFloats)
      for (int fi = 0; fi <= static_cast<int>(BinaryFn::Pow); ++fi) {
        const auto f = static_cast<BinaryFn>(fi);
        Vd av(numel(c.a));
        for (auto& e : av) e = f == BinaryFn::Pow ? std::fabs(rnd(0.2, 2.0)) : rnd(0.2, 2.0);
        FT a(t, av), b(t, numel(c.b), 0.2, 2.0);
        const size_t n = numel(c.out);
        Buf y(n * esz(t));
        launch_binary(f, t, a.p(), b.p(), y.p(), make_broadcast(c.out, c.a, c.b), nullptr);
        Vd ref(n);
        for (size_t i = 0; i < n; ++i) {
          const double p = a.v[bcast_off(c.out, c.a, i)], q = b.v[bcast_off(c.out, c.b, i)];
          const double r[] = {p + q, p - q, p * q, p / q, std::max(p, q), std::min(p, q), std::pow(p, q)};
          ref[i] = r[fi];
        }
        expect_close(read_f(t, y), ref, tol_of(t), str("binary ", binary_name(f), " ", dtype_name(t), " rank ", c.out.size()).c_str());
      }
}

TEST(CudaKernels, BinaryIntCompareWhere) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  for (const auto& c : kBCases) {
    const size_t n = numel(c.out), na = numel(c.a), nb = numel(c.b);
    std::vector<int32_t> a(na), b(nb);
    for (auto& e : a) e = static_cast<int32_t>(rng()() % 2001) - 1000;
    for (auto& e : b) e = static_cast<int32_t>(rng()() % 21) - 10;  // includes 0: x/0 = 0
    a[0] = INT32_MIN;
    b[0] = -1;
    Buf da(na * 4), db(nb * 4), dy(n * 4), dc(n);
    da.up(a.data());
    db.up(b.data());
    const StridedShape s = make_broadcast(c.out, c.a, c.b);
    for (int fi = 0; fi < static_cast<int>(BinaryFn::Pow); ++fi) {
      launch_binary(static_cast<BinaryFn>(fi), DType::I32, da.p(), db.p(), dy.p(), s, nullptr);
      const auto got = read_as<int32_t>(dy);
      for (size_t i = 0; i < n; ++i) {
        const int64_t p = a[bcast_off(c.out, c.a, i)], q = b[bcast_off(c.out, c.b, i)];
        const int64_t r[] = {p + q, p - q, p * q, q == 0 ? 0 : p / q, std::max(p, q), std::min(p, q)};
        ASSERT_EQ(got[i], static_cast<int32_t>(static_cast<uint32_t>(r[fi]))) << binary_name(static_cast<BinaryFn>(fi)) << " i32 [" << i << "] " << p << ", " << q;
      }
    }
    for (int fi = 0; fi <= static_cast<int>(CompareFn::Ge); ++fi) {
      launch_compare(static_cast<CompareFn>(fi), DType::I32, da.p(), db.p(), dc.as<uint8_t>(), s, nullptr);
      const auto got = read_as<uint8_t>(dc);
      for (size_t i = 0; i < n; ++i) {
        const int64_t p = a[bcast_off(c.out, c.a, i)], q = b[bcast_off(c.out, c.b, i)];
        const bool r[] = {p == q, p != q, p < q, p <= q, p > q, p >= q};
        ASSERT_EQ(got[i], r[fi] ? 1 : 0) << compare_name(static_cast<CompareFn>(fi)) << " [" << i << "]";
      }
    }
    // where(cond = a < b, a as f32, b as f32), cond broadcast like a
    FT fa(DType::F32, na), fb(DType::F32, nb);
    Buf cond(na);
    std::vector<uint8_t> ch(na);
    for (auto& e : ch) e = static_cast<uint8_t>(rng()() % 3);  // 0, 1, 2 (nonzero = true)
    cond.up(ch.data());
    Buf dw(n * 4);
    launch_where(DType::F32, cond.as<uint8_t>(), fa.p(), fb.p(), dw.p(), make_broadcast(c.out, c.a, c.a, &c.b), nullptr);
    const auto got = read_as<float>(dw);
    for (size_t i = 0; i < n; ++i) {
      const size_t ia = bcast_off(c.out, c.a, i);
      ASSERT_EQ(got[i], static_cast<float>(ch[ia] ? fa.v[ia] : fb.v[bcast_off(c.out, c.b, i)])) << "where [" << i << "]";
    }
  }
}

// Host cast reference: the CPU kernel's rules (elementwise.cpp) on top of half.h.
struct HostVal { double f; int64_t i; bool is_int; };
HostVal load_val(DType t, const uint8_t* p, size_t k) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::F64: return {get_f(t, p, k), 0, false};
    case DType::F8E4M3: return {fp8_e4m3_to_f32(p[k]), 0, false};
    case DType::F8E5M2: return {fp8_e5m2_to_f32(p[k]), 0, false};
    case DType::I8: return {0, reinterpret_cast<const int8_t*>(p)[k], true};
    case DType::U8: return {0, p[k], true};
    case DType::I16: return {0, reinterpret_cast<const int16_t*>(p)[k], true};
    case DType::I32: return {0, reinterpret_cast<const int32_t*>(p)[k], true};
    case DType::I64: return {0, reinterpret_cast<const int64_t*>(p)[k], true};
    default: return {0, p[k] != 0, true};
  }
}
float round_odd(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(f) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return bits_f32(f32_bits(f) | 1u);
}
template <typename I>
void store_int(uint8_t* p, size_t k, const HostVal& v) {
  const double lo = static_cast<double>(std::numeric_limits<I>::min()), hi = static_cast<double>(std::numeric_limits<I>::max());
  I r;
  if (v.is_int) r = static_cast<I>(std::clamp<int64_t>(v.i, static_cast<int64_t>(std::numeric_limits<I>::min()), static_cast<int64_t>(std::numeric_limits<I>::max())));
  else r = std::isnan(v.f) ? I(0) : v.f <= lo ? std::numeric_limits<I>::min() : v.f >= hi ? std::numeric_limits<I>::max() : static_cast<I>(v.f);
  std::memcpy(p + k * sizeof(I), &r, sizeof(I));
}
void store_val(DType t, uint8_t* p, size_t k, const HostVal& v) {
  const double d = v.is_int ? static_cast<double>(v.i) : v.f;
  switch (t) {
    case DType::Bool: p[k] = v.is_int ? v.i != 0 : v.f != 0; break;
    case DType::I8: store_int<int8_t>(p, k, v); break;
    case DType::U8: store_int<uint8_t>(p, k, v); break;
    case DType::I16: store_int<int16_t>(p, k, v); break;
    case DType::I32: store_int<int32_t>(p, k, v); break;
    case DType::I64: store_int<int64_t>(p, k, v); break;
    case DType::F64: reinterpret_cast<double*>(p)[k] = d; break;
    case DType::F32: reinterpret_cast<float*>(p)[k] = static_cast<float>(d); break;
    case DType::F16: reinterpret_cast<uint16_t*>(p)[k] = f32_to_f16(round_odd(d)); break;
    case DType::BF16: reinterpret_cast<uint16_t*>(p)[k] = f32_to_bf16(round_odd(d)); break;
    case DType::F8E4M3: p[k] = f32_to_fp8_e4m3(round_odd(d)); break;
    default: p[k] = f32_to_fp8_e5m2(round_odd(d)); break;
  }
}

TEST(CudaKernels, Cast) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8, DType::U8,
                         DType::I16, DType::I32, DType::I64, DType::Bool, DType::F8E4M3, DType::F8E5M2};
  const size_t n = 777;
  for (DType from : types) {
    // Random magnitudes from 1e-3 to 1e6 plus specials, stored in `from` via the reference itself.
    std::vector<uint8_t> src(n * esz(from));
    for (size_t i = 0; i < n; ++i) {
      double v = rnd(0.001, 3.0) * std::pow(10.0, static_cast<double>(rng()() % 7));
      if (i == 0) v = 448.0 + 20;  // e4m3 saturation
      if (i == 1) v = -1e9;
      if (i == 2) v = 0.0078125 * 1.5;
      if (i == 3) v = 2.5;
      store_val(from, src.data(), i, is_float(from) ? HostVal{v, 0, false} : HostVal{0, static_cast<int64_t>(v), true});
    }
    Buf dx(src.size());
    dx.up(src.data());
    for (DType to : types) {
      Buf dy(n * esz(to));
      launch_cast(from, to, dx.p(), dy.p(), static_cast<int64_t>(n), nullptr);
      const auto got = dy.down();
      std::vector<uint8_t> ref(got.size());
      for (size_t i = 0; i < n; ++i) store_val(to, ref.data(), i, load_val(from, src.data(), i));
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::memcmp(got.data() + i * esz(to), ref.data() + i * esz(to), esz(to)), 0)
            << "cast " << dtype_name(from) << " -> " << dtype_name(to) << " [" << i << "]";
    }
  }
}

TEST(CudaKernels, ElementwiseChain) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  for (DType t : kFloats)
    for (int64_t cols : {64, 67}) {
      const int64_t rows = 13;
      FT x(t, rows * cols), bias(DType::F32, cols), per_row(t, rows, 0.05, 0.2), full(DType::BF16, rows * cols);
      ChainProgram p;
      p.num_operands = 3;
      p.operands[0] = {bias.p(), DType::F32, 0, 1};
      p.operands[1] = {per_row.p(), t, 1, 0};
      p.operands[2] = {full.p(), DType::BF16, cols, 1};
      using K = ChainStep::Kind;
      p.steps[0] = {K::Binary, UnaryFn::Relu, BinaryFn::Add, 0, false, 0};
      p.steps[1] = {K::Unary, UnaryFn::GeluTanh, BinaryFn::Add, 0, false, 0};
      p.steps[2] = {K::Binary, UnaryFn::Relu, BinaryFn::Mul, 1, false, 0};
      p.steps[3] = {K::BinaryScalar, UnaryFn::Relu, BinaryFn::Sub, 0, true, 3.0f};  // 3 − acc
      p.steps[4] = {K::Binary, UnaryFn::Relu, BinaryFn::Div, 2, true, 0};          // full / acc
      p.steps[5] = {K::Unary, UnaryFn::Tanh, BinaryFn::Add, 0, false, 0};
      p.num_steps = 6;
      Buf y(x.v.size() * esz(t));
      launch_elementwise_chain(t, x.p(), y.p(), rows, cols, p, nullptr);
      Vd ref(x.v.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t k = r * cols + c;
          double a = unary_ref(UnaryFn::GeluTanh, x.v[k] + bias.v[c]) * per_row.v[r];
          ref[k] = std::tanh(full.v[k] / (3.0 - a));
        }
      expect_close(read_f(t, y), ref, tol_of(t) * 4, str("chain ", dtype_name(t), " cols ", cols).c_str());
    }
}

// ------------------------------------------------------------------ reduce / select

TEST(CudaKernels, Reduce) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  const int64_t views[][3] = {{7, 33, 1}, {300, 64, 1}, {3, 5000, 1}, {4, 9, 37}, {2, 100, 3}, {1, 1, 1}};
  for (auto [o, n, in] : views)
    for (int fi = 0; fi <= static_cast<int>(ReduceFn::Min); ++fi) {
      const auto f = static_cast<ReduceFn>(fi);
      for (DType t : kFloats) {
        FT x(t, static_cast<size_t>(o * n * in));
        Buf y(static_cast<size_t>(o * in) * esz(t));
        launch_reduce(f, t, x.p(), y.p(), o, n, in, nullptr);
        Vd ref(static_cast<size_t>(o * in));
        for (int64_t a = 0; a < o; ++a)
          for (int64_t c = 0; c < in; ++c) {
            double s = 0, mx = -INFINITY, mn = INFINITY;
            for (int64_t r = 0; r < n; ++r) {
              const double v = x.v[(a * n + r) * in + c];
              s += v, mx = std::max(mx, v), mn = std::min(mn, v);
            }
            const double res[] = {s, s / n, mx, mn};
            ref[a * in + c] = res[fi];
          }
        // f64 accumulation: only the final rounding to t remains.
        expect_close(read_f(t, y), ref, tol_of(t), str("reduce ", reduce_name(f), " ", dtype_name(t), " ", o, "x", n, "x", in).c_str());
      }
      std::vector<int64_t> xi(o * n * in);
      for (auto& e : xi) e = static_cast<int64_t>(rng()() % 2000001) - 1000000;
      Buf dx(xi.size() * 8), dy(o * in * 8);
      dx.up(xi.data());
      launch_reduce(f, DType::I64, dx.p(), dy.p(), o, n, in, nullptr);
      const auto got = read_as<int64_t>(dy);
      for (int64_t a = 0; a < o; ++a)
        for (int64_t c = 0; c < in; ++c) {
          int64_t s = 0, mx = INT64_MIN, mn = INT64_MAX;
          for (int64_t r = 0; r < n; ++r) {
            const int64_t v = xi[(a * n + r) * in + c];
            s += v, mx = std::max(mx, v), mn = std::min(mn, v);
          }
          const int64_t res[] = {s, s / n, mx, mn};
          ASSERT_EQ(got[a * in + c], res[fi]) << "reduce i64 " << reduce_name(f);
        }
    }
}

TEST(CudaKernels, ArgMaxTopK) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  const int64_t views[][3] = {{7, 33, 1}, {300, 64, 1}, {3, 5003, 1}, {4, 9, 37}};
  for (auto [o, n, in] : views)
    for (DType t : kFloats) {
      Vd v(static_cast<size_t>(o * n * in));
      for (auto& e : v) e = static_cast<double>(rng()() % 17) - 8;  // many ties
      if (o > 2) v[(2 * n + n / 2) * in] = NAN;                      // NaN ranks first
      FT x(t, v);
      Buf y(static_cast<size_t>(o * in) * 4);
      launch_argmax(t, x.p(), y.as<int32_t>(), o, n, in, nullptr);
      const auto got = read_as<int32_t>(y);
      for (int64_t a = 0; a < o; ++a)
        for (int64_t c = 0; c < in; ++c) {
          int64_t best = 0;
          for (int64_t r = 1; r < n; ++r) {
            const double p = x.v[(a * n + r) * in + c], q = x.v[(a * n + best) * in + c];
            if (!std::isnan(q) && (std::isnan(p) || p > q)) best = r;
          }
          ASSERT_EQ(got[a * in + c], best) << "argmax " << dtype_name(t) << " " << o << "x" << n << "x" << in;
        }
    }
  // Few long rows (LLM logits) split across CTAs: scratch + zeroed counters.
  // Each case runs three times on the same counters with fresh data, so a
  // counter left non-zero by one launch would break the next.
  for (auto [o, n] : {std::pair<int64_t, int64_t>{1, 262144}, {2, 100003}, {3, 16384}, {1, 151936}})
    for (DType t : kFloats) {
      const ArgmaxPlan plan = argmax_plan(t, o, n, 1);
      ASSERT_GT(plan.splits, 1) << o << "x" << n;
      Buf ws(plan.workspace_bytes), counters(plan.counters * 4), y(static_cast<size_t>(o) * 4);
      ASSERT_EQ(cudaMemset(counters.p(), 0, plan.counters * 4), cudaSuccess);
      for (int rep = 0; rep < 3; ++rep) {
        Vd v(static_cast<size_t>(o * n));
        for (auto& e : v) e = static_cast<double>(rng()() % 257) - 128;  // ties across chunks
        if (rep == 1) v[static_cast<size_t>(n - 1)] = NAN;               // NaN in the last chunk ranks first
        FT x(t, v);
        launch_argmax(t, x.p(), y.as<int32_t>(), o, n, 1, nullptr, ws.p(), counters.as<int32_t>());
        const auto got = read_as<int32_t>(y);
        for (int64_t a = 0; a < o; ++a) {
          int64_t best = 0;
          for (int64_t r = 1; r < n; ++r) {
            const double p = x.v[a * n + r], q = x.v[a * n + best];
            if (!std::isnan(q) && (std::isnan(p) || p > q)) best = r;
          }
          ASSERT_EQ(got[a], best) << "split argmax " << dtype_name(t) << " " << o << "x" << n << " rep " << rep;
        }
      }
      const auto left = read_as<int32_t>(counters);
      for (int32_t c : left) ASSERT_EQ(c, 0) << "argmax left a counter set";
    }
  for (DType t : kFloats)
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 100}, {3, 4099}, {2, 64}})
      for (int k : {1, 5, 17, 64})
        for (bool idx : {false, true}) {
          Vd v(static_cast<size_t>(rows * cols));
          for (auto& e : v) e = static_cast<double>(rng()() % 41) - 20 + 0.25;
          FT x(t, v);
          Buf y(static_cast<size_t>(rows * k) * (idx ? 4 : esz(t)));
          launch_topk(t, x.p(), y.p(), rows, cols, k, idx, nullptr);
          const Vd gv = idx ? Vd() : read_f(t, y);
          const auto gi = idx ? read_as<int32_t>(y) : std::vector<int32_t>();
          for (int64_t r = 0; r < rows; ++r) {
            std::vector<int32_t> order(cols);
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](int32_t i, int32_t j) { return x.v[r * cols + i] > x.v[r * cols + j]; });
            for (int j = 0; j < k; ++j) {
              if (idx) ASSERT_EQ(gi[r * k + j], order[j]) << "topk idx k=" << k << " row " << r << " rank " << j;
              else ASSERT_EQ(gv[r * k + j], x.v[r * cols + order[j]]) << "topk val k=" << k;
            }
          }
        }
}

// The CPU kernel's Sample rule (select.cpp), sequential in f64.
int32_t sample_ref(const Vd& row, const SampleAttrs& a, uint32_t step, uint32_t r) {
  const int64_t n = static_cast<int64_t>(row.size());
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t i, int32_t j) {
    if (std::isnan(row[j])) return false;
    return std::isnan(row[i]) || row[i] > row[j];
  });
  if (a.temperature == 0.0f || !std::isfinite(row[idx[0]])) return idx[0];
  const int64_t k = a.top_k == 0 ? n : std::min<int64_t>(a.top_k, n);
  Vd cum(k);
  double total = 0;
  for (int64_t j = 0; j < k; ++j) cum[j] = total += std::exp((row[idx[j]] - row[idx[0]]) / double{a.temperature});
  int64_t keep = k;
  if (a.top_p < 1.0f) {
    keep = 1;
    while (keep < k && cum[keep - 1] < double{a.top_p} * total) ++keep;
  }
  const double target = static_cast<double>(sample_uniform(a.seed, step, r)) * cum[keep - 1];
  for (int64_t j = 0; j < keep; ++j)
    if (cum[j] > target) return idx[j];
  return idx[keep - 1];
}

TEST(CudaKernels, Sample) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  const SampleAttrs cfgs[] = {{0.0f, 0, 1.0f, 1}, {0.8f, 0, 1.0f, rng()()}, {1.0f, 40, 1.0f, rng()()},
                              {0.7f, 0, 0.9f, rng()()}, {1.3f, 50, 0.95f, rng()()}, {2.0f, 1, 0.5f, rng()()}};
  for (DType t : kFloats)
    for (const auto& cfg : cfgs)
      for (int64_t V : {1000, 32003}) {
        const int64_t B = 5;
        Vd v(static_cast<size_t>(B * V));
        for (auto& e : v) e = rnd(0.0, 6.0);
        v[V + 7] = NAN;               // row 1 greedy (NaN first)
        for (int64_t j = 0; j < V; ++j) v[2 * V + j] = std::round(v[2 * V + j]);  // row 2: many ties
        FT x(t, v);
        const int32_t step_h = static_cast<int32_t>(rng()() % 1000);
        Buf step(4), y(B * 4), ws(std::max<size_t>(sample_workspace_bytes(B, V, cfg), 1));
        step.up(&step_h);
        for (bool with_step : {false, true}) {
          launch_sample(t, x.p(), y.as<int32_t>(), B, V, cfg, with_step ? step.as<int32_t>() : nullptr, ws.p(),
                        sample_workspace_bytes(B, V, cfg), nullptr);
          const auto got = read_as<int32_t>(y);
          for (int64_t r = 0; r < B; ++r) {
            const Vd row(x.v.begin() + r * V, x.v.begin() + (r + 1) * V);
            EXPECT_EQ(got[r], sample_ref(row, cfg, with_step ? static_cast<uint32_t>(step_h) : 0u, static_cast<uint32_t>(r)))
                << "sample " << dtype_name(t) << " T=" << cfg.temperature << " k=" << cfg.top_k << " p=" << cfg.top_p << " V=" << V << " row " << r;
          }
        }
      }
}

// top_k ≤ 1024 takes the selection path (RLX_CUDA_SAMPLE_SELECT): the same
// token as the radix sort and as the CPU rule, here where the selection has
// work to do: many slices of 4096 logits, ties within and across slices
// (rounded logits, the top value repeated in the last slice), −inf entries,
// a NaN row, K = 1 to the largest selected K, several rows, seeds and steps.
TEST(CudaKernels, SampleTopKSelectionMatchesSort) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  const int64_t B = 3;
  for (int64_t V : {int64_t{700}, int64_t{4096 * 3 + 17}, int64_t{262144}})
    for (int k : {1, 2, 40, 1000, 1024}) {
      Vd v(static_cast<size_t>(B * V));
      for (auto& e : v) e = rnd(-4.0, 8.0);
      for (int64_t j = 0; j < V; ++j) v[j] = std::round(v[j] * 2.0) / 2.0;  // row 0: ties everywhere
      v[V - 1] = v[V - 2] = 20.0;                                            // ... and at the top, last slice
      for (int64_t j = 0; j < V; j += 7) v[V + j] = -INFINITY;                // row 1: some −inf
      v[2 * V + V / 2] = NAN;                                                // row 2: NaN → greedy
      const SampleAttrs cfg{0.9f, k, k > 2 ? 0.95f : 1.0f, rng()()};
      FT x(DType::F32, v);
      const int32_t step_h = static_cast<int32_t>(rng()() % 1000);
      Buf step(4), y(B * 4), ws(sample_workspace_bytes(B, V, cfg));
      step.up(&step_h);
      auto draw = [&](const char* select) {
        test::ScopedEnv knob("RLX_CUDA_SAMPLE_SELECT", select);
        launch_sample(DType::F32, x.p(), y.as<int32_t>(), B, V, cfg, step.as<int32_t>(), ws.p(),
                      sample_workspace_bytes(B, V, cfg), nullptr);
        return read_as<int32_t>(y);
      };
      const auto selected = draw("1"), sorted = draw("0");
      for (int64_t r = 0; r < B; ++r) {
        const Vd row(x.v.begin() + r * V, x.v.begin() + (r + 1) * V);
        const int32_t want = sample_ref(row, cfg, static_cast<uint32_t>(step_h), static_cast<uint32_t>(r));
        EXPECT_EQ(selected[r], sorted[r]) << "V=" << V << " k=" << k << " row " << r;
        EXPECT_EQ(selected[r], want) << "V=" << V << " k=" << k << " row " << r;
      }
    }
}

// ------------------------------------------------------------------ rope / glu

TEST(CudaKernels, Rope) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  struct C { int H, D, n_rot; RopePairing pair; int64_t off, W; bool batched; int max_pos; };
  const C cases[] = {{4, 64, 64, RopePairing::NeoX, 0, 256, false, 100},
                     {3, 80, 32, RopePairing::Interleaved, 48, 400, true, 200000},
                     {2, 128, 128, RopePairing::NeoX, 128, 512, true, 40000},
                     {5, 32, 16, RopePairing::Interleaved, 0, 160, false, 7}};
  for (DType t : kFloats)
    for (const auto& c : cases) {
      const int64_t B = 3, L = 7;
      RopeAttrs a;
      a.num_heads = c.H, a.head_dim = c.D, a.n_rot = c.n_rot, a.pairing = c.pair, a.src_offset = c.off;
      a.freq_base = 10000.0f, a.freq_scale = 0.5f;
      FT x(t, B * L * c.W);
      std::vector<int32_t> pos(c.batched ? B * L : L);
      for (auto& p : pos) p = static_cast<int32_t>(rng()() % (c.max_pos + 1));
      Buf dp(pos.size() * 4), y(B * L * c.H * c.D * esz(t));
      dp.up(pos.data());
      launch_rope(t, x.p(), c.W, dp.as<int32_t>(), c.batched, y.p(), B, L, a, nullptr);
      Vd ref(B * L * c.H * c.D);
      const int half = c.n_rot / 2;
      for (int64_t r = 0; r < B * L; ++r) {
        const double p = static_cast<double>(pos[c.batched ? r : r % L]) * a.freq_scale;
        for (int h = 0; h < c.H; ++h) {
          const double* xs = x.v.data() + r * c.W + c.off + h * c.D;
          double* ys = ref.data() + (r * c.H + h) * c.D;
          for (int d = c.n_rot; d < c.D; ++d) ys[d] = xs[d];
          for (int i = 0; i < half; ++i) {
            const double th = p * std::pow(10000.0, -2.0 * i / c.n_rot);
            const int i0 = c.pair == RopePairing::NeoX ? i : 2 * i, i1 = c.pair == RopePairing::NeoX ? i + half : 2 * i + 1;
            ys[i0] = xs[i0] * std::cos(th) - xs[i1] * std::sin(th);
            ys[i1] = xs[i1] * std::cos(th) + xs[i0] * std::sin(th);
          }
        }
      }
      expect_close(read_f(t, y), ref, tol_of(t), str("rope ", dtype_name(t), " H", c.H, " D", c.D, " rot", c.n_rot).c_str());

      // Fused K rope + V copy into a cache at slot *cache_pos.
      const int64_t cap = 20;
      for (int32_t start : {3, 14}) {  // 14 + 7 > 20: out of range, no write
        Buf kc(B * cap * c.H * c.D * esz(t)), vc(B * cap * c.H * c.D * esz(t)), cp(4), err(4);
        cp.up(&start);
        cudaMemset(err.p(), 0, 4);
        const auto before = kc.down();
        launch_rope_kv_write(t, x.p(), c.W, x.p(), c.W, 0, dp.as<int32_t>(), c.batched, cp.as<int32_t>(), kc.p(),
                             vc.p(), B, L, cap, a, err.as<int32_t>(), nullptr);
        const auto e = read_as<int32_t>(err)[0];
        if (start + L > cap) {
          EXPECT_EQ(e, kErrSliceOutOfRange);
          EXPECT_EQ(kc.down(), before) << "out-of-range kv write must not write";
          continue;
        }
        EXPECT_EQ(e, 0);
        const Vd kg = read_f(t, kc), vg = read_f(t, vc);
        Vd kr, kw, vr, vw;
        for (int64_t r = 0; r < B * L; ++r)
          for (int64_t j = 0; j < c.H * c.D; ++j) {
            const int64_t slot = ((r / L) * cap + start + r % L) * c.H * c.D + j;
            kr.push_back(ref[r * c.H * c.D + j]), kw.push_back(kg[slot]);
            vr.push_back(x.v[r * c.W + j]), vw.push_back(vg[slot]);
          }
        expect_close(kw, kr, tol_of(t), "rope_kv_write K");
        expect_close(vw, vr, 0, "rope_kv_write V");
      }
    }
}

TEST(CudaKernels, Glu) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  for (DType t : kFloats)
    for (int64_t n : {64, 77, 1024})
      for (GluKind k : {GluKind::SwiGLU, GluKind::GeGLUErf, GluKind::GeGLUTanh}) {
        const int64_t rows = 9;
        FT x(t, rows * 2 * n, 0.01, 4.0);
        Buf y(rows * n * esz(t));
        launch_glu(k, t, x.p(), y.p(), rows, n, nullptr);
        Vd ref(rows * n);
        const UnaryFn f = k == GluKind::SwiGLU ? UnaryFn::Silu : k == GluKind::GeGLUErf ? UnaryFn::GeluErf : UnaryFn::GeluTanh;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < n; ++j) ref[r * n + j] = unary_ref(f, x.v[r * 2 * n + j]) * x.v[r * 2 * n + n + j];
        expect_close(read_f(t, y), ref, tol_of(t), str("glu ", static_cast<int>(k), " ", dtype_name(t), " n ", n).c_str());
      }
}

// ------------------------------------------------------------------ movement

// Random bytes of n elements of `es` bytes.
std::vector<uint8_t> rand_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng()() | 1);
  return v;
}

TEST(CudaKernels, TransposeExpand) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  struct C { std::vector<int64_t> dims; std::vector<int> perm; };
  const C cases[] = {{{37, 45}, {1, 0}},         {{3, 70, 33}, {0, 2, 1}},       {{2, 9, 5, 64}, {0, 2, 1, 3}},
                     {{4, 3, 5}, {2, 0, 1}},     {{2, 3, 2, 3, 2, 5}, {5, 3, 1, 0, 2, 4}}, {{6, 1, 7}, {1, 2, 0}}};
  for (size_t es : {1, 2, 4, 8})
    for (const auto& c : cases) {
      const int r = static_cast<int>(c.dims.size());
      const size_t n = numel(c.dims);
      const auto src = rand_bytes(n * es);
      Buf x(src.size()), y(src.size());
      x.up(src.data());
      launch_transpose(es, x.p(), y.p(), c.dims.data(), c.perm.data(), r, nullptr);
      const auto got = y.down();
      std::vector<int64_t> in_st(r, 1), out_dims(r);
      for (int i = r - 1; i > 0; --i) in_st[i - 1] = in_st[i] * c.dims[i];
      for (int i = 0; i < r; ++i) out_dims[i] = c.dims[c.perm[i]];
      for (size_t o = 0; o < n; ++o) {
        size_t t = o, off = 0;
        for (int i = r - 1; i >= 0; --i) off += (t % out_dims[i]) * in_st[c.perm[i]], t /= out_dims[i];
        ASSERT_EQ(std::memcmp(got.data() + o * es, src.data() + off * es, es), 0) << "transpose es " << es << " rank " << r << " at " << o;
      }
    }
  for (size_t es : {2, 4}) {
    const std::vector<int64_t> in = {3, 1, 8, 1}, out = {3, 5, 8, 6};
    const auto src = rand_bytes(numel(in) * es);
    Buf x(src.size()), y(numel(out) * es);
    x.up(src.data());
    launch_expand(es, x.p(), y.p(), in.data(), out.data(), 4, nullptr);
    const auto got = y.down();
    for (size_t o = 0; o < static_cast<size_t>(numel(out)); ++o)
      ASSERT_EQ(std::memcmp(got.data() + o * es, src.data() + bcast_off(out, in, o) * es, es), 0) << "expand at " << o;
  }
}

TEST(CudaKernels, NarrowConcatGatherWriteSlice) {
  SKIP_WITHOUT_GPU();
  TRACE_SEED();
  for (size_t es : {1, 2, 4, 8}) {
    const int64_t outer = 5, len = 23, inner = 6, start = 4, length = 11;
    const auto src = rand_bytes(outer * len * inner * es);
    Buf x(src.size()), y(outer * length * inner * es);
    x.up(src.data());
    launch_narrow(es, x.p(), y.p(), outer, len, start, length, inner, nullptr);
    const auto got = y.down();
    for (int64_t o = 0; o < outer; ++o)
      ASSERT_EQ(std::memcmp(got.data() + o * length * inner * es, src.data() + (o * len + start) * inner * es, length * inner * es), 0) << "narrow";
  }
  for (int nin : {3, 11}) {
    const size_t es = 2;
    const int64_t outer = 4, inner = 5;
    std::vector<int64_t> lens;
    std::vector<std::vector<uint8_t>> hs;
    std::vector<std::unique_ptr<Buf>> bufs;
    std::vector<const void*> ptrs;
    int64_t total = 0;
    for (int i = 0; i < nin; ++i) {
      lens.push_back(static_cast<int64_t>(rng()() % 4));  // zero-length inputs too
      total += lens.back();
      hs.push_back(rand_bytes(outer * lens.back() * inner * es));
      bufs.push_back(std::make_unique<Buf>(hs.back().size()));
      if (!hs.back().empty()) bufs.back()->up(hs.back().data());
      ptrs.push_back(bufs.back()->p());
    }
    Buf y(std::max<int64_t>(outer * total * inner * es, 1));
    launch_concat(es, ptrs.data(), lens.data(), nin, y.p(), outer, inner, nullptr);
    const auto got = y.down();
    for (int64_t o = 0; o < outer; ++o) {
      int64_t off = 0;
      for (int i = 0; i < nin; ++i) {
        const int64_t row = lens[i] * inner * es;
        ASSERT_EQ(std::memcmp(got.data() + o * total * inner * es + off, hs[i].data() + o * row, row), 0) << "concat input " << i;
        off += row;
      }
    }
  }
  for (DType it : {DType::I32, DType::I64}) {
    const size_t es = 2;
    const int64_t rows = 50, width = 384, n = 13;
    const auto table = rand_bytes(rows * width * es);
    std::vector<int64_t> ids(n);
    for (auto& i : ids) i = static_cast<int64_t>(rng()() % rows);
    ids[3] = rows;  // out of range
    ids[5] = -1;
    std::vector<int32_t> ids32(ids.begin(), ids.end());
    Buf dt(table.size()), di(n * esz(it)), y(n * width * es), err(4);
    dt.up(table.data());
    di.up(it == DType::I32 ? static_cast<const void*>(ids32.data()) : ids.data());
    cudaMemset(err.p(), 0, 4);
    launch_gather(es, dt.p(), 1, rows, width, it, di.p(), n, y.p(), err.as<int32_t>(), nullptr);
    const auto got = y.down();
    const std::vector<uint8_t> zeros(width * es, 0);
    for (int64_t j = 0; j < n; ++j) {
      const bool ok = ids[j] >= 0 && ids[j] < rows;
      ASSERT_EQ(std::memcmp(got.data() + j * width * es, ok ? table.data() + ids[j] * width * es : zeros.data(), width * es), 0) << "gather row " << j;
    }
    EXPECT_EQ(read_as<int32_t>(err)[0], kErrIndexOutOfRange);
  }
  for (int32_t off : {0, 9, 10, -1}) {  // state len 16, update len 7: 10 and -1 are out of range
    const size_t es = 4;
    const int64_t outer = 3, S = 16, U = 7, inner = 5;
    const auto state = rand_bytes(outer * S * inner * es), upd = rand_bytes(outer * U * inner * es);
    Buf ds(state.size()), du(upd.size()), doff(4), err(4);
    ds.up(state.data());
    du.up(upd.data());
    doff.up(&off);
    cudaMemset(err.p(), 0, 4);
    launch_write_slice(es, ds.p(), du.p(), doff.as<int32_t>(), outer, S, U, inner, err.as<int32_t>(), nullptr);
    auto want = state;
    const bool ok = off >= 0 && off + U <= S;
    if (ok)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(want.data() + (o * S + off) * inner * es, upd.data() + o * U * inner * es, U * inner * es);
    EXPECT_EQ(ds.down(), want) << "write_slice offset " << off;
    EXPECT_EQ(read_as<int32_t>(err)[0], ok ? 0 : kErrSliceOutOfRange) << "write_slice offset " << off;
  }
}

}  // namespace
