// CUDA-graph replay must give exactly what direct launches give, run after
// run, with inputs changing every run and several shape buckets interleaved.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "rlx/backends/cuda/cublaslt.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/encoder.h"
#include "rlx/backends/cuda/kernels/elementwise.h"
#include "rlx/backends/cuda/memory.h"
#include "rlx/core/env.h"
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

// Hidden 128 over 4 heads (head dim 32), FFN 256, a 1,000-token vocabulary.
bert::BertConfig small_bert(int layers) {
  bert::BertConfig cfg;
  cfg.hidden = 128;
  cfg.heads = 4;
  cfg.layers = layers;
  cfg.intermediate = 256;
  cfg.vocab_size = 1000;
  return cfg;
}

}  // namespace

TEST(CudaGraphs, ReplayEqualsDirectLaunchesAcrossRunsAndBuckets) {
  register_builtin_backends();
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const bert::BertConfig cfg = small_bert(2);
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

// Outputs come back over pinned blocks that are reused once the caller drops
// a run's tensors (RLX_CUDA_PINNED_OUTPUTS). Tensors still held must keep
// their values however many runs follow (the pool runs out after three and
// later runs are copied out), stay writable, and a block the caller wrote
// into and dropped must come back with the new run's values only.
TEST(CudaGraphs, HeldOutputsKeepTheirValuesAcrossRuns) {
  register_builtin_backends();
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const bert::BertConfig cfg = small_bert(1);
  const Graph g = bert::build_graph(cfg);
  Session s("cuda");
  std::mt19937 wr(3);
  auto exe = compile_bert(s, true, wr, g);
  const int64_t B = 3, L = 16;
  auto inputs_for = [&](int run) {
    std::mt19937 rng(static_cast<uint32_t>(100 + run));
    std::uniform_int_distribution<int32_t> tok(0, 999);
    Tensor ids = Tensor::empty(DType::I32, {B, L}), types = Tensor::zeros(DType::I32, {B, L});
    Tensor mask = Tensor::empty(DType::I32, {B, L}), pos = Tensor::empty(DType::I32, {L});
    for (int64_t i = 0; i < B * L; ++i) {
      ids.data<int32_t>()[i] = tok(rng);
      mask.data<int32_t>()[i] = 1;
    }
    for (int64_t l = 0; l < L; ++l) pos.data<int32_t>()[l] = static_cast<int32_t>(l);
    return std::vector<Tensor>{ids, types, mask, pos};
  };
  constexpr int kRuns = 6;
  std::vector<Tensor> held, copies;
  for (int run = 0; run < kRuns; ++run) {
    held.push_back(exe->run(inputs_for(run))[0]);
    copies.push_back(held.back().clone());
    if (run > 0) {
      ASSERT_NE(std::memcmp(held[run].raw(), held[run - 1].raw(), held[run].nbytes()), 0) << run;
    }
  }
  for (int run = 0; run < kRuns; ++run) {
    EXPECT_EQ(std::memcmp(held[run].raw(), copies[run].raw(), held[run].nbytes()), 0)
        << "run " << run << "'s output changed after later runs";
  }
  // Writable, and a dropped block carries nothing of what was written into it.
  for (Tensor& t : held) std::memset(t.raw_mut(), 0x7f, t.nbytes());
  held.clear();
  for (int round = 0; round < 2; ++round) {
    for (int run = 0; run < kRuns; ++run) {
      const Tensor again = exe->run(inputs_for(run))[0];
      EXPECT_EQ(std::memcmp(again.raw(), copies[run].raw(), again.nbytes()), 0) << "round " << round << " run " << run;
    }
  }
}

// Every layer's attention reads one key mask: the first prepares it (bytes,
// per-row lengths) in the program's persistent memory and the later layers
// reuse that. Each run must prepare the new mask again (graph replays
// included); right-padded rows and rows that are not a prefix must match the
// CPU.
TEST(CudaGraphs, LayersShareOnePreparedKeyMask) {
  register_builtin_backends();
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const bert::BertConfig cfg = small_bert(3);  // head dim 32: the tensor-core prefill path
  const Graph g = bert::build_graph(cfg);
  Session gpu("cuda"), cpu("cpu");
  CompileOptions go, co;
  go.precision = DType::F16;
  co.precision = DType::F32;
  auto dev = gpu.compile(g, go);
  auto ref = cpu.compile(g, co);
  for (const auto& exe : {dev, ref})  // the same weights, drawn per name
    for (NodeId id : exe->graph().leaves(OpKind::Param)) {
      const auto& n = exe->graph().node(id);
      const std::string& name = n.attr<LeafAttrs>().name;
      std::mt19937 wr(static_cast<uint32_t>(std::hash<std::string>{}(name)));
      std::normal_distribution<float> d(0.0f, 0.05f);
      Tensor t = Tensor::empty(DType::F32, static_dims(n.type.shape));
      for (int64_t i = 0; i < t.numel(); ++i)
        t.data<float>()[i] = d(wr) + (name.find("LayerNorm.weight") != std::string::npos);
      exe->set_param(name, t);
    }
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, 999);
  const int64_t B = 4, L = 40, H = cfg.hidden;
  for (int run = 0; run < 3; ++run) {
    Tensor ids = Tensor::empty(DType::I32, {B, L}), types = Tensor::zeros(DType::I32, {B, L});
    Tensor mask = Tensor::empty(DType::I32, {B, L}), pos = Tensor::empty(DType::I32, {L});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t l = 0; l < L; ++l) {
        ids.data<int32_t>()[b * L + l] = tok(rng);
        const int64_t keep = L - 7 * (b + run);  // right padding that changes every run
        bool on = l < keep;
        if (b == (run + 1) % B) on = (l + run) % 3 != 1;  // holes: not a prefix
        mask.data<int32_t>()[b * L + l] = on ? 1 : 0;
      }
    for (int64_t l = 0; l < L; ++l) pos.data<int32_t>()[l] = static_cast<int32_t>(l);
    Tensor a = dev->run({ids, types, mask, pos})[0];
    Tensor e = ref->run({ids, types, mask, pos})[0];
    ASSERT_EQ(a.shape(), e.shape());
    for (int64_t b = 0; b < B; ++b) {
      double dot = 0, na = 0, ne = 0;
      for (int64_t i = 0; i < H; ++i) {
        const double x = a.data<float>()[b * H + i], y = e.data<float>()[b * H + i];
        dot += x * y, na += x * x, ne += y * y;
      }
      EXPECT_GT(dot / std::sqrt(na * ne + 1e-30), 0.999) << "run " << run << " row " << b;
      EXPECT_NEAR(ne, 1.0, 1e-3) << "the reference must be a real embedding";
    }
  }
  const std::string report = dev->dispatch_report();
  size_t shared = 0;
  for (size_t at = report.find("prepared by an earlier layer"); at != std::string::npos;
       at = report.find("prepared by an earlier layer", at + 1))
    ++shared;
  EXPECT_EQ(shared, static_cast<size_t>(cfg.layers - 1)) << report;
}

