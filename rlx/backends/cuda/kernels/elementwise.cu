// Elementwise kernels: unary, binary / compare / where with broadcasting,
// cast, and the fused elementwise chain.
//
// Memory plan. Every kernel is a grid-stride loop over 16-byte vectors of the
// output (V = 16 / sizeof(T) elements per thread-iteration), consecutive
// threads on consecutive vectors, so loads and stores coalesce; a scalar
// variant (V = 1) covers lengths or pointers that do not allow vectors.
//   flat (unary, cast):  n / V vectors + a scalar tail of n % V elements.
//   2-D view (binary, compare, where, chain): the broadcast shape collapsed to
//     [rows, cols]; each operand has a row stride and a column stride of 1
//     (loaded as a vector) or 0 (one scalar broadcast over the vector). This
//     covers equal shapes, bias [C] over [R, C], per-row [R, 1] and scalars.
//   N-D (rank ≤ 6, anything else): one element per iteration, the output
//     index decomposed with 32-bit multiply-shift division (int64 above 2^31).
// Float math is f32 (f64 for f64 storage). The library builds with
// --use_fast_math, so accuracy-sensitive functions call libdevice's
// full-precision routines (__nv_expf, __nv_tanhf, ...) explicitly, and
// division / sqrt use the IEEE round-to-nearest intrinsics, matching the CPU.
#include "rlx/backends/cuda/kernels/elementwise.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <limits>
#include <type_traits>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/activation.cuh"
#include "rlx/backends/cuda/device/fastdiv.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/fp8.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/core/error.h"

extern "C" __device__ float __nv_expf(float);
extern "C" __device__ float __nv_logf(float);
extern "C" __device__ float __nv_tanhf(float);
extern "C" __device__ float __nv_sinf(float);
extern "C" __device__ float __nv_cosf(float);

namespace rlx::cuda {

int64_t StridedShape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

StridedShape make_broadcast(const std::vector<int64_t>& out, const std::vector<int64_t>& a,
                            const std::vector<int64_t>& b, const std::vector<int64_t>* c) {
  const std::vector<int64_t>* ins[3] = {&a, &b, c};
  const int nops = c ? 3 : 2;
  const int r = static_cast<int>(out.size());
  std::vector<int64_t> st[3];
  for (int k = 0; k < nops; ++k) {
    const auto& d = *ins[k];
    const int rk = static_cast<int>(d.size());
    RLX_SHAPE_CHECK(rk <= r, "broadcast: operand of rank ", rk, " exceeds output rank ", r);
    st[k].assign(static_cast<size_t>(r), 0);
    int64_t stride = 1;
    for (int i = r - 1; i >= 0; --i) {
      const int j = i - (r - rk);
      if (j < 0) break;
      RLX_SHAPE_CHECK(d[j] == out[i] || d[j] == 1, "broadcast: operand ", k, " dim ", j, " (", d[j],
                      ") does not broadcast to ", out[i]);
      st[k][i] = d[j] == 1 ? 0 : stride;
      stride *= d[j];
    }
  }
  StridedShape s;
  for (int i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    if (s.rank > 0) {
      bool merge = true;
      for (int k = 0; k < nops; ++k) merge = merge && s.strides[k][s.rank - 1] == st[k][i] * out[i];
      if (merge) {
        s.dims[s.rank - 1] *= out[i];
        for (int k = 0; k < nops; ++k) s.strides[k][s.rank - 1] = st[k][i];
        continue;
      }
    }
    RLX_CHECK_AS(Unsupported, s.rank < kMaxRank, "broadcast: more than ", kMaxRank, " dims after merging");
    s.dims[s.rank] = out[i];
    for (int k = 0; k < nops; ++k) s.strides[k][s.rank] = st[k][i];
    ++s.rank;
  }
  if (s.rank == 0) s.rank = 1, s.dims[0] = 1;
  return s;
}

namespace {

// ------------------------------------------------------------ conversions

using dev::compute_t;
using dev::from_c;
using dev::to_c;

// Bit-exact ports of rlx/core/half.h.
__device__ inline float bits_f32(uint32_t u) { return __uint_as_float(u); }

__device__ inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax < 0x38800000u) return static_cast<uint16_t>(sign | static_cast<uint32_t>(rintf(bits_f32(ax) * 16777216.0f)));
  uint32_t r = ax - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}
