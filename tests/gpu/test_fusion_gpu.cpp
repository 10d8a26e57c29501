// CUDA lowering-time fusions against the CPU backend running the same graph.
//
// Embedding + LayerNorm (try_lower_embedding_norm, lower_norm.cpp): BERT's
// word[ids] + pos[positions] + type[type_ids] → LayerNorm becomes one launch.
// Each case builds the graph, runs it on the CPU in f32 (the reference) and on
// CUDA in f32/f16/bf16, with fresh random tables and indices (the seed is
// printed on failure). Table and norm values are rounded to bf16 on the host,
// so every precision stores them exactly and the backends differ only in
// arithmetic. Tolerance |got − ref| ≤ atol + rtol·|ref|: f32 1e-4/1e-4,
// f16 5e-3/5e-3, bf16 4e-2/1e-2 (the unfused path rounds the sum to the
// dtype before normalizing). Every case also checks from the dispatch report
// whether the fused launch ran, so the fused kernel (not the unfused path) is
// what the comparison tests.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/cuda/kernels/movement.h"
#include "rlx/backends/cuda/kernels/norm.h"
#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/cuda_backend_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using rlx::test::ScopedEnv;

using rlx::test::rng;
#define TRACE_SEED() RLX_TRACE_SEED()


// Uniform in [lo, hi], rounded to bf16 (exact in f16 too at these magnitudes).
Tensor random_values(std::vector<int64_t> shape, float lo, float hi) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_f32(f32_to_bf16(d(rng())));
  return t;
}

// Indices uniform in [0, n).
Tensor random_ids(DType dt, std::vector<int64_t> shape, int64_t n) {
  Tensor t = Tensor::empty(dt, std::move(shape));
  std::uniform_int_distribution<int64_t> d(0, n - 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::I64) t.data<int64_t>()[i] = d(rng());
    else t.data<int32_t>()[i] = static_cast<int32_t>(d(rng()));
  }
  return t;
}

void set_index(Tensor& t, int64_t i, int64_t v) {
  if (t.dtype() == DType::I64) t.data<int64_t>()[i] = v;
  else t.data<int32_t>()[i] = static_cast<int32_t>(v);
}

struct Problem {
  Graph g;
  std::map<std::string, Tensor> params;
  std::vector<Tensor> inputs;
};

struct Result {
  std::vector<Tensor> outs;  // as f32
  std::string report;
};

std::shared_ptr<Executable> compile(const std::string& device, const Problem& p, DType precision) {
  Session s(device);
  CompileOptions o;
  o.precision = precision;
  auto exe = s.compile(p.g, o);
  for (const auto& [name, t] : p.params) exe->set_param(name, t);
  return exe;
}

Result run_graph(const std::string& device, const Problem& p, DType precision) {
  auto exe = compile(device, p, precision);
  Result r;
  for (const Tensor& t : exe->run(p.inputs))
    r.outs.push_back(is_float(t.dtype()) && t.dtype() != DType::F32 ? t.to(DType::F32) : t);
  r.report = exe->dispatch_report();
  return r;
}

void expect_close(const Tensor& got, const Tensor& ref, DType dt, const std::string& what) {
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  if (!is_float(ref.dtype())) {
    ASSERT_EQ(got.dtype(), ref.dtype()) << what;
    EXPECT_EQ(std::memcmp(got.raw(), ref.raw(), ref.nbytes()), 0) << what;
    return;
  }
  const double atol = dt == DType::F32 ? 1e-4 : dt == DType::F16 ? 5e-3 : 4e-2;
  const double rtol = dt == DType::F32 ? 1e-4 : dt == DType::F16 ? 5e-3 : 1e-2;
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.data<float>()[i], r = ref.data<float>()[i];
    if (std::fabs(g - r) <= atol + rtol * std::fabs(r)) continue;  // NaN fails
    if (++bad <= 5) ADD_FAILURE() << what << ": [" << i << "] got " << g << ", want " << r;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.numel() << " values outside the tolerance";
}

