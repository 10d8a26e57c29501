// Elementwise CPU kernels: Unary, Binary, Compare, Where, Cast.
//
// Numerics (the reference the other backends are tested against):
// - f16/bf16 storage computes in f32 (staged by KernelArgs); f64 computes in double.
// - Binary Max/Min propagate NaN. Compare is IEEE: NaN is unequal to
//   everything (Ne is true, every ordered compare false).
// - Integer Add/Sub/Mul wrap (two's complement). Div truncates toward zero;
//   x / 0 is defined as 0 and INT_MIN / -1 wraps to INT_MIN, so no input traps.
// - Cast: float → int truncates toward zero and saturates to the target range,
//   NaN → 0; int → narrower int saturates too; → bool is x != 0 (NaN → true);
//   bool → 0/1. Narrowing float conversions round to nearest even once: an f64
//   source goes through a round-to-odd f32, so f64 → f16 is not double-rounded.
// Broadcasting uses StridedPlan (kernels/strided.h): rows of the innermost
// merged dim, each operand read with stride 1 or 0.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/vmath.h"
#include "rlx/backends/cpu/kernels/strided.h"
#include "rlx/core/half.h"

namespace rlx::cpu {
namespace {

template <auto V> using Const = std::integral_constant<decltype(V), V>;

// ---------------------------------------------------------------- Unary

template <typename C>
C sigmoid(C x) {
  // exp of a non-positive argument only, so neither branch overflows.
  if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
  const C e = std::exp(x);
  return e / (C(1) + e);
}

template <UnaryFn F, typename C>
C unary_op(C x) {
  constexpr bool f32 = std::is_same_v<C, float>;
  if constexpr (F == UnaryFn::GeluErf) {
    if constexpr (f32) return gelu_erf(x);
    else return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440));
  } else if constexpr (F == UnaryFn::GeluTanh) {
    if constexpr (f32) return gelu_tanh_fast(x);
    else return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
  } else if constexpr (F == UnaryFn::Silu) {
    return x * sigmoid(x);
  } else if constexpr (F == UnaryFn::Relu) {
    return x < C(0) ? C(0) : x;  // NaN passes through
  } else if constexpr (F == UnaryFn::Sigmoid) {
    return sigmoid(x);
  } else if constexpr (F == UnaryFn::Tanh) {
    return std::tanh(x);
  } else if constexpr (F == UnaryFn::Exp) {
    return std::exp(x);
  } else if constexpr (F == UnaryFn::Log) {
    return std::log(x);
  } else if constexpr (F == UnaryFn::Sqrt) {
    return std::sqrt(x);
  } else if constexpr (F == UnaryFn::Rsqrt) {
    return C(1) / std::sqrt(x);
  } else if constexpr (F == UnaryFn::Neg) {
    return -x;
  } else if constexpr (F == UnaryFn::Abs) {
    return std::fabs(x);
  } else if constexpr (F == UnaryFn::Sin) {
    return std::sin(x);
  } else {
    static_assert(F == UnaryFn::Cos);
    return std::cos(x);
  }
}

template <typename F>
void visit_unary(UnaryFn fn, F&& f) {
  switch (fn) {
    case UnaryFn::GeluErf: return f(Const<UnaryFn::GeluErf>{});
    case UnaryFn::GeluTanh: return f(Const<UnaryFn::GeluTanh>{});
    case UnaryFn::Silu: return f(Const<UnaryFn::Silu>{});
    case UnaryFn::Relu: return f(Const<UnaryFn::Relu>{});
    case UnaryFn::Sigmoid: return f(Const<UnaryFn::Sigmoid>{});
    case UnaryFn::Tanh: return f(Const<UnaryFn::Tanh>{});
    case UnaryFn::Exp: return f(Const<UnaryFn::Exp>{});
    case UnaryFn::Log: return f(Const<UnaryFn::Log>{});
    case UnaryFn::Sqrt: return f(Const<UnaryFn::Sqrt>{});
    case UnaryFn::Rsqrt: return f(Const<UnaryFn::Rsqrt>{});
    case UnaryFn::Neg: return f(Const<UnaryFn::Neg>{});
    case UnaryFn::Abs: return f(Const<UnaryFn::Abs>{});
    case UnaryFn::Sin: return f(Const<UnaryFn::Sin>{});
    case UnaryFn::Cos: return f(Const<UnaryFn::Cos>{});
  }
  throw Unsupported(str("cpu: unknown unary fn ", static_cast<int>(fn)));
}