__device__ inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
using dev::e4m3_to_f32;
using dev::e5m2_to_f32;
using dev::f32_to_e4m3;
using dev::f32_to_e5m2;
// f64 → f32 rounding to odd: a later RNE to ≤ 22 mantissa bits equals one rounding of d.
__device__ inline float round_to_odd_f32(double d) {
  float f = __double2float_rn(d);
  if (!isfinite(f) || static_cast<double>(f) == d) return f;
  if (fabs(static_cast<double>(f)) > fabs(d)) f = __uint_as_float(__float_as_uint(f) - 1u);  // toward zero
  return __uint_as_float(__float_as_uint(f) | 1u);
}

// ------------------------------------------------------------ math

// Rare, long routines stay out of line so the V-wide unrolled loops stay small.
__device__ __forceinline__ float pow_f32(float a, float b) {
  return static_cast<float>(pow(static_cast<double>(a), static_cast<double>(b)));
}
__device__ __noinline__ float sin_f32(float x) { return __nv_sinf(x); }
__device__ __noinline__ float cos_f32(float x) { return __nv_cosf(x); }

__device__ __forceinline__ float sigmoid_f(float x) { return dev::sigmoid_f32(x); }
__device__ __forceinline__ double sigmoid_f(double x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}

template <typename C>
__device__ __forceinline__ C unary_op(UnaryFn fn, C x) {
  if constexpr (std::is_same_v<C, float>) {
    switch (fn) {
      case UnaryFn::GeluErf: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
      case UnaryFn::GeluTanh: return dev::gelu_tanh_f32(x);
      case UnaryFn::Silu: return x * sigmoid_f(x);
      case UnaryFn::Relu: return x < 0.0f ? 0.0f : x;
      case UnaryFn::Sigmoid: return sigmoid_f(x);
      case UnaryFn::Tanh: return __nv_tanhf(x);
      case UnaryFn::Exp: return __nv_expf(x);
      case UnaryFn::Log: return __nv_logf(x);
      case UnaryFn::Sqrt: return __fsqrt_rn(x);
      case UnaryFn::Rsqrt: return __fdiv_rn(1.0f, __fsqrt_rn(x));
      case UnaryFn::Neg: return -x;
      case UnaryFn::Abs: return fabsf(x);
      case UnaryFn::Sin: return sin_f32(x);
      case UnaryFn::Cos: return cos_f32(x);
    }
  } else {
    switch (fn) {
      case UnaryFn::GeluErf: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
      case UnaryFn::GeluTanh: return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
      case UnaryFn::Silu: return x * sigmoid_f(x);
      case UnaryFn::Relu: return x < 0.0 ? 0.0 : x;
      case UnaryFn::Sigmoid: return sigmoid_f(x);
      case UnaryFn::Tanh: return tanh(x);
      case UnaryFn::Exp: return exp(x);
      case UnaryFn::Log: return log(x);
      case UnaryFn::Sqrt: return sqrt(x);
      case UnaryFn::Rsqrt: return 1.0 / sqrt(x);
      case UnaryFn::Neg: return -x;
      case UnaryFn::Abs: return fabs(x);
      case UnaryFn::Sin: return sin(x);
      case UnaryFn::Cos: return cos(x);
    }
  }
  return x;
}

template <typename C>
__device__ __forceinline__ C binary_op(BinaryFn fn, C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (fn) {
      case BinaryFn::Add: return a + b;
      case BinaryFn::Sub: return a - b;
      case BinaryFn::Mul: return a * b;
      case BinaryFn::Div:
        if constexpr (std::is_same_v<C, float>) return __fdiv_rn(a, b);
        else return a / b;
      case BinaryFn::Max: return (a > b || a != a) ? a : b;  // NaN wins
      case BinaryFn::Min: return (a < b || a != a) ? a : b;
      case BinaryFn::Pow:
        if constexpr (std::is_same_v<C, float>) return pow_f32(a, b);
        else return pow(a, b);
    }
    return a;
  } else {
    using W = std::conditional_t<(sizeof(C) <= 4), uint32_t, uint64_t>;
    switch (fn) {
      case BinaryFn::Add: return static_cast<C>(static_cast<W>(a) + static_cast<W>(b));
      case BinaryFn::Sub: return static_cast<C>(static_cast<W>(a) - static_cast<W>(b));
      case BinaryFn::Mul: return static_cast<C>(static_cast<W>(a) * static_cast<W>(b));
      case BinaryFn::Div:
        if (b == 0) return C(0);
        if constexpr (std::is_signed_v<C>)
          if (b == C(-1)) return static_cast<C>(W(0) - static_cast<W>(a));
        return static_cast<C>(a / b);
      case BinaryFn::Max: return a > b ? a : b;
      case BinaryFn::Min: return a < b ? a : b;
      case BinaryFn::Pow: return C(0);  // rejected by the launcher
    }
    return a;
  }
}

