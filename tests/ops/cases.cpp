// The conformance case table (see cases.h). Shapes are odd on purpose (7, 13,
// 33, 129, 1031) so that no kernel gets away with assuming a multiple of a
// vector or tile width; size-1 dims, broadcasting and ranks 1–4 appear
// throughout. The random-broadcast cases draw their shapes from a fixed seed,
// so test names and shapes are stable from run to run.
#include "tests/ops/cases.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "rlx/core/error.h"
#include "rlx/core/half.h"

namespace rlx::test {
namespace {

double u01(Rng& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
int64_t uint_below(Rng& rng, int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); }

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// The next value above `v` that `dt` can store.
double next_up(DType dt, double v) {
  if (is_int(dt)) return v + 1.0;
  double d = std::max(std::fabs(v), 1e-6) * 0x1.0p-30;
  for (;;) {
    const double r = round_to(dt, v + d);
    if (r > v) return r;
    d *= 2.0;
  }
}

template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i)
    std::swap(v[i - 1], v[static_cast<size_t>(uint_below(rng, static_cast<int64_t>(i)))]);
}

}  // namespace

double round_to(DType dt, double v) {
  switch (dt) {
    case DType::F32: return static_cast<float>(v);
    case DType::F16: return f16_to_f32(f32_to_f16(static_cast<float>(v)));
    case DType::BF16: return bf16_to_f32(f32_to_bf16(static_cast<float>(v)));
    case DType::F64: return v;
    case DType::Bool: return v != 0.0 ? 1.0 : 0.0;
    default: return std::trunc(v);
  }
}

// ---- distributions --------------------------------------------------------

Dist uniform(double lo, double hi, double min_abs) {
  return {str("uniform(", lo, ", ", hi, ")"), [=](const std::vector<int64_t>& s, DType, Rng& rng) {
            std::vector<double> out(static_cast<size_t>(numel_of(s)));
            for (auto& x : out) {
              do x = lo + (hi - lo) * u01(rng);
              while (std::fabs(x) < min_abs);
            }
            return out;
          }};
}

Dist ints(int64_t lo, int64_t hi, bool nonzero) {
  return {str("ints[", lo, ", ", hi, "]"), [=](const std::vector<int64_t>& s, DType, Rng& rng) {
            std::vector<double> out(static_cast<size_t>(numel_of(s)));
            for (auto& x : out) {
              do x = static_cast<double>(lo + uint_below(rng, hi - lo + 1));
              while (nonzero && x == 0.0);
            }
            return out;
          }};
}

Dist bools(double p) {
  return {str("bools(", p, ")"), [=](const std::vector<int64_t>& s, DType, Rng& rng) {
            std::vector<double> out(static_cast<size_t>(numel_of(s)));
            for (auto& x : out) x = u01(rng) < p ? 1.0 : 0.0;
            return out;
          }};
}

Dist grid(double lo, double hi, double step) {
  return {str("grid(", lo, ", ", hi, ", ", step, ")"), [=](const std::vector<int64_t>& s, DType, Rng& rng) {
            const auto klo = static_cast<int64_t>(std::ceil(lo / step)),
                       khi = static_cast<int64_t>(std::floor(hi / step));
            std::vector<double> out(static_cast<size_t>(numel_of(s)));
            for (auto& x : out) {
              do x = static_cast<double>(klo + uint_below(rng, khi - klo + 1)) * step;
              while (x == 0.0);
            }
            return out;
          }};
}

Dist distinct(double lo, double hi) {
  return {str("distinct(", lo, ", ", hi, ")"), [=](const std::vector<int64_t>& s, DType dt, Rng& rng) {
            const int64_t n = numel_of(s);
            std::vector<double> out(static_cast<size_t>(n));
            double prev = -INFINITY;
            for (int64_t i = 0; i < n; ++i) {
              double r = round_to(dt, lo + (hi - lo) * (static_cast<double>(i) + 0.37) / static_cast<double>(n));
              if (r <= prev) r = next_up(dt, prev);
              out[static_cast<size_t>(i)] = prev = r;
            }
            shuffle(out, rng);
            return out;
          }};
}

Dist key_mask(int empty_rows) {
  return {str("key_mask(empty_rows=", empty_rows, ")"), [=](const std::vector<int64_t>& s, DType, Rng& rng) {
            const int64_t b = s.at(0), lk = s.at(1);
            std::vector<double> out(static_cast<size_t>(b * lk), 0.0);
            for (int64_t r = 0; r < b - empty_rows; ++r) {
              bool any = false;
              for (int64_t j = 0; j < lk; ++j) {
                const bool keep = u01(rng) < 0.6;
                out[static_cast<size_t>(r * lk + j)] = keep ? 1.0 : 0.0;
                any = any || keep;
              }
              if (!any) out[static_cast<size_t>(r * lk + uint_below(rng, lk))] = 1.0;
            }
            return out;
          }};
}

// Right-padded masks as tokenizers produce: row r keeps a random prefix
// (empty_rows trailing rows keep nothing).
Dist prefix_key_mask(int empty_rows) {
  return {str("prefix_key_mask(empty_rows=", empty_rows, ")"), [=](const std::vector<int64_t>& s, DType, Rng& rng) {
            const int64_t b = s.at(0), lk = s.at(1);
            std::vector<double> out(static_cast<size_t>(b * lk), 0.0);
            for (int64_t r = 0; r < b - empty_rows; ++r) {
              const int64_t n = 1 + uint_below(rng, lk);
              for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(r * lk + j)] = 1.0;
            }
            return out;
          }};
}

// Even rows right-padded, odd rows with a hole before their last kept key:
// the CUDA prefill path must send each row to its own kernel.
Dist mixed_key_mask() {
  return {"mixed_key_mask", [](const std::vector<int64_t>& s, DType, Rng& rng) {
            const int64_t b = s.at(0), lk = s.at(1);
            std::vector<double> out(static_cast<size_t>(b * lk), 0.0);
            for (int64_t r = 0; r < b; ++r) {
              const int64_t n = 2 + uint_below(rng, lk - 1);  // 2..lk kept positions span
              for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(r * lk + j)] = 1.0;
              if (r % 2 == 1) out[static_cast<size_t>(r * lk + uint_below(rng, n - 1))] = 0.0;  // a hole
            }
            return out;
          }};
}

Dist numeric(DType dt) { return is_int(dt) ? ints(-50, 50, true) : uniform(); }

// ---- builder ----------------------------------------------------------------

Value CaseBuilder::leaf(OpKind kind, const std::string& name, std::vector<int64_t> shape, Dist d,
                        std::optional<DType> dtype) {
  const DType t = dtype.value_or(dt);
  Value v;
  if (kind == OpKind::Input)
    v = rlx::input(graph, name, t, make_shape(shape));
  else if (kind == OpKind::Param)
    v = rlx::param(graph, name, t, make_shape(shape));
  else
    v = rlx::state(graph, name, t, make_shape(shape));
  leaves_.push_back(LeafSpec{kind, name, t, std::move(shape), std::move(d)});
  return v;
}

Value CaseBuilder::input(const std::string& name, std::vector<int64_t> shape, Dist d, std::optional<DType> dtype) {
  return leaf(OpKind::Input, name, std::move(shape), std::move(d), dtype);
}
Value CaseBuilder::param(const std::string& name, std::vector<int64_t> shape, Dist d, std::optional<DType> dtype) {
  return leaf(OpKind::Param, name, std::move(shape), std::move(d), dtype);
}
Value CaseBuilder::state(const std::string& name, std::vector<int64_t> shape, Dist d, std::optional<DType> dtype) {
  return leaf(OpKind::State, name, std::move(shape), std::move(d), dtype);
}

void CaseBuilder::output(Value v, Check check) {
  rlx::output(str("out", checks_.size()), v);
  checks_.push_back(check);
}

void CaseBuilder::scale_atol(double scale, std::string why) {
  atol_scale_ = scale;
  atol_why_ = std::move(why);
}

Feeds generate(const CaseBuilder& b, Rng& rng) {
  Feeds f;
  for (const LeafSpec& l : b.leaves()) {
    std::vector<double> vals = l.dist.fill(l.shape, l.dtype, rng);
    Tensor t = Tensor::from(vals, l.shape).to(l.dtype);
    f.values[l.name] = RefTensor(l.shape, t.to_f64());
    auto& dst = l.kind == OpKind::Input ? f.inputs : l.kind == OpKind::Param ? f.params : f.states;
    dst[l.name] = std::move(t);
  }
  return f;
}

// ---- the table ----------------------------------------------------------------

