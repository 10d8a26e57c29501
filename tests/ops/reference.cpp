#include "tests/ops/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace rlx::test {
namespace {

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int norm_axis(int axis, int rank) {
  if (axis < -rank || axis >= rank) throw std::invalid_argument("reference: axis out of range");
  return axis < 0 ? axis + rank : axis;
}

// Index into `src` for an output index of a broadcast result: size-1 dims read
// element 0, missing leading dims are dropped.
int64_t broadcast_offset(const std::vector<int64_t>& out_idx, const std::vector<int64_t>& src_shape) {
  const size_t off = out_idx.size() - src_shape.size();
  int64_t flat = 0;
  for (size_t i = 0; i < src_shape.size(); ++i) {
    const int64_t d = src_shape[i];
    flat = flat * d + (d == 1 ? 0 : out_idx[off + i]);
  }
  return flat;
}

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

}  // namespace

RefTensor::RefTensor(std::vector<int64_t> s, double fill) : shape(std::move(s)) {
  v.assign(static_cast<size_t>(numel_of(shape)), fill);
}

RefTensor::RefTensor(std::vector<int64_t> s, std::vector<double> values) : shape(std::move(s)), v(std::move(values)) {
  if (static_cast<int64_t>(v.size()) != numel_of(shape)) throw std::invalid_argument("RefTensor: size mismatch");
}

double& RefTensor::at(const std::vector<int64_t>& idx) { return v[static_cast<size_t>(ravel(idx, shape))]; }
double RefTensor::at(const std::vector<int64_t>& idx) const { return v[static_cast<size_t>(ravel(idx, shape))]; }

int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i) flat = flat * shape[i] + idx[i];
  return flat;
}

std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return idx;
}

std::string index_str(const std::vector<int64_t>& idx) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < idx.size(); ++i) os << (i ? ", " : "") << idx[i];
  os << "]";
  return os.str();
}

namespace ref {

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2)); }
double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }

double activation(Activation a, double x) {
  switch (a) {
    case Activation::None: return x;
    case Activation::GeluErf: return gelu_erf(x);
    case Activation::GeluTanh: return gelu_tanh(x);
    case Activation::Relu: return x > 0 ? x : 0.0;
    case Activation::Silu: return silu(x);
  }
  throw std::invalid_argument("reference: unknown activation");
}

namespace {

double unary_scalar(UnaryFn fn, double x) {
  switch (fn) {
    case UnaryFn::GeluErf: return gelu_erf(x);
    case UnaryFn::GeluTanh: return gelu_tanh(x);
    case UnaryFn::Silu: return silu(x);
    case UnaryFn::Relu: return x > 0 ? x : 0.0;
    case UnaryFn::Sigmoid: return sigmoid(x);
    case UnaryFn::Tanh: return std::tanh(x);
    case UnaryFn::Exp: return std::exp(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Sqrt: return std::sqrt(x);
    case UnaryFn::Rsqrt: return 1.0 / std::sqrt(x);
    case UnaryFn::Neg: return -x;
    case UnaryFn::Abs: return std::fabs(x);
    case UnaryFn::Sin: return std::sin(x);
    case UnaryFn::Cos: return std::cos(x);
  }
  throw std::invalid_argument("reference: unknown unary fn");
}

double binary_scalar(BinaryFn fn, double a, double b, bool integer) {
  switch (fn) {
    case BinaryFn::Add: return a + b;
    case BinaryFn::Sub: return a - b;
    case BinaryFn::Mul: return a * b;
    case BinaryFn::Div: return integer ? std::trunc(a / b) : a / b;
    case BinaryFn::Max: return std::max(a, b);
    case BinaryFn::Min: return std::min(a, b);
    case BinaryFn::Pow: return std::pow(a, b);
  }
  throw std::invalid_argument("reference: unknown binary fn");
}

bool compare_scalar(CompareFn fn, double a, double b) {
  switch (fn) {
    case CompareFn::Eq: return a == b;
    case CompareFn::Ne: return a != b;
    case CompareFn::Lt: return a < b;
    case CompareFn::Le: return a <= b;
    case CompareFn::Gt: return a > b;
    case CompareFn::Ge: return a >= b;
  }
  throw std::invalid_argument("reference: unknown compare fn");
}

// out[i] = f(a[bcast i], b[bcast i]) over the broadcast shape.
template <typename F>
RefTensor broadcast_map(const RefTensor& a, const RefTensor& b, F f) {
  RefTensor out(broadcast_shapes(a.shape, b.shape));
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, out.shape);
    out[i] = f(a[broadcast_offset(idx, a.shape)], b[broadcast_offset(idx, b.shape)]);
  }
  return out;
}

}  // namespace

