// Reduction CPU kernels: Softmax and Reduce (Sum, Mean, Max, Min).
//
// Softmax (any axis): y = exp(x − max) / Σ exp(x − max), the sum in double.
// A row whose max is −inf (fully masked) comes out all zeros; a NaN or +inf in
// a row makes that row NaN.
//
// Reduce over any set of axes (keepdims or not):
// - floats (f16/bf16 computed in f32, f64 in double): Sum and Mean accumulate
//   in double; Max and Min propagate NaN.
// - integers: Sum wraps like the storage type (accumulated in 64 bits); Mean
//   is the 64-bit sum divided by the count, truncated toward zero.
// - an empty reduction (a reduced dim of size 0): Sum = 0, Mean = NaN for
//   floats and 0 for integers; Max/Min throw InvalidArgument.
//
// Loop plan: dims of size 1 are dropped and adjacent dims that are both kept
// or both reduced are merged. When the innermost merged dim is reduced each
// output sums contiguous rows ("row mode"); when it is kept, blocks of up to
// 64 adjacent outputs accumulate contiguous vectors ("column mode"). Either
// way every read is a contiguous run.
#include <cmath>
#include <limits>
#include <type_traits>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/strided.h"

namespace rlx::cpu {
namespace {

template <auto V> using Const = std::integral_constant<decltype(V), V>;
constexpr int64_t kLanes = 64;


// ---------------------------------------------------------------- Softmax

// Softmax of n values at x[0], x[s], ... into y (same stride). T is float or double.
template <typename T>
void softmax_strided(const T* x, T* y, int64_t n, int64_t s) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const T v = x[j * s];
    if (v > m || v != v) m = v;  // a NaN sticks
  }
  if (m == -std::numeric_limits<T>::infinity()) {
    for (int64_t j = 0; j < n; ++j) y[j * s] = T(0);
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const T e = std::exp(x[j * s] - m);
    y[j * s] = e;
    sum += e;
  }
  const double inv = 1.0 / sum;
  for (int64_t j = 0; j < n; ++j) y[j * s] = static_cast<T>(static_cast<double>(y[j * s]) * inv);
}

// softmax_strided on `lanes` (<= kLanes) adjacent columns at once.
template <typename T>
void softmax_columns(const T* x, T* y, int64_t n, int64_t s, int64_t lanes) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T m[kLanes];
  double sum[kLanes];
  for (int64_t c = 0; c < lanes; ++c) {
    m[c] = kNegInf;
    sum[c] = 0.0;
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < lanes; ++c) {
      const T v = x[j * s + c];
      if (v > m[c] || v != v) m[c] = v;
    }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < lanes; ++c) {
      const T e = m[c] == kNegInf ? T(0) : std::exp(x[j * s + c] - m[c]);
      y[j * s + c] = e;
      sum[c] += e;
    }
  for (int64_t c = 0; c < lanes; ++c) sum[c] = m[c] == kNegInf ? 0.0 : 1.0 / sum[c];
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < lanes; ++c) y[j * s + c] = static_cast<T>(static_cast<double>(y[j * s + c]) * sum[c]);
}

template <typename T>
void softmax_kernel(KernelArgs& a) {
  const auto& d = a.in_dims(0);
  const int axis = a.attrs<AxisAttrs>().axis;
  const auto ax = static_cast<size_t>(axis < 0 ? axis + static_cast<int>(d.size()) : axis);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < ax; ++i) outer *= d[i];
  for (size_t i = ax + 1; i < d.size(); ++i) inner *= d[i];
  const int64_t len = d[ax];
  if (outer * inner * len == 0) return;
  const T* x = a.in_as<T>(0);
  T* y = a.out_as<T>();
  if (inner == 1) {
    a.pool.parallel_for(outer, std::max<int64_t>(1, kGrainElems / (4 * len)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) softmax_strided(x + o * len, y + o * len, len, 1);
    });
    return;
  }
  // Strided axis: blocks of up to 64 adjacent columns go through the three
  // passes together, so every read is a contiguous run.
  const int64_t blocks = (inner + kLanes - 1) / kLanes;
  const int64_t grain = std::max<int64_t>(1, kGrainElems / (4 * len * kLanes));
  a.pool.parallel_for(outer * blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / blocks, c0 = (t % blocks) * kLanes, lanes = std::min(kLanes, inner - c0);
      softmax_columns(x + o * len * inner + c0, y + o * len * inner + c0, len, inner, lanes);
    }
  });
}