template <typename C>
__device__ __forceinline__ uint8_t compare_op(CompareFn fn, C a, C b) {
  switch (fn) {
    case CompareFn::Eq: return a == b;
    case CompareFn::Ne: return a != b;
    case CompareFn::Lt: return a < b;
    case CompareFn::Le: return a <= b;
    case CompareFn::Gt: return a > b;
    case CompareFn::Ge: return a >= b;
  }
  return 0;
}

// ------------------------------------------------------------ indexing

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

using dev::FastDiv;

inline int grid_for(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return static_cast<int>(b < (int64_t{1} << 20) ? (b > 0 ? b : 1) : (int64_t{1} << 20));
}
inline bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

struct NdParams {
  int rank;
  int64_t dims[kMaxRank];
  FastDiv fdiv[kMaxRank];
  int64_t strides[3][kMaxRank];
  int64_t numel;
  bool small;  // numel < 2^31: 32-bit index math
};

template <int NOPS>
__device__ __forceinline__ void nd_offsets(const NdParams& p, int64_t idx, int64_t (&off)[3]) {
#pragma unroll
  for (int k = 0; k < NOPS; ++k) off[k] = 0;
  if (p.small) {
    uint32_t i = static_cast<uint32_t>(idx);
    for (int d = p.rank - 1; d >= 0; --d) {
      const uint32_t q = p.fdiv[d].div(i), r = i - q * p.fdiv[d].d;
      i = q;
#pragma unroll
      for (int k = 0; k < NOPS; ++k) off[k] += static_cast<int64_t>(r) * p.strides[k][d];
    }
  } else {
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t q = idx / p.dims[d], r = idx - q * p.dims[d];
      idx = q;
#pragma unroll
      for (int k = 0; k < NOPS; ++k) off[k] += r * p.strides[k][d];
    }
  }
}

NdParams make_nd(const StridedShape& s) {
  NdParams p{};
  p.rank = s.rank;
  p.numel = s.numel();
  p.small = p.numel < (int64_t{1} << 31);
  for (int d = 0; d < s.rank; ++d) {
    p.dims[d] = s.dims[d];
    if (p.small) p.fdiv[d] = FastDiv(s.dims[d]);
    for (int k = 0; k < 3; ++k) p.strides[k][d] = s.strides[k][d];
  }
  return p;
}

// [rows, cols] view; operand k at r·rs[k] + c·cs[k].
struct View2 {
  int64_t rows, cols;
  int64_t rs[3], cs[3];
  FastDiv fcv;  // cols / V, valid when rows·cols/V < 2^31
  bool small;
};

