// A LayerNorm folded into the Linear layer that reads it, on the host: the
// weights for the sm90 GEMM's row-scale epilogue (Sm90LnFold::a_stats in
// rlx/backends/cuda/kernels/gemm_sm90.h). With y = (x − mean)·rstd ⊙ γ + β,
//   y·Wᵀ + b = rstd·(x·W'ᵀ) + b',
// W'[n, k] = W[n, k]·γ[k] − mean over k of (W[n, ·]·γ) (each row of W' sums
// to zero, so x·W'ᵀ = (x − mean)·(W·diag γ)ᵀ: the mean folds in exactly),
// b'[n] = b[n] + Σ_k W[n, k]·β[k]. The GEMM then reads x itself and needs
// only its rows' rstd. Computed in double.
#pragma once
#include <cstdint>
#include <vector>

namespace rlx {

struct FoldedLinear {
  std::vector<float> weight;  // W' [N, K], row-major
  std::vector<float> bias;    // b' [N]
};

// W [N, K] row-major, b [N] or null, gamma and beta [K]. Throws
// InvalidArgument on an empty or overflowing shape or a null W, gamma or beta.
FoldedLinear fold_layer_norm(const float* W, int64_t N, int64_t K, const float* b, const float* gamma,
                             const float* beta);

}  // namespace rlx
