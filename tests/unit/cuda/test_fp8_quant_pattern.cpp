// Where the CUDA lowering runs quantize_fp8's per-row chain as one kernel
// (fp8_quant_reads, lower_fp8_quant.cpp): the graph part of the decision, on
// graphs after the compile passes (the precision policy keeps the chain f32).
// No GPU.
#include <gtest/gtest.h>

#include "rlx/backends/cuda/lowering.h"
#include "rlx/ir/builder.h"
#include "tests/test_util.h"
#include "tests/unit/cuda/pattern_util.h"

using namespace rlx;

namespace {

// Every node the fused kernel would run at, and what it reads there.
std::vector<std::pair<NodeId, std::vector<NodeId>>> fused_at(const Graph& g) {
  const auto users = g.users();
  std::vector<std::pair<NodeId, std::vector<NodeId>>> out;
  for (NodeId i = 0; i < g.size(); ++i)
    if (auto r = cuda::fp8_quant_reads(g, users, i); !r.empty()) out.push_back({i, r});
  return out;
}

Graph fp8_linear(DType x_dtype, bool per_row_x, bool also_output_abs) {
  Graph g;
  auto x = input(g, "x", x_dtype, {5, 64});
  auto w = param(g, "w", DType::F32, {32, 64});
  const Fp8Quantized qx = quantize_fp8(x, DType::F8E4M3, per_row_x), qw = quantize_fp8(w, DType::F8E5M2, true);
  output("y", scaled_matmul(qx.q, qw.q, qx.scale, qw.scale, DType::F32));
  if (also_output_abs) {
    // The chain's Abs read outside it: that chain stays unfused.
    for (NodeId i = 0; i < g.size(); ++i)
      if (g.node(i).op == OpKind::Unary && g.node(i).attr<UnaryAttrs>().fn == UnaryFn::Abs) {
        g.set_output("abs", i);
        break;
      }
  }
  return g;
}

TEST(Fp8QuantPattern, PerRowChainsFuseAtTheirCast) {
  for (DType x_dtype : {DType::F32, DType::F16, DType::BF16})
    for (DType precision : {DType::F32, DType::F16}) {
      SCOPED_TRACE(testing::Message() << dtype_name(x_dtype) << " x, policy " << dtype_name(precision));
      const Graph g = rlx::test::lowered_at(fp8_linear(x_dtype, true, false), precision);
      const auto found = fused_at(g);
      ASSERT_EQ(found.size(), 2u);  // x's chain and w's
      for (const auto& [at, reads] : found) {
        const Node& q = g.node(at);
        EXPECT_EQ(q.op, OpKind::Cast);
        EXPECT_TRUE(q.type.dtype == DType::F8E4M3 || q.type.dtype == DType::F8E5M2);
        ASSERT_EQ(reads.size(), 1u);
        const Node& src = g.node(reads[0]);
        EXPECT_TRUE(src.op == OpKind::Input || src.op == OpKind::Param) << op_name(src.op);
      }
    }
}

TEST(Fp8QuantPattern, PerTensorScalesAndOutsideReadersStayUnfused) {
  // x per tensor: only w's chain.
  const Graph per_tensor = rlx::test::lowered_at(fp8_linear(DType::F32, false, false), DType::F32);
  const auto a = fused_at(per_tensor);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(per_tensor.node(a[0].first).type.dtype, DType::F8E5M2);
  // The first chain's Abs is also an output: only w's chain.
  const Graph shared = rlx::test::lowered_at(fp8_linear(DType::F32, true, true), DType::F32);
  const auto b = fused_at(shared);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(shared.node(b[0].first).type.dtype, DType::F8E5M2);
  rlx::test::ScopedEnv off("RLX_CUDA_FUSE_FP8_QUANT", "0");
  EXPECT_TRUE(fused_at(rlx::test::lowered_at(fp8_linear(DType::F32, true, false), DType::F32)).empty());
}

}  // namespace