std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) throw std::invalid_argument("reference: shapes do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

RefTensor unary(UnaryFn fn, const RefTensor& x) {
  RefTensor out(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = unary_scalar(fn, x[i]);
  return out;
}

RefTensor binary(BinaryFn fn, const RefTensor& a, const RefTensor& b, bool integer) {
  return broadcast_map(a, b, [&](double x, double y) { return binary_scalar(fn, x, y, integer); });
}

RefTensor compare(CompareFn fn, const RefTensor& a, const RefTensor& b) {
  return broadcast_map(a, b, [&](double x, double y) { return compare_scalar(fn, x, y) ? 1.0 : 0.0; });
}

RefTensor where(const RefTensor& cond, const RefTensor& a, const RefTensor& b) {
  RefTensor out(broadcast_shapes(broadcast_shapes(cond.shape, a.shape), b.shape));
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, out.shape);
    out[i] = cond[broadcast_offset(idx, cond.shape)] != 0.0 ? a[broadcast_offset(idx, a.shape)]
                                                            : b[broadcast_offset(idx, b.shape)];
  }
  return out;
}

RefTensor cast(const RefTensor& x, DType to) {
  RefTensor out(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (to == DType::Bool)
      out[i] = x[i] != 0.0 ? 1.0 : 0.0;
    else if (is_int(to))
      out[i] = std::trunc(x[i]);
    else
      out[i] = x[i];
  }
  return out;
}

RefTensor matmul(const RefTensor& a, const RefTensor& b, bool ta, bool tb) {
  if (a.rank() < 2 || b.rank() < 2) throw std::invalid_argument("reference matmul: rank < 2");
  const int64_t m = ta ? a.dim(-1) : a.dim(-2);
  const int64_t k = ta ? a.dim(-2) : a.dim(-1);
  const int64_t kb = tb ? b.dim(-1) : b.dim(-2);
  const int64_t n = tb ? b.dim(-2) : b.dim(-1);
  if (k != kb) throw std::invalid_argument("reference matmul: inner dims differ");
  std::vector<int64_t> abatch(a.shape.begin(), a.shape.end() - 2), bbatch(b.shape.begin(), b.shape.end() - 2);
  std::vector<int64_t> batch = broadcast_shapes(abatch, bbatch);
  std::vector<int64_t> oshape = batch;
  oshape.push_back(m);
  oshape.push_back(n);
  RefTensor out(oshape);
  const int64_t nb = numel_of(batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    auto bidx = unravel(bi, batch);
    const int64_t aoff = broadcast_offset(bidx, abatch) * a.dim(-2) * a.dim(-1);
    const int64_t boff = broadcast_offset(bidx, bbatch) * b.dim(-2) * b.dim(-1);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = ta ? a[aoff + p * m + i] : a[aoff + i * k + p];
          const double bv = tb ? b[boff + j * k + p] : b[boff + p * n + j];
          s += av * bv;
        }
        out[(bi * m + i) * n + j] = s;
      }
    }
  }
  return out;
}

RefTensor matmul_bias_act(const RefTensor& a, const RefTensor& b, const RefTensor& bias, bool tb, Activation act) {
  RefTensor out = matmul(a, b, false, tb);
  const int64_t n = out.dim(-1);
  for (int64_t i = 0; i < out.numel(); ++i) out[i] = activation(act, out[i] + bias[i % n]);
  return out;
}

