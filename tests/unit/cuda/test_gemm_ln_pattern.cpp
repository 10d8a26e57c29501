// Where the CUDA lowering fuses a projection with the residual LayerNorm
// after it (gemm_ln_pattern, lower_gemm_ln.cpp): the graph part of the
// decision, on graphs after the compile passes (fusion, f16 policy). No GPU.
#include <gtest/gtest.h>

#include "rlx/backends/cuda/lowering.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/unit/cuda/pattern_util.h"

using namespace rlx;

namespace {

struct Spec {
  int64_t K = 384, N = 384;
  bool params_after = false;    // the norm's gamma/beta created after the projection (as the BERT builder does)
  bool residual_after = false;  // the residual computed after the projection
  bool projection_output = false;
  bool gelu = false;
  DType precision = DType::F16;
};

// Whether the lowered graph's residual LayerNorm fuses with its projection.
bool fuses(const Spec& sp) {
  register_builtin_backends();
  const int64_t M = 300;
  Graph g;
  auto x = input(g, "x", DType::F32, {M, sp.K});
  auto r = input(g, "r", DType::F32, {M, sp.N});
  auto w = param(g, "w", DType::F32, {sp.N, sp.K});
  auto b = param(g, "b", DType::F32, {sp.N});
  auto make_params = [&] {
    return std::pair{param(g, "gamma", DType::F32, {sp.N}), param(g, "beta", DType::F32, {sp.N})};
  };
  std::optional<std::pair<Value, Value>> gb;
  std::optional<Value> res;
  if (!sp.params_after) gb = make_params();
  if (!sp.residual_after) res = r + r;
  Value p = matmul(x, w, MatMulAttrs{false, true}) + b;
  if (sp.gelu) p = gelu(p);
  if (sp.residual_after) res = r + r;
  if (sp.params_after) gb = make_params();
  output("y", layer_norm(p + *res, gb->first, gb->second, 1e-12f));
  if (sp.projection_output) output("p", p);
  const Graph lowered = rlx::test::lowered_at(g, sp.precision);
  const auto users = lowered.users();
  int norms = 0, hits = 0;
  for (NodeId i = 0; i < lowered.size(); ++i) {
    if (lowered.node(i).op != OpKind::FusedResidualLayerNorm) continue;
    ++norms;
    hits += cuda::gemm_ln_pattern(lowered, users, i);
  }
  EXPECT_EQ(norms, 1) << "the passes should leave one FusedResidualLayerNorm";
  return hits == 1;
}

TEST(GemmLnPattern, AttentionOutputProjectionFuses) { EXPECT_TRUE(fuses({})); }
TEST(GemmLnPattern, ParamsAddedAfterTheProjectionStillFuse) {
  Spec s;
  s.params_after = true;
  EXPECT_TRUE(fuses(s));
}
TEST(GemmLnPattern, BF16AndN256Fuse) {
  Spec s;
  s.precision = DType::BF16;
  s.N = 256;
  EXPECT_TRUE(fuses(s));
}
TEST(GemmLnPattern, FfnDownProjectionFuses) {
  Spec s;
  s.K = 1536;  // MiniLM's FFN down
  EXPECT_TRUE(fuses(s));
}
TEST(GemmLnPattern, RefusedCases) {
  Spec s;
  s.K = 3072;  // past the kernel's measured win
  EXPECT_FALSE(fuses(s));
  s = {};
  s.N = 768;  // the kernel holds at most 384 columns
  EXPECT_FALSE(fuses(s));
  s = {};
  s.residual_after = true;  // not computed yet where the projection runs
  EXPECT_FALSE(fuses(s));
  s = {};
  s.projection_output = true;  // the projection itself is needed
  EXPECT_FALSE(fuses(s));
  s = {};
  s.gelu = true;  // an activation between them
  EXPECT_FALSE(fuses(s));
  s = {};
  s.precision = DType::F32;  // the kernel is f16/bf16
  EXPECT_FALSE(fuses(s));
}

}  // namespace
