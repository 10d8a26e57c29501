// Where the CUDA lowering lets a GEMM add the other term of the residual norm
// after it (residual_norm_pattern, lower_matmul.cpp): the graph part of the
// decision, on graphs after the compile passes (fusion, precision policy). No GPU.
#include <gtest/gtest.h>

#include <tuple>

#include "rlx/backends/cuda/lowering.h"
#include "rlx/ir/builder.h"
#include "tests/unit/cuda/pattern_util.h"

using namespace rlx;

namespace {

struct Spec {
  int64_t K = 768, N = 768;
  bool rms = false;             // RmsNorm instead of LayerNorm
  bool projection_first = true;  // the projection is the first term of the sum (p + r), else r + p
  bool bias = true;
  bool gelu = false;
  bool residual_after = false;  // the residual computed after the projection
  bool residual_input = false;  // the residual is a program input used as is
  bool projection_output = false;
  bool self_sum = false;  // p + p
  DType precision = DType::F16;
};

struct Found {
  int norms = 0;
  int hits = 0;
  bool other_term_is_not_the_projection = true;
};

Found find(const Spec& sp) {
  const int64_t M = 300;
  Graph g;
  auto x = input(g, "x", DType::F32, {M, sp.K});
  auto r = input(g, "r", DType::F32, {M, sp.N});
  auto w = param(g, "w", DType::F32, {sp.N, sp.K});
  auto b = param(g, "b", DType::F32, {sp.N});
  auto gamma = param(g, "gamma", DType::F32, {sp.N});
  auto beta = param(g, "beta", DType::F32, {sp.N});
  std::optional<Value> res;
  if (sp.residual_input) res = r;
  else if (!sp.residual_after) res = r * r;
  Value p = matmul(x, w, MatMulAttrs{false, true});
  if (sp.bias) p = p + b;
  if (sp.gelu) p = gelu(p);
  if (!res) res = r * r;
  const Value sum = sp.self_sum ? p + p : sp.projection_first ? p + *res : *res + p;
  output("y", sp.rms ? rms_norm(sum, gamma, 1e-6f) : layer_norm(sum, gamma, beta, 1e-12f));
  if (sp.projection_output) output("p", p);
  Found f;
  std::tie(f.hits, f.norms) = rlx::test::pattern_matches(
      g, sp.precision, cuda::residual_norm_pattern,
      {OpKind::FusedResidualLayerNorm, OpKind::FusedResidualRmsNorm}, [&](const Graph& lowered, NodeId i, NodeId norm) {
        const auto& in = lowered.node(norm).inputs;
        EXPECT_TRUE(in[0] == i || in[1] == i) << "the norm found reads the GEMM";
        f.other_term_is_not_the_projection = in[0] != in[1];
      });
  return f;
}

bool folds(const Spec& sp) {
  const Found f = find(sp);
  EXPECT_EQ(f.norms, 1) << "the passes should leave one residual norm";
  EXPECT_TRUE(f.other_term_is_not_the_projection);
  return f.hits == 1;
}

TEST(GemmResidualPattern, BertBaseProjectionsFold) {
  EXPECT_TRUE(folds({}));
  Spec s;
  s.K = 3072;  // FFN down
  EXPECT_TRUE(folds(s));
}

TEST(GemmResidualPattern, EitherTermOrderRmsNormNoBiasAndEveryFloatType) {
  Spec s;
  s.projection_first = false;
  EXPECT_TRUE(folds(s));
  s = {};
  s.rms = true;
  EXPECT_TRUE(folds(s));
  s = {};
  s.bias = false;  // a plain MatMul
  EXPECT_TRUE(folds(s));
  for (DType t : {DType::F32, DType::BF16}) {
    s = {};
    s.precision = t;
    EXPECT_TRUE(folds(s)) << dtype_name(t);
  }
  s = {};
  s.residual_after = true;
  s.residual_input = true;  // an input exists from the start, wherever it is used
  s.precision = DType::F32;  // (at f16 the policy's cast of it comes after the GEMM)
  EXPECT_TRUE(folds(s));
}

TEST(GemmResidualPattern, RefusedCases) {
  Spec s;
  s.gelu = true;  // the activation comes before the sum; cuBLASLt would apply it after
  EXPECT_FALSE(folds(s));
  s = {};
  s.residual_after = true;  // not computed yet where the GEMM runs
  EXPECT_FALSE(folds(s));
  s = {};
  s.projection_output = true;  // the projection alone is needed too
  EXPECT_FALSE(folds(s));
  s = {};
  s.self_sum = true;  // both terms are the GEMM's output
  const Found f = find(s);
  EXPECT_EQ(f.hits, 0);
}

}  // namespace