RefTensor scaled_matmul(const RefTensor& a, const RefTensor& b, const RefTensor& sa, const RefTensor& sb,
                        const RefTensor& bias) {
  RefTensor out = matmul(a, b, false, true);
  const int64_t n = out.dim(-1);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t row = i / n, col = i % n;
    const double s = sa[sa.numel() == 1 ? 0 : row] * sb[sb.numel() == 1 ? 0 : col];
    out[i] = s * out[i] + (bias.numel() ? bias[col] : 0.0);
  }
  return out;
}

RefTensor layer_norm(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta, double eps) {
  const int64_t w = x.dim(-1);
  RefTensor out(x.shape);
  for (int64_t r = 0; r < x.numel() / w; ++r) {
    double mean = 0.0;
    for (int64_t i = 0; i < w; ++i) mean += x[r * w + i];
    mean /= static_cast<double>(w);
    double var = 0.0;
    for (int64_t i = 0; i < w; ++i) var += (x[r * w + i] - mean) * (x[r * w + i] - mean);
    var /= static_cast<double>(w);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < w; ++i) out[r * w + i] = (x[r * w + i] - mean) * inv * gamma[i] + beta[i];
  }
  return out;
}

RefTensor rms_norm(const RefTensor& x, const RefTensor& gamma, double eps) {
  const int64_t w = x.dim(-1);
  RefTensor out(x.shape);
  for (int64_t r = 0; r < x.numel() / w; ++r) {
    double ms = 0.0;
    for (int64_t i = 0; i < w; ++i) ms += x[r * w + i] * x[r * w + i];
    ms /= static_cast<double>(w);
    const double inv = 1.0 / std::sqrt(ms + eps);
    for (int64_t i = 0; i < w; ++i) out[r * w + i] = x[r * w + i] * inv * gamma[i];
  }
  return out;
}

RefTensor head_rms_norm(const RefTensor& x, const RefTensor& weight, int64_t head_dim, double eps) {
  RefTensor out(x.shape);
  for (int64_t r = 0; r < x.numel() / head_dim; ++r) {
    double ms = 0.0;
    for (int64_t i = 0; i < head_dim; ++i) ms += x[r * head_dim + i] * x[r * head_dim + i];
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(head_dim) + eps);
    for (int64_t i = 0; i < head_dim; ++i) out[r * head_dim + i] = x[r * head_dim + i] * inv * weight[i];
  }
  return out;
}

RefTensor residual_layer_norm(const RefTensor& x, const RefTensor& r, const RefTensor& gamma, const RefTensor& beta,
                              double eps) {
  return layer_norm(binary(BinaryFn::Add, x, r, false), gamma, beta, eps);
}

RefTensor residual_rms_norm(const RefTensor& x, const RefTensor& r, const RefTensor& gamma, double eps) {
  return rms_norm(binary(BinaryFn::Add, x, r, false), gamma, eps);
}

RefTensor softmax(const RefTensor& x, int axis) {
  const int ax = norm_axis(axis, x.rank());
  const int64_t n = x.dim(ax);
  int64_t inner = 1;
  for (int i = ax + 1; i < x.rank(); ++i) inner *= x.dim(i);
  const int64_t outer = x.numel() / (n * inner);
  RefTensor out(x.shape);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t i) { return (o * n + i) * inner + in; };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[at(i)]);
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(x[at(i)] - mx);
      for (int64_t i = 0; i < n; ++i) out[at(i)] = std::exp(x[at(i)] - mx) / sum;
    }
  }
  return out;
}