template <typename T, int V>
__device__ __forceinline__ void load_op(const T* p, int64_t roff, int64_t c, int64_t cs, T (&o)[V]) {
  if constexpr (V == 1) {
    o[0] = p[roff + c * cs];
  } else if (cs == 0) {
    const T s = p[roff];
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = s;
  } else {
    const Vec<T, V> t = *reinterpret_cast<const Vec<T, V>*>(p + roff + c);
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = t.v[i];
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const T (&o)[V]) {
  Vec<T, V> t;
#pragma unroll
  for (int i = 0; i < V; ++i) t.v[i] = o[i];
  *reinterpret_cast<Vec<T, V>*>(p) = t;
}

__device__ __forceinline__ void row_col(const View2& v, int64_t i, int64_t cv, int64_t& r, int64_t& c) {
  if (v.small) {
    const uint32_t q = v.fcv.div(static_cast<uint32_t>(i));
    r = q;
    c = i - static_cast<int64_t>(q) * cv;
  } else {
    r = i / cv;
    c = i - r * cv;
  }
}

View2 make_view2(const StridedShape& s, int nops, int v) {
  View2 w{};
  w.rows = s.rank == 2 ? s.dims[0] : 1;
  w.cols = s.dims[s.rank - 1];
  for (int k = 0; k < nops; ++k) {
    w.rs[k] = s.rank == 2 ? s.strides[k][0] : 0;
    w.cs[k] = s.strides[k][s.rank - 1];
  }
  w.small = w.rows * (w.cols / v) < (int64_t{1} << 31);
  if (w.small) w.fcv = FastDiv(w.cols / v);
  return w;
}

// Whether operand k of a 2-D view can be read as V-element vectors.
bool vec_ok(const View2& w, int k, const void* p, size_t elem, int v) {
  if (w.cs[k] == 0) return true;
  return w.cs[k] == 1 && w.rs[k] % v == 0 && aligned(p, elem * v);
}

// ------------------------------------------------------------ ops as functors
// Each op names its operand types In0..In2 and output Out, and applies to V lanes.

template <typename T>
struct BinaryF {
  using In0 = T; using In1 = T; using In2 = T; using Out = T;
  static constexpr int N = 2;
  const T* p0; const T* p1; const T* p2; BinaryFn fn;
  template <int V>
  __device__ __forceinline__ void operator()(const T (&a)[V], const T (&b)[V], const T (&)[V], T (&o)[V]) const {
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = from_c<T>(binary_op<compute_t<T>>(fn, to_c(a[i]), to_c(b[i])));
  }
};

template <typename T>
struct CompareF {
  using In0 = T; using In1 = T; using In2 = T; using Out = uint8_t;
  static constexpr int N = 2;
  const T* p0; const T* p1; const T* p2; CompareFn fn;
  template <int V>
  __device__ __forceinline__ void operator()(const T (&a)[V], const T (&b)[V], const T (&)[V], uint8_t (&o)[V]) const {
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = compare_op<compute_t<T>>(fn, to_c(a[i]), to_c(b[i]));
  }
};

template <typename T>
struct WhereF {
  using In0 = uint8_t; using In1 = T; using In2 = T; using Out = T;
  static constexpr int N = 3;
  const uint8_t* p0; const T* p1; const T* p2;
  template <int V>
  __device__ __forceinline__ void operator()(const uint8_t (&c)[V], const T (&a)[V], const T (&b)[V], T (&o)[V]) const {
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = c[i] ? a[i] : b[i];
  }
};

template <class Op, int V>
__global__ void __launch_bounds__(256) ew2d_kernel(Op op, View2 v, typename Op::Out* out) {
  dev::pdl_begin();
  const int64_t cv = v.cols / V, total = v.rows * cv;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r, c;
    row_col(v, i, cv, r, c);
    c *= V;
    typename Op::In0 a[V];
    typename Op::In1 b[V];
    typename Op::In2 e[V];
    load_op<typename Op::In0, V>(op.p0, r * v.rs[0], c, v.cs[0], a);
    load_op<typename Op::In1, V>(op.p1, r * v.rs[1], c, v.cs[1], b);
    if constexpr (Op::N == 3) load_op<typename Op::In2, V>(op.p2, r * v.rs[2], c, v.cs[2], e);
    typename Op::Out o[V];
    op.template operator()<V>(a, b, e, o);
    store_vec<typename Op::Out, V>(out + r * v.cols + c, o);
  }
}

template <class Op>
__global__ void __launch_bounds__(256) ewnd_kernel(Op op, NdParams p, typename Op::Out* out) {
  dev::pdl_begin();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off[3];
    nd_offsets<Op::N>(p, i, off);
    typename Op::In0 a[1] = {op.p0[off[0]]};
    typename Op::In1 b[1] = {op.p1[off[1]]};
    typename Op::In2 e[1];
    if constexpr (Op::N == 3) e[0] = op.p2[off[2]];
    typename Op::Out o[1];
    op.template operator()<1>(a, b, e, o);
    out[i] = o[0];
  }
}

// Picks the 2-D vector, 2-D scalar or N-D kernel for a broadcast op.
template <class Op>
void launch_broadcast(const Op& op, const StridedShape& s, typename Op::Out* out, cudaStream_t stream,
                      const char* name) {
  constexpr size_t kMaxElem = sizeof(typename Op::In1) > sizeof(typename Op::Out) ? sizeof(typename Op::In1)
                                                                                  : sizeof(typename Op::Out);
  constexpr int V = static_cast<int>(16 / kMaxElem);
  const int64_t n = s.numel();
  if (n == 0) return;
  if (s.rank <= 2) {
    const void* ptrs[3] = {op.p0, op.p1, op.p2};
    const size_t sizes[3] = {sizeof(typename Op::In0), sizeof(typename Op::In1), sizeof(typename Op::In2)};
    View2 w = make_view2(s, Op::N, V);
    bool vec = V > 1 && w.cols % V == 0 && aligned(out, sizeof(typename Op::Out) * V);
    for (int k = 0; k < Op::N; ++k) vec = vec && vec_ok(w, k, ptrs[k], sizes[k], V);
    if (vec) {
      ew2d_kernel<Op, V><<<grid_for(n / V, 256), 256, 0, stream>>>(op, w, out);
    } else {
      w = make_view2(s, Op::N, 1);
      ew2d_kernel<Op, 1><<<grid_for(n, 256), 256, 0, stream>>>(op, w, out);
    }
  } else {
    ewnd_kernel<Op><<<grid_for(n, 256), 256, 0, stream>>>(op, make_nd(s), out);
  }
  RLX_CUDA_CHECK_LAUNCH(name);
}

