// The op budget of the LLM decode graphs: after the pass pipeline the CPU
// program (the CUDA one lowers node for node) keeps the fused forms — stacked
// q|k|v projections, QK-norm inside Rope, K's RoPE inside its cache write,
// each Gemma post-norm residual together with the next norm, KV writes that
// convert to the cache dtype without a Cast. A change that falls
// back to the unfused ops fails here with the counts, not just in a benchmark.
#include <gtest/gtest.h>

#include <filesystem>

#include "rlx/models/llm/config.h"
#include "rlx/models/llm/model.h"
#include "rlx/runtime/session.h"
#include "tests/models/tiny_llm_graph.h"

namespace rlx {
namespace {

int count(const Graph& g, OpKind op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

// KV-cache writes that rotate K as they store it (with QK-norm or without).
int rope_writes(const Graph& g, bool head_norm) {
  int n = 0;
  for (const Node& node : g.nodes())
    if (node.op == OpKind::WriteSlice && node.attr<WriteSliceAttrs>().rope)
      n += node.attr<WriteSliceAttrs>().rope_attrs.head_norm == head_norm;
  return n;
}

using test::lowered_decode_graph;

TEST(LlmFusion, Gemma3LayerIsFused) {
  const int layers = static_cast<int>(test::tiny_spec("gemma3").layers);
  const Graph g = lowered_decode_graph("gemma3");
  int rope_with_norm = 0;
  for (const Node& n : g.nodes())
    if (n.op == OpKind::Rope && n.attr<RopeAttrs>().head_norm) ++rope_with_norm;
  // q's Rope; k is rotated by its cache write.
  EXPECT_EQ(count(g, OpKind::Rope), layers) << print_graph(g);
  EXPECT_EQ(rope_with_norm, layers) << "QK-norm not fused into Rope";
  EXPECT_EQ(rope_writes(g, true), layers) << "K's norm + RoPE not fused into its cache write";
  EXPECT_EQ(count(g, OpKind::FusedPostRmsNorm), 2 * layers) << "post-norm residuals not fused";
  // Only layer 0's attn_norm stays a plain RmsNorm: the last layer's pair
  // yields the output norm.
  EXPECT_EQ(count(g, OpKind::RmsNorm), 1) << print_graph(g);
  // Q into the f16 attention and its output back: 2 per layer; none for the cache writes.
  EXPECT_EQ(count(g, OpKind::Cast), 2 * layers) << print_graph(g);
  EXPECT_EQ(count(g, OpKind::WriteSlice), 2 * layers);
  // Each stacked FusedPostRmsNorm is read through two Narrow views (no copies;
  // the last layer's sum is unused), and the head reads the last row through one.
  EXPECT_EQ(count(g, OpKind::Narrow), 2 * (2 * layers) - 1 + 1);
  EXPECT_EQ(count(g, OpKind::Gather), 1) << "only the embedding: the head's last row is a Narrow view";
  // Per layer [q | k], o, [gate | up], down, plus the tied Q8_0 head; v has
  // another type (f16 here, Q8_0 in some layers of the real file), its own MatMul.
  EXPECT_EQ(count(g, OpKind::DequantMatMul), 4 * layers + 1) << print_graph(g);
  EXPECT_EQ(count(g, OpKind::MatMul), layers) << print_graph(g);
}

TEST(LlmFusion, Qwen3QkNormIsFusedIntoRope) {
  const int layers = static_cast<int>(test::tiny_spec("qwen3").layers);
  const Graph g = lowered_decode_graph("qwen3");
  int rope_with_norm = 0;
  for (const Node& n : g.nodes())
    if (n.op == OpKind::Rope && n.attr<RopeAttrs>().head_norm) ++rope_with_norm;
  EXPECT_EQ(rope_with_norm, layers) << print_graph(g);
  EXPECT_EQ(count(g, OpKind::Rope), layers) << print_graph(g);
  EXPECT_EQ(rope_writes(g, true), layers) << print_graph(g);
  // attn_norm and ffn_norm per layer, plus the output norm; no per-head norms left.
  EXPECT_EQ(count(g, OpKind::RmsNorm) + count(g, OpKind::FusedResidualRmsNorm), 2 * layers + 1) << print_graph(g);
  EXPECT_EQ(count(g, OpKind::Cast), 2 * layers) << print_graph(g);
  // [q | k | v], o, [gate | up], down per layer (the head is an f16 MatMul);
  // v is a Narrow of the stacked projection, and the head's last row one more.
  EXPECT_EQ(count(g, OpKind::DequantMatMul), 4 * layers) << print_graph(g);
  EXPECT_EQ(count(g, OpKind::Narrow), layers + 1) << print_graph(g);
  // Q5_0 q and k with Q8_0 v (tiny_spec) stack as one Q8_0 matrix per layer.
  int q8_qkv = 0;
  for (const Node& n : g.nodes()) {
    const Node& w = n.op == OpKind::DequantMatMul ? g.node(n.inputs[1]) : n;
    q8_qkv += w.name.find(llm::names::kQkvSuffix) != std::string::npos && w.type.dtype == DType::Q8_0 && &w != &n;
  }
  EXPECT_EQ(q8_qkv, layers) << print_graph(g);
}

TEST(LlmFusion, Qwen2StacksQkvAndBiases) {
  const int layers = static_cast<int>(test::tiny_spec("qwen2").layers);
  const Graph g = lowered_decode_graph("qwen2");
  // [q | k | v], o, [gate | up], down per layer, plus the Q8_0 output head.
  EXPECT_EQ(count(g, OpKind::DequantMatMul), 4 * layers + 1) << print_graph(g);
  int bias_params = 0;
  for (const Node& n : g.nodes())
    bias_params += n.op == OpKind::Param && n.attr<LeafAttrs>().name.find(llm::names::kQkvBiasSuffix) != std::string::npos;
  EXPECT_EQ(bias_params, layers) << "one stacked q|k|v bias per layer";
}

TEST(LlmFusion, LlamaRopesKInItsCacheWrite) {
  const int layers = static_cast<int>(test::tiny_spec("llama").layers);
  const Graph g = lowered_decode_graph("llama");
  EXPECT_EQ(count(g, OpKind::Rope), layers) << print_graph(g);
  EXPECT_EQ(rope_writes(g, false), layers) << print_graph(g);
  EXPECT_EQ(count(g, OpKind::WriteSlice), 2 * layers);
}

}  // namespace
}  // namespace rlx
