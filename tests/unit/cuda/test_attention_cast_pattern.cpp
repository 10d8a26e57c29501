// The casts the CUDA lowering folds into the launch before them
// (RLX_CUDA_FUSE_ATTN_CASTS): the graph part, attention_cast_reads, on every
// tiny LLM's decode graph after the compile passes. With f32 activations
// over an f16 cache each layer has Q's cast to f16 (after its Rope) and the
// attention output's cast to f32, and the memory plan must keep what the
// earlier launch reads live until each. No GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "rlx/backends/cuda/lowering.h"
#include "tests/models/tiny_llm_graph.h"
#include "tests/test_util.h"

using namespace rlx;

namespace {

bool has(const std::vector<NodeId>& v, NodeId x) { return std::find(v.begin(), v.end(), x) != v.end(); }

class AttentionCastPattern : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionCastPattern, EveryLayersTwoCastsKeepTheirLaunchInputsLive) {
  const std::string arch = GetParam();
  const int layers = static_cast<int>(test::tiny_spec(arch).layers);
  const Graph g = test::lowered_decode_graph(arch);
  const auto users = g.users();
  int q_casts = 0, out_casts = 0;
  for (NodeId i = 0; i < g.size(); ++i) {
    const std::vector<NodeId> reads = cuda::attention_cast_reads(g, users, i);
    if (reads.empty()) continue;
    const Node& cast = g.node(i);
    ASSERT_EQ(cast.op, OpKind::Cast) << g.describe(i);
    const Node& src = g.node(cast.inputs[0]);
    for (NodeId in : src.inputs) EXPECT_TRUE(has(reads, in)) << g.describe(i) << " misses " << g.describe(in);
    if (src.op == OpKind::Attention) {
      ++out_casts;
      EXPECT_EQ(cast.type.dtype, DType::F32) << g.describe(i);
    } else {
      ++q_casts;
      ASSERT_EQ(src.op, OpKind::Rope) << g.describe(i);
      // Both cache writes the attention reads, and what they read.
      const Node& attn = g.node(users[static_cast<size_t>(i)][0]);
      for (NodeId w : {attn.inputs[1], attn.inputs[2]}) {
        ASSERT_EQ(g.node(w).op, OpKind::WriteSlice) << g.describe(w);
        for (NodeId in : g.node(w).inputs) EXPECT_TRUE(has(reads, in)) << g.describe(i) << " misses " << g.describe(in);
      }
    }
  }
  EXPECT_EQ(q_casts, layers) << arch;
  EXPECT_EQ(out_casts, layers) << arch;
  // Activations in the cache's dtype: no cast around the attention, nothing to fold.
  const Graph bf16 = test::lowered_decode_graph(arch, DType::BF16, DType::BF16);
  const auto bf16_users = bf16.users();
  for (NodeId i = 0; i < bf16.size(); ++i)
    EXPECT_TRUE(cuda::attention_cast_reads(bf16, bf16_users, i).empty()) << arch << ": " << bf16.describe(i);
  // The knob off: nothing is kept live for a fold that will not happen.
  test::ScopedEnv off("RLX_CUDA_FUSE_ATTN_CASTS", "0");
  for (NodeId i = 0; i < g.size(); ++i) EXPECT_TRUE(cuda::attention_cast_reads(g, users, i).empty());
}

INSTANTIATE_TEST_SUITE_P(Archs, AttentionCastPattern,
                         ::testing::Values("gemma3", "gemma2", "qwen3", "qwen2", "llama", "phi3", "granite", "smollm3",
                                           "olmo2"),
                         [](const auto& info) { return info.param; });

}  // namespace