Value gather_named(Value table, Value ids, const std::string& name) {
  return op(OpKind::Gather, NoAttrs{}, {table, ids}, name);
}

struct EmbedShape {
  int64_t B, L, C;
  int64_t vocab = 97, max_pos = 40;
  DType type_ids = DType::I32;
};

// BERT's embedding layer: position, word and token-type rows summed, then
// LayerNorm (the fusion pass turns it into FusedResidualLayerNorm(word + pos, type)).
Problem bert_embedding(const EmbedShape& e) {
  Problem p;
  Graph& g = p.g;
  auto ids = input(g, "ids", DType::I32, {e.B, e.L});
  auto types = input(g, "types", e.type_ids, {e.B, e.L});
  auto pos = input(g, "pos", DType::I32, {e.L});
  auto ptab = param(g, "ptab", DType::F32, {e.max_pos, e.C});
  auto pe = gather_named(ptab, pos, "pos_gather");
  auto word = param(g, "word", DType::F32, {e.vocab, e.C});
  auto we = gather_named(word, ids, "word_gather");
  auto sum = we + pe;
  auto ttab = param(g, "ttab", DType::F32, {2, e.C});
  auto te = gather_named(ttab, types, "type_gather");
  auto gamma = param(g, "gamma", DType::F32, {e.C});
  auto beta = param(g, "beta", DType::F32, {e.C});
  output("y", layer_norm(sum + te, gamma, beta, 1e-12f));
  p.params = {{"ptab", random_values({e.max_pos, e.C}, -1, 1)},
              {"word", random_values({e.vocab, e.C}, -1, 1)},
              {"ttab", random_values({2, e.C}, -1, 1)},
              {"gamma", random_values({e.C}, 0.5f, 2)},
              {"beta", random_values({e.C}, -1, 1)}};
  p.inputs = {random_ids(DType::I32, {e.B, e.L}, e.vocab), random_ids(e.type_ids, {e.B, e.L}, 2),
              random_ids(DType::I32, {e.L}, e.max_pos)};
  return p;
}

bool fused(const std::string& report, const std::string& what) { return report.find(what) != std::string::npos; }

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};

}  // namespace

// (a) The BERT form, every dtype, over the kernel's paths: warp per row (384,
// 100 in f32), scalar (100 and 1030 in 16-bit: not a multiple of 8; 1030 in
// f32: not a multiple of 4; 17000: too long for registers), block per row (1536).
TEST(FusionGpu, EmbeddingLayerNormMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  TRACE_SEED();
  const EmbedShape shapes[] = {{3, 7, 384},  {2, 5, 100, 300, 9, DType::I64}, {2, 3, 1536},
                               {1, 4, 1030, 40, 6, DType::I64}, {1, 3, 17000, 8, 5}};
  for (const EmbedShape& e : shapes)
    for (DType dt : kFloats) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " B=" << e.B << " L=" << e.L << " C=" << e.C);
      const Problem p = bert_embedding(e);
      const Result ref = run_graph("cpu", p, DType::F32);
      const Result got = run_graph("cuda", p, dt);
      EXPECT_TRUE(fused(got.report, "gather x3")) << got.report;
      expect_close(got.outs[0], ref.outs[0], dt, "y");
    }
}

// (b) A single table: layer_norm(table[ids]).
TEST(FusionGpu, SingleGatherLayerNormMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  TRACE_SEED();
  for (DType dt : kFloats)
    for (int64_t C : {64, 384, 200}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " C=" << C);
      Problem p;
      auto ids = input(p.g, "ids", DType::I64, {5, 9});
      auto table = param(p.g, "table", DType::F32, {50, C});
      auto gamma = param(p.g, "gamma", DType::F32, {C});
      auto beta = param(p.g, "beta", DType::F32, {C});
      output("y", layer_norm(gather_named(table, ids, "lookup"), gamma, beta));
      p.params = {{"table", random_values({50, C}, -2, 2)},
                  {"gamma", random_values({C}, 0.5f, 2)},
                  {"beta", random_values({C}, -1, 1)}};
      p.inputs = {random_ids(DType::I64, {5, 9}, 50)};
      const Result ref = run_graph("cpu", p, DType::F32);
      const Result got = run_graph("cuda", p, dt);
      EXPECT_TRUE(fused(got.report, "gather x1 (")) << got.report;
      expect_close(got.outs[0], ref.outs[0], dt, "y");
    }
}

