// CUDA-graph replay must give exactly what direct launches give, run after
// run, with inputs changing every run and several shape buckets interleaved.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "rlx/models/bert/bert.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"

using namespace rlx;

namespace {

std::shared_ptr<Executable> compile_bert(Session& s, bool graphs, std::mt19937& rng, const Graph& g) {
  CompileOptions o;
  o.precision = DType::F16;
  o.cuda_graphs = graphs;
  auto exe = s.compile(g, o);
  std::normal_distribution<float> d(0.0f, 0.05f);
  for (NodeId id : exe->graph().leaves(OpKind::Param)) {
    const auto& n = exe->graph().node(id);
    Tensor t = Tensor::empty(DType::F32, static_dims(n.type.shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng) + (n.name.find("LayerNorm.weight") != std::string::npos);
    exe->set_param(n.attr<LeafAttrs>().name, t);
  }
  return exe;
}

}  // namespace

TEST(CudaGraphs, ReplayEqualsDirectLaunchesAcrossRunsAndBuckets) {
  register_builtin_backends();
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  bert::BertConfig cfg;
  cfg.hidden = 128;
  cfg.heads = 4;
  cfg.layers = 2;
  cfg.intermediate = 256;
  cfg.vocab_size = 1000;
  const Graph g = bert::build_graph(cfg);
  Session s("cuda");
  std::mt19937 wr(1), wr2(1);
  auto with = compile_bert(s, true, wr, g);
  auto without = compile_bert(s, false, wr2, g);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, 999);
  for (int run = 0; run < 24; ++run) {
    const int64_t B = run % 3 == 0 ? 4 : 2, L = run % 2 == 0 ? 16 : 24;
    Tensor ids = Tensor::empty(DType::I32, {B, L}), types = Tensor::zeros(DType::I32, {B, L});
    Tensor mask = Tensor::empty(DType::I32, {B, L}), pos = Tensor::empty(DType::I32, {L});
    for (int64_t i = 0; i < B * L; ++i) {
      ids.data<int32_t>()[i] = tok(rng);
      mask.data<int32_t>()[i] = (i % L) < L - (i / L) ? 1 : 0;  // right padding varies per row
    }
    for (int64_t l = 0; l < L; ++l) pos.data<int32_t>()[l] = static_cast<int32_t>(l);
    Tensor a = with->run({ids, types, mask, pos})[0];
    Tensor b = without->run({ids, types, mask, pos})[0];
    ASSERT_EQ(a.shape(), b.shape());
    ASSERT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << "run " << run << " (B=" << B << ", L=" << L << ")";
    double norm = 0;
    for (int64_t i = 0; i < cfg.hidden; ++i) norm += double(a.data<float>()[i]) * a.data<float>()[i];
    ASSERT_NEAR(norm, 1.0, 1e-2) << "outputs must be real embeddings, not zeros";
  }
  EXPECT_EQ(with->cached_specializations(), 4u);
}