template <typename C>
void unary_kernel(KernelArgs& a) {
  const C* x = a.in_as<C>(0);
  C* y = a.out_as<C>();
  const int64_t n = a.out_numel();
  visit_unary(a.attrs<UnaryAttrs>().fn, [&](auto fn) {
    a.pool.parallel_for(n, kGrainElems / 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = unary_op<decltype(fn)::value>(x[i]);
    });
  });
}

// ---------------------------------------------------------------- Binary

template <BinaryFn F, typename T>
T binary_op(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if constexpr (F == BinaryFn::Add) return a + b;
    else if constexpr (F == BinaryFn::Sub) return a - b;
    else if constexpr (F == BinaryFn::Mul) return a * b;
    else if constexpr (F == BinaryFn::Div) return a / b;
    else if constexpr (F == BinaryFn::Max) return (a > b || a != a) ? a : b;  // NaN wins
    else if constexpr (F == BinaryFn::Min) return (a < b || a != a) ? a : b;
    else return std::pow(a, b);
  } else {
    // Wrapping arithmetic in an unsigned type at least as wide as int (so
    // small types do not promote to signed int and overflow).
    using W = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;
    if constexpr (F == BinaryFn::Add) return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
    else if constexpr (F == BinaryFn::Sub) return static_cast<T>(static_cast<W>(a) - static_cast<W>(b));
    else if constexpr (F == BinaryFn::Mul) return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
    else if constexpr (F == BinaryFn::Div) {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return static_cast<T>(W(0) - static_cast<W>(a));
      return static_cast<T>(a / b);
    } else if constexpr (F == BinaryFn::Max) return a > b ? a : b;
    else if constexpr (F == BinaryFn::Min) return a < b ? a : b;
    else return T(0);  // Pow on integers is rejected before the loop
  }
}

template <typename F>
void visit_binary(BinaryFn fn, F&& f) {
  switch (fn) {
    case BinaryFn::Add: return f(Const<BinaryFn::Add>{});
    case BinaryFn::Sub: return f(Const<BinaryFn::Sub>{});
    case BinaryFn::Mul: return f(Const<BinaryFn::Mul>{});
    case BinaryFn::Div: return f(Const<BinaryFn::Div>{});
    case BinaryFn::Max: return f(Const<BinaryFn::Max>{});
    case BinaryFn::Min: return f(Const<BinaryFn::Min>{});
    case BinaryFn::Pow: return f(Const<BinaryFn::Pow>{});
  }
  throw Unsupported(str("cpu: unknown binary fn ", static_cast<int>(fn)));
}

// One row of a broadcast binary op; each operand stride is 1 or 0.
template <typename T, typename O, typename Op>
void binary_row(const T* x, int64_t sx, const T* y, int64_t sy, O* o, int64_t n, Op op) {
  if (sx && sy) {
    for (int64_t j = 0; j < n; ++j) o[j] = op(x[j], y[j]);
  } else if (sx) {
    const T v = *y;
    for (int64_t j = 0; j < n; ++j) o[j] = op(x[j], v);
  } else if (sy) {
    const T v = *x;
    for (int64_t j = 0; j < n; ++j) o[j] = op(v, y[j]);
  } else {
    const O v = op(*x, *y);
    for (int64_t j = 0; j < n; ++j) o[j] = v;
  }
}

StridedPlan<2> binary_plan(const KernelArgs& a) {
  return plan_broadcast<2>(a.out_dims(), {&a.in_dims(0), &a.in_dims(1)});
}