RefTensor reduce(ReduceFn fn, const RefTensor& x, std::vector<int> axes, bool keepdims) {
  std::vector<bool> reduced(static_cast<size_t>(x.rank()), false);
  for (int a : axes) reduced[static_cast<size_t>(norm_axis(a, x.rank()))] = true;
  std::vector<int64_t> kept_shape;  // keepdims form
  int64_t count = 1;
  for (int i = 0; i < x.rank(); ++i) {
    kept_shape.push_back(reduced[static_cast<size_t>(i)] ? 1 : x.dim(i));
    if (reduced[static_cast<size_t>(i)]) count *= x.dim(i);
  }
  const double init = fn == ReduceFn::Max   ? -std::numeric_limits<double>::infinity()
                      : fn == ReduceFn::Min ? std::numeric_limits<double>::infinity()
                                            : 0.0;
  RefTensor acc(kept_shape, init);
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, x.shape);
    for (size_t d = 0; d < idx.size(); ++d)
      if (reduced[d]) idx[d] = 0;
    double& a = acc.at(idx);
    switch (fn) {
      case ReduceFn::Sum:
      case ReduceFn::Mean: a += x[i]; break;
      case ReduceFn::Max: a = std::max(a, x[i]); break;
      case ReduceFn::Min: a = std::min(a, x[i]); break;
    }
  }
  if (fn == ReduceFn::Mean)
    for (auto& a : acc.v) a /= static_cast<double>(count);
  if (keepdims) return acc;
  std::vector<int64_t> out_shape;
  for (int i = 0; i < x.rank(); ++i)
    if (!reduced[static_cast<size_t>(i)]) out_shape.push_back(x.dim(i));
  return RefTensor(out_shape, acc.v);
}

RefTensor argmax(const RefTensor& x, int axis, bool keepdims) {
  const int ax = norm_axis(axis, x.rank());
  std::vector<int64_t> kept = x.shape;
  kept[static_cast<size_t>(ax)] = 1;
  RefTensor out(kept);
  for (int64_t o = 0; o < out.numel(); ++o) {
    auto idx = unravel(o, kept);
    int64_t best = 0;
    double best_v = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < x.dim(ax); ++i) {
      idx[static_cast<size_t>(ax)] = i;
      const double val = x.at(idx);
      if (val > best_v) {
        best_v = val;
        best = i;
      }
    }
    out[o] = static_cast<double>(best);
  }
  if (!keepdims) out.shape.erase(out.shape.begin() + ax);
  return out;
}

std::pair<RefTensor, RefTensor> topk(const RefTensor& x, int k) {
  const int64_t n = x.dim(-1);
  std::vector<int64_t> oshape = x.shape;
  oshape.back() = k;
  RefTensor vals(oshape), idxs(oshape);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < x.numel() / n; ++r) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[r * n + a] > x[r * n + b]; });
    for (int64_t j = 0; j < k; ++j) {
      vals[r * k + j] = x[r * n + order[static_cast<size_t>(j)]];
      idxs[r * k + j] = static_cast<double>(order[static_cast<size_t>(j)]);
    }
  }
  return {vals, idxs};
}

RefTensor sample_allowed(const RefTensor& logits, const SampleAttrs& a) {
  const int64_t b = logits.dim(0), n = logits.dim(1);
  RefTensor allowed({b, n}, 0.0);
  for (int64_t r = 0; r < b; ++r) {
    const double* row = logits.v.data() + r * n;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return row[x] > row[y]; });
    if (a.temperature == 0.0f) {
      allowed[r * n + order[0]] = 1.0;
      continue;
    }
    const double t = a.temperature;
    const double mx = row[order[0]];
    double z = 0.0;
    for (int64_t i = 0; i < n; ++i) z += std::exp((row[i] - mx) / t);
    double before = 0.0;  // mass of the tokens ranked ahead
    for (int64_t rank = 0; rank < n; ++rank) {
      const int64_t tok = order[static_cast<size_t>(rank)];
      const bool in_k = a.top_k == 0 || rank < a.top_k;
      const bool in_p = rank == 0 || before < static_cast<double>(a.top_p) + 1e-6;
      if (in_k && in_p) allowed[r * n + tok] = 1.0;
      before += std::exp((row[tok] - mx) / t) / z;
    }
  }
  return allowed;
}