// Runtime dtype → storage type for the broadcast ops.
template <typename F>
void dispatch_storage(DType t, const char* op, F&& f, bool allow_small_int = true, bool allow_bool = false) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::I8: if (allow_small_int) return f(int8_t{}); break;
    case DType::U8: if (allow_small_int) return f(uint8_t{}); break;
    case DType::I16: if (allow_small_int) return f(int16_t{}); break;
    case DType::Bool: if (allow_bool) return f(uint8_t{}); break;
    default: break;
  }
  throw Unsupported(str(op, ": cuda kernel has no ", dtype_name(t), " variant"));
}

// ------------------------------------------------------------ unary

// unary_op, except GELU-erf of 16-bit values (dev::gelu_erf_16bit).
template <typename T>
__device__ __forceinline__ compute_t<T> unary_apply(UnaryFn fn, compute_t<T> x) {
  if constexpr (sizeof(T) == 2) {
    if (fn == UnaryFn::GeluErf) return dev::gelu_erf_16bit<T>(x);
  }
  return unary_op<compute_t<T>>(fn, x);
}

// A UnaryFn known at compile time (kFixed) folds unary_op's switch away: the
// activations that follow GEMMs (GELU erf/tanh, SiLU, ReLU) would otherwise
// pay a per-element dispatch on top of their math. The grid is at most a few
// waves (launch_unary) and each thread takes kUnaryVecs vectors per step,
// loaded before any is computed: with one vector per thread and one thread
// per vector, the FFN's GELU (50M elements) spent its time launching CTAs.
constexpr int kUnaryVecs = 2;

template <typename T, int V, bool kFixed = false, UnaryFn kFn = UnaryFn::Neg>
__global__ void __launch_bounds__(256) unary_kernel(UnaryFn fn, const T* x, T* y, int64_t n) {
  dev::pdl_begin();
  if constexpr (kFixed) fn = kFn;
  constexpr int U = kUnaryVecs;
  const int64_t nv = n / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < nv; i += U * stride) {
    Vec<T, V> a[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u * stride < nv) a[u] = reinterpret_cast<const Vec<T, V>*>(x)[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u * stride >= nv) break;
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = from_c<T>(unary_apply<T>(fn, to_c(a[u].v[j])));
      reinterpret_cast<Vec<T, V>*>(y)[i + u * stride] = o;
    }
  }
  for (int64_t i = nv * V + tid; i < n; i += stride) y[i] = from_c<T>(unary_apply<T>(fn, to_c(x[i])));
}

// ------------------------------------------------------------ cast

// A loaded value: float sources as double (exact), integer and bool sources as int64.
struct CastVal {
  double f;
  int64_t i;
  bool is_int;
};

__device__ __forceinline__ CastVal cast_load(DType t, const void* p, int64_t k) {
  switch (t) {
    case DType::F32: return {static_cast<const float*>(p)[k], 0, false};
    case DType::F16: return {__half2float(static_cast<const __half*>(p)[k]), 0, false};
    case DType::BF16: return {__bfloat162float(static_cast<const __nv_bfloat16*>(p)[k]), 0, false};
    case DType::F64: return {static_cast<const double*>(p)[k], 0, false};
    case DType::F8E4M3: return {e4m3_to_f32(static_cast<const uint8_t*>(p)[k]), 0, false};
    case DType::F8E5M2: return {e5m2_to_f32(static_cast<const uint8_t*>(p)[k]), 0, false};
    case DType::I8: return {0, static_cast<const int8_t*>(p)[k], true};
    case DType::U8: return {0, static_cast<const uint8_t*>(p)[k], true};
    case DType::I16: return {0, static_cast<const int16_t*>(p)[k], true};
    case DType::I32: return {0, static_cast<const int32_t*>(p)[k], true};
    case DType::I64: return {0, static_cast<const int64_t*>(p)[k], true};
    default: return {0, static_cast<const uint8_t*>(p)[k] != 0, true};  // Bool
  }
}

template <typename I>
__device__ __forceinline__ I sat_int(const CastVal& v) {
  constexpr int64_t lo = std::is_same_v<I, int64_t> ? INT64_MIN : static_cast<int64_t>(std::numeric_limits<I>::min());
  constexpr int64_t hi = std::is_same_v<I, int64_t> ? INT64_MAX : static_cast<int64_t>(std::numeric_limits<I>::max());
  if (v.is_int) return static_cast<I>(v.i < lo ? lo : v.i > hi ? hi : v.i);
  const double d = v.f;
  if (d != d) return I(0);
  if (d <= static_cast<double>(lo)) return static_cast<I>(lo);
  if (d >= static_cast<double>(hi)) return static_cast<I>(hi);
  return static_cast<I>(d);
}