template <typename T>
void binary_kernel(KernelArgs& a) {
  const BinaryFn fn = a.attrs<BinaryAttrs>().fn;
  if (!std::is_floating_point_v<T> && fn == BinaryFn::Pow)
    throw Unsupported(str(a.where(), ": pow is only defined for float types"));
  const T* x = a.in_as<T>(0);
  const T* y = a.in_as<T>(1);
  T* o = a.out_as<T>();
  const auto plan = binary_plan(a);
  const auto s = plan.inner_strides();
  visit_binary(fn, [&](auto f) {
    auto op = [](T p, T q) { return binary_op<decltype(f)::value, T>(p, q); };
    parallel_rows(a.pool, plan, [&](int64_t oo, const std::array<int64_t, 2>& off) {
      binary_row(x + off[0], s[0], y + off[1], s[1], o + oo, plan.inner(), op);
    });
  });
}

// ---------------------------------------------------------------- Compare

template <CompareFn F, typename T>
uint8_t compare_op(T a, T b) {
  if constexpr (F == CompareFn::Eq) return a == b;
  else if constexpr (F == CompareFn::Ne) return a != b;
  else if constexpr (F == CompareFn::Lt) return a < b;
  else if constexpr (F == CompareFn::Le) return a <= b;
  else if constexpr (F == CompareFn::Gt) return a > b;
  else return a >= b;
}

template <typename F>
void visit_compare(CompareFn fn, F&& f) {
  switch (fn) {
    case CompareFn::Eq: return f(Const<CompareFn::Eq>{});
    case CompareFn::Ne: return f(Const<CompareFn::Ne>{});
    case CompareFn::Lt: return f(Const<CompareFn::Lt>{});
    case CompareFn::Le: return f(Const<CompareFn::Le>{});
    case CompareFn::Gt: return f(Const<CompareFn::Gt>{});
    case CompareFn::Ge: return f(Const<CompareFn::Ge>{});
  }
  throw Unsupported(str("cpu: unknown compare fn ", static_cast<int>(fn)));
}

// T: float (f32/f16/bf16 via f32, exact), double, or the integer storage type.
template <typename T>
void compare_kernel(KernelArgs& a) {
  const T* x = a.in_as<T>(0);
  const T* y = a.in_as<T>(1);
  auto* o = a.out<uint8_t>();
  const auto plan = binary_plan(a);
  const auto s = plan.inner_strides();
  visit_compare(a.attrs<CompareAttrs>().fn, [&](auto f) {
    auto op = [](T p, T q) { return compare_op<decltype(f)::value, T>(p, q); };
    parallel_rows(a.pool, plan, [&](int64_t oo, const std::array<int64_t, 2>& off) {
      binary_row(x + off[0], s[0], y + off[1], s[1], o + oo, plan.inner(), op);
    });
  });
}

// ---------------------------------------------------------------- Where

void where_kernel(KernelArgs& a) {
  const auto plan = plan_broadcast<3>(a.out_dims(), {&a.in_dims(0), &a.in_dims(1), &a.in_dims(2)});
  const auto s = plan.inner_strides();
  const auto* c = a.in<uint8_t>(0);
  with_elem_size(dtype_size(a.out_dtype()), [&](auto tag) {
    using E = typename decltype(tag)::type;
    const E* x = a.in<E>(1);
    const E* y = a.in<E>(2);
    E* o = a.out<E>();
    parallel_rows(a.pool, plan, [&](int64_t oo, const std::array<int64_t, 3>& off) {
      const uint8_t* cr = c + off[0];
      const E* xr = x + off[1];
      const E* yr = y + off[2];
      E* orow = o + oo;
      for (int64_t j = 0; j < plan.inner(); ++j) orow[j] = cr[j * s[0]] ? xr[j * s[1]] : yr[j * s[2]];
    });
  });
}

// ---------------------------------------------------------------- Cast

constexpr DType kCastDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,     DType::U8,
                                 DType::I16, DType::I32, DType::I64,  DType::Bool, DType::F8E4M3, DType::F8E5M2};

