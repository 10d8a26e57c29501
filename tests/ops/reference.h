// Float64 reference implementations of every op the CPU backend runs (all of
// DESIGN §3 except Fft, GaussianSplatRender, DequantMatMul and Custom).
//
// Written from the op contract in rlx/ir/ops.h alone, never from a kernel:
// plain loops over multi-dimensional indices, computed in double. Inputs are
// the values a backend actually receives (already rounded to their storage
// dtype), so the only error left to tolerate is the backend's own.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rlx/ir/ops.h"

namespace rlx::test {

// A dense row-major array of doubles with a concrete shape. Integer and bool
// values are stored exactly (bool as 0/1).
struct RefTensor {
  std::vector<int64_t> shape;
  std::vector<double> v;

  RefTensor() = default;
  explicit RefTensor(std::vector<int64_t> s, double fill = 0.0);
  RefTensor(std::vector<int64_t> s, std::vector<double> values);

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  double& operator[](int64_t i) { return v[static_cast<size_t>(i)]; }
  double operator[](int64_t i) const { return v[static_cast<size_t>(i)]; }
  double& at(const std::vector<int64_t>& idx);
  double at(const std::vector<int64_t>& idx) const;
};

// Row-major flat offset of `idx` in `shape`, and its inverse.
int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape);
std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape);
// "[1, 0, 5]"
std::string index_str(const std::vector<int64_t>& idx);

namespace ref {

// Scalar activations (as the contract states them: GeluErf with erf, GeluTanh
// with the tanh formula).
double gelu_erf(double x);
double gelu_tanh(double x);
double silu(double x);
double sigmoid(double x);
double activation(Activation a, double x);

// Elementwise. `integer` selects integer semantics for Binary (i32: division
// truncates toward zero).
RefTensor unary(UnaryFn fn, const RefTensor& x);
RefTensor binary(BinaryFn fn, const RefTensor& a, const RefTensor& b, bool integer);
RefTensor compare(CompareFn fn, const RefTensor& a, const RefTensor& b);
RefTensor where(const RefTensor& cond, const RefTensor& a, const RefTensor& b);
// Value conversion to `to`: float → int truncates toward zero, → bool is
// (x != 0), float → float is the value itself (the tolerance of `to` covers the
// rounding of the result).
RefTensor cast(const RefTensor& x, DType to);
// numpy broadcast of two shapes.
std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// Linear algebra
RefTensor matmul(const RefTensor& a, const RefTensor& b, bool transpose_a, bool transpose_b);
RefTensor matmul_bias_act(const RefTensor& a, const RefTensor& b, const RefTensor& bias, bool transpose_b,
                          Activation act);
// ScaledMatMul: sa[m] · sb[n] · Σ_k a[m, k] · b[n, k] + bias[n]; sa / sb hold
// one value or one per row (of a's rows / of b's N rows); bias may be empty.
RefTensor scaled_matmul(const RefTensor& a, const RefTensor& b, const RefTensor& sa, const RefTensor& sb,
                        const RefTensor& bias);

// Norms over the last axis; the residual forms normalize (x + residual).
RefTensor layer_norm(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta, double eps);
RefTensor rms_norm(const RefTensor& x, const RefTensor& gamma, double eps);
RefTensor residual_layer_norm(const RefTensor& x, const RefTensor& r, const RefTensor& gamma, const RefTensor& beta,
                              double eps);
RefTensor residual_rms_norm(const RefTensor& x, const RefTensor& r, const RefTensor& gamma, double eps);
// RMS norm of each head_dim-long run of x's last axis (heads side by side),
// all with the same weight [head_dim].
RefTensor head_rms_norm(const RefTensor& x, const RefTensor& weight, int64_t head_dim, double eps);

// Reductions and selection
RefTensor softmax(const RefTensor& x, int axis);
RefTensor reduce(ReduceFn fn, const RefTensor& x, std::vector<int> axes, bool keepdims);
RefTensor argmax(const RefTensor& x, int axis, bool keepdims);
// Largest k along the last axis, sorted descending: (values, indices).
std::pair<RefTensor, RefTensor> topk(const RefTensor& x, int k);
// Which tokens a correct Sample may return, per row of logits [B, V]:
// a [B, V] 0/1 mask. Temperature 0 allows only the argmax; otherwise a token
// is allowed when its rank is below top_k (if set) and the probability mass
// (at this temperature) of the tokens ranked before it is below top_p — a
// superset of the set left after either order of top-k / top-p truncation.
RefTensor sample_allowed(const RefTensor& logits, const SampleAttrs& a);

// Data movement
RefTensor gather(const RefTensor& table, const RefTensor& indices);
RefTensor reshape(const RefTensor& x, std::vector<int64_t> shape);
RefTensor transpose(const RefTensor& x, const std::vector<int>& perm);
RefTensor narrow(const RefTensor& x, int axis, int64_t start, int64_t length);
RefTensor concat(const std::vector<RefTensor>& xs, int axis);
RefTensor expand(const RefTensor& x, const std::vector<int64_t>& shape);
RefTensor write_slice(const RefTensor& state, const RefTensor& update, int64_t offset, int axis);

// Transformer blocks. `extra` is the key mask [B, Lk] (MaskKind::Custom) or
// the additive bias [B|1, H|1, Lq, Lk] (MaskKind::Bias), else ignored.
// `kv_len` ([1] or [B]) limits the valid keys as AttentionAttrs::kv_len_input says.
RefTensor attention(const RefTensor& q, const RefTensor& k, const RefTensor& v, const AttentionAttrs& a,
                    const RefTensor* extra, const RefTensor* kv_len = nullptr);
RefTensor rope(const RefTensor& x, const RefTensor& positions, const RopeAttrs& a);
// act(x[..., :N]) · x[..., N:]
RefTensor glu(const RefTensor& x, UnaryFn act);

// Fourier transforms along the last axis as direct sums (numpy.fft's signs
// and `norm`). Complex values are [..., 2] (real, imaginary) pairs.
RefTensor dft(const RefTensor& x, bool inverse, FftNorm norm);  // [..., n, 2] → [..., n, 2]
RefTensor rdft(const RefTensor& x, FftNorm norm);               // real [..., n] → [..., n/2 + 1, 2]
// numpy.fft.irfft: x_j = Re X_0 + 2·Σ_{0<k<n/2} Re(X_k·e^{2πi·jk/n}) + (n even) Re X_{n/2}·(−1)^j, scaled.
RefTensor irdft(const RefTensor& x, int64_t n, FftNorm norm);   // [..., n/2 + 1, 2] → real [..., n]

// Gaussian splatting as SplatAttrs states it, every Gaussian tried at every
// pixel in depth order (no tiles, no radius). Inputs in the op's order.
RefTensor gaussian_splat(const std::vector<const RefTensor*>& in, const SplatAttrs& a);

}  // namespace ref
}  // namespace rlx::test
