// LayerNorm, RmsNorm and their fused residual forms on the CPU.
//
// Per row of the last axis (length N), rows in parallel:
//   s = x (+ residual, summed in f32)
//   LayerNorm: mean = Σs/N; var = Σ(s − mean)²/N (sums in f64, see row_stats);
//              y = (s − mean)·rsqrt(var + eps)·γ + β
//   RmsNorm:   y = s·rsqrt(Σs²/N + eps)·γ
// γ and β may be stored in a different float type than x; y has x's type.
//
// FusedPostRmsNorm: y = x + a·rsqrt(Σa²/N + eps)·w1, rounded to x's dtype;
// with w2 also h = y·rsqrt(Σy²/N + eps)·w2 from the rounded y (what the
// unfused RmsNorm, Add, RmsNorm compute), written after all of y.
#include <algorithm>
#include <cmath>
#include <vector>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/core/half.h"
#include "rlx/backends/cpu/kernels/gemm.h"

namespace rlx::cpu {
namespace {

// Row statistics in f64, one pass, eight interleaved lanes (vectorizable,
// fixed order). Values are shifted by c = x[0] before summing, so
// Σ(x−c)² − (Σ(x−c))²/n loses nothing to cancellation in f64 even when
// |mean| ≫ std (f32 inputs carry 24 bits; f64 sums keep 53).
struct RowStats {
  double mean, var;  // var is the biased (population) variance
};

inline RowStats row_stats(const float* x, int64_t n) {
  const double c = x[0];
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const double d = static_cast<double>(x[i + l]) - c;
      s[l] += d;
      q[l] += d * d;
    }
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - c;
    s[0] += d;
    q[0] += d * d;
  }
  const double sum = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  const double sq = ((q[0] + q[4]) + (q[1] + q[5])) + ((q[2] + q[6]) + (q[3] + q[7]));
  const double dn = static_cast<double>(n);
  const double mean_shift = sum / dn;
  return {c + mean_shift, std::max(0.0, sq / dn - mean_shift * mean_shift)};
}

// Σx² in f64, eight interleaved lanes.
inline double row_sum_sq(const float* x, int64_t n) {
  double q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) q[l] += static_cast<double>(x[i + l]) * static_cast<double>(x[i + l]);
  for (; i < n; ++i) q[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return ((q[0] + q[4]) + (q[1] + q[5])) + ((q[2] + q[6]) + (q[3] + q[7]));
}

struct NormRows {
  const float* x;
  const float* residual;  // null unless fused
  const float* gamma;
  const float* beta;      // null for RmsNorm
  float* y;
  int64_t n;
  float eps;
  bool layer;
};

RLX_CPU_MULTIVERSION
void norm_rows(const NormRows& a, int64_t r0, int64_t r1, float* sum_buf) {
  const int64_t n = a.n;
  for (int64_t r = r0; r < r1; ++r) {
    const float* s = a.x + r * n;
    if (a.residual) {
      const float* res = a.residual + r * n;
      for (int64_t i = 0; i < n; ++i) sum_buf[i] = s[i] + res[i];
      s = sum_buf;
    }
    float* y = a.y + r * n;
    if (a.layer) {
      const RowStats st = row_stats(s, n);
      const auto m = static_cast<float>(st.mean);
      const auto rstd = static_cast<float>(1.0 / std::sqrt(st.var + static_cast<double>(a.eps)));
      for (int64_t i = 0; i < n; ++i) y[i] = (s[i] - m) * rstd * a.gamma[i] + a.beta[i];
    } else {
      const double ms = row_sum_sq(s, n) / static_cast<double>(n);
      const auto rstd = static_cast<float>(1.0 / std::sqrt(ms + static_cast<double>(a.eps)));
      for (int64_t i = 0; i < n; ++i) y[i] = s[i] * rstd * a.gamma[i];
    }
  }
}