// ---------------------------------------------------------------- Reduce

template <ReduceFn F, typename T>
struct Reducer {
  static constexpr bool kFloat = std::is_floating_point_v<T>;
  static constexpr bool kSum = F == ReduceFn::Sum || F == ReduceFn::Mean;
  using Acc = std::conditional_t<kSum, std::conditional_t<kFloat, double, uint64_t>, T>;

  static Acc init() {
    if constexpr (kSum) return Acc(0);
    else if constexpr (kFloat) return F == ReduceFn::Max ? -std::numeric_limits<T>::infinity()
                                                          : std::numeric_limits<T>::infinity();
    else return F == ReduceFn::Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
  static Acc add(Acc acc, T v) {
    if constexpr (kSum && kFloat) return acc + static_cast<double>(v);
    else if constexpr (kSum) return acc + static_cast<uint64_t>(static_cast<int64_t>(v));  // wraps
    else if constexpr (kFloat && F == ReduceFn::Max) return (v > acc || v != v) ? v : acc;  // NaN sticks
    else if constexpr (kFloat) return (v < acc || v != v) ? v : acc;
    else if constexpr (F == ReduceFn::Max) return v > acc ? v : acc;
    else return v < acc ? v : acc;
  }
  static T finish(Acc acc, int64_t count) {
    if constexpr (F == ReduceFn::Sum) return static_cast<T>(acc);
    else if constexpr (F == ReduceFn::Mean && kFloat) return static_cast<T>(acc / static_cast<double>(count));
    else if constexpr (F == ReduceFn::Mean) return static_cast<T>(static_cast<int64_t>(acc) / count);
    else return acc;
  }
};

struct ReducePlan {
  bool row_mode = true;  // innermost merged dim reduced (else kept)
  int64_t inner = 1;     // size of the innermost merged dim (stride 1)
  std::vector<int64_t> kept_dims, kept_strides;  // outer kept dims (column mode: without the inner one)
  std::vector<int64_t> red_dims, red_strides;    // outer reduced dims (row mode: without the inner one)
  int64_t count = 1;     // elements reduced into each output
};

ReducePlan plan_reduce(const std::vector<int64_t>& d, const std::vector<bool>& reduced) {
  std::vector<int64_t> dims;
  std::vector<bool> red;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == 1) continue;
    if (!red.empty() && red.back() == reduced[i]) dims.back() *= d[i];
    else {
      dims.push_back(d[i]);
      red.push_back(reduced[i]);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    red.push_back(true);
  }
  ReducePlan p;
  p.row_mode = red.back();
  p.inner = dims.back();
  int64_t stride = dims.back();
  if (p.row_mode) p.count = dims.back();
  for (size_t i = dims.size() - 1; i-- > 0;) {
    if (red[i]) {
      p.red_dims.insert(p.red_dims.begin(), dims[i]);
      p.red_strides.insert(p.red_strides.begin(), stride);
      p.count *= dims[i];
    } else {
      p.kept_dims.insert(p.kept_dims.begin(), dims[i]);
      p.kept_strides.insert(p.kept_strides.begin(), stride);
    }
    stride *= dims[i];
  }
  RLX_CHECK_AS(Unsupported, p.red_dims.size() <= kMaxStridedRank, "cpu: reduce over too many separate axis groups");
  return p;
}

// Offset of the kept-dims position `o` (row-major over kept_dims).
int64_t kept_offset(const ReducePlan& p, int64_t o) {
  int64_t off = 0;
  for (size_t i = p.kept_dims.size(); i-- > 0;) {
    off += (o % p.kept_dims[i]) * p.kept_strides[i];
    o /= p.kept_dims[i];
  }
  return off;
}

// Calls f(offset) for every position of the outer reduced dims.
template <typename F>
void for_each_reduced(const ReducePlan& p, F&& f) {
  const size_t r = p.red_dims.size();
  int64_t idx[kMaxStridedRank] = {};
  int64_t off = 0;
  for (;;) {
    f(off);
    size_t i = r;
    for (; i-- > 0;) {
      off += p.red_strides[i];
      if (++idx[i] < p.red_dims[i]) break;
      off -= p.red_strides[i] * p.red_dims[i];
      idx[i] = 0;
    }
    if (i == static_cast<size_t>(-1)) return;  // every index wrapped: done
  }
}

