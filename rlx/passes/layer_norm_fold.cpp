#include "rlx/passes/layer_norm_fold.h"

#include <limits>

#include "rlx/core/error.h"

namespace rlx {

FoldedLinear fold_layer_norm(const float* W, int64_t N, int64_t K, const float* b, const float* gamma,
                             const float* beta) {
  RLX_CHECK(W != nullptr && gamma != nullptr && beta != nullptr, "fold_layer_norm: W, gamma and beta are required");
  RLX_CHECK(N > 0 && K > 0 && N <= std::numeric_limits<int64_t>::max() / K, "fold_layer_norm: bad shape [", N, ", ",
            K, "]");
  FoldedLinear out;
  out.weight.resize(static_cast<size_t>(N * K));
  out.bias.resize(static_cast<size_t>(N));
  std::vector<double> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    const float* w = W + n * K;
    double mean = 0.0, shift = b != nullptr ? b[n] : 0.0;
    for (int64_t k = 0; k < K; ++k) {
      row[static_cast<size_t>(k)] = double(w[k]) * gamma[k];
      mean += row[static_cast<size_t>(k)];
      shift += double(w[k]) * beta[k];
    }
    mean /= double(K);
    for (int64_t k = 0; k < K; ++k)
      out.weight[static_cast<size_t>(n * K + k)] = float(row[static_cast<size_t>(k)] - mean);
    out.bias[static_cast<size_t>(n)] = float(shift);
  }
  return out;
}

}  // namespace rlx