// (c) An intermediate sum that is also a graph output must not be fused
// away; both outputs stay right.
TEST(FusionGpu, EmbeddingSumThatIsAnOutputIsNotFused) {
  SKIP_WITHOUT_CUDA();
  TRACE_SEED();
  for (DType dt : kFloats) {
    SCOPED_TRACE(dtype_name(dt));
    const EmbedShape e{2, 6, 128};
    Problem p = bert_embedding(e);
    // Rebuild with word + pos exposed as an output.
    Problem q;
    auto ids = input(q.g, "ids", DType::I32, {e.B, e.L});
    auto types = input(q.g, "types", DType::I32, {e.B, e.L});
    auto pos = input(q.g, "pos", DType::I32, {e.L});
    auto pe = gather_named(param(q.g, "ptab", DType::F32, {e.max_pos, e.C}), pos, "pos_gather");
    auto we = gather_named(param(q.g, "word", DType::F32, {e.vocab, e.C}), ids, "word_gather");
    auto sum = we + pe;
    auto te = gather_named(param(q.g, "ttab", DType::F32, {2, e.C}), types, "type_gather");
    auto gamma = param(q.g, "gamma", DType::F32, {e.C});
    auto beta = param(q.g, "beta", DType::F32, {e.C});
    output("sum", sum);
    output("y", layer_norm(sum + te, gamma, beta, 1e-12f));
    q.params = p.params;
    q.inputs = p.inputs;
    const Result ref = run_graph("cpu", q, DType::F32);
    const Result got = run_graph("cuda", q, dt);
    EXPECT_FALSE(fused(got.report, "gather x")) << got.report;
    expect_close(got.outs[0], ref.outs[0], dt, "sum");
    expect_close(got.outs[1], ref.outs[1], dt, "y");
  }
}

// A computed index must still be alive where the fused launch runs (the
// norm's position): one whose only reader is its gather may have had its
// buffer reused by then, so the fusion declines; the same index also read
// as a graph output stays alive, and the fusion applies.
TEST(FusionGpu, ComputedIndexFusesOnlyWhileAlive) {
  SKIP_WITHOUT_CUDA();
  TRACE_SEED();
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "index is also an output" : "index read only by its gather");
    Problem p;
    auto ids = input(p.g, "ids", DType::I32, {4, 8});
    auto pos = input(p.g, "pos", DType::I32, {8});
    auto shifted = ids + constant(p.g, Tensor::from<int32_t>(std::vector<int32_t>{3}, {1}));
    auto pe = gather_named(param(p.g, "ptab", DType::F32, {16, 256}), pos, "pos_gather");
    auto we = gather_named(param(p.g, "word", DType::F32, {64, 256}), shifted, "word_gather");
    auto gamma = param(p.g, "gamma", DType::F32, {256});
    auto beta = param(p.g, "beta", DType::F32, {256});
    output("y", layer_norm(we + pe, gamma, beta));
    if (keep) output("shifted", shifted);
    p.params = {{"ptab", random_values({16, 256}, -1, 1)},
                {"word", random_values({64, 256}, -1, 1)},
                {"gamma", random_values({256}, 0.5f, 2)},
                {"beta", random_values({256}, -1, 1)}};
    p.inputs = {random_ids(DType::I32, {4, 8}, 61), random_ids(DType::I32, {8}, 16)};
    const Result ref = run_graph("cpu", p, DType::F32);
    const Result got = run_graph("cuda", p, DType::F16);
    EXPECT_EQ(fused(got.report, "gather x2"), keep) << got.report;
    for (size_t i = 0; i < ref.outs.size(); ++i) expect_close(got.outs[i], ref.outs[i], DType::F16, str("output ", i));
  }
}