namespace {

const std::vector<DType> kF = {DType::F32, DType::F16, DType::BF16};
const std::vector<DType> kFI = {DType::F32, DType::F16, DType::BF16, DType::I32};

using Shape64 = std::vector<int64_t>;

struct Table {
  std::vector<OpCase> cases;
  void add(std::string name, std::vector<DType> dtypes, std::function<void(CaseBuilder&)> define) {
    for (const auto& c : cases) RLX_CHECK(c.name != name, "duplicate conformance case ", name);
    cases.push_back(OpCase{std::move(name), std::move(dtypes), std::move(define)});
  }
};

std::vector<RefTensor> one(RefTensor t) { return {std::move(t)}; }

// ---- elementwise ----

void unary_cases(Table& t) {
  const UnaryFn fns[] = {UnaryFn::GeluErf, UnaryFn::GeluTanh, UnaryFn::Silu, UnaryFn::Relu, UnaryFn::Sigmoid,
                         UnaryFn::Tanh,    UnaryFn::Exp,      UnaryFn::Log,  UnaryFn::Sqrt, UnaryFn::Rsqrt,
                         UnaryFn::Neg,     UnaryFn::Abs,      UnaryFn::Sin,  UnaryFn::Cos};
  const Shape64 shapes[] = {{7, 33}, {129}, {2, 3, 13}, {2, 3, 5, 7}, {1, 1031}};
  size_t i = 0;
  for (UnaryFn fn : fns) {
    const Shape64 shape = shapes[i++ % std::size(shapes)];
    t.add(str("unary_", unary_name(fn)), kF, [fn, shape](CaseBuilder& b) {
      Dist d = fn == UnaryFn::Log || fn == UnaryFn::Sqrt || fn == UnaryFn::Rsqrt ? uniform(0.05, 8.0, 0.0)
               : fn == UnaryFn::Sin || fn == UnaryFn::Cos                        ? uniform(-6.0, 6.0)
                                                                                 : uniform(-4.0, 4.0);
      b.output(unary(fn, b.input("x", shape, d)));
      b.set_reference([fn](const Leaves& l) { return one(ref::unary(fn, l.at("x"))); });
    });
  }
}

// a (op) b with numpy broadcasting; i32 runs use integer semantics.
void binary_case(Table& t, const std::string& name, std::vector<DType> dtypes, BinaryFn fn, Shape64 as, Shape64 bs) {
  t.add(name, std::move(dtypes), [=](CaseBuilder& b) {
    const bool integer = is_int(b.dt);
    Dist da = numeric(b.dt), db = numeric(b.dt);
    if (fn == BinaryFn::Div) {
      da = integer ? ints(-1000, 1000, true) : uniform();
      db = integer ? ints(-30, 30, true) : uniform(-2.0, 2.0, 0.25);
    } else if (fn == BinaryFn::Mul && integer) {
      da = db = ints(-1000, 1000, true);
    } else if (fn == BinaryFn::Pow) {
      da = uniform(0.25, 4.0, 0.0);
      db = uniform(-2.0, 2.0, 0.0);
    }
    b.output(binary(fn, b.input("a", as, da), b.input("b", bs, db)));
    b.set_reference([=](const Leaves& l) { return one(ref::binary(fn, l.at("a"), l.at("b"), integer)); });
  });
}

void binary_cases(Table& t) {
  binary_case(t, "binary_add", kFI, BinaryFn::Add, {13, 33}, {13, 33});
  binary_case(t, "binary_sub_bcast", kFI, BinaryFn::Sub, {7, 1, 13}, {33, 1});
  binary_case(t, "binary_mul_scalar", kFI, BinaryFn::Mul, {2, 3, 7}, {1});
  binary_case(t, "binary_div_bcast", kFI, BinaryFn::Div, {3, 1, 129}, {5, 129});
  binary_case(t, "binary_max_outer", kFI, BinaryFn::Max, {1, 33}, {7, 1});
  binary_case(t, "binary_min_rank4", kFI, BinaryFn::Min, {2, 3, 5, 7}, {3, 1, 7});
  binary_case(t, "binary_pow", kF, BinaryFn::Pow, {13, 33}, {33});
  binary_case(t, "binary_add_rank1", kFI, BinaryFn::Add, {1031}, {1031});
  // Random broadcast pairs (fixed seed): per dim both full, or one side 1;
  // the right operand may also drop leading dims.
  Rng rng(0x5eed0b1a);
  const BinaryFn fns[] = {BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div, BinaryFn::Max, BinaryFn::Min};
  const int64_t sizes[] = {2, 3, 5, 7, 13, 33};
  int i = 0;
  for (BinaryFn fn : fns) {
    Shape64 as, bs;
    do {
      as.clear();
      bs.clear();
      const int64_t rank = 1 + uint_below(rng, 4);
      for (int64_t r = 0; r < rank; ++r) {
        const int64_t d = sizes[uint_below(rng, 6)];
        switch (uint_below(rng, 3)) {
          case 0:
            as.push_back(d);
            bs.push_back(d);
            break;
          case 1:
            as.push_back(1);
            bs.push_back(d);
            break;
          default:
            as.push_back(d);
            bs.push_back(1);
            break;
        }
      }
      bs.erase(bs.begin(), bs.begin() + uint_below(rng, rank));
    } while (numel_of(ref::broadcast_shapes(as, bs)) > 50000);
    binary_case(t, str("binary_", binary_name(fn), "_random", i++), kF, fn, as, bs);
  }
}

void compare_cases(Table& t) {
  const CompareFn fns[] = {CompareFn::Eq, CompareFn::Ne, CompareFn::Lt, CompareFn::Le, CompareFn::Gt, CompareFn::Ge};
  int i = 0;
  for (CompareFn fn : fns) {
    // Values on a coarse grid, so equal pairs are common.
    const Shape64 as = i % 2 ? Shape64{3, 1, 5} : Shape64{7, 13};
    const Shape64 bs = i % 2 ? Shape64{4, 1} : Shape64{13};
    ++i;
    t.add(str("compare_", compare_name(fn)), kFI, [=](CaseBuilder& b) {
      Dist d = is_int(b.dt) ? ints(-3, 3) : grid(-2.0, 2.0, 0.5);
      b.output(compare(fn, b.input("a", as, d), b.input("b", bs, d)));
      b.set_reference([=](const Leaves& l) { return one(ref::compare(fn, l.at("a"), l.at("b"))); });
    });
  }
}

void where_cast_cases(Table& t) {
  auto where_case = [&t](const std::string& name, Shape64 cs, Shape64 as, Shape64 bs) {
    t.add(name, kFI, [=](CaseBuilder& b) {
      auto c = b.input("cond", cs, bools(0.5), DType::Bool);
      b.output(where(c, b.input("a", as, numeric(b.dt)), b.input("b", bs, numeric(b.dt))));
      b.set_reference([](const Leaves& l) { return one(ref::where(l.at("cond"), l.at("a"), l.at("b"))); });
    });
  };
  where_case("where_bcast", {7, 1}, {7, 13}, {13});
  where_case("where_rank3", {2, 1, 33}, {1, 5, 33}, {2, 5, 1});

  // The case dtype is the source; `to` the target.
  auto cast_case = [&t](const std::string& name, std::vector<DType> dts, DType to, Shape64 shape) {
    t.add(name, std::move(dts), [=](CaseBuilder& b) {
      b.output(cast(b.input("x", shape, uniform(-100.0, 100.0, 0.1)), to));
      b.set_reference([=](const Leaves& l) { return one(ref::cast(l.at("x"), to)); });
    });
  };
  cast_case("cast_to_f32", {DType::F16, DType::BF16}, DType::F32, {7, 129});
  cast_case("cast_to_f16", {DType::F32, DType::BF16}, DType::F16, {3, 5, 33});
  cast_case("cast_to_bf16", {DType::F32, DType::F16}, DType::BF16, {1031});
  // Integer-valued floats: exact in both directions, no rounding-mode question.
  t.add("cast_to_i32", kF, [](CaseBuilder& b) {
    b.output(cast(b.input("x", {13, 33}, grid(-200.0, 200.0, 1.0)), DType::I32));
    b.set_reference([](const Leaves& l) { return one(ref::cast(l.at("x"), DType::I32)); });
  });
  t.add("cast_from_i32", kF, [](CaseBuilder& b) {
    b.output(cast(b.input("x", {13, 33}, ints(-1000, 1000), DType::I32), b.dt));
    b.set_reference([](const Leaves& l) { return one(l.at("x")); });
  });
}

// ---- linear algebra ----

// atol multiplier for a K-long dot product: its error scales with the terms
// (|out| ~ √K·E|ab|), not with a result that may have cancelled to near zero.
void dot_tolerance(CaseBuilder& b, int64_t k) {
  b.scale_atol(std::sqrt(static_cast<double>(k)), str("atol x sqrt(K=", k, "): dot-product error scales with sqrt(K)"));
}

void matmul_case(Table& t, const std::string& name, Shape64 as, Shape64 bs, bool ta, bool tb) {
  t.add(name, kF, [=](CaseBuilder& b) {
    dot_tolerance(b, ta ? as[as.size() - 2] : as.back());
    b.output(matmul(b.input("a", as, uniform()), b.input("b", bs, uniform()), MatMulAttrs{ta, tb}));
    b.set_reference([=](const Leaves& l) { return one(ref::matmul(l.at("a"), l.at("b"), ta, tb)); });
  });
}

void mmba_case(Table& t, const std::string& name, Shape64 as, Shape64 bs, bool tb, Activation act) {
  t.add(name, kF, [=](CaseBuilder& b) {
    dot_tolerance(b, as.back());
    const int64_t n = tb ? bs[0] : bs[1];
    auto a = b.input("a", as, uniform());
    auto w = b.param("w", bs, uniform());
    auto bias = b.param("bias", {n}, uniform());
    b.output(matmul_bias_act(a, w, bias, act, tb));
    b.set_reference(
        [=](const Leaves& l) { return one(ref::matmul_bias_act(l.at("a"), l.at("w"), l.at("bias"), tb, act)); });
  });
}

// fp8 a [..., K] x b [n, K] with f32 scales (one value or one per row) and an optional bias.
void scaled_mm_case(Table& t, const std::string& name, Shape64 as, int64_t n, DType at, DType bt, bool rows_a,
                    bool rows_b, bool with_bias) {
  t.add(name, kF, [=](CaseBuilder& b) {
    const int64_t k = as.back();
    if (b.dt == DType::F32) {
      // Hopper's fp8 tensor cores sum with about 14 significant bits between cuBLASLt's f32
      // promotions: an f32 result holds 2^-12 of the largest sum of |sa·sb·a·b| (0.25 · 9 · K here).
      b.scale_atol(std::ldexp(0.25 * 9.0 * static_cast<double>(k), -12) / 1e-5,
                   str("atol = 2^-12 x the largest sum of |sa sb a b| over K=", k,
                       ": fp8 tensor cores sum with ~14 significant bits"));
    } else {
      dot_tolerance(b, k);
    }
    Shape64 sa_shape = as;
    sa_shape.back() = 1;
    auto a = b.input("a", as, uniform(-3.0, 3.0, 0.01), at);
    auto w = b.param("b", {n, as.back()}, uniform(-3.0, 3.0, 0.01), bt);
    auto sa = b.input("sa", rows_a ? sa_shape : Shape64{1}, uniform(0.05, 0.5), DType::F32);
    auto sb = b.param("sb", rows_b ? Shape64{n, 1} : Shape64{1}, uniform(0.05, 0.5), DType::F32);
    Value bias = with_bias ? b.param("bias", {n}, uniform()) : Value{};
    b.output(scaled_matmul(a, w, sa, sb, b.dt, bias));
    b.set_reference([=](const Leaves& l) {
      return one(ref::scaled_matmul(l.at("a"), l.at("b"), l.at("sa"), l.at("sb"),
                                    with_bias ? l.at("bias") : RefTensor{}));
    });
  });
}

void linalg_cases(Table& t) {
  matmul_case(t, "matmul_2d", {13, 33}, {33, 7}, false, false);
  matmul_case(t, "matmul_ta", {33, 13}, {33, 7}, true, false);
  matmul_case(t, "matmul_tb", {13, 33}, {7, 33}, false, true);
  matmul_case(t, "matmul_ta_tb", {33, 13}, {7, 33}, true, true);
  matmul_case(t, "matmul_batched", {3, 7, 33}, {3, 33, 13}, false, false);
  matmul_case(t, "matmul_bcast_batch", {2, 1, 7, 13}, {3, 13, 5}, false, false);
  matmul_case(t, "matmul_bcast_rhs2d_tb", {4, 7, 33}, {129, 33}, false, true);
  matmul_case(t, "matmul_gemv", {1, 257}, {257, 129}, false, false);
  matmul_case(t, "matmul_k1", {7, 1}, {1, 13}, false, false);
  matmul_case(t, "matmul_k4096", {3, 4096}, {4096, 5}, false, false);
  matmul_case(t, "matmul_m129_tb", {129, 65}, {33, 65}, false, true);
  mmba_case(t, "mmba_none", {7, 33}, {33, 13}, false, Activation::None);
  mmba_case(t, "mmba_gelu_erf", {2, 7, 33}, {33, 129}, false, Activation::GeluErf);
  mmba_case(t, "mmba_gelu_tanh", {13, 65}, {65, 33}, false, Activation::GeluTanh);
  mmba_case(t, "mmba_relu_tb", {7, 33}, {13, 33}, true, Activation::Relu);
  mmba_case(t, "mmba_silu_tb", {3, 5, 129}, {7, 129}, true, Activation::Silu);
  mmba_case(t, "mmba_bert_ffn_gelu_erf_tb", {5, 384}, {1536, 384}, true, Activation::GeluErf);
  // fp8: the case's dtype is the result's. Shapes with K and N multiples of 16
  // take cuBLASLt's fp8 GEMM on CUDA; e5m2 x e5m2 and K = 20 its f32 fallback.
  scaled_mm_case(t, "scaled_matmul_tensor_scales", {2, 9, 64}, 48, DType::F8E4M3, DType::F8E4M3, false, false, false);
  scaled_mm_case(t, "scaled_matmul_row_scales_bias", {37, 96}, 80, DType::F8E4M3, DType::F8E4M3, true, true, true);
  scaled_mm_case(t, "scaled_matmul_e4m3_e5m2", {16, 32}, 32, DType::F8E4M3, DType::F8E5M2, true, false, true);
  scaled_mm_case(t, "scaled_matmul_e5m2_pair_k20", {5, 20}, 7, DType::F8E5M2, DType::F8E5M2, false, true, true);
  scaled_mm_case(t, "scaled_matmul_gemv", {1, 256}, 64, DType::F8E4M3, DType::F8E4M3, true, true, false);
}

// ---- norms ----

void norm_case(Table& t, const std::string& name, OpKind op, Shape64 shape, Dist xd = uniform()) {
  t.add(name, kF, [=](CaseBuilder& b) {
    const int64_t w = shape.back();
    const bool layer = op == OpKind::LayerNorm || op == OpKind::FusedResidualLayerNorm;
    const bool residual = op == OpKind::FusedResidualLayerNorm || op == OpKind::FusedResidualRmsNorm;
    const float eps = layer ? 1e-5f : 1e-6f;
    auto x = b.input("x", shape, xd);
    Value r = residual ? b.input("r", shape, uniform()) : Value{};
    auto gamma = b.param("gamma", {w}, uniform(-2.0, 2.0, 0.25));
    Value beta = layer ? b.param("beta", {w}, uniform()) : Value{};
    switch (op) {
      case OpKind::LayerNorm: b.output(layer_norm(x, gamma, beta, eps)); break;
      case OpKind::RmsNorm: b.output(rms_norm(x, gamma, eps)); break;
      case OpKind::FusedResidualLayerNorm: b.output(residual_layer_norm(x, r, gamma, beta, eps)); break;
      default: b.output(residual_rms_norm(x, r, gamma, eps)); break;
    }
    b.set_reference([=](const Leaves& l) {
      switch (op) {
        case OpKind::LayerNorm: return one(ref::layer_norm(l.at("x"), l.at("gamma"), l.at("beta"), eps));
        case OpKind::RmsNorm: return one(ref::rms_norm(l.at("x"), l.at("gamma"), eps));
        case OpKind::FusedResidualLayerNorm:
          return one(ref::residual_layer_norm(l.at("x"), l.at("r"), l.at("gamma"), l.at("beta"), eps));
        default: return one(ref::residual_rms_norm(l.at("x"), l.at("r"), l.at("gamma"), eps));
      }
    });
  });
}

void norm_cases(Table& t) {
  norm_case(t, "layernorm_w1", OpKind::LayerNorm, {13, 1});
  norm_case(t, "layernorm_w7", OpKind::LayerNorm, {3, 5, 7});
  norm_case(t, "layernorm_w384", OpKind::LayerNorm, {7, 384});
  norm_case(t, "layernorm_w4096", OpKind::LayerNorm, {3, 4096});
  norm_case(t, "layernorm_offset_w384", OpKind::LayerNorm, {5, 384}, uniform(20.0, 24.0));
  norm_case(t, "rmsnorm_w1", OpKind::RmsNorm, {13, 1});
  norm_case(t, "rmsnorm_w7", OpKind::RmsNorm, {2, 3, 5, 7});
  norm_case(t, "rmsnorm_w384", OpKind::RmsNorm, {7, 384});
  norm_case(t, "rmsnorm_w4096", OpKind::RmsNorm, {3, 4096});
  norm_case(t, "residual_layernorm_w7", OpKind::FusedResidualLayerNorm, {13, 7});
  norm_case(t, "residual_layernorm_w384", OpKind::FusedResidualLayerNorm, {2, 7, 384});
  norm_case(t, "residual_rmsnorm_w33", OpKind::FusedResidualRmsNorm, {5, 33});
  norm_case(t, "residual_rmsnorm_w4096", OpKind::FusedResidualRmsNorm, {2, 4096});

  // Post-norm residual y = x + rms_norm(a, w1), y rounded to the dtype (the
  // op's contract), and with w2 also rms_norm(y, w2), stacked on a new axis 0.
  // `views`: read the two halves through post_rms_norm_pair's Narrow views,
  // and use them again (y + h) so an aliased view also feeds another op.
  auto post_case = [&t](const std::string& name, Shape64 shape, bool pair, bool views) {
    t.add(name, kF, [=](CaseBuilder& b) {
      const int64_t w = shape.back();
      const float eps = 1e-6f;
      auto x = b.input("x", shape, uniform());
      auto a = b.input("a", shape, uniform());
      auto w1 = b.param("w1", {w}, uniform(-2.0, 2.0, 0.25));
      Value w2 = pair ? b.param("w2", {w}, uniform(-2.0, 2.0, 0.25)) : Value{};
      if (!pair) {
        b.output(post_rms_norm(x, a, w1, eps));
      } else if (!views) {
        b.output(op(OpKind::FusedPostRmsNorm, NormAttrs{eps}, {x, a, w1, w2}));
      } else {
        const PostNormPair p = post_rms_norm_pair(x, a, w1, w2, eps);
        b.output(p.sum);
        b.output(p.norm);
        b.output(p.sum + p.norm);
      }
      const DType dt = b.dt;
      b.set_reference([=](const Leaves& l) {
        RefTensor y = ref::binary(BinaryFn::Add, l.at("x"), ref::rms_norm(l.at("a"), l.at("w1"), eps), false);
        for (double& v : y.v) v = round_to(dt, v);
        if (!pair) return one(y);
        RefTensor h = ref::rms_norm(y, l.at("w2"), eps);
        if (views) {
          RefTensor hr = h;
          for (double& v : hr.v) v = round_to(dt, v);
          return std::vector<RefTensor>{y, h, ref::binary(BinaryFn::Add, y, hr, false)};
        }
        Shape64 st = shape;
        st.insert(st.begin(), 2);
        RefTensor both(st);
        std::copy(y.v.begin(), y.v.end(), both.v.begin());
        std::copy(h.v.begin(), h.v.end(), both.v.begin() + y.numel());
        return one(both);
      });
    });
  };
  post_case("post_rmsnorm_w7", {13, 7}, false, false);
  post_case("post_rmsnorm_w640", {1, 3, 640}, false, false);
  post_case("post_rmsnorm_pair_w33", {5, 33}, true, false);
  post_case("post_rmsnorm_pair_w640_decode", {1, 1, 640}, true, false);
  post_case("post_rmsnorm_pair_w4096", {2, 4096}, true, false);
  post_case("post_rmsnorm_pair_views_w640", {1, 7, 640}, true, true);
}

// ---- reductions and selection ----

void softmax_case(Table& t, const std::string& name, Shape64 shape, int axis, Dist d = uniform(-4.0, 4.0)) {
  t.add(name, kF, [=](CaseBuilder& b) {
    b.output(softmax(b.input("x", shape, d), axis));
    b.set_reference([=](const Leaves& l) { return one(ref::softmax(l.at("x"), axis)); });
  });
}

void reduce_case(Table& t, const std::string& name, std::vector<DType> dts, ReduceFn fn, Shape64 shape,
                 std::vector<int> axes, bool keepdims) {
  t.add(name, std::move(dts), [=](CaseBuilder& b) {
    if (fn == ReduceFn::Sum) {
      int64_t n = 1;
      for (int a : axes) n *= shape[static_cast<size_t>(a < 0 ? a + static_cast<int>(shape.size()) : a)];
      b.scale_atol(std::sqrt(static_cast<double>(n)), str("atol x sqrt(n=", n, "): a sum's error scales with sqrt(n)"));
    }
    b.output(reduce(fn, b.input("x", shape, numeric(b.dt)), axes, keepdims));
    b.set_reference([=](const Leaves& l) { return one(ref::reduce(fn, l.at("x"), axes, keepdims)); });
  });
}

void reduce_cases(Table& t) {
  softmax_case(t, "softmax_last", {7, 33}, -1);
  softmax_case(t, "softmax_axis0", {13, 7}, 0);
  softmax_case(t, "softmax_axis1_rank3", {3, 33, 5}, 1);
  softmax_case(t, "softmax_rank4_axis2", {2, 3, 13, 7}, -2);
  softmax_case(t, "softmax_large_values", {5, 129}, -1, uniform(80.0, 100.0));  // overflows exp without max-subtraction
  softmax_case(t, "softmax_long_row", {2, 1031}, -1);
  softmax_case(t, "softmax_width1", {13, 1}, -1);

  reduce_case(t, "reduce_sum_last", kFI, ReduceFn::Sum, {7, 33}, {-1}, false);
  reduce_case(t, "reduce_mean_axes02_keepdims", kF, ReduceFn::Mean, {5, 7, 13}, {0, 2}, true);
  reduce_case(t, "reduce_max_axis0", kFI, ReduceFn::Max, {33, 7}, {0}, false);
  reduce_case(t, "reduce_min_middle_keepdims", kFI, ReduceFn::Min, {3, 13, 5}, {1}, true);
  reduce_case(t, "reduce_sum_all", kFI, ReduceFn::Sum, {2, 3, 5, 7}, {0, 1, 2, 3}, false);
  reduce_case(t, "reduce_sum_w4096", kF, ReduceFn::Sum, {3, 4096}, {1}, false);
  reduce_case(t, "reduce_mean_w4096", kF, ReduceFn::Mean, {3, 4096}, {-1}, false);
  reduce_case(t, "reduce_max_rank4_axes13", kF, ReduceFn::Max, {2, 7, 3, 13}, {1, 3}, false);

  auto argmax_case = [&t](const std::string& name, Shape64 shape, int axis, bool keepdims) {
    t.add(name, kFI, [=](CaseBuilder& b) {
      b.output(argmax(b.input("x", shape, distinct()), axis, keepdims));
      b.set_reference([=](const Leaves& l) { return one(ref::argmax(l.at("x"), axis, keepdims)); });
    });
  };
  argmax_case("argmax_last", {7, 129}, -1, false);
  argmax_case("argmax_axis0_keepdims", {33, 13}, 0, true);
  argmax_case("argmax_rank3_axis1", {2, 13, 5}, 1, false);
  argmax_case("argmax_vocab", {3, 1031}, -1, false);

  // Values and indices of the same TopK, as two outputs.
  auto topk_case = [&t](const std::string& name, Shape64 shape, int k) {
    t.add(name, kF, [=](CaseBuilder& b) {
      auto x = b.input("x", shape, distinct());
      b.output(topk(x, k, false));
      b.output(topk(x, k, true));
      b.set_reference([=](const Leaves& l) {
        auto [vals, idx] = ref::topk(l.at("x"), k);
        return std::vector<RefTensor>{vals, idx};
      });
    });
  };
  topk_case("topk_k1", {7, 33}, 1);
  topk_case("topk_k5_rank3", {3, 5, 129}, 5);
  topk_case("topk_full_sort", {4, 13}, 13);
  topk_case("topk_k40_vocab", {2, 1031}, 40);

  auto sample_case = [&t](const std::string& name, Shape64 shape, SampleAttrs a, bool step) {
    t.add(name, kF, [=](CaseBuilder& b) {
      auto logits = b.input("logits", shape, distinct(-8.0, 8.0));
      Value s = step ? b.input("step", {1}, ints(0, 1000), DType::I32) : Value{};
      b.output(sample(logits, a, s), Check::AllowedIndex);
      b.set_reference([=](const Leaves& l) { return one(ref::sample_allowed(l.at("logits"), a)); });
    });
  };
  sample_case("sample_greedy", {4, 1031}, SampleAttrs{0.0f, 0, 1.0f, 1}, false);
  sample_case("sample_greedy_step", {3, 257}, SampleAttrs{0.0f, 0, 1.0f, 2}, true);
  sample_case("sample_top_k", {4, 129}, SampleAttrs{0.8f, 5, 1.0f, 7}, false);
  sample_case("sample_top_p", {4, 129}, SampleAttrs{1.0f, 0, 0.9f, 11}, false);
  sample_case("sample_top_k_top_p_step", {4, 1031}, SampleAttrs{0.7f, 40, 0.95f, 13}, true);
}

// ---- data movement ----

void movement_cases(Table& t) {
  t.add("gather_embedding", kFI, [](CaseBuilder& b) {
    auto table = b.param("table", {33, 13}, numeric(b.dt));
    b.output(gather(table, b.input("ids", {2, 7}, ints(0, 32), DType::I32)));
    b.set_reference([](const Leaves& l) { return one(ref::gather(l.at("table"), l.at("ids"))); });
  });
  t.add("gather_i64_ids", kF, [](CaseBuilder& b) {
    auto table = b.input("table", {129, 7}, uniform());
    b.output(gather(table, b.input("ids", {5}, ints(0, 128), DType::I64)));
    b.set_reference([](const Leaves& l) { return one(ref::gather(l.at("table"), l.at("ids"))); });
  });
  t.add("gather_rank3_table", kF, [](CaseBuilder& b) {
    auto table = b.input("table", {13, 3, 5}, uniform());
    b.output(gather(table, b.input("ids", {4}, ints(0, 12), DType::I32)));
    b.set_reference([](const Leaves& l) { return one(ref::gather(l.at("table"), l.at("ids"))); });
  });

  auto reshape_case = [&t](const std::string& name, Shape64 shape, Shape64 to) {
    t.add(name, kFI, [=](CaseBuilder& b) {
      Shape target;
      for (int64_t d : to) target.push_back(Dim(d));
      b.output(reshape(b.input("x", shape, numeric(b.dt)), target));
      b.set_reference([=](const Leaves& l) { return one(ref::reshape(l.at("x"), to)); });
    });
  };
  reshape_case("reshape_merge", {2, 3, 5, 7}, {6, 35});
  reshape_case("reshape_infer", {13, 33}, {-1, 3, 11});

  auto transpose_case = [&t](const std::string& name, Shape64 shape, std::vector<int> perm) {
    t.add(name, kFI, [=](CaseBuilder& b) {
      b.output(transpose(b.input("x", shape, numeric(b.dt)), perm));
      b.set_reference([=](const Leaves& l) { return one(ref::transpose(l.at("x"), perm)); });
    });
  };
  transpose_case("transpose_2d", {13, 33}, {1, 0});
  transpose_case("transpose_3d_021", {3, 7, 13}, {0, 2, 1});
  transpose_case("transpose_4d_0213", {2, 7, 3, 13}, {0, 2, 1, 3});
  transpose_case("transpose_4d_3120", {2, 3, 5, 7}, {3, 1, 2, 0});

  auto narrow_case = [&t](const std::string& name, Shape64 shape, int axis, int64_t start, int64_t len) {
    t.add(name, kFI, [=](CaseBuilder& b) {
      b.output(narrow(b.input("x", shape, numeric(b.dt)), axis, start, len));
      b.set_reference([=](const Leaves& l) { return one(ref::narrow(l.at("x"), axis, start, len)); });
    });
  };
  narrow_case("narrow_last", {7, 33}, -1, 5, 13);
  narrow_case("narrow_axis0_last_row", {13, 7}, 0, 12, 1);
  narrow_case("narrow_middle", {3, 33, 5}, 1, 7, 20);

  auto concat_case = [&t](const std::string& name, std::vector<Shape64> shapes, int axis) {
    t.add(name, kFI, [=](CaseBuilder& b) {
      std::vector<Value> xs;
      for (size_t i = 0; i < shapes.size(); ++i) xs.push_back(b.input(str("x", i), shapes[i], numeric(b.dt)));
      b.output(concat(xs, axis));
      b.set_reference([=](const Leaves& l) {
        std::vector<RefTensor> rs;
        for (size_t i = 0; i < shapes.size(); ++i) rs.push_back(l.at(str("x", i)));
        return one(ref::concat(rs, axis));
      });
    });
  };
  concat_case("concat_last", {{7, 5}, {7, 13}}, -1);
  concat_case("concat_axis0_three", {{1, 13}, {7, 13}, {2, 13}}, 0);
  concat_case("concat_middle", {{2, 3, 5}, {2, 7, 5}}, 1);

  auto expand_case = [&t](const std::string& name, Shape64 shape, Shape64 to) {
    t.add(name, kFI, [=](CaseBuilder& b) {
      b.output(expand(b.input("x", shape, numeric(b.dt)), make_shape(to)));
      b.set_reference([=](const Leaves& l) { return one(ref::expand(l.at("x"), to)); });
    });
  };
  expand_case("expand_rows", {1, 33}, {7, 33});
  expand_case("expand_new_leading", {13}, {2, 3, 13});
  expand_case("expand_mixed", {3, 1, 1}, {2, 3, 7, 13});

  // The state starts with random contents (written before each run); the
  // output is the whole state after the update.
  auto write_slice_case = [&t](const std::string& name, Shape64 state_shape, Shape64 update_shape, int axis) {
    t.add(name, kFI, [=](CaseBuilder& b) {
      const int ax = axis < 0 ? axis + static_cast<int>(state_shape.size()) : axis;
      const int64_t room = state_shape[static_cast<size_t>(ax)] - update_shape[static_cast<size_t>(ax)];
      auto s = b.state("cache", state_shape, numeric(b.dt));
      auto u = b.input("update", update_shape, numeric(b.dt));
      auto off = b.input("offset", {1}, ints(0, room), DType::I32);
      b.output(write_slice(s, u, off, axis));
      b.set_reference([=](const Leaves& l) {
        return one(ref::write_slice(l.at("cache"), l.at("update"), static_cast<int64_t>(l.at("offset")[0]), axis));
      });
    });
  };
  write_slice_case("write_slice_kv_axis1", {2, 33, 13}, {2, 5, 13}, 1);
  write_slice_case("write_slice_axis0_one_row", {13, 7}, {1, 7}, 0);
  write_slice_case("write_slice_last_axis", {3, 4, 129}, {3, 4, 7}, -1);
  // A float update converted to the cache's float type on write (f32 activations
  // into an f16/bf16 KV cache; an f16 update into an f32 cache).
  t.add("write_slice_convert_kv", kF, [](CaseBuilder& b) {
    const DType ut = b.dt == DType::F32 ? DType::F16 : DType::F32;
    auto s = b.state("cache", {1, 33, 64}, uniform());
    auto u = b.input("update", {1, 3, 64}, uniform(), ut);
    auto off = b.input("offset", {1}, ints(0, 30), DType::I32);
    b.output(write_slice(s, u, off, 1));
    b.set_reference([](const Leaves& l) {
      return one(ref::write_slice(l.at("cache"), l.at("update"), static_cast<int64_t>(l.at("offset")[0]), 1));
    });
  });
}

// ---- transformer blocks ----

struct AttnSpec {
  int64_t b = 1, lq = 1, lk = 1;
  AttentionAttrs a;
  Shape64 bias_shape;               // MaskKind::Bias
  std::optional<DType> mask_dtype;  // MaskKind::Custom (default: the case dtype)
  int empty_rows = 0;               // MaskKind::Custom: trailing fully masked batch rows
  int64_t kv_len_n = 0;             // > 0: a kv_len input of this many entries drawn in [lq, lk]
  bool prefix_mask = false;         // MaskKind::Custom: right-padded rows instead of random keeps
  bool mixed_mask = false;          // MaskKind::Custom: right-padded and holed rows alternating
};

void attention_case(Table& t, const std::string& name, AttnSpec s) {
  t.add(name, kF, [s](CaseBuilder& b) {
    const int64_t d = s.a.head_dim;
    auto q = b.input("q", {s.b, s.lq, s.a.num_heads * d}, uniform());
    auto k = b.input("k", {s.b, s.lk, s.a.num_kv_heads * d}, uniform());
    auto v = b.input("v", {s.b, s.lk, s.a.num_kv_heads * d}, uniform());
    Value extra;
    if (s.a.mask == MaskKind::Custom)
      extra = b.input("mask", {s.b, s.lk}, s.mixed_mask    ? mixed_key_mask()
                                      : s.prefix_mask ? prefix_key_mask(s.empty_rows)
                                                      : key_mask(s.empty_rows),
                      s.mask_dtype);
    if (s.a.mask == MaskKind::Bias) extra = b.input("bias", s.bias_shape, uniform());
    Value kv_len;
    if (s.kv_len_n > 0) kv_len = b.input("kv_len", {s.kv_len_n}, ints(s.lq, s.lk), DType::I32);
    b.output(attention(q, k, v, s.a, extra, kv_len));
    b.set_reference([s](const Leaves& l) {
      const RefTensor* e = s.a.mask == MaskKind::Custom ? &l.at("mask")
                           : s.a.mask == MaskKind::Bias ? &l.at("bias")
                                                        : nullptr;
      return one(ref::attention(l.at("q"), l.at("k"), l.at("v"), s.a, e, s.kv_len_n > 0 ? &l.at("kv_len") : nullptr));
    });
  });
}

AttentionAttrs attn(int h, int hkv, int d, MaskKind mask, float scale = 0.0f, float softcap = 0.0f,
                    int64_t window = 0) {
  AttentionAttrs a;
  a.num_heads = h;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.mask = mask;
  a.scale = scale;
  a.softcap = softcap;
  a.window = window;
  return a;
}

void attention_cases(Table& t) {
  using M = MaskKind;
  attention_case(t, "attention_none", {2, 7, 13, attn(4, 4, 16, M::None), {}, {}, 0});
  attention_case(t, "attention_single_token", {1, 1, 1, attn(1, 1, 8, M::None), {}, {}, 0});
  attention_case(t, "attention_causal", {2, 13, 13, attn(2, 2, 32, M::Causal), {}, {}, 0});
  attention_case(t, "attention_causal_lq_lt_lk", {2, 5, 13, attn(3, 3, 8, M::Causal), {}, {}, 0});
  // Lq > Lk: the first Lq − Lk queries see no key at all → rows of zeros.
  attention_case(t, "attention_causal_lq_gt_lk", {1, 13, 7, attn(2, 2, 16, M::Causal), {}, {}, 0});
  attention_case(t, "attention_causal_gqa", {2, 33, 33, attn(8, 2, 16, M::Causal), {}, {}, 0});
  attention_case(t, "attention_mqa", {1, 7, 33, attn(4, 1, 32, M::None), {}, {}, 0});
  attention_case(t, "attention_causal_head_dim_128", {1, 33, 33, attn(2, 2, 128, M::Causal), {}, {}, 0});
  attention_case(t, "attention_head_dim_80_three_heads", {2, 7, 13, attn(3, 3, 80, M::None), {}, {}, 0});
  attention_case(t, "attention_sliding_window", {2, 33, 33, attn(2, 2, 16, M::SlidingWindow, 0, 0, 5), {}, {}, 0});
  attention_case(t, "attention_sliding_window_lq_lt_lk",
                 {1, 7, 33, attn(2, 1, 8, M::SlidingWindow, 0, 0, 4), {}, {}, 0});
  attention_case(t, "attention_sliding_window_decode_long",
                 {1, 1, 1031, attn(4, 2, 64, M::SlidingWindow, 0, 0, 129), {}, {}, 0});
  attention_case(t, "attention_decode_long_gqa", {2, 1, 1031, attn(8, 2, 64, M::Causal), {}, {}, 0});
  attention_case(t, "attention_decode_long_none_hd128", {1, 1, 2053, attn(2, 2, 128, M::None), {}, {}, 0});
  attention_case(t, "attention_custom_mask_i32", {3, 7, 13, attn(2, 2, 16, M::Custom), {}, DType::I32, 1});
  attention_case(t, "attention_custom_mask_bool", {2, 5, 33, attn(4, 2, 16, M::Custom), {}, DType::Bool, 0});
  attention_case(t, "attention_custom_mask_float", {2, 13, 13, attn(2, 2, 32, M::Custom), {}, std::nullopt, 1});
  attention_case(t, "attention_bias_full", {2, 7, 13, attn(3, 3, 16, M::Bias), {2, 3, 7, 13}, {}, 0});
  attention_case(t, "attention_bias_bcast_heads", {2, 7, 13, attn(3, 3, 16, M::Bias), {2, 1, 7, 13}, {}, 0});
  attention_case(t, "attention_bias_bcast_batch", {2, 7, 13, attn(3, 3, 16, M::Bias), {1, 3, 7, 13}, {}, 0});
  attention_case(t, "attention_bias_bcast_both_gqa", {2, 5, 33, attn(4, 2, 8, M::Bias), {1, 1, 5, 33}, {}, 0});
  attention_case(t, "attention_scale", {2, 7, 13, attn(2, 2, 16, M::None, 0.3f), {}, {}, 0});
  // Scale 1 makes raw scores large (|s| up to ~20) so the cap bites.
  attention_case(t, "attention_softcap", {2, 7, 13, attn(2, 2, 16, M::None, 1.0f, 5.0f), {}, {}, 0});
  attention_case(t, "attention_softcap_causal_gqa", {2, 13, 13, attn(8, 4, 32, M::Causal, 0.5f, 8.0f), {}, {}, 0});
  attention_case(t, "attention_softcap_bias", {1, 7, 13, attn(2, 2, 16, M::Bias, 1.0f, 3.0f), {1, 2, 7, 13}, {}, 0});
  attention_case(t, "attention_softcap_sliding_window_decode",
                 {1, 1, 1031, attn(8, 1, 32, M::SlidingWindow, 0.0f, 30.0f, 512), {}, {}, 0});
  // A fixed-size KV cache with a valid length read from an input (decode and chunked prefill).
  attention_case(t, "attention_kv_len_decode_causal_gqa", {1, 1, 1031, attn(4, 1, 64, M::Causal), {}, {}, 0, 1});
  attention_case(t, "attention_kv_len_decode_window_hd256",
                 {1, 1, 777, attn(4, 1, 256, M::SlidingWindow, 0, 0, 100), {}, {}, 0, 1});
  attention_case(t, "attention_kv_len_prefill_causal", {2, 13, 64, attn(4, 2, 32, M::Causal), {}, {}, 0, 2});
  attention_case(t, "attention_kv_len_prefill_window", {1, 37, 160, attn(2, 1, 64, M::SlidingWindow, 0, 0, 16), {}, {}, 0, 1});
  attention_case(t, "attention_kv_len_none_hd128", {2, 5, 70, attn(2, 2, 128, M::None), {}, {}, 0, 2});
  attention_case(t, "attention_kv_len_custom_mask", {2, 7, 33, attn(2, 2, 16, M::Custom), {}, DType::I32, 0, 2});
  // Right-padded masks (the CUDA prefill path turns them into lengths on the device).
  attention_case(t, "attention_prefix_mask_hd32", {5, 40, 40, attn(4, 4, 32, M::Custom), {}, DType::I32, 1, 0, true});
  attention_case(t, "attention_prefix_mask_hd64_gqa", {3, 70, 70, attn(4, 2, 64, M::Custom), {}, DType::Bool, 0, 0, true});
  attention_case(t, "attention_mixed_prefix_mask_hd64", {4, 50, 50, attn(4, 4, 64, M::Custom), {}, DType::I32, 0, 0, false, true});
}

struct RopeSpec {
  int64_t b = 1, l = 1, width = 0;  // width 0 → num_heads·head_dim
  bool pos_2d = false;
  int64_t max_pos = 127;
  RopeAttrs a;
  bool head_norm = false;  // per-head RMS norm (weight input "w") before rotating
  // WriteSlice with rope: the rotated rows go into a state "cache" [b, ctx,
  // H·D] at a random offset; with `convert` the update has another float type.
  int64_t ctx = 0;
  bool convert = false;
};

void rope_case(Table& t, const std::string& name, RopeSpec s) {
  t.add(name, kF, [s](CaseBuilder& b) {
    // θ = pos·freq formed in f32 (as any real kernel does) carries |Δθ| ≲ 4·pos·2⁻²⁴,
    // an absolute output error of up to |x|·|Δθ|; only f32's atol is that tight.
    if (b.dt == DType::F32 && s.max_pos > 16)
      b.scale_atol(1.0 + static_cast<double>(s.max_pos) / 16.0,
                   str("f32 atol x (1 + max_pos/16) for max_pos=", s.max_pos, ": theta = pos*freq is rounded in f32"));
    const int64_t w = s.width ? s.width : s.a.num_heads * s.a.head_dim;
    const DType xt = !s.convert ? b.dt : b.dt == DType::F32 ? DType::F16 : DType::F32;
    auto x = b.input("x", {s.b, s.l, w}, uniform(), xt);
    auto pos = s.pos_2d ? b.input("pos", {s.b, s.l}, ints(0, s.max_pos), DType::I32)
                        : b.input("pos", {s.l}, ints(0, s.max_pos), DType::I32);
    RopeAttrs a = s.a;
    a.norm_eps = 1e-6f;
    Value nw = s.head_norm ? b.param("w", {a.head_dim}, uniform(-2.0, 2.0, 0.25)) : Value{};
    if (s.ctx) {
      const int64_t hw = int64_t{a.num_heads} * a.head_dim;
      auto cache = b.state("cache", {s.b, s.ctx, hw}, uniform());
      auto off = b.input("offset", {1}, ints(0, s.ctx - s.l), DType::I32);
      b.output(rope_write_slice(cache, x, off, pos, a, nw));
    } else {
      b.output(rope(x, pos, a, nw));
    }
    b.set_reference([s, a, w](const Leaves& l) {
      RefTensor rows;
      if (!s.head_norm) {
        rows = ref::rope(l.at("x"), l.at("pos"), a);
      } else {
        // Take the heads out of the (possibly wider) rows, normalize them, rotate.
        const RefTensor& xs = l.at("x");
        const int64_t hw = int64_t{a.num_heads} * a.head_dim, n = xs.dim(0) * xs.dim(1);
        RefTensor heads({xs.dim(0), xs.dim(1), hw});
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < hw; ++c) heads[r * hw + c] = xs[r * w + a.src_offset + c];
        RopeAttrs plain = a;
        plain.src_offset = 0;
        plain.head_norm = false;
        rows = ref::rope(ref::head_rms_norm(heads, l.at("w"), a.head_dim, a.norm_eps), l.at("pos"), plain);
      }
      if (!s.ctx) return one(rows);
      return one(ref::write_slice(l.at("cache"), rows, static_cast<int64_t>(l.at("offset")[0]), 1));
    });
  });
}

