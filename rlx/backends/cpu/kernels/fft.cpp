// Fft on the CPU: the numerical reference the GPU's transforms are checked
// against, so it computes in double (inputs widened, results rounded once).
//
// A length factors into radix-4, 2 and 3 passes and direct DFTs of any other
// prime up to kMaxDirectPrime, run as a mixed-radix Stockham transform (out of
// place, every pass reading and writing in order, no bit reversal). A length
// with a larger prime factor goes through Bluestein's chirp-z: a circular
// convolution of power-of-two length >= 2n − 1, itself a Stockham transform.
// Real inputs and outputs use the full complex transform of the Hermitian
// sequence: simple and exact, at twice the arithmetic of a packed real pass.
#include <cmath>
#include <complex>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <vector>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/core/half.h"

namespace rlx::cpu {
namespace {

using cd = std::complex<double>;

constexpr int kMaxDirectPrime = 31;

// exp(−2πi·num/den), with num reduced first so large products keep full precision.
cd root(int64_t num, int64_t den) {
  num %= den;
  const double t = -2.0 * std::numbers::pi * static_cast<double>(num) / static_cast<double>(den);
  return {std::cos(t), std::sin(t)};
}

// One Stockham pass: length-L transforms of the M = n/L decimated sequences
// (stored [q][k], q < M, k < L) become length-L·p transforms of M/p sequences.
// Output [q'][k + L·b] = Σ_a ω_p^{ab} · ω_{Lp}^{ak} · in[q' + (M/p)·a][k].
struct Pass {
  int p = 0;
  int64_t L = 0;
  std::vector<cd> twiddle;  // [a − 1][k] = ω_{Lp}^{ak}, a in [1, p)
  std::vector<cd> dft;      // p > 4: [a][b] = ω_p^{ab}
};

struct Plan {
  int64_t n = 0;
  std::vector<Pass> passes;
  // Bluestein (when n has a prime factor above kMaxDirectPrime)
  std::shared_ptr<const Plan> conv;  // the power-of-two convolution's plan
  std::vector<cd> chirp;             // exp(−πi·j²/n), j < n
  std::vector<cd> chirp_fft;         // FFT of the conjugate chirp, wrapped to conv->n

