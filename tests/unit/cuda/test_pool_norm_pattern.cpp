// Where the CUDA lowering runs an encoder's pooling tail as one kernel
// (pool_norm_reads, lower_pool_norm.cpp): the graph part of the decision, on
// the BERT builder's graphs after the compile passes. No GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "rlx/backends/cuda/lowering.h"
#include "rlx/models/bert/bert.h"
#include "tests/test_util.h"
#include "tests/unit/cuda/pattern_util.h"

using namespace rlx;

namespace {

// The node the fused kernel would run at (the graph's output), and what it reads.
struct Found {
  NodeId at = -1;
  std::vector<NodeId> reads;
};

Found find(const bert::BertConfig& cfg, DType precision, Graph* out = nullptr) {
  // A program is compiled for one binding of the symbolic dims (Executable::program_for).
  const Graph g = specialize(rlx::test::lowered_at(bert::build_graph(cfg), precision), {{"B", 3}, {"L", 16}});
  const auto users = g.users();
  Found f;
  for (NodeId i = 0; i < g.size(); ++i)
    if (auto r = cuda::pool_norm_reads(g, users, i); !r.empty()) {
      EXPECT_EQ(f.at, -1) << "one pooling tail";
      f = {i, r};
    }
  if (out) *out = g;
  return f;
}

bert::BertConfig tiny(bert::Pooling pooling, bool normalize) {
  bert::BertConfig c;
  c.hidden = 64;
  c.layers = 1;
  c.heads = 2;
  c.intermediate = 128;
  c.vocab_size = 100;
  c.pooling = pooling;
  c.normalize = normalize;
  return c;
}

TEST(PoolNormPattern, MeanPooledNormalizedEncoderFusesAtItsOutput) {
  for (DType p : {DType::F16, DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(p));
    Graph g;
    const Found f = find(tiny(bert::Pooling::Mean, true), p, &g);
    ASSERT_GE(f.at, 0);
    EXPECT_EQ(g.outputs().at(0).second, f.at);  // the output dtype cast (or the norm in f32) is the last node
    ASSERT_EQ(f.reads.size(), 3u);               // x, the weights, gamma
    // The mask is read straight from the program input (its cast absorbed).
    EXPECT_EQ(g.node(f.reads[1]).op, OpKind::Input);
    EXPECT_EQ(g.node(f.reads[1]).type.dtype, DType::I32);
  }
}

TEST(PoolNormPattern, OtherTailsAndTheKnobDoNotFuse) {
  EXPECT_LT(find(tiny(bert::Pooling::Mean, false), DType::F16).at, 0);  // divides by the count instead
  EXPECT_LT(find(tiny(bert::Pooling::Cls, true), DType::F16).at, 0);
  EXPECT_LT(find(tiny(bert::Pooling::None, false), DType::F16).at, 0);
  rlx::test::ScopedEnv env("RLX_CUDA_FUSE_POOL_NORM", "0");
  EXPECT_LT(find(tiny(bert::Pooling::Mean, true), DType::F16).at, 0);
}

}  // namespace