RopeAttrs rope_attrs(int h, int hd, int n_rot, RopePairing p, int64_t src_offset = 0, float base = 10000.0f,
                     float scale = 1.0f) {
  RopeAttrs a;
  a.num_heads = h;
  a.head_dim = hd;
  a.n_rot = n_rot;
  a.pairing = p;
  a.src_offset = src_offset;
  a.freq_base = base;
  a.freq_scale = scale;
  return a;
}

// Frequency divisors from 1 up to 8 across the pairs, as Llama 3.1's scaling
// spreads them (rope_freqs.weight).
RopeAttrs with_freq_factors(RopeAttrs a) {
  const int half = a.n_rot / 2;
  for (int i = 0; i < half; ++i) a.freq_factors.push_back(1.0f + 7.0f * static_cast<float>(i) / std::max(half - 1, 1));
  return a;
}

void rope_glu_cases(Table& t) {
  using P = RopePairing;
  rope_case(t, "rope_neox", {2, 7, 0, false, 511, rope_attrs(4, 64, 64, P::NeoX)});
  rope_case(t, "rope_interleaved", {2, 7, 0, false, 511, rope_attrs(4, 64, 64, P::Interleaved)});
  rope_case(t, "rope_neox_small_pos", {1, 13, 0, false, 16, rope_attrs(3, 32, 32, P::NeoX)});
  rope_case(t, "rope_interleaved_small_pos", {1, 13, 0, false, 16, rope_attrs(3, 32, 32, P::Interleaved)});
  rope_case(t, "rope_neox_partial", {1, 13, 0, false, 255, rope_attrs(3, 64, 32, P::NeoX)});
  rope_case(t, "rope_interleaved_partial", {2, 5, 0, false, 255, rope_attrs(2, 64, 24, P::Interleaved)});
  // Fused QKV rows [Q: 4 heads | K: 2 heads | V: 2 heads] of head_dim 32.
  rope_case(t, "rope_strided_qkv_q", {2, 7, 256, false, 127, rope_attrs(4, 32, 32, P::NeoX, 0)});
  rope_case(t, "rope_strided_qkv_k", {2, 7, 256, false, 127, rope_attrs(2, 32, 32, P::NeoX, 128)});
  rope_case(t, "rope_strided_interleaved_partial", {1, 9, 200, false, 127, rope_attrs(3, 40, 20, P::Interleaved, 37)});
  rope_case(t, "rope_positions_2d", {3, 5, 0, true, 1023, rope_attrs(2, 16, 16, P::NeoX)});
  rope_case(t, "rope_base_1e6_scale_quarter", {1, 7, 0, false, 2047, rope_attrs(2, 128, 128, P::NeoX, 0, 1e6f, 0.25f)});
  rope_case(t, "rope_decode_one_token", {2, 1, 0, true, 2047, rope_attrs(8, 64, 64, P::NeoX)});
  rope_case(t, "rope_head_dim_2", {1, 7, 0, false, 63, rope_attrs(5, 2, 2, P::Interleaved)});
  // Llama 3.1+: base 500000, interleaved pairs, per-pair frequency factors.
  rope_case(t, "rope_freq_factors_llama3",
            {1, 9, 0, false, 4095, with_freq_factors(rope_attrs(4, 64, 64, P::Interleaved, 0, 5e5f))});
  rope_case(t, "rope_freq_factors_partial_batched",
            {2, 3, 0, true, 1023, with_freq_factors(rope_attrs(2, 64, 32, P::NeoX, 0, 1e4f, 0.5f))});
  // QK-norm fused in: Gemma 3 (head_dim 256, 4 q heads / 1 kv head, decode), Qwen3
  // (head_dim 128), partial and interleaved rotation, a strided source.
  rope_case(t, "rope_head_norm_gemma_q_decode", {1, 1, 0, false, 1023, rope_attrs(4, 256, 256, P::NeoX), true});
  rope_case(t, "rope_head_norm_gemma_k_prefill", {1, 13, 0, false, 1023, rope_attrs(1, 256, 256, P::NeoX), true});
  rope_case(t, "rope_head_norm_qwen3", {2, 5, 0, true, 511, rope_attrs(8, 128, 128, P::NeoX), true});
  rope_case(t, "rope_head_norm_partial_interleaved", {1, 9, 0, false, 255, rope_attrs(3, 64, 24, P::Interleaved), true});
  rope_case(t, "rope_head_norm_strided", {2, 7, 256, false, 127, rope_attrs(2, 32, 32, P::NeoX, 128), true});
  // Rotated K written straight into a KV cache (WriteSlice with rope): Gemma 3
  // decode from a stacked [q | k] row with QK-norm, Qwen3-like prefill from
  // [q | k | v] rows, Llama's interleaved pairs without a norm, batched
  // positions, and updates of another float type than the cache.
  {
    RopeSpec g{1, 1, 1280, false, 1023, rope_attrs(1, 256, 256, P::NeoX, 1024), true, 64};
    rope_case(t, "rope_write_gemma_k_decode", g);
    g.convert = true;
    rope_case(t, "rope_write_gemma_k_decode_convert", g);
    rope_case(t, "rope_write_qkv_prefill", {1, 9, 256, false, 127, rope_attrs(2, 32, 32, P::NeoX, 128), true, 33});
    rope_case(t, "rope_write_interleaved_partial", {2, 5, 200, false, 255, rope_attrs(3, 40, 20, P::Interleaved, 37),
                                                    false, 17, true});
    rope_case(t, "rope_write_positions_2d", {3, 2, 0, true, 511, rope_attrs(2, 16, 16, P::NeoX), false, 7});
    rope_case(t, "rope_write_freq_factors_qkv_decode",
              {1, 1, 384, false, 2047, with_freq_factors(rope_attrs(2, 64, 64, P::Interleaved, 256, 5e5f)), false, 33});
  }

  auto glu_case = [&t](const std::string& name, Shape64 shape, OpKind op, bool tanh_approx) {
    t.add(name, kF, [=](CaseBuilder& b) {
      auto x = b.input("x", shape, uniform(-4.0, 4.0));
      b.output(op == OpKind::FusedSwiGLU ? swiglu(x) : geglu(x, tanh_approx));
      const UnaryFn act = op == OpKind::FusedSwiGLU ? UnaryFn::Silu
                          : tanh_approx             ? UnaryFn::GeluTanh
                                                    : UnaryFn::GeluErf;
      b.set_reference([=](const Leaves& l) { return one(ref::glu(l.at("x"), act)); });
    });
  };
  glu_case("swiglu", {3, 7, 258}, OpKind::FusedSwiGLU, false);
  glu_case("swiglu_w4096", {2, 8192}, OpKind::FusedSwiGLU, false);
  glu_case("swiglu_n1", {13, 2}, OpKind::FusedSwiGLU, false);
  glu_case("geglu_erf", {5, 66}, OpKind::FusedGeGLU, false);
  glu_case("geglu_tanh", {2, 3, 130}, OpKind::FusedGeGLU, true);
}