__device__ __forceinline__ void cast_store(DType t, void* p, int64_t k, const CastVal& v) {
  if (t == DType::Bool) {
    static_cast<uint8_t*>(p)[k] = v.is_int ? v.i != 0 : v.f != 0.0;
    return;
  }
  switch (t) {
    case DType::I8: static_cast<int8_t*>(p)[k] = sat_int<int8_t>(v); return;
    case DType::U8: static_cast<uint8_t*>(p)[k] = sat_int<uint8_t>(v); return;
    case DType::I16: static_cast<int16_t*>(p)[k] = sat_int<int16_t>(v); return;
    case DType::I32: static_cast<int32_t*>(p)[k] = sat_int<int32_t>(v); return;
    case DType::I64: static_cast<int64_t*>(p)[k] = sat_int<int64_t>(v); return;
    default: break;
  }
  const double d = v.is_int ? static_cast<double>(v.i) : v.f;
  switch (t) {
    case DType::F64: static_cast<double*>(p)[k] = d; return;
    case DType::F32: static_cast<float*>(p)[k] = static_cast<float>(d); return;
    case DType::F16: static_cast<uint16_t*>(p)[k] = f32_to_f16_bits(round_to_odd_f32(d)); return;
    case DType::BF16: static_cast<uint16_t*>(p)[k] = f32_to_bf16_bits(round_to_odd_f32(d)); return;
    case DType::F8E4M3: static_cast<uint8_t*>(p)[k] = f32_to_e4m3(round_to_odd_f32(d)); return;
    default: static_cast<uint8_t*>(p)[k] = f32_to_e5m2(round_to_odd_f32(d)); return;  // F8E5M2
  }
}

__global__ void __launch_bounds__(256) cast_generic_kernel(DType from, DType to, const void* x, void* y, int64_t n) {
  dev::pdl_begin();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    cast_store(to, y, i, cast_load(from, x, i));
}

// f32/f16/bf16 ↔ f32/f16/bf16: 8 elements per iteration, bit-exact with half.h.
template <typename S> __device__ __forceinline__ float cast_in(S v) { return to_c(v); }
template <typename D> __device__ __forceinline__ D cast_out(float v);
template <> __device__ __forceinline__ float cast_out<float>(float v) { return v; }
template <> __device__ __forceinline__ __half cast_out<__half>(float v) { return __ushort_as_half(f32_to_f16_bits(v)); }
template <> __device__ __forceinline__ __nv_bfloat16 cast_out<__nv_bfloat16>(float v) {
  return __ushort_as_bfloat16(f32_to_bf16_bits(v));
}

template <typename S, typename D>
__global__ void __launch_bounds__(256) cast_float_kernel(const S* x, D* y, int64_t n) {
  dev::pdl_begin();
  constexpr int V = 8;
  const int64_t nv = n / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < nv; i += stride) {
    const Vec<S, V> a = reinterpret_cast<const Vec<S, V>*>(x)[i];
    Vec<D, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = cast_out<D>(cast_in(a.v[j]));
    reinterpret_cast<Vec<D, V>*>(y)[i] = o;
  }
  for (int64_t i = nv * V + tid; i < n; i += stride) y[i] = cast_out<D>(cast_in(x[i]));
}

template <typename F>
bool dispatch_half_float(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return true;
    case DType::F16: f(__half{}); return true;
    case DType::BF16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}

bool is_cast_dtype(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::F64: case DType::I8: case DType::U8:
    case DType::I16: case DType::I32: case DType::I64: case DType::Bool: case DType::F8E4M3: case DType::F8E5M2:
      return true;
    default: return false;
  }
}

// ------------------------------------------------------------ chain

struct ChainParams {
  ChainProgram prog;
  View2 view;  // rows, cols; operand strides in rs/cs
};