RefTensor gather(const RefTensor& table, const RefTensor& indices) {
  const int64_t rows = table.dim(0);
  const int64_t row = table.numel() / rows;
  std::vector<int64_t> oshape = indices.shape;
  oshape.insert(oshape.end(), table.shape.begin() + 1, table.shape.end());
  RefTensor out(oshape);
  for (int64_t i = 0; i < indices.numel(); ++i) {
    const auto r = static_cast<int64_t>(indices[i]);
    if (r < 0 || r >= rows) throw std::invalid_argument("reference gather: index out of range");
    for (int64_t j = 0; j < row; ++j) out[i * row + j] = table[r * row + j];
  }
  return out;
}

RefTensor reshape(const RefTensor& x, std::vector<int64_t> shape) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1)
      infer = static_cast<int>(i);
    else
      known *= shape[i];
  }
  if (infer >= 0) shape[static_cast<size_t>(infer)] = x.numel() / known;
  return RefTensor(shape, x.v);
}

RefTensor transpose(const RefTensor& x, const std::vector<int>& perm) {
  std::vector<int64_t> oshape;
  for (int p : perm) oshape.push_back(x.dim(p));
  RefTensor out(oshape);
  std::vector<int64_t> src(perm.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, oshape);
    for (size_t k = 0; k < perm.size(); ++k) src[static_cast<size_t>(perm[k])] = idx[k];
    out[i] = x.at(src);
  }
  return out;
}

RefTensor narrow(const RefTensor& x, int axis, int64_t start, int64_t length) {
  const int ax = norm_axis(axis, x.rank());
  std::vector<int64_t> oshape = x.shape;
  oshape[static_cast<size_t>(ax)] = length;
  RefTensor out(oshape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, oshape);
    idx[static_cast<size_t>(ax)] += start;
    out[i] = x.at(idx);
  }
  return out;
}

RefTensor concat(const std::vector<RefTensor>& xs, int axis) {
  const int ax = norm_axis(axis, xs.at(0).rank());
  std::vector<int64_t> oshape = xs[0].shape;
  oshape[static_cast<size_t>(ax)] = 0;
  for (const auto& x : xs) oshape[static_cast<size_t>(ax)] += x.dim(ax);
  RefTensor out(oshape);
  int64_t base = 0;
  for (const auto& x : xs) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto idx = unravel(i, x.shape);
      idx[static_cast<size_t>(ax)] += base;
      out.at(idx) = x[i];
    }
    base += x.dim(ax);
  }
  return out;
}

RefTensor expand(const RefTensor& x, const std::vector<int64_t>& shape) {
  RefTensor out(shape);
  for (int64_t i = 0; i < out.numel(); ++i) out[i] = x[broadcast_offset(unravel(i, shape), x.shape)];
  return out;
}

RefTensor write_slice(const RefTensor& state, const RefTensor& update, int64_t offset, int axis) {
  const int ax = norm_axis(axis, state.rank());
  RefTensor out = state;
  for (int64_t i = 0; i < update.numel(); ++i) {
    auto idx = unravel(i, update.shape);
    idx[static_cast<size_t>(ax)] += offset;
    out.at(idx) = update[i];
  }
  return out;
}