// ---- signal ----

// Complex values enter and leave as f32 [..., n, 2] pairs through the
// bitcast views, so every backend is judged on real-valued outputs.
void fft_cases(Table& t) {
  const std::vector<DType> f32 = {DType::F32};
  // An FFT bin sums n products: its error grows with the output's scale, which
  // is √n (unscaled), 1 (ortho) or 1/√n (scaled by 1/n) times the input's.
  auto tolerate = [](CaseBuilder& b, int64_t n, FftNorm norm, bool inverse) {
    const double rn = std::sqrt(static_cast<double>(n));
    const bool scaled = norm == FftNorm::Ortho ? false : (norm == FftNorm::Backward) == inverse;
    const double out = norm == FftNorm::Ortho ? 1.0 : scaled ? 1.0 / rn : rn;
    b.scale_atol(4.0 * out, str("atol x 4 x the output's scale (", out, " for n=", n, ", norm ",
                                fft_norm_name(norm), "): each bin sums n terms"));
  };
  struct C2c { int64_t n; bool inverse; FftNorm norm; Shape64 batch; };
  const C2c c2c[] = {{1, false, FftNorm::Backward, {3}},      {2, false, FftNorm::Backward, {5}},
                     {3, true, FftNorm::Backward, {4}},       {8, false, FftNorm::Backward, {2, 3}},
                     {12, true, FftNorm::Ortho, {3}},         {15, false, FftNorm::Forward, {3}},
                     {31, false, FftNorm::Backward, {2}},     {97, false, FftNorm::Backward, {2}},
                     {97, true, FftNorm::Forward, {3}},       {128, true, FftNorm::Backward, {2, 2}},
                     {210, false, FftNorm::Ortho, {2}},       {1000, false, FftNorm::Backward, {2}},
                     {4096, false, FftNorm::Backward, {1}}};
  for (const C2c& c : c2c) {
    t.add(str(c.inverse ? "ifft" : "fft", "_n", c.n, "_", fft_norm_name(c.norm)), f32, [c, tolerate](CaseBuilder& b) {
      Shape64 shape = c.batch;
      shape.push_back(c.n);
      shape.push_back(2);
      Value x = view_as_complex(b.input("x", shape, uniform()));
      b.output(view_as_real(c.inverse ? ifft(x, c.norm) : fft(x, c.norm)));
      tolerate(b, c.n, c.norm, c.inverse);
      b.set_reference([c](const Leaves& l) { return one(ref::dft(l.at("x"), c.inverse, c.norm)); });
    });
  }
  struct Real { int64_t n; FftNorm norm; };
  for (const Real r : {Real{1, FftNorm::Backward}, Real{2, FftNorm::Backward}, Real{15, FftNorm::Ortho},
                       Real{16, FftNorm::Backward}, Real{97, FftNorm::Forward}, Real{256, FftNorm::Backward}}) {
    t.add(str("rfft_n", r.n, "_", fft_norm_name(r.norm)), kF, [r, tolerate](CaseBuilder& b) {
      b.output(view_as_real(rfft(b.input("x", {2, 3, r.n}, uniform()), r.norm)));
      tolerate(b, r.n, r.norm, false);
      b.set_reference([r](const Leaves& l) { return one(ref::rdft(l.at("x"), r.norm)); });
    });
    // The bins' imaginary parts at 0 and n/2 are random too: irfft must ignore them.
    t.add(str("irfft_n", r.n, "_", fft_norm_name(r.norm)), f32, [r, tolerate](CaseBuilder& b) {
      Value x = view_as_complex(b.input("x", {3, r.n / 2 + 1, 2}, uniform()));
      b.output(irfft(x, r.n, r.norm));
      tolerate(b, r.n, r.norm, true);
      b.set_reference([r](const Leaves& l) { return one(ref::irdft(l.at("x"), r.n, r.norm)); });
    });
  }
  // Complex values through the movement ops: the transform of a transposed,
  // narrowed complex tensor, and a round trip of the views alone.
  t.add("fft_of_transposed_complex", f32, [tolerate](CaseBuilder& b) {
    Value x = view_as_complex(b.input("x", {24, 5, 2}, uniform()));
    b.output(view_as_real(fft(narrow(transpose(x, {1, 0}), 1, 4, 20))));
    tolerate(b, 20, FftNorm::Backward, false);
    b.set_reference([](const Leaves& l) {
      return one(ref::dft(ref::narrow(ref::transpose(l.at("x"), {1, 0, 2}), 1, 4, 20), false, FftNorm::Backward));
    });
  });
  t.add("bitcast_complex_round_trip", f32, [](CaseBuilder& b) {
    b.output(view_as_real(view_as_complex(b.input("x", {4, 6, 2}, uniform()))));
    b.set_reference([](const Leaves& l) { return one(l.at("x")); });
  });
}