template <DType D> struct Storage;
template <> struct Storage<DType::F32> { using type = float; };
template <> struct Storage<DType::F16> { using type = uint16_t; };
template <> struct Storage<DType::BF16> { using type = uint16_t; };
template <> struct Storage<DType::F64> { using type = double; };
template <> struct Storage<DType::I8> { using type = int8_t; };
template <> struct Storage<DType::U8> { using type = uint8_t; };
template <> struct Storage<DType::I16> { using type = int16_t; };
template <> struct Storage<DType::I32> { using type = int32_t; };
template <> struct Storage<DType::I64> { using type = int64_t; };
template <> struct Storage<DType::Bool> { using type = uint8_t; };
template <> struct Storage<DType::F8E4M3> { using type = uint8_t; };
template <> struct Storage<DType::F8E5M2> { using type = uint8_t; };
template <DType D> using storage_t = typename Storage<D>::type;

constexpr bool is_int_like(DType d) {
  return d == DType::I8 || d == DType::U8 || d == DType::I16 || d == DType::I32 || d == DType::I64 ||
         d == DType::Bool;
}

template <typename F>
void visit_cast_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(Const<DType::F32>{});
    case DType::F16: return f(Const<DType::F16>{});
    case DType::BF16: return f(Const<DType::BF16>{});
    case DType::F64: return f(Const<DType::F64>{});
    case DType::I8: return f(Const<DType::I8>{});
    case DType::U8: return f(Const<DType::U8>{});
    case DType::I16: return f(Const<DType::I16>{});
    case DType::I32: return f(Const<DType::I32>{});
    case DType::I64: return f(Const<DType::I64>{});
    case DType::Bool: return f(Const<DType::Bool>{});
    case DType::F8E4M3: return f(Const<DType::F8E4M3>{});
    case DType::F8E5M2: return f(Const<DType::F8E5M2>{});
    default: break;
  }
  throw Unsupported(str("cpu: cast does not handle ", t));
}

// Float sources load as double (exact), integer and bool sources as int64.
template <DType S>
auto cast_load(storage_t<S> v) {
  if constexpr (S == DType::F16) return static_cast<double>(f16_to_f32(v));
  else if constexpr (S == DType::BF16) return static_cast<double>(bf16_to_f32(v));
  else if constexpr (S == DType::F8E4M3) return static_cast<double>(fp8_e4m3_to_f32(v));
  else if constexpr (S == DType::F8E5M2) return static_cast<double>(fp8_e5m2_to_f32(v));
  else if constexpr (S == DType::Bool) return static_cast<int64_t>(v != 0);
  else if constexpr (is_int_like(S)) return static_cast<int64_t>(v);
  else return static_cast<double>(v);
}

// Nearest f32 toward zero with the last mantissa bit forced to 1 when d is
// not exact in f32. Rounding that to a format with <= 22 mantissa bits gives
// the same result as rounding d directly (no double-rounding error).
float round_to_odd_f32(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(f) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return bits_f32(f32_bits(f) | 1u);
}

template <typename T>
T saturate_int(double v) {
  if (v != v) return T(0);
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v <= lo) return std::numeric_limits<T>::min();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);  // truncates toward zero
}

template <typename T>
T saturate_int(int64_t v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    return v;
  } else {
    constexpr auto lo = static_cast<int64_t>(std::numeric_limits<T>::min());
    constexpr auto hi = static_cast<int64_t>(std::numeric_limits<T>::max());
    return static_cast<T>(v < lo ? lo : v > hi ? hi : v);
  }
}