// (d) An index out of range is reported against its own gather (word, the
// periodic position term, or type), fused or not; the next good run succeeds.
TEST(FusionGpu, EmbeddingIndexOutOfRangeNamesTheGather) {
  SKIP_WITHOUT_CUDA();
  TRACE_SEED();
  for (const char* knob : {"1", "0"}) {
    ScopedEnv env("RLX_CUDA_FUSE_EMBED_NORM", knob);
    SCOPED_TRACE(str("RLX_CUDA_FUSE_EMBED_NORM=", knob));
    const EmbedShape e{2, 5, 384, 50, 8, DType::I64};
    const Problem p = bert_embedding(e);
    auto exe = compile("cuda", p, DType::F16);
    ASSERT_EQ(exe->run(p.inputs).size(), 1u);
    EXPECT_EQ(fused(exe->dispatch_report(), "gather x3"), knob[0] == '1') << exe->dispatch_report();
    struct Bad {
      size_t input;
      int64_t at, value;
      const char* gather;
    };
    for (const Bad& b : {Bad{0, 7, e.vocab, "'word_gather'"}, Bad{0, 0, -1, "'word_gather'"},
                         Bad{2, 3, e.max_pos, "'pos_gather'"}, Bad{1, 9, 2, "'type_gather'"}}) {
      SCOPED_TRACE(str(b.gather, " index ", b.value));
      std::vector<Tensor> in = p.inputs;
      in[b.input] = in[b.input].clone();  // copies are shallow
      set_index(in[b.input], b.at, b.value);
      const std::string msg = test::error_of([&] { exe->run(in); });
      EXPECT_NE(msg.find(str("(Gather ", b.gather, ")")), std::string::npos) << msg;
      EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
      for (const char* other : {"'word_gather'", "'pos_gather'", "'type_gather'"})
        if (std::string(other) != b.gather) {
          EXPECT_EQ(msg.find(other), std::string::npos) << msg;
        }
    }
    EXPECT_EQ(test::error_of([&] { exe->run(p.inputs); }), "") << "flags must be cleared between runs";
  }
}

// (e) The knob: on (the default) one fused launch replaces the gathers, adds
// and norm; off, they run one by one. Both agree with the CPU.
TEST(FusionGpu, EmbeddingFusionKnob) {
  SKIP_WITHOUT_CUDA();
  TRACE_SEED();
  const Problem p = bert_embedding({4, 16, 384});
  const Result ref = run_graph("cpu", p, DType::F32);
  for (const char* knob : {static_cast<const char*>(nullptr), "1", "0"}) {
    ScopedEnv env("RLX_CUDA_FUSE_EMBED_NORM", knob);
    const bool on = !knob || knob[0] == '1';
    SCOPED_TRACE(knob ? str("RLX_CUDA_FUSE_EMBED_NORM=", knob) : std::string("RLX_CUDA_FUSE_EMBED_NORM unset"));
    const Result got = run_graph("cuda", p, DType::F16);
    EXPECT_EQ(fused(got.report, "gather x3 ("), on) << got.report;
    EXPECT_EQ(fused(got.report, "+ add + layer_norm f16"), on) << got.report;
    for (const char* g : {"(Gather 'word_gather') -> gather", "(Gather 'pos_gather') -> gather",
                          "(Gather 'type_gather') -> gather"})
      EXPECT_EQ(fused(got.report, g), !on) << g << "\n" << got.report;
    expect_close(got.outs[0], ref.outs[0], DType::F16, "y");
  }
}