// ---- graphics ----

// Random scenes before a fixed camera (a small turn about y, an offset, an
// off-centre principal point): `z_lo` below the near plane puts some
// Gaussians behind it; `opacity_lo` near 1 makes pixels saturate, so the
// transmittance cut-off ends them early.
void splat_case(Table& t, const std::string& name, int64_t n, double z_lo, double opacity_lo) {
  t.add(name, {DType::F32}, [=](CaseBuilder& b) {
    SplatAttrs a;
    a.width = 48;
    a.height = 32;
    auto fixed = [](std::vector<double> v) {
      return Dist{"fixed", [v](const std::vector<int64_t>&, DType, Rng&) { return v; }};
    };
    auto per_column = [](std::vector<std::pair<double, double>> ranges) {
      return Dist{"per column", [ranges](const std::vector<int64_t>& shape, DType, Rng& rng) {
                    std::vector<double> v(static_cast<size_t>(numel_of(shape)));
                    for (size_t i = 0; i < v.size(); ++i) {
                      const auto [lo, hi] = ranges[i % ranges.size()];
                      v[i] = std::uniform_real_distribution<double>(lo, hi)(rng);
                    }
                    return v;
                  }};
    };
    const double c = std::cos(0.1), s = std::sin(0.1);
    Value means = b.input("means", {n, 3}, per_column({{-1.6, 1.6}, {-1.2, 1.2}, {z_lo, 6.0}}));
    Value scales = b.input("scales", {n, 3}, uniform(0.03, 0.35, 0.0));
    Value rotations = b.input("rotations", {n, 4}, uniform(-1.0, 1.0, 0.1));
    Value opacities = b.input("opacities", {n}, uniform(opacity_lo, 1.0, 0.0));
    Value colors = b.input("colors", {n, 3}, uniform(0.0, 1.0, 0.0));
    Value view = b.input("view", {4, 4}, fixed({c, 0, s, 0.1, 0, 1, 0, -0.05, -s, 0, c, 0.2, 0, 0, 0, 1}));
    Value intrinsics = b.input("intrinsics", {4}, fixed({55.0, 58.0, 24.3, 15.8}));
    Value background = b.input("background", {3}, uniform(0.0, 1.0, 0.0));
    b.output(gaussian_splat(means, scales, rotations, opacities, colors, view, intrinsics, background, a));
    b.scale_atol(30.0, "atol x 30: each pixel blends many exponentials, f32 on a GPU");
    b.set_reference([a](const Leaves& l) {
      std::vector<const RefTensor*> in;
      for (const char* k : {"means", "scales", "rotations", "opacities", "colors", "view", "intrinsics", "background"})
        in.push_back(&l.at(k));
      return one(ref::gaussian_splat(in, a));
    });
  });
}

void splat_cases(Table& t) {
  splat_case(t, "gaussian_splat_scene", 60, 2.5, 0.05);
  splat_case(t, "gaussian_splat_behind_near_plane", 80, -1.0, 0.05);
  splat_case(t, "gaussian_splat_saturated", 300, 2.0, 0.9);
}

std::vector<OpCase> build_cases() {
  Table t;
  unary_cases(t);
  binary_cases(t);
  compare_cases(t);
  where_cast_cases(t);
  linalg_cases(t);
  norm_cases(t);
  reduce_cases(t);
  movement_cases(t);
  attention_cases(t);
  rope_glu_cases(t);
  fft_cases(t);
  splat_cases(t);
  return std::move(t.cases);
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = build_cases();
  return cases;
}

}  // namespace rlx::test