  // Complex scratch a transform of this plan needs besides its data.
  int64_t work() const { return conv ? 2 * conv->n : n; }
};

std::shared_ptr<const Plan> make_plan(int64_t n);

void run_pass(const Pass& ps, int64_t n, const cd* in, cd* out) {
  const int p = ps.p;
  const int64_t L = ps.L, Mp = n / (L * p);
  const cd* tw = ps.twiddle.data();
  cd u[kMaxDirectPrime];
  for (int64_t q = 0; q < Mp; ++q) {
    const cd* src = in + q * L;        // in[(q + Mp·a)·L + k] = src[a·Mp·L + k]
    cd* dst = out + q * L * p;         // out[q·Lp + b·L + k]
    const int64_t stride = Mp * L;
    for (int64_t k = 0; k < L; ++k) {
      u[0] = src[k];
      for (int a = 1; a < p; ++a) u[a] = src[a * stride + k] * tw[(a - 1) * L + k];
      switch (p) {
        case 2:
          dst[k] = u[0] + u[1];
          dst[L + k] = u[0] - u[1];
          break;
        case 3: {
          constexpr double h = 0.86602540378443864676;  // √3 / 2
          const cd s = u[1] + u[2], d = u[1] - u[2];
          const cd m = u[0] - 0.5 * s, r{h * d.imag(), -h * d.real()};  // −i·(√3/2)·d
          dst[k] = u[0] + s;
          dst[L + k] = m + r;
          dst[2 * L + k] = m - r;
          break;
        }
        case 4: {
          const cd t0 = u[0] + u[2], t1 = u[0] - u[2], t2 = u[1] + u[3], d = u[1] - u[3];
          const cd t3{d.imag(), -d.real()};  // −i·(u1 − u3)
          dst[k] = t0 + t2;
          dst[L + k] = t1 + t3;
          dst[2 * L + k] = t0 - t2;
          dst[3 * L + k] = t1 - t3;
          break;
        }
        default:
          for (int b = 0; b < p; ++b) {
            cd acc = u[0];
            for (int a = 1; a < p; ++a) acc += u[a] * ps.dft[static_cast<size_t>(a * p + b)];
            dst[b * L + k] = acc;
          }
      }
    }
  }
}

// Forward transform of x[0, n) in place; `work` holds plan.work() values.
void stockham(const Plan& plan, cd* x, cd* work) {
  cd* a = x;
  cd* b = work;
  for (const Pass& ps : plan.passes) {
    run_pass(ps, plan.n, a, b);
    std::swap(a, b);
  }
  if (a != x) std::copy(a, a + plan.n, x);
}

std::vector<int> factor_radices(int64_t n) {
  std::vector<int> r;
  while (n % 4 == 0) r.push_back(4), n /= 4;
  while (n % 2 == 0) r.push_back(2), n /= 2;
  for (int p = 3; p <= kMaxDirectPrime; p += 2)
    while (n % p == 0) r.push_back(p), n /= p;
  if (n != 1) return {};  // a prime factor above kMaxDirectPrime
  return r;
}

std::shared_ptr<Plan> build_plan(int64_t n) {
  auto plan = std::make_shared<Plan>();
  plan->n = n;
  const std::vector<int> radices = factor_radices(n);
  if (n > 1 && radices.empty()) {
    int64_t m = 1;
    while (m < 2 * n - 1) m *= 2;
    plan->conv = make_plan(m);
    plan->chirp.resize(static_cast<size_t>(n));
    // j² mod 2n kept in integers ((j + 1)² = j² + 2j + 1): the angle stays exact for any n.
    for (int64_t j = 0, sq = 0; j < n; sq = (sq + 2 * j + 1) % (2 * n), ++j)
      plan->chirp[static_cast<size_t>(j)] = root(sq, 2 * n);
    std::vector<cd> b(static_cast<size_t>(m), cd{0.0, 0.0});
    b[0] = std::conj(plan->chirp[0]);
    for (int64_t j = 1; j < n; ++j)
      b[static_cast<size_t>(j)] = b[static_cast<size_t>(m - j)] = std::conj(plan->chirp[static_cast<size_t>(j)]);
    std::vector<cd> scratch(static_cast<size_t>(m));
    plan->chirp_fft = std::move(b);
    stockham(*plan->conv, plan->chirp_fft.data(), scratch.data());  // a power of two: no Bluestein of its own
    return plan;
  }
  int64_t L = 1;
  for (int p : radices) {
    Pass pass;
    pass.p = p;
    pass.L = L;
    pass.twiddle.resize(static_cast<size_t>((p - 1) * L));
    for (int a = 1; a < p; ++a)
      for (int64_t k = 0; k < L; ++k) pass.twiddle[static_cast<size_t>((a - 1) * L + k)] = root(a * k, L * p);
    if (p > 4) {
      pass.dft.resize(static_cast<size_t>(p * p));
      for (int a = 0; a < p; ++a)
        for (int b = 0; b < p; ++b) pass.dft[static_cast<size_t>(a * p + b)] = root(static_cast<int64_t>(a) * b, p);
    }
    plan->passes.push_back(std::move(pass));
    L *= p;
  }
  return plan;
}

// Plans are built once per length and shared by every call and thread.
std::shared_ptr<const Plan> make_plan(int64_t n) {
  static std::mutex mu;
  static std::map<int64_t, std::shared_ptr<const Plan>> cache;
  {
    std::lock_guard lock(mu);
    auto it = cache.find(n);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<const Plan> plan = build_plan(n);  // outside the lock: Bluestein builds a nested plan
  std::lock_guard lock(mu);
  if (cache.size() >= 64) cache.clear();
  return cache.emplace(n, std::move(plan)).first->second;
}

void forward(const Plan& plan, cd* x, cd* work) {
  if (!plan.conv) return stockham(plan, x, work);
  const int64_t n = plan.n, m = plan.conv->n;
  cd* a = work;
  cd* scratch = work + m;
  for (int64_t j = 0; j < n; ++j) a[j] = x[j] * plan.chirp[static_cast<size_t>(j)];
  std::fill(a + n, a + m, cd{0.0, 0.0});
  stockham(*plan.conv, a, scratch);
  // Inverse of the product through conjugation: ifft(c) = conj(fft(conj(c))) / m.
  for (int64_t j = 0; j < m; ++j) a[j] = std::conj(a[j] * plan.chirp_fft[static_cast<size_t>(j)]);
  stockham(*plan.conv, a, scratch);
  const double inv_m = 1.0 / static_cast<double>(m);
  for (int64_t k = 0; k < n; ++k) x[k] = plan.chirp[static_cast<size_t>(k)] * std::conj(a[k]) * inv_m;
}

// A transform of either direction: the inverse is the forward one conjugated.
void transform(const Plan& plan, cd* x, cd* work, bool inverse) {
  const int64_t n = plan.n;
  if (inverse)
    for (int64_t j = 0; j < n; ++j) x[j] = std::conj(x[j]);
  forward(plan, x, work);
  if (inverse)
    for (int64_t j = 0; j < n; ++j) x[j] = std::conj(x[j]);
}

double norm_scale(const FftAttrs& a, int64_t n) {
  switch (a.norm) {
    case FftNorm::Backward: return a.inverse ? 1.0 / static_cast<double>(n) : 1.0;
    case FftNorm::Ortho: return 1.0 / std::sqrt(static_cast<double>(n));
    case FftNorm::Forward: return a.inverse ? 1.0 : 1.0 / static_cast<double>(n);
  }
  return 1.0;
}

void fft_kernel(KernelArgs& a) {
  const auto& at = a.attrs<FftAttrs>();
  const auto& in_dims = a.in_dims(0);
  const int64_t in_len = in_dims.back();
  const int64_t n = at.real_output ? at.n : in_len;
  if (n < 1) throw InvalidArgument(str(a.where(), ": fft length must be >= 1, got ", n));
  const int64_t out_len = a.out_dims().back();
  const int64_t rows = in_len == 0 ? 0 : a.in_numel(0) / in_len;
  if (rows == 0) return;
  const std::shared_ptr<const Plan> plan = make_plan(n);
  const double scale = norm_scale(at, n);

  const bool f64_in = at.real_input && a.in_dtype(0) == DType::F64;
  const float* real_in = at.real_input && !f64_in ? a.in_f32(0) : nullptr;
  const double* real_in64 = f64_in ? a.in<double>(0) : nullptr;
  const auto* cin = at.real_input ? nullptr : a.in<std::complex<float>>(0);
  float* real_out = at.real_output ? a.out_f32() : nullptr;
  auto* cout = at.real_output ? nullptr : a.out<std::complex<float>>();

  // Rows per task: enough transforms to amortize a task (~64k points).
  const int64_t grain = std::max<int64_t>(1, 65536 / n);
  a.pool.parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<cd> x(static_cast<size_t>(n)), work(static_cast<size_t>(plan->work()));
    for (int64_t r = r0; r < r1; ++r) {
      if (at.real_input) {
        for (int64_t j = 0; j < n; ++j)
          x[static_cast<size_t>(j)] = {f64_in ? real_in64[r * n + j] : static_cast<double>(real_in[r * n + j]), 0.0};
      } else if (at.real_output) {
        // The Hermitian spectrum the n/2 + 1 bins stand for.
        const std::complex<float>* bins = cin + r * in_len;
        for (int64_t k = 0; k <= n / 2; ++k) x[static_cast<size_t>(k)] = cd(bins[k]);
        for (int64_t k = n / 2 + 1; k < n; ++k) x[static_cast<size_t>(k)] = std::conj(cd(bins[n - k]));
      } else {
        for (int64_t j = 0; j < n; ++j) x[static_cast<size_t>(j)] = cd(cin[r * n + j]);
      }
      transform(*plan, x.data(), work.data(), at.inverse);
      if (at.real_output) {
        // Real parts only: the imaginary parts of bins 0 and n/2 drop out here.
        for (int64_t j = 0; j < n; ++j)
          real_out[r * n + j] = static_cast<float>(x[static_cast<size_t>(j)].real() * scale);
      } else {
        for (int64_t k = 0; k < out_len; ++k) {
          const cd v = x[static_cast<size_t>(k)] * scale;
          cout[r * out_len + k] = {static_cast<float>(v.real()), static_cast<float>(v.imag())};
        }
      }
    }
  });
  if (at.real_output) a.finish();
}

}  // namespace

void register_fft_kernels() {
  register_cpu_kernel(OpKind::Fft, {DType::C64, DType::C64}, fft_kernel, "cpu fft (complex, f64 compute)");
  register_cpu_kernel(OpKind::Fft, {DType::C64, DType::F32}, fft_kernel, "cpu fft (real output, f64 compute)");
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    register_cpu_kernel(OpKind::Fft, {t, DType::C64}, fft_kernel, str("cpu fft (real ", dtype_name(t), " input)"));
}

}  // namespace rlx::cpu