template <ReduceFn F, typename T>
void reduce_loop(KernelArgs& a, const ReducePlan& p, const T* x, T* y) {
  using R = Reducer<F, T>;
  const int64_t n_out = a.out_numel();
  const int64_t grain_outputs = std::max<int64_t>(1, kGrainElems / p.count);
  if (p.row_mode) {
    a.pool.parallel_for(n_out, grain_outputs, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* base = x + kept_offset(p, o);
        typename R::Acc acc = R::init();
        for_each_reduced(p, [&](int64_t off) {
          const T* row = base + off;
          for (int64_t j = 0; j < p.inner; ++j) acc = R::add(acc, row[j]);
        });
        y[o] = R::finish(acc, p.count);
      }
    });
    return;
  }
  const int64_t blocks = (p.inner + kLanes - 1) / kLanes;
  const int64_t groups = n_out / p.inner;
  a.pool.parallel_for(groups * blocks, std::max<int64_t>(1, grain_outputs / kLanes), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t g = t / blocks, c0 = (t % blocks) * kLanes, lanes = std::min(kLanes, p.inner - c0);
      const T* base = x + kept_offset(p, g) + c0;
      typename R::Acc acc[kLanes];
      for (int64_t j = 0; j < lanes; ++j) acc[j] = R::init();
      for_each_reduced(p, [&](int64_t off) {
        const T* v = base + off;
        for (int64_t j = 0; j < lanes; ++j) acc[j] = R::add(acc[j], v[j]);
      });
      for (int64_t j = 0; j < lanes; ++j) y[g * p.inner + c0 + j] = R::finish(acc[j], p.count);
    }
  });
}

// T: float (f32/f16/bf16 via f32), double, int32_t or int64_t.
template <typename T>
void reduce_kernel(KernelArgs& a) {
  const auto& at = a.attrs<ReduceAttrs>();
  const auto& d = a.in_dims(0);
  std::vector<bool> reduced(d.size(), false);
  int64_t count = 1;
  for (int ax : at.axes) {
    const auto k = static_cast<size_t>(ax < 0 ? ax + static_cast<int>(d.size()) : ax);
    reduced[k] = true;
    count *= d[k];
  }
  const int64_t n_out = a.out_numel();
  if (n_out == 0) return;
  T* y = a.out_as<T>();
  if (count == 0) {
    if (at.fn == ReduceFn::Max || at.fn == ReduceFn::Min)
      throw InvalidArgument(str(a.where(), ": ", reduce_name(at.fn), " over an empty axis"));
    const T fill = at.fn == ReduceFn::Mean && std::is_floating_point_v<T> ? std::numeric_limits<T>::quiet_NaN() : T(0);
    std::fill(y, y + n_out, fill);
    return;
  }
  const ReducePlan p = plan_reduce(d, reduced);
  const T* x = a.in_as<T>(0);
  switch (at.fn) {
    case ReduceFn::Sum: return reduce_loop<ReduceFn::Sum>(a, p, x, y);
    case ReduceFn::Mean: return reduce_loop<ReduceFn::Mean>(a, p, x, y);
    case ReduceFn::Max: return reduce_loop<ReduceFn::Max>(a, p, x, y);
    case ReduceFn::Min: return reduce_loop<ReduceFn::Min>(a, p, x, y);
  }
  throw Unsupported(str(a.where(), ": unknown reduce fn ", static_cast<int>(at.fn)));
}

}  // namespace

void register_reduce_kernels() {
  register_cpu_float_kernel(OpKind::Softmax, {DType::F32, DType::F32}, softmax_kernel<float>, "cpu softmax");
  register_cpu_kernel(OpKind::Softmax, {DType::F64, DType::F64}, softmax_kernel<double>, "cpu softmax [f64]");
  register_cpu_float_kernel(OpKind::Reduce, {DType::F32, DType::F32}, reduce_kernel<float>, "cpu reduce");
  register_cpu_kernel(OpKind::Reduce, {DType::F64, DType::F64}, reduce_kernel<double>, "cpu reduce [f64]");
  register_cpu_kernel(OpKind::Reduce, {DType::I32, DType::I32}, reduce_kernel<int32_t>, "cpu reduce [i32]");
  register_cpu_kernel(OpKind::Reduce, {DType::I64, DType::I64}, reduce_kernel<int64_t>, "cpu reduce [i64]");
}

}  // namespace rlx::cpu