// Inside a captured graph, edges into rlx kernels become programmatic (PDL);
// edges into library kernels (cuBLAS) stay full dependencies. Kernel names
// are read through the driver, which also knows cuBLAS's kernels (the
// runtime's lookup failed on them with an API error under compute-sanitizer).
TEST(CudaGraphs, EdgesIntoRlxKernelsBecomeProgrammatic) {
  register_builtin_backends();
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  using namespace rlx::cuda;
  constexpr int64_t n = 16;  // x: n × n; y = -(|-x| · |-x|ᵀ)
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> x(n * n);
  for (auto& e : x) e = u(rng);
  DeviceBuffer buf(0, 5 * n * n * sizeof(float), "test");
  float* p = static_cast<float*>(buf.data());
  float *dx = p, *d1 = p + n * n, *d2 = p + 2 * n * n, *dc = p + 3 * n * n, *dy = p + 4 * n * n;
  ASSERT_EQ(cudaMemcpy(dx, x.data(), n * n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  GemmEngine gemm(0);
  GemmArgs g;
  g.trans_b = true;
  g.M = g.N = g.K = n;
  g.A = g.B = d2;
  g.lda = g.ldb = g.ldc = n;
  g.C = dc;
  ThunkSchedule s;
  s.add({-1, "neg", [=](cudaStream_t st) { launch_unary(UnaryFn::Neg, DType::F32, dx, d1, n * n, st); }});
  s.add({-1, "abs", [=](cudaStream_t st) { launch_unary(UnaryFn::Abs, DType::F32, d1, d2, n * n, st); }});
  s.add({-1, "gemm", [&gemm, g](cudaStream_t st) { gemm.run(g, st); }});
  s.add({-1, "neg", [=](cudaStream_t st) { launch_unary(UnaryFn::Neg, DType::F32, dc, dy, n * n, st); }});
  s.end_segment();
  Encoder enc(true, [](NodeId) { return std::string("test"); });
  if (!enc.uses_graphs()) GTEST_SKIP() << "CUDA graphs are off (RLX_CUDA_GRAPHS=0)";
  Stream stream;
  for (int run = 0; run < 2; ++run) enc.run(s, stream.get());
  stream.synchronize();
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> y(n * n);
  ASSERT_EQ(cudaMemcpy(y.data(), dy, n * n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < n; ++k) ref += std::fabs(double{x[i * n + k]}) * std::fabs(double{x[j * n + k]});
      EXPECT_NEAR(y[i * n + j], -ref, 1e-4 * (1 + std::fabs(ref))) << i << "," << j;
    }
  EXPECT_EQ(enc.captures(), 1);
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  if (major < 9 || !env_bool("RLX_CUDA_PDL")) GTEST_SKIP() << "no programmatic launches before sm_90 or with RLX_CUDA_PDL=0";
  // neg → abs and cuBLAS's last kernel → neg; abs → cuBLAS stays a full dependency.
  EXPECT_EQ(enc.programmatic_edges(), 2);
}