RefTensor attention(const RefTensor& q, const RefTensor& k, const RefTensor& v, const AttentionAttrs& a,
                    const RefTensor* extra, const RefTensor* kv_len) {
  const int64_t b = q.dim(0), lq = q.dim(1), lk = k.dim(1);
  const int64_t h = a.num_heads, hkv = a.num_kv_heads, d = a.head_dim;
  const int64_t group = h / hkv;
  const double scale = a.scale != 0.0f ? static_cast<double>(a.scale) : 1.0 / std::sqrt(static_cast<double>(d));
  const double cap = a.softcap;
  RefTensor out(q.shape, 0.0);
  std::vector<double> s(static_cast<size_t>(lk));
  std::vector<bool> vis(static_cast<size_t>(lk));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const int64_t kh = hi / group;
      const int64_t kv =
          kv_len ? static_cast<int64_t>((*kv_len)[kv_len->numel() == 1 ? 0 : bi]) : lk;  // valid keys
      for (int64_t i = 0; i < lq; ++i) {
        const int64_t qpos = i + kv - lq;  // bottom-right aligned
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < lk; ++j) {
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c)
            dot += q[(bi * lq + i) * h * d + hi * d + c] * k[(bi * lk + j) * hkv * d + kh * d + c];
          double sc = dot * scale;
          if (cap > 0.0) sc = cap * std::tanh(sc / cap);
          bool visible = j < kv;
          switch (a.mask) {
            case MaskKind::None: break;
            case MaskKind::Causal: visible = visible && j <= qpos; break;
            case MaskKind::SlidingWindow: visible = visible && j <= qpos && qpos - j < a.window; break;
            case MaskKind::Custom: visible = visible && (*extra)[bi * lk + j] != 0.0; break;
            case MaskKind::Bias: {
              const RefTensor& bias = *extra;
              const int64_t bb = bias.dim(0) == 1 ? 0 : bi, bh = bias.dim(1) == 1 ? 0 : hi;
              sc += bias[((bb * bias.dim(1) + bh) * lq + i) * lk + j];
              break;
            }
          }
          s[static_cast<size_t>(j)] = sc;
          vis[static_cast<size_t>(j)] = visible;
          if (visible) mx = std::max(mx, sc);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // fully masked row → zeros
        double z = 0.0;
        for (int64_t j = 0; j < lk; ++j) {
          const size_t sj = static_cast<size_t>(j);
          s[sj] = vis[sj] ? std::exp(s[sj] - mx) : 0.0;
          z += s[sj];
        }
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0.0;
          for (int64_t j = 0; j < lk; ++j) acc += s[static_cast<size_t>(j)] * v[(bi * lk + j) * hkv * d + kh * d + c];
          out[(bi * lq + i) * h * d + hi * d + c] = acc / z;
        }
      }
    }
  }
  return out;
}

RefTensor rope(const RefTensor& x, const RefTensor& positions, const RopeAttrs& a) {
  const int64_t b = x.dim(0), l = x.dim(1), w = x.dim(2);
  const int64_t h = a.num_heads, hd = a.head_dim, nrot = a.n_rot, half = nrot / 2;
  RefTensor out({b, l, h * hd});
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t li = 0; li < l; ++li) {
      const double pos = positions.rank() == 1 ? positions[li] : positions[bi * l + li];
      for (int64_t hi = 0; hi < h; ++hi) {
        const double* src = x.v.data() + (bi * l + li) * w + a.src_offset + hi * hd;
        double* dst = out.v.data() + (bi * l + li) * h * hd + hi * hd;
        for (int64_t dd = nrot; dd < hd; ++dd) dst[dd] = src[dd];
        for (int64_t i = 0; i < half; ++i) {
          const double factor = a.freq_factors.empty() ? 1.0 : static_cast<double>(a.freq_factors[static_cast<size_t>(i)]);
          const double theta =
              pos * static_cast<double>(a.freq_scale) *
              std::pow(static_cast<double>(a.freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(nrot)) /
              factor;
          const double c = std::cos(theta), s = std::sin(theta);
          const int64_t i0 = a.pairing == RopePairing::NeoX ? i : 2 * i;
          const int64_t i1 = a.pairing == RopePairing::NeoX ? i + half : 2 * i + 1;
          dst[i0] = src[i0] * c - src[i1] * s;
          dst[i1] = src[i0] * s + src[i1] * c;
        }
      }
    }
  }
  return out;
}

RefTensor glu(const RefTensor& x, UnaryFn act) {
  const int64_t w = x.dim(-1), n = w / 2;
  std::vector<int64_t> oshape = x.shape;
  oshape.back() = n;
  RefTensor out(oshape);
  for (int64_t r = 0; r < x.numel() / w; ++r)
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = unary_scalar(act, x[r * w + i]) * x[r * w + n + i];
  return out;
}