template <bool Layer, bool Residual>
void norm_kernel(KernelArgs& args) {
  const size_t p = Residual ? 2 : 1;  // first param input
  NormRows a{};
  a.layer = Layer;
  a.eps = args.attrs<NormAttrs>().eps;
  a.x = args.in_f32(0);
  a.residual = Residual ? args.in_f32(1) : nullptr;
  a.gamma = args.in_f32(p);
  a.beta = Layer ? args.in_f32(p + 1) : nullptr;
  a.y = args.out_f32();
  const auto& dims = args.in_dims(0);
  a.n = dims.back();
  if (a.n == 0) return;
  const int64_t rows = args.in_numel(0) / a.n;
  args.pool.parallel_for(rows, std::max<int64_t>(1, 16384 / a.n), [&](int64_t r0, int64_t r1) {
    std::vector<float> sum_buf(Residual ? static_cast<size_t>(a.n) : 0);
    norm_rows(a, r0, r1, sum_buf.data());
  });
}

// Rounds v to what storing it in `t` keeps.
inline float round_to(DType t, float v) {
  if (t == DType::F16) return f16_to_f32(f32_to_f16(v));
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  return v;
}

RLX_CPU_MULTIVERSION
void post_norm_rows(const float* x, const float* a, const float* w1, const float* w2, float* y, float* h,
                    int64_t n, float eps, DType t, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    const float* ar = a + r * n;
    float* yr = y + r * n;
    const auto rstd = static_cast<float>(1.0 / std::sqrt(row_sum_sq(ar, n) / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = round_to(t, xr[i] + ar[i] * rstd * w1[i]);
    if (!w2) continue;
    float* hr = h + r * n;
    const auto rstd2 = static_cast<float>(1.0 / std::sqrt(row_sum_sq(yr, n) / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) hr[i] = yr[i] * rstd2 * w2[i];
  }
}

void post_norm_kernel(KernelArgs& args) {
  const float eps = args.attrs<NormAttrs>().eps;
  const bool pair = args.num_inputs() == 4;
  const float* x = args.in_f32(0);
  const float* a = args.in_f32(1);
  const float* w1 = args.in_f32(2);
  const float* w2 = pair ? args.in_f32(3) : nullptr;
  float* y = args.out_f32();
  const int64_t n = args.in_dims(0).back();
  if (n == 0) return;
  const int64_t rows = args.in_numel(0) / n;
  float* h = pair ? y + rows * n : nullptr;  // the second half of the stacked result
  const DType t = args.out_dtype();
  args.pool.parallel_for(rows, std::max<int64_t>(1, 16384 / n), [&](int64_t r0, int64_t r1) {
    post_norm_rows(x, a, w1, w2, y, h, n, eps, t, r0, r1);
  });
}

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};

std::string norm_desc(const char* what, DType x, DType g, DType b, bool has_beta) {
  std::string d = str(what, " [x ", dtype_name(x), ", gamma ", dtype_name(g));
  if (has_beta) d += str(", beta ", dtype_name(b));
  return d + "; f32 compute, f64 row sums]";
}

}  // namespace

void register_norm_kernels() {
  for (DType x : kFloats)
    for (DType g : kFloats) {
      register_cpu_kernel(OpKind::RmsNorm, {x, g, x}, norm_kernel<false, false>, norm_desc("rms_norm", x, g, g, false));
      register_cpu_kernel(OpKind::FusedResidualRmsNorm, {x, x, g, x}, norm_kernel<false, true>,
                          norm_desc("residual+rms_norm", x, g, g, false));
      register_cpu_kernel(OpKind::FusedPostRmsNorm, {x, x, g, x}, post_norm_kernel,
                          norm_desc("x + rms_norm(a)", x, g, g, false));
      register_cpu_kernel(OpKind::FusedPostRmsNorm, {x, x, g, g, x}, post_norm_kernel,
                          norm_desc("x + rms_norm(a), then rms_norm of it", x, g, g, false));
      for (DType b : kFloats) {
        register_cpu_kernel(OpKind::LayerNorm, {x, g, b, x}, norm_kernel<true, false>,
                            norm_desc("layer_norm", x, g, b, true));
        register_cpu_kernel(OpKind::FusedResidualLayerNorm, {x, x, g, b, x}, norm_kernel<true, true>,
                            norm_desc("residual+layer_norm", x, g, b, true));
      }
    }
}

}  // namespace rlx::cpu