template <int V>
__device__ __forceinline__ void load_chain_operand(const ChainOperand& o, int64_t r, int64_t c, float (&out)[V]) {
  const int64_t roff = r * o.row_stride;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    T t[V];
    load_op<T, V>(static_cast<const T*>(o.data), roff, c, o.col_stride, t);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = to_c(t[i]);
  };
  switch (o.dtype) {
    case DType::F16: go(__half{}); break;
    case DType::BF16: go(__nv_bfloat16{}); break;
    default: go(float{}); break;
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(256) chain_kernel(const T* x, T* y, ChainParams p) {
  dev::pdl_begin();
  const View2& v = p.view;
  const int64_t cv = v.cols / V, total = v.rows * cv;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r, c;
    row_col(v, i, cv, r, c);
    c *= V;
    T xt[V];
    load_op<T, V>(x, r * v.cols, c, 1, xt);
    float acc[V], opnd[kMaxChainOperands][V];
#pragma unroll
    for (int k = 0; k < kMaxChainOperands; ++k)
      if (k < p.prog.num_operands) load_chain_operand<V>(p.prog.operands[k], r, c, opnd[k]);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = to_c(xt[j]);
#pragma unroll
    for (int s = 0; s < kMaxChainSteps; ++s) {
      if (s >= p.prog.num_steps) break;
      const ChainStep& st = p.prog.steps[s];
      if (st.kind == ChainStep::Kind::Unary) {
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = unary_op<float>(st.unary, acc[j]);
      } else {
        float other[V];
        if (st.kind == ChainStep::Kind::BinaryScalar) {
#pragma unroll
          for (int j = 0; j < V; ++j) other[j] = st.scalar;
        } else {
#pragma unroll
          for (int k = 0; k < kMaxChainOperands; ++k)
            if (k == st.operand)
#pragma unroll
              for (int j = 0; j < V; ++j) other[j] = opnd[k][j];
        }
#pragma unroll
        for (int j = 0; j < V; ++j)
          acc[j] = st.reversed ? binary_op<float>(st.binary, other[j], acc[j]) : binary_op<float>(st.binary, acc[j], other[j]);
      }
    }
    T o[V];
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = from_c<T>(acc[j]);
    store_vec<T, V>(y + r * v.cols + c, o);
  }
}

}  // namespace

void launch_unary(UnaryFn fn, DType dtype, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = static_cast<int>(16 / sizeof(T));
    const auto* xt = static_cast<const T*>(x);
    auto* yt = static_cast<T*>(y);
    // 8 resident CTAs of 256 threads per SM; four waves of them at most.
    const int grid = static_cast<int>(std::min<int64_t>(grid_for(n / V + 1, 256), int64_t{32} * current_sm_count()));
    if (aligned(x, 16) && aligned(y, 16)) {
      switch (fn) {
        case UnaryFn::GeluErf: unary_kernel<T, V, true, UnaryFn::GeluErf><<<grid, 256, 0, stream>>>(fn, xt, yt, n); break;
        case UnaryFn::GeluTanh: unary_kernel<T, V, true, UnaryFn::GeluTanh><<<grid, 256, 0, stream>>>(fn, xt, yt, n); break;
        case UnaryFn::Silu: unary_kernel<T, V, true, UnaryFn::Silu><<<grid, 256, 0, stream>>>(fn, xt, yt, n); break;
        case UnaryFn::Relu: unary_kernel<T, V, true, UnaryFn::Relu><<<grid, 256, 0, stream>>>(fn, xt, yt, n); break;
        default: unary_kernel<T, V><<<grid, 256, 0, stream>>>(fn, xt, yt, n); break;
      }
    } else
      unary_kernel<T, 1><<<grid_for(n, 256), 256, 0, stream>>>(fn, static_cast<const T*>(x), static_cast<T*>(y), n);
    RLX_CUDA_CHECK_LAUNCH("Unary");
  };
  switch (dtype) {
    case DType::F32: go(float{}); return;
    case DType::F16: go(__half{}); return;
    case DType::BF16: go(__nv_bfloat16{}); return;
    case DType::F64: go(double{}); return;
    default: throw Unsupported(str("Unary: cuda kernel has no ", dtype_name(dtype), " variant"));
  }
}

void launch_binary(BinaryFn fn, DType dtype, const void* a, const void* b, void* out, const StridedShape& shape,
                   cudaStream_t stream) {
  if (fn == BinaryFn::Pow && !is_float(dtype)) throw Unsupported("Binary: pow is only defined for float types");
  dispatch_storage(dtype, "Binary", [&](auto tag) {
    using T = decltype(tag);
    const BinaryF<T> op{static_cast<const T*>(a), static_cast<const T*>(b), nullptr, fn};
    launch_broadcast(op, shape, static_cast<T*>(out), stream, "Binary");
  });
}

void launch_compare(CompareFn fn, DType dtype, const void* a, const void* b, uint8_t* out, const StridedShape& shape,
                    cudaStream_t stream) {
  dispatch_storage(dtype, "Compare", [&](auto tag) {
    using T = decltype(tag);
    const CompareF<T> op{static_cast<const T*>(a), static_cast<const T*>(b), nullptr, fn};
    launch_broadcast(op, shape, out, stream, "Compare");
  }, true, true);
}

