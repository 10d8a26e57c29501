// Shared by the GPU tests that run small random BERTs (the fused-kernel tests
// against the CPU): random weights, right-padded inputs, and the pooled
// embeddings' cosine check.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"
#include "rlx/models/bert/bert.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

namespace rlx::test {

// `g` compiled on `device` at `precision`, every parameter N(0, 0.05²) from
// `seed` (LayerNorm weights around 1).
inline std::shared_ptr<Executable> compile_random_bert(const Graph& g, const std::string& device, DType precision,
                                                       uint32_t seed) {
  Session s(device);
  CompileOptions o;
  o.precision = precision;
  auto exe = s.compile(g, o);
  std::mt19937 wr(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  for (NodeId id : exe->graph().leaves(OpKind::Param)) {
    const auto& n = exe->graph().node(id);
    Tensor t = Tensor::empty(DType::F32, static_dims(n.type.shape));
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = d(wr) + (n.name.find("LayerNorm.weight") != std::string::npos);
    exe->set_param(n.attr<LeafAttrs>().name, t);
  }
  return exe;
}

// Encoder inputs (ids, token types, mask, positions) for B rows of L tokens;
// row b keeps kept(b) tokens.
template <typename Kept>
std::vector<Tensor> bert_inputs(int64_t B, int64_t L, int32_t vocab, uint32_t seed, Kept&& kept) {
  std::mt19937 r(seed);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  Tensor ids = Tensor::empty(DType::I32, {B, L}), types = Tensor::zeros(DType::I32, {B, L});
  Tensor mask = Tensor::empty(DType::I32, {B, L}), pos = Tensor::empty(DType::I32, {L});
  for (int64_t i = 0; i < B * L; ++i) {
    ids.data<int32_t>()[i] = tok(r);
    mask.data<int32_t>()[i] = (i % L) < kept(i / L) ? 1 : 0;
  }
  for (int64_t l = 0; l < L; ++l) pos.data<int32_t>()[l] = static_cast<int32_t>(l);
  return {ids, types, mask, pos};
}

// Every row of `got` ([B, H] embeddings) within cosine `min_cos` of `ref`'s.
inline void expect_rows_close(const Tensor& ref, Tensor got, int64_t H, double min_cos) {
  if (got.dtype() != DType::F32) got = got.to(DType::F32);
  ASSERT_EQ(got.shape(), ref.shape());
  for (int64_t b = 0; b * H < ref.numel(); ++b) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t i = 0; i < H; ++i) {
      const double x = ref.data<float>()[b * H + i], y = got.data<float>()[b * H + i];
      dot += x * y, na += x * x, nb += y * y;
    }
    EXPECT_GE(dot / std::sqrt(na * nb), min_cos) << "row " << b;
  }
}

// A two-layer BERT of the given widths (vocabulary 1000), five right-padded
// rows of 40 tokens (row b keeps 40 − 3b; from `input_seed`) and, as the
// reference, its pooled embeddings on the CPU in f32 with the weights of
// `weight_seed` (compile_random_bert).
struct SmallBert {
  bert::BertConfig cfg;
  Graph graph;
  std::vector<Tensor> inputs;
  Tensor ref;
};
inline SmallBert small_bert(int64_t hidden, int64_t heads, int64_t intermediate, uint32_t input_seed,
                            uint32_t weight_seed) {
  SmallBert b;
  b.cfg.hidden = hidden;
  b.cfg.heads = heads;
  b.cfg.layers = 2;
  b.cfg.intermediate = intermediate;
  b.cfg.vocab_size = 1000;
  b.graph = bert::build_graph(b.cfg);
  const int64_t B = 5, L = 40;
  b.inputs = bert_inputs(B, L, 1000, input_seed, [&](int64_t r) { return L - 3 * r; });
  b.ref = compile_random_bert(b.graph, "cpu", DType::F32, weight_seed)->run(b.inputs)[0];
  return b;
}

// How many times `what` occurs in a dispatch report.
inline size_t count_in(const std::string& report, const std::string& what) {
  size_t n = 0;
  for (size_t at = report.find(what); at != std::string::npos; at = report.find(what, at + 1)) ++n;
  return n;
}

// `b` compiled on CUDA in f16 (weights of `weight_seed`, as its reference's)
// with `knob` set to 1 and to 0: its pooled embeddings within cosine 0.999 of
// the reference each time, and `marker` in the dispatch report at least
// `min_count` times with the knob on (a report may list a thunk more than
// once), never with it off.
inline void expect_knob_fuses_bert(const SmallBert& b, uint32_t weight_seed, const char* knob,
                                   const std::string& marker, size_t min_count) {
  for (const char* on : {"1", "0"}) {
    SCOPED_TRACE(testing::Message() << knob << "=" << on);
    ScopedEnv env(knob, on);
    auto exe = compile_random_bert(b.graph, "cuda", DType::F16, weight_seed);
    const Tensor got = exe->run(b.inputs)[0];
    const std::string report = exe->dispatch_report();
    if (std::string(on) == "1") {
      EXPECT_GE(count_in(report, marker), min_count) << report;
    } else {
      EXPECT_EQ(count_in(report, marker), 0u) << report;
    }
    expect_rows_close(b.ref, got, b.cfg.hidden, 0.999);
  }
}

}  // namespace rlx::test