// The launcher directly, on what the graphs above cannot produce: a table
// pointer off 16-byte alignment (the scalar kernel), a bad index in one term
// only (that term adds zeros and sets its own flag), mixed i32/i64 indices.
TEST(FusionGpu, EmbeddingNormLauncherMisalignedAndBadIndex) {
  SKIP_WITHOUT_CUDA();
  TRACE_SEED();
  const int64_t rows = 12, cols = 384, period = 4, n0 = 30, n1 = 5;
  for (size_t skew : {size_t{0}, size_t{2}}) {
    SCOPED_TRACE(str("table skew ", skew, " bytes"));
    std::vector<uint16_t> t0(n0 * cols), t1(n1 * cols), gb(2 * cols);
    std::vector<double> v0(t0.size()), v1(t1.size()), vg(gb.size());
    auto fill = [](std::vector<uint16_t>& h, std::vector<double>& v, float lo, float hi) {
      std::uniform_real_distribution<float> d(lo, hi);
      for (size_t i = 0; i < h.size(); ++i) {
        h[i] = f32_to_f16(d(rng()));
        v[i] = f16_to_f32(h[i]);
      }
    };
    fill(t0, v0, -1, 1);
    fill(t1, v1, -1, 1);
    fill(gb, vg, 0.5f, 2);
    std::vector<int64_t> i0(rows);
    std::vector<int32_t> i1(period);
    for (auto& x : i0) x = static_cast<int64_t>(rng()() % n0);
    for (auto& x : i1) x = static_cast<int32_t>(rng()() % n1);
    i0[5] = n0;  // out of range: term 0 adds zeros to row 5

    char *dt0, *dt1, *dgb, *di0, *di1, *dy;
    int32_t* dflags;
    ASSERT_EQ(cudaMalloc(&dt0, t0.size() * 2 + 16), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dt1, t1.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dgb, gb.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&di0, rows * 8), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&di1, period * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, rows * cols * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dflags, 8), cudaSuccess);
    cudaMemcpy(dt0 + skew, t0.data(), t0.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dt1, t1.data(), t1.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dgb, gb.data(), gb.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(di0, i0.data(), rows * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(di1, i1.data(), period * 4, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xFF, rows * cols * 2);
    cudaMemset(dflags, 0, 8);

    cuda::EmbeddingNormArgs a;
    a.dtype = DType::F16;
    a.param_dtype = DType::F16;
    a.n_terms = 2;
    a.terms[0] = {dt0 + skew, n0, di0, DType::I64, 0, dflags};
    a.terms[1] = {dt1, n1, di1, DType::I32, period, dflags + 1};
    a.gamma = dgb;
    a.beta = dgb + cols * 2;
    a.y = dy;
    a.rows = rows;
    a.cols = cols;
    a.eps = 1e-5f;
    cuda::launch_embedding_norm(a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> y(rows * cols);
    int32_t flags[2];
    cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(flags, dflags, 8, cudaMemcpyDeviceToHost);
    for (void* ptr : {static_cast<void*>(dt0), static_cast<void*>(dt1), static_cast<void*>(dgb),
                      static_cast<void*>(di0), static_cast<void*>(di1), static_cast<void*>(dy),
                      static_cast<void*>(dflags)})
      cudaFree(ptr);
    EXPECT_EQ(flags[0], cuda::kErrIndexOutOfRange);
    EXPECT_EQ(flags[1], 0);

    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> s(cols, 0.0);
      double mean = 0, var = 0;
      for (int64_t c = 0; c < cols; ++c) {
        if (i0[r] < n0) s[c] += v0[i0[r] * cols + c];
        s[c] += v1[i1[r % period] * cols + c];
        mean += s[c] / cols;
      }
      for (int64_t c = 0; c < cols; ++c) var += (s[c] - mean) * (s[c] - mean) / cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double want = (s[c] - mean) / std::sqrt(var + 1e-5) * vg[c] + vg[cols + c];
        const double g = f16_to_f32(y[r * cols + c]);
        if (!(std::fabs(g - want) <= 5e-3 + 5e-3 * std::fabs(want)) && ++bad <= 5)
          ADD_FAILURE() << "[" << r << ", " << c << "] got " << g << ", want " << want;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}