namespace {

// e^{sign·2πi·m/n} with m reduced mod n first (exact angles for any j·k).
std::pair<double, double> unit_root(int64_t m, int64_t n, double sign) {
  const double t = sign * 2.0 * std::numbers::pi * static_cast<double>(m % n) / static_cast<double>(n);
  return {std::cos(t), std::sin(t)};
}

double fft_scale(FftNorm norm, bool inverse, int64_t n) {
  const double dn = static_cast<double>(n);
  switch (norm) {
    case FftNorm::Backward: return inverse ? 1.0 / dn : 1.0;
    case FftNorm::Ortho: return 1.0 / std::sqrt(dn);
    case FftNorm::Forward: return inverse ? 1.0 : 1.0 / dn;
  }
  return 1.0;
}

}  // namespace

RefTensor dft(const RefTensor& x, bool inverse, FftNorm norm) {
  const int64_t n = x.dim(-2), rows = x.numel() / (2 * n);
  const double sign = inverse ? 1.0 : -1.0, scale = fft_scale(norm, inverse, n);
  RefTensor out(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* in = &x.v[static_cast<size_t>(r * 2 * n)];
    for (int64_t k = 0; k < n; ++k) {
      double re = 0.0, im = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const auto [c, s] = unit_root(j * k, n, sign);
        re += in[2 * j] * c - in[2 * j + 1] * s;
        im += in[2 * j] * s + in[2 * j + 1] * c;
      }
      out[r * 2 * n + 2 * k] = re * scale;
      out[r * 2 * n + 2 * k + 1] = im * scale;
    }
  }
  return out;
}

RefTensor rdft(const RefTensor& x, FftNorm norm) {
  const int64_t n = x.dim(-1), rows = x.numel() / n, bins = n / 2 + 1;
  const double scale = fft_scale(norm, false, n);
  std::vector<int64_t> shape = x.shape;
  shape.back() = bins;
  shape.push_back(2);
  RefTensor out(shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < bins; ++k) {
      double re = 0.0, im = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const auto [c, s] = unit_root(j * k, n, -1.0);
        re += x[r * n + j] * c;
        im += x[r * n + j] * s;
      }
      out[(r * bins + k) * 2] = re * scale;
      out[(r * bins + k) * 2 + 1] = im * scale;
    }
  return out;
}

RefTensor irdft(const RefTensor& x, int64_t n, FftNorm norm) {
  const int64_t bins = x.dim(-2), rows = x.numel() / (2 * bins);
  const double scale = fft_scale(norm, true, n);
  std::vector<int64_t> shape(x.shape.begin(), x.shape.end() - 1);
  shape.back() = n;
  RefTensor out(shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* X = &x.v[static_cast<size_t>(r * 2 * bins)];
    for (int64_t j = 0; j < n; ++j) {
      double acc = X[0];
      for (int64_t k = 1; 2 * k < n; ++k) {
        const auto [c, s] = unit_root(j * k, n, 1.0);
        acc += 2.0 * (X[2 * k] * c - X[2 * k + 1] * s);
      }
      if (n % 2 == 0) acc += X[n] * (j % 2 ? -1.0 : 1.0);  // Re X_{n/2}
      out[r * n + j] = acc * scale;
    }
  }
  return out;
}