void launch_where(DType dtype, const uint8_t* cond, const void* a, const void* b, void* out,
                  const StridedShape& shape, cudaStream_t stream) {
  RLX_CHECK_AS(Unsupported, !is_quant(dtype), "Where: no kernel for ", dtype_name(dtype));
  auto go = [&](auto tag) {
    using E = decltype(tag);
    const WhereF<E> op{cond, static_cast<const E*>(a), static_cast<const E*>(b)};
    launch_broadcast(op, shape, static_cast<E*>(out), stream, "Where");
  };
  switch (dtype_size(dtype)) {
    case 1: go(uint8_t{}); return;
    case 2: go(uint16_t{}); return;
    case 4: go(uint32_t{}); return;
    case 8: go(uint64_t{}); return;
    default: throw Unsupported(str("Where: no kernel for ", dtype_name(dtype)));
  }
}

void launch_cast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  RLX_CHECK_AS(Unsupported, is_cast_dtype(from) && is_cast_dtype(to), "Cast: no cuda kernel for ",
               dtype_name(from), " -> ", dtype_name(to));
  if (n <= 0) return;
  if (from == to) {
    if (x != y)
      RLX_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<size_t>(dtype_bytes(to, n)), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  bool done = false;
  dispatch_half_float(from, [&](auto s) {
    dispatch_half_float(to, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      if constexpr (!std::is_same_v<S, D>) {
        if (aligned(x, 8 * sizeof(S)) && aligned(y, 8 * sizeof(D))) {
          cast_float_kernel<S, D><<<grid_for(n / 8 + 1, 256), 256, 0, stream>>>(static_cast<const S*>(x),
                                                                                  static_cast<D*>(y), n);
          done = true;
        }
      }
    });
  });
  if (!done) cast_generic_kernel<<<grid_for(n, 256), 256, 0, stream>>>(from, to, x, y, n);
  RLX_CUDA_CHECK_LAUNCH("Cast");
}

void launch_elementwise_chain(DType dtype, const void* x, void* y, int64_t rows, int64_t cols,
                              const ChainProgram& program, cudaStream_t stream) {
  RLX_CHECK(program.num_steps >= 0 && program.num_steps <= kMaxChainSteps, "ElementwiseChain: ", program.num_steps,
            " steps (max ", kMaxChainSteps, ")");
  RLX_CHECK(program.num_operands >= 0 && program.num_operands <= kMaxChainOperands, "ElementwiseChain: ",
            program.num_operands, " operands (max ", kMaxChainOperands, ")");
  for (int s = 0; s < program.num_steps; ++s) {
    const ChainStep& st = program.steps[s];
    RLX_CHECK(st.kind != ChainStep::Kind::Binary || (st.operand >= 0 && st.operand < program.num_operands),
              "ElementwiseChain: step ", s, " reads operand ", int{st.operand}, " of ", program.num_operands);
  }
  for (int k = 0; k < program.num_operands; ++k)
    RLX_CHECK_AS(Unsupported, is_compute_float(program.operands[k].dtype), "ElementwiseChain: operand ", k,
                 " has dtype ", dtype_name(program.operands[k].dtype));
  if (rows <= 0 || cols <= 0) return;
  dispatch_storage(dtype, "ElementwiseChain", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<compute_t<T>, float>) {
      constexpr int V = static_cast<int>(16 / sizeof(T));
      StridedShape s;
      s.rank = 2;
      s.dims[0] = rows;
      s.dims[1] = cols;
      ChainParams p{program, {}};
      bool vec = cols % V == 0 && aligned(x, 16) && aligned(y, 16);
      for (int k = 0; k < program.num_operands; ++k) {
        const ChainOperand& o = program.operands[k];
        if (o.col_stride != 0)
          vec = vec && o.col_stride == 1 && o.row_stride % V == 0 && aligned(o.data, dtype_size(o.dtype) * V);
      }
      const int v = vec ? V : 1;
      p.view = make_view2(s, 0, v);
      p.view.rows = rows;
      p.view.cols = cols;
      const int64_t work = rows * cols / v;
      if (vec) chain_kernel<T, V><<<grid_for(work, 256), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
      else chain_kernel<T, 1><<<grid_for(work, 256), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
      RLX_CUDA_CHECK_LAUNCH("ElementwiseChain");
    } else {
      throw Unsupported(str("ElementwiseChain: cuda kernel has no ", dtype_name(dtype), " variant"));
    }
  });
}

}  // namespace rlx::cuda
