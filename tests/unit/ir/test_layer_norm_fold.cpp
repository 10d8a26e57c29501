// fold_layer_norm (rlx/passes/layer_norm_fold.h) against LayerNorm then the
// Linear layer, both in double: rows with large means and small spreads
// (where folding the mean into the weights must still be exact), with and
// without a bias.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "rlx/core/error.h"
#include "rlx/passes/layer_norm_fold.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using rlx::test::rng;

TEST(LayerNormFold, EqualsLayerNormThenLinear) {
  RLX_TRACE_SEED();
  const int64_t M = 7, N = 5, K = 96;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.5f, 1.5f);
  std::vector<float> W(N * K), b(N), gamma(K), beta(K), x(M * K);
  for (float& v : W) v = u(rng());
  for (float& v : b) v = u(rng());
  for (float& v : gamma) v = pos(rng());
  for (float& v : beta) v = u(rng());
  for (int64_t i = 0; i < M; ++i) {
    const float mean = 40.0f * u(rng()), spread = i == 0 ? 1e-3f : pos(rng());  // row 0: |mean| / σ ~ 10^4
    for (int64_t k = 0; k < K; ++k) x[i * K + k] = mean + spread * u(rng());
  }
  for (const bool with_bias : {true, false}) {
    const FoldedLinear f = fold_layer_norm(W.data(), N, K, with_bias ? b.data() : nullptr, gamma.data(), beta.data());
    ASSERT_EQ(f.weight.size(), static_cast<size_t>(N * K));
    ASSERT_EQ(f.bias.size(), static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += f.weight[n * K + k];
      EXPECT_NEAR(sum, 0.0, 1e-5) << "row " << n << " of W' must sum to zero";
    }
    for (int64_t i = 0; i < M; ++i) {
      double mean = 0, var = 0;
      for (int64_t k = 0; k < K; ++k) mean += x[i * K + k];
      mean /= double(K);
      for (int64_t k = 0; k < K; ++k) var += std::pow(x[i * K + k] - mean, 2);
      const double rstd = 1.0 / std::sqrt(var / double(K) + 1e-12);
      for (int64_t n = 0; n < N; ++n) {
        double want = with_bias ? b[n] : 0.0, acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          want += ((x[i * K + k] - mean) * rstd * gamma[k] + beta[k]) * W[n * K + k];
          acc += double(x[i * K + k]) * f.weight[n * K + k];
        }
        const double got = rstd * acc + f.bias[n];
        // W' is rounded to float: each term's error is ~2^-24 of |x_k·W'|,
        // scaled by rstd; row 0's |x| / σ of ~10^4 makes that ~1e-3.
        const double tol = 1e-4 + 2e-7 * rstd * 40.0 * std::sqrt(double(K));
        EXPECT_NEAR(got, want, tol) << "row " << i << ", output " << n << (with_bias ? "" : " (no bias)");
      }
    }
  }
}

TEST(LayerNormFold, RefusesBadArguments) {
  const float w[4] = {1, 2, 3, 4}, g[2] = {1, 1}, be[2] = {0, 0};
  EXPECT_THROW(fold_layer_norm(nullptr, 2, 2, nullptr, g, be), InvalidArgument);
  EXPECT_THROW(fold_layer_norm(w, 2, 2, nullptr, nullptr, be), InvalidArgument);
  EXPECT_THROW(fold_layer_norm(w, 0, 2, nullptr, g, be), InvalidArgument);
  EXPECT_THROW(fold_layer_norm(w, 2, -1, nullptr, g, be), InvalidArgument);
}

}  // namespace