RefTensor gaussian_splat(const std::vector<const RefTensor*>& in, const SplatAttrs& a) {
  const RefTensor &means = *in[0], &scales = *in[1], &quats = *in[2], &opac = *in[3], &colors = *in[4],
                  &view = *in[5], &intr = *in[6], &bg = *in[7];
  const int64_t n = means.dim(0);
  const double fx = intr[0], fy = intr[1], cx = intr[2], cy = intr[3];
  struct G {
    double depth, mx, my, inv[3], o, c[3];
    int64_t index;
  };
  std::vector<G> gs;
  for (int64_t i = 0; i < n; ++i) {
    double cam[3];
    for (int r = 0; r < 3; ++r) {
      cam[r] = view[r * 4 + 3];
      for (int k = 0; k < 3; ++k) cam[r] += view[r * 4 + k] * means[i * 3 + k];
    }
    if (!(cam[2] > a.near_plane)) continue;
    double q[4], qn = 0;
    for (int k = 0; k < 4; ++k) qn += quats[i * 4 + k] * quats[i * 4 + k];
    for (int k = 0; k < 4; ++k) q[k] = quats[i * 4 + k] / std::sqrt(qn);
    const double w = q[0], x = q[1], y = q[2], z = q[3];
    // Rows of the rotation matrix, then Σ = Σ_k s_k² r_k r_kᵀ over its columns r_k.
    const double rot[3][3] = {{1 - 2 * y * y - 2 * z * z, 2 * x * y - 2 * w * z, 2 * x * z + 2 * w * y},
                              {2 * x * y + 2 * w * z, 1 - 2 * x * x - 2 * z * z, 2 * y * z - 2 * w * x},
                              {2 * x * z - 2 * w * y, 2 * y * z + 2 * w * x, 1 - 2 * x * x - 2 * y * y}};
    double sigma[3][3] = {};
    for (int k = 0; k < 3; ++k) {
      const double s2 = scales[i * 3 + k] * scales[i * 3 + k];
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) sigma[r][c] += s2 * rot[r][k] * rot[c][k];
    }
    // Camera space: V Σ Vᵀ with V the view's rotation.
    double vs[3][3] = {}, sc[3][3] = {};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c)
        for (int k = 0; k < 3; ++k) vs[r][c] += view[r * 4 + k] * sigma[k][c];
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c)
        for (int k = 0; k < 3; ++k) sc[r][c] += vs[r][k] * view[c * 4 + k];
    const double u = std::clamp(cam[0] / cam[2], -cx / fx - 0.15 * a.width / fx, (a.width - cx) / fx + 0.15 * a.width / fx);
    const double v = std::clamp(cam[1] / cam[2], -cy / fy - 0.15 * a.height / fy, (a.height - cy) / fy + 0.15 * a.height / fy);
    const double jac[2][3] = {{fx / cam[2], 0, -fx * u / cam[2]}, {0, fy / cam[2], -fy * v / cam[2]}};
    double cov[2][2] = {};
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c)
        for (int k = 0; k < 3; ++k)
          for (int l = 0; l < 3; ++l) cov[r][c] += jac[r][k] * sc[k][l] * jac[c][l];
    cov[0][0] += a.eps2d;
    cov[1][1] += a.eps2d;
    const double det = cov[0][0] * cov[1][1] - cov[0][1] * cov[1][0];
    if (!(det > 0)) continue;
    gs.push_back({cam[2], fx * cam[0] / cam[2] + cx, fy * cam[1] / cam[2] + cy,
                  {cov[1][1] / det, -cov[0][1] / det, cov[0][0] / det}, opac[i],
                  {colors[i * 3], colors[i * 3 + 1], colors[i * 3 + 2]}, i});
  }
  std::sort(gs.begin(), gs.end(), [](const G& l, const G& r) { return l.depth != r.depth ? l.depth < r.depth : l.index < r.index; });
  RefTensor out({a.height, a.width, 3});
  for (int64_t py = 0; py < a.height; ++py)
    for (int64_t px = 0; px < a.width; ++px) {
      double T = 1, rgb[3] = {0, 0, 0};
      for (const G& g : gs) {
        const double dx = px + 0.5 - g.mx, dy = py + 0.5 - g.my;
        const double e = -0.5 * (g.inv[0] * dx * dx + 2 * g.inv[1] * dx * dy + g.inv[2] * dy * dy);
        if (e > 0) continue;
        const double alpha = std::min(0.99, g.o * std::exp(e));
        if (alpha < 1.0 / 255.0) continue;
        if (T * (1 - alpha) < 1e-4) break;
        for (int k = 0; k < 3; ++k) rgb[k] += T * alpha * g.c[k];
        T *= 1 - alpha;
      }
      for (int k = 0; k < 3; ++k) out[(py * a.width + px) * 3 + k] = rgb[k] + T * bg[k];
    }
  return out;
}

}  // namespace ref
}  // namespace rlx::test