// V is double (float source) or int64 (integer/bool source).
template <DType D, typename V>
storage_t<D> cast_store(V v) {
  if constexpr (D == DType::Bool) {
    return v != V(0);
  } else if constexpr (is_int_like(D)) {
    return saturate_int<storage_t<D>>(v);
  } else {
    const double d = static_cast<double>(v);  // int64 → double rounds once (innocuous for every target)
    if constexpr (D == DType::F64) return d;
    else if constexpr (D == DType::F32) return static_cast<float>(d);
    else if constexpr (D == DType::F16) return f32_to_f16(round_to_odd_f32(d));
    else if constexpr (D == DType::BF16) return f32_to_bf16(round_to_odd_f32(d));
    else if constexpr (D == DType::F8E4M3) return f32_to_fp8_e4m3(round_to_odd_f32(d));
    else return f32_to_fp8_e5m2(round_to_odd_f32(d));
  }
}

void cast_kernel(KernelArgs& a) {
  const DType from = a.in_dtype(0), to = a.out_dtype();
  const int64_t n = a.out_numel();
  if (from == to) {
    if (a.in_raw(0) != a.out_raw() && n > 0)
      std::memcpy(a.out_raw(), a.in_raw(0), static_cast<size_t>(dtype_bytes(to, n)));
    return;
  }
  visit_cast_dtype(from, [&](auto s) {
    visit_cast_dtype(to, [&](auto d) {
      constexpr DType S = decltype(s)::value, D = decltype(d)::value;
      const auto* x = a.in<storage_t<S>>(0);
      auto* y = a.out<storage_t<D>>();
      a.pool.parallel_for(n, kGrainElems, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = cast_store<D>(cast_load<S>(x[i]));
      });
    });
  });
}

}  // namespace

void register_elementwise_kernels() {
  register_cpu_float_kernel(OpKind::Unary, {DType::F32, DType::F32}, unary_kernel<float>, "cpu unary");
  register_cpu_kernel(OpKind::Unary, {DType::F64, DType::F64}, unary_kernel<double>, "cpu unary [f64]");

  register_cpu_float_kernel(OpKind::Binary, {DType::F32, DType::F32, DType::F32}, binary_kernel<float>,
                            "cpu binary (broadcast)");
  register_cpu_kernel(OpKind::Binary, {DType::F64, DType::F64, DType::F64}, binary_kernel<double>,
                      "cpu binary (broadcast) [f64]");
  auto int_binary = [](DType t, CpuKernel k) {
    register_cpu_kernel(OpKind::Binary, {t, t, t}, std::move(k), str("cpu binary (broadcast) [", dtype_name(t), "]"));
  };
  int_binary(DType::I8, binary_kernel<int8_t>);
  int_binary(DType::U8, binary_kernel<uint8_t>);
  int_binary(DType::I16, binary_kernel<int16_t>);
  int_binary(DType::I32, binary_kernel<int32_t>);
  int_binary(DType::I64, binary_kernel<int64_t>);

  register_cpu_float_kernel(OpKind::Compare, {DType::F32, DType::F32, DType::Bool}, compare_kernel<float>,
                            "cpu compare (broadcast)");
  auto cmp = [](DType t, CpuKernel k) {
    register_cpu_kernel(OpKind::Compare, {t, t, DType::Bool}, std::move(k),
                        str("cpu compare (broadcast) [", dtype_name(t), "]"));
  };
  cmp(DType::F64, compare_kernel<double>);
  cmp(DType::I8, compare_kernel<int8_t>);
  cmp(DType::U8, compare_kernel<uint8_t>);
  cmp(DType::I16, compare_kernel<int16_t>);
  cmp(DType::I32, compare_kernel<int32_t>);
  cmp(DType::I64, compare_kernel<int64_t>);
  cmp(DType::Bool, compare_kernel<uint8_t>);

  for (DType t : kPlainDTypes)
    register_cpu_kernel(OpKind::Where, {DType::Bool, t, t, t}, where_kernel,
                        str("cpu where (broadcast) [", dtype_name(t), "]"));

  for (DType from : kCastDTypes)
    for (DType to : kCastDTypes)
      register_cpu_kernel(OpKind::Cast, {from, to}, cast_kernel,
                          str("cpu cast [", dtype_name(from), "->", dtype_name(to), "]"));
}

}  // namespace rlx::cpu
