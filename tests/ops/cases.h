// The conformance case table. A case is a name, the dtypes it runs for, and a
// `define` function that — for one dtype — builds the graph with
// rlx/ir/builder.h, declares how every leaf (input, param, state) is filled
// with random values, and gives the float64 reference of every output.
//
// Leaves are generated in f64, rounded to their storage dtype, and the
// reference is computed from the ROUNDED values, so the comparison measures
// only the backend's error. Tolerances live in test_conformance.cpp, written
// once per dtype; a case may only scale atol by a documented multiplier.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rlx/ir/builder.h"
#include "tests/ops/reference.h"

namespace rlx::test {

using Rng = std::mt19937_64;

// How to fill one leaf: `fill(shape, dtype, rng)` returns numel values in f64
// (rounded to `dtype` by the generator afterwards; distributions that must stay
// distinct after rounding take the dtype into account).
struct Dist {
  std::string what;
  std::function<std::vector<double>(const std::vector<int64_t>& shape, DType dt, Rng& rng)> fill;
};

// uniform(lo, hi) resampling values with |x| < min_abs (keeps relative error meaningful).
Dist uniform(double lo = -2.0, double hi = 2.0, double min_abs = 0.1);
// Integers in [lo, hi]; `nonzero` resamples 0.
Dist ints(int64_t lo, int64_t hi, bool nonzero = false);
// 0/1 with P(1) = p.
Dist bools(double p);
// Multiples of `step` in [lo, hi], exactly representable in every float dtype
// (for Eq/Ne and exact casts); zero is skipped.
Dist grid(double lo, double hi, double step);
// All numel values distinct after rounding to the dtype (argmax / topk / sample
// without ties), roughly spread over [lo, hi], in random order.
Dist distinct(double lo = -4.0, double hi = 4.0);
// Key-padding mask [B, Lk]: each row keeps a random subset (never empty),
// except the last `empty_rows` rows, which are fully masked.
Dist key_mask(int empty_rows);
// Uniform for float dtypes, integers in [-50, 50] \ {0} for integer dtypes.
Dist numeric(DType dt);

// How an output is judged.
enum class Check {
  Auto,          // float outputs: |got − ref| ≤ atol + rtol·|ref|; int/bool: exact
  AllowedIndex,  // got: i32 [B]; ref: [B, V] 0/1 mask of acceptable indices (Sample)
};

struct LeafSpec {
  OpKind kind;  // Input, Param or State
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Dist dist;
};

using Leaves = std::map<std::string, RefTensor>;
using Reference = std::function<std::vector<RefTensor>(const Leaves&)>;

// What a case's `define` fills in for one dtype.
class CaseBuilder {
 public:
  explicit CaseBuilder(DType dtype) : dt(dtype) {}
  CaseBuilder(const CaseBuilder&) = delete;
  CaseBuilder& operator=(const CaseBuilder&) = delete;

  const DType dt;  // the dtype this instance runs for
  Graph graph;

  // Leaves; dtype defaults to `dt`.
  Value input(const std::string& name, std::vector<int64_t> shape, Dist d, std::optional<DType> dtype = {});
  Value param(const std::string& name, std::vector<int64_t> shape, Dist d, std::optional<DType> dtype = {});
  Value state(const std::string& name, std::vector<int64_t> shape, Dist d, std::optional<DType> dtype = {});
  // Outputs are named out0, out1, ... in call order; `reference` returns them in that order.
  void output(Value v, Check check = Check::Auto);
  void set_reference(Reference r) { reference_ = std::move(r); }
  // Multiplies atol (every dtype unless the case chooses by `dt`); `why` is
  // printed with every failure so the multiplier is never silent.
  void scale_atol(double scale, std::string why);

  const std::vector<LeafSpec>& leaves() const { return leaves_; }
  const std::vector<Check>& checks() const { return checks_; }
  const Reference& reference() const { return reference_; }
  double atol_scale() const { return atol_scale_; }
  const std::string& atol_why() const { return atol_why_; }

 private:
  Value leaf(OpKind kind, const std::string& name, std::vector<int64_t> shape, Dist d, std::optional<DType> dtype);
  std::vector<LeafSpec> leaves_;
  std::vector<Check> checks_;
  Reference reference_;
  double atol_scale_ = 1.0;
  std::string atol_why_;
};

struct OpCase {
  std::string name;  // lower_snake, unique; the test is <backend>_<name>_<dtype>
  std::vector<DType> dtypes;
  std::function<void(CaseBuilder&)> define;
};

// Every case, in table order.
const std::vector<OpCase>& op_cases();

// Random leaf values for one run: tensors in their storage dtype, and the same
// (rounded) values in f64 for the reference.
struct Feeds {
  std::map<std::string, Tensor> inputs, params, states;
  Leaves values;
};
Feeds generate(const CaseBuilder& b, Rng& rng);

// `v` rounded to what `dt` stores (ints truncate, bool is v != 0).
double round_to(DType dt, double v);

}  // namespace rlx::test
