// The cuDNN graph path (RLX_CUDNN_ATTENTION / _MATMUL / _NORM): whole graphs
// compiled on the GPU with a knob on must match the CPU backend (the
// numerical reference) and the built-in thunk path within the dtype's
// tolerance, and the dispatch report must show that cuDNN really ran — or,
// for refused cases, the refusal reason next to the fallback kernel, with
// results still correct. CUDA graphs on and off must agree bit for bit.
// Skips without a GPU or without cuDNN (the reason is printed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/cuda/cudnn_graph.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"

using namespace rlx;

namespace {

#define SKIP_WITHOUT_CUDNN()                                                  \
  do {                                                                        \
    register_builtin_backends();                                              \
    if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";         \
    std::string why_;                                                         \
    if (!cuda::cudnn::available(&why_)) GTEST_SKIP() << "cuDNN: " << why_;     \
  } while (0)

// Sets one RLX_CUDNN_* knob for the scope (knobs are read at compile time).
class Knob {
 public:
  Knob(const char* name, bool on) : name_(name) { setenv(name, on ? "1" : "0", 1); }
  ~Knob() { unsetenv(name_); }
  Knob(const Knob&) = delete;
  Knob& operator=(const Knob&) = delete;

 private:
  const char* name_;
};

Tensor random_tensor(DType dt, std::vector<int64_t> shape, std::mt19937& rng, float scale = 1.0f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return Tensor::from(v, shape).to(dt);
}

struct RunResult {
  std::vector<float> out;
  std::string report;
  Tensor raw;
};

// A fresh Session per run, so no compiled program is reused across knob settings.
RunResult run_graph(const std::string& device, const Graph& g, const std::vector<Tensor>& inputs, bool graphs = true) {
  Session s(device);
  CompileOptions o;
  o.cuda_graphs = graphs;
  auto exe = s.compile(g, o);
  Tensor out = exe->run(inputs)[0];
  RunResult r;
  r.raw = out;
  Tensor f = out.to(DType::F32);
  r.out.assign(f.data<float>(), f.data<float>() + f.numel());
  r.report = exe->dispatch_report();
  return r;
}

double tolerance(DType dt) { return dt == DType::BF16 ? 3e-2 : 4e-3; }

// Max |a − b| / (1 + |b|) with the worst index, for the failure message.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(double(want[i])))
                                           : INFINITY;
    if (!(e <= worst)) worst = e, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": worst error at element " << at << ": got " << got[at] << ", want " << want[at];
}

void expect_used(const std::string& report, const std::string& kernel, const std::string& what) {
  EXPECT_NE(report.find(kernel), std::string::npos)
      << what << ": the dispatch report does not show '" << kernel << "' (cuDNN refused?):\n" << report;
}

struct AttnCase {
  DType dt;
  int B, Lq, Lk, H, Hkv, D;
  bool causal;
  std::string name() const {
    return str(dtype_name(dt), " B", B, " Lq", Lq, " Lk", Lk, " H", H, "/", Hkv, " D", D, causal ? " causal" : "");
  }
};

Graph attention_graph(const AttnCase& c, float softcap = 0.0f) {
  Graph g;
  Value q = input(g, "q", c.dt, {c.B, c.Lq, int64_t{c.H} * c.D});
  Value k = input(g, "k", c.dt, {c.B, c.Lk, int64_t{c.Hkv} * c.D});
  Value v = input(g, "v", c.dt, {c.B, c.Lk, int64_t{c.Hkv} * c.D});
  AttentionAttrs a;
  a.num_heads = c.H;
  a.num_kv_heads = c.Hkv;
  a.head_dim = c.D;
  a.mask = c.causal ? MaskKind::Causal : MaskKind::None;
  a.softcap = softcap;
  output("out", attention(q, k, v, a));
  return g;
}

}  // namespace

TEST(Cudnn, AttentionMatchesCpuAndThunkPath) {
  SKIP_WITHOUT_CUDNN();
  std::mt19937 rng(11);
  std::vector<AttnCase> cases;
  for (DType dt : {DType::F16, DType::BF16})
    for (int D : {64, 128})
      for (bool causal : {false, true}) {
        cases.push_back({dt, 2, 128, 128, 8, 8, D, causal});  // MHA, aligned
        cases.push_back({dt, 1, 77, 77, 8, 2, D, causal});    // GQA 4:1, odd length
        cases.push_back({dt, 2, 33, 97, 4, 1, D, causal});    // MQA, Lq < Lk (bottom-right causal)
      }
  for (const AttnCase& c : cases) {
    const Graph g = attention_graph(c);
    const std::vector<Tensor> in = {random_tensor(c.dt, {c.B, c.Lq, int64_t{c.H} * c.D}, rng),
                                    random_tensor(c.dt, {c.B, c.Lk, int64_t{c.Hkv} * c.D}, rng),
                                    random_tensor(c.dt, {c.B, c.Lk, int64_t{c.Hkv} * c.D}, rng)};
    const RunResult cpu = run_graph("cpu", g, in);
    RunResult thunk, dnn;
    // A device fault surfaces at a later CUDA call; name the case and path it came from.
    const char* path = "rlx kernel (knob off)";
    try {
      {
        Knob k("RLX_CUDNN_ATTENTION", false);
        thunk = run_graph("cuda", g, in);
      }
      path = "cudnn knob on";
      {
        Knob k("RLX_CUDNN_ATTENTION", true);
        dnn = run_graph("cuda", g, in);
      }
    } catch (const std::exception& e) {
      FAIL() << c.name() << ", " << path << " run (or a fault left by the run before it): " << e.what();
    }
    expect_used(dnn.report, "cudnn sdpa", c.name());
    EXPECT_EQ(thunk.report.find("cudnn"), std::string::npos) << "knob off must not touch cuDNN:\n" << thunk.report;
    expect_close(dnn.out, cpu.out, tolerance(c.dt), c.name() + " cudnn vs cpu");
    expect_close(dnn.out, thunk.out, tolerance(c.dt), c.name() + " cudnn vs thunk");
  }
}

// Q, K and V as Narrows of one fused QKV projection: cuDNN reads them in
// place with the fused row stride, like the built-in kernel.
TEST(Cudnn, AttentionReadsFusedQkvInPlace) {
  SKIP_WITHOUT_CUDNN();
  std::mt19937 rng(12);
  const int B = 2, L = 64, H = 6, D = 64;
  Graph g;
  Value qkv = input(g, "qkv", DType::F16, {B, L, 3 * H * D});
  AttentionAttrs a;
  a.num_heads = a.num_kv_heads = H;
  a.head_dim = D;
  output("out", attention(narrow(qkv, 2, 0, H * D), narrow(qkv, 2, H * D, H * D), narrow(qkv, 2, 2 * H * D, H * D), a));
  const std::vector<Tensor> in = {random_tensor(DType::F16, {B, L, 3 * H * D}, rng)};
  const RunResult cpu = run_graph("cpu", g, in);
  Knob k("RLX_CUDNN_ATTENTION", true);
  const RunResult dnn = run_graph("cuda", g, in);
  expect_used(dnn.report, "cudnn sdpa", "fused qkv");
  expect_close(dnn.out, cpu.out, tolerance(DType::F16), "fused qkv cudnn vs cpu");
}

// RLX_CUDNN_ATTENTION=auto (the default) without a calibration: cuDNN for
// prefill with head dim >= 64 and >= 128 queries (where it measured faster),
// rlx's kernel for small head dims and short query blocks. An empty
// calibration folder makes sure no cached calibration decides instead.
TEST(Cudnn, AutoChoosesCudnnForLargePrefillOnly) {
  SKIP_WITHOUT_CUDNN();
  const std::string dir = testing::TempDir() + "rlx-no-calibration";
  setenv("RLX_CALIB_DIR", dir.c_str(), 1);
  setenv("RLX_CALIBRATE", "off", 1);
  unsetenv("RLX_CUDNN_ATTENTION");
  std::mt19937 rng(14);
  struct Want {
    AttnCase c;
    bool cudnn;
  };
  const std::vector<Want> wants = {
      {{DType::F16, 2, 256, 256, 8, 8, 128, false}, true},
      {{DType::BF16, 1, 512, 512, 8, 2, 64, true}, true},
      {{DType::F16, 4, 128, 128, 12, 12, 32, false}, false},  // head dim 32
      {{DType::F16, 2, 16, 300, 8, 8, 128, true}, false},     // 16 queries
  };
  for (const auto& w : wants) {
    const Graph g = attention_graph(w.c);
    const std::vector<Tensor> in = {random_tensor(w.c.dt, {w.c.B, w.c.Lq, int64_t{w.c.H} * w.c.D}, rng),
                                    random_tensor(w.c.dt, {w.c.B, w.c.Lk, int64_t{w.c.Hkv} * w.c.D}, rng),
                                    random_tensor(w.c.dt, {w.c.B, w.c.Lk, int64_t{w.c.Hkv} * w.c.D}, rng)};
    const RunResult gpu = run_graph("cuda", g, in);
    const bool used = gpu.report.find("cudnn sdpa") != std::string::npos;
    EXPECT_EQ(used, w.cudnn) << w.c.name() << ": auto should " << (w.cudnn ? "" : "not ") << "pick cuDNN:\n"
                             << gpu.report;
    expect_close(gpu.out, run_graph("cpu", g, in).out, tolerance(w.c.dt), w.c.name() + " auto vs cpu");
  }
  unsetenv("RLX_CALIB_DIR");
  unsetenv("RLX_CALIBRATE");
}

// Softcap and f32 are refused: the built-in kernel runs, the report says why,
// and the result is still right.
TEST(Cudnn, RefusedAttentionFallsBackWithReason) {
  SKIP_WITHOUT_CUDNN();
  std::mt19937 rng(13);
  Knob k("RLX_CUDNN_ATTENTION", true);
  struct Refusal {
    AttnCase c;
    float softcap;
    std::string reason;
  };
  const std::vector<Refusal> refusals = {
      {{DType::F16, 1, 40, 40, 4, 4, 64, true}, 30.0f, "cudnn attention refused: softcap"},
      {{DType::F32, 1, 40, 40, 4, 4, 64, false}, 0.0f, "cudnn attention refused: dtype f32"},
      {{DType::F16, 1, 40, 40, 4, 4, 36, false}, 0.0f, "cudnn attention refused: head dim 36"},
  };
  for (const auto& r : refusals) {
    const Graph g = attention_graph(r.c, r.softcap);
    const std::vector<Tensor> in = {random_tensor(r.c.dt, {r.c.B, r.c.Lq, int64_t{r.c.H} * r.c.D}, rng),
                                    random_tensor(r.c.dt, {r.c.B, r.c.Lk, int64_t{r.c.Hkv} * r.c.D}, rng),
                                    random_tensor(r.c.dt, {r.c.B, r.c.Lk, int64_t{r.c.Hkv} * r.c.D}, rng)};
    const RunResult cpu = run_graph("cpu", g, in);
    const RunResult gpu = run_graph("cuda", g, in);
    EXPECT_NE(gpu.report.find(r.reason), std::string::npos) << "want '" << r.reason << "' in:\n" << gpu.report;
    EXPECT_EQ(gpu.report.find("cudnn sdpa"), std::string::npos) << gpu.report;
    expect_close(gpu.out, cpu.out, r.c.dt == DType::F32 ? 1e-4 : tolerance(r.c.dt), r.reason);
  }
}

TEST(Cudnn, MatmulWithEpilogueMatchesCpu) {
  SKIP_WITHOUT_CUDNN();
  std::mt19937 rng(14);
  for (DType dt : {DType::F16, DType::BF16}) {
    for (Activation act : {Activation::None, Activation::Relu, Activation::GeluErf, Activation::GeluTanh}) {
      for (bool tb : {false, true}) {
        const int64_t B = 3, M = 37, K = 256, N = 192;
        Graph g;
        Value x = input(g, "x", dt, {B, M, K});
        const std::vector<int64_t> wdims = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
        Value w = input(g, "w", dt, Shape(wdims.begin(), wdims.end()));
        Value bias = input(g, "bias", dt, {N});
        output("y", matmul_bias_act(x, w, bias, act, tb));
        const std::vector<Tensor> in = {random_tensor(dt, {B, M, K}, rng, 0.1f),
                                        random_tensor(dt, wdims, rng, 0.1f),
                                        random_tensor(dt, {N}, rng)};
        const std::string what = str(dtype_name(dt), " ", activation_name(act), tb ? " transpose_b" : "");
        const RunResult cpu = run_graph("cpu", g, in);
        Knob k("RLX_CUDNN_MATMUL", true);
        const RunResult dnn = run_graph("cuda", g, in);
        expect_used(dnn.report, "cudnn matmul", what);
        expect_close(dnn.out, cpu.out, tolerance(dt), what + " cudnn vs cpu");
      }
    }
  }
  // A plain batched matmul with both operands batched (Q·Kᵀ-like).
  Graph g;
  Value a = input(g, "a", DType::F16, {4, 48, 64});
  Value b = input(g, "b", DType::F16, {4, 80, 64});
  MatMulAttrs at;
  at.transpose_b = true;
  output("y", matmul(a, b, at));
  const std::vector<Tensor> in = {random_tensor(DType::F16, {4, 48, 64}, rng, 0.2f),
                                  random_tensor(DType::F16, {4, 80, 64}, rng, 0.2f)};
  const RunResult cpu = run_graph("cpu", g, in);
  Knob k("RLX_CUDNN_MATMUL", true);
  const RunResult dnn = run_graph("cuda", g, in);
  expect_used(dnn.report, "cudnn matmul", "batched matmul");
  expect_close(dnn.out, cpu.out, tolerance(DType::F16), "batched matmul cudnn vs cpu");
}

TEST(Cudnn, RefusedMatmulFallsBackWithReason) {
  SKIP_WITHOUT_CUDNN();
  std::mt19937 rng(15);
  Graph g;
  Value x = input(g, "x", DType::F16, {16, 64});
  Value w = input(g, "w", DType::F16, {64, 32});
  Value bias = input(g, "bias", DType::F16, {32});
  output("y", matmul_bias_act(x, w, bias, Activation::Silu));
  const std::vector<Tensor> in = {random_tensor(DType::F16, {16, 64}, rng, 0.2f),
                                  random_tensor(DType::F16, {64, 32}, rng, 0.2f), random_tensor(DType::F16, {32}, rng)};
  const RunResult cpu = run_graph("cpu", g, in);
  Knob k("RLX_CUDNN_MATMUL", true);
  const RunResult gpu = run_graph("cuda", g, in);
  EXPECT_NE(gpu.report.find("cudnn matmul refused: activation silu"), std::string::npos) << gpu.report;
  expect_close(gpu.out, cpu.out, tolerance(DType::F16), "silu fallback vs cpu");
}

TEST(Cudnn, NormsMatchCpu) {
  SKIP_WITHOUT_CUDNN();
  std::mt19937 rng(16);
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    for (DType pt : {dt, DType::F32}) {
      for (bool layer : {true, false}) {
        const int64_t R = 37, C = 384;
        Graph g;
        Value x = input(g, "x", dt, {R, C});
        Value gamma = input(g, "gamma", pt, {C});
        Value beta = layer ? input(g, "beta", pt, {C}) : Value{};
        output("y", layer ? layer_norm(x, gamma, beta, 1e-5f) : rms_norm(x, gamma, 1e-6f));
        std::vector<Tensor> in = {random_tensor(dt, {R, C}, rng, 2.0f), random_tensor(pt, {C}, rng)};
        if (layer) in.push_back(random_tensor(pt, {C}, rng));
        const std::string what = str(layer ? "layer_norm " : "rms_norm ", dtype_name(dt), " params ", dtype_name(pt));
        const RunResult cpu = run_graph("cpu", g, in);
        Knob k("RLX_CUDNN_NORM", true);
        const RunResult dnn = run_graph("cuda", g, in);
        expect_used(dnn.report, layer ? "cudnn layer_norm" : "cudnn rms_norm", what);
        expect_close(dnn.out, cpu.out, dt == DType::F32 ? 1e-4 : tolerance(dt), what + " cudnn vs cpu");
      }
    }
  }
}

// Every knob on: CUDA-graph replay equals direct launches, run after run.
TEST(Cudnn, CudaGraphsOnAndOffAgree) {
  SKIP_WITHOUT_CUDNN();
  std::mt19937 rng(17);
  Knob ka("RLX_CUDNN_ATTENTION", true), km("RLX_CUDNN_MATMUL", true), kn("RLX_CUDNN_NORM", true);
  const int64_t B = 2, L = 96, H = 4, D = 64, W = H * D;
  Graph g;
  Value x = input(g, "x", DType::F16, {B, L, W});
  Value wqkv = input(g, "wqkv", DType::F16, {W, 3 * W});
  Value bqkv = input(g, "bqkv", DType::F16, {3 * W});
  Value gamma = input(g, "gamma", DType::F16, {W});
  Value beta = input(g, "beta", DType::F16, {W});
  Value qkv = matmul_bias_act(x, wqkv, bqkv, Activation::None);
  AttentionAttrs a;
  a.num_heads = a.num_kv_heads = static_cast<int>(H);
  a.head_dim = static_cast<int>(D);
  a.mask = MaskKind::Causal;
  Value att = attention(narrow(qkv, 2, 0, W), narrow(qkv, 2, W, W), narrow(qkv, 2, 2 * W, W), a);
  output("y", layer_norm(att, gamma, beta));
  Session s("cuda");
  CompileOptions on, off;
  off.cuda_graphs = false;
  auto with = s.compile(g, on);
  Session s2("cuda");
  auto without = s2.compile(g, off);
  for (int run = 0; run < 3; ++run) {
    const std::vector<Tensor> in = {random_tensor(DType::F16, {B, L, W}, rng), random_tensor(DType::F16, {W, 3 * W}, rng, 0.05f),
                                    random_tensor(DType::F16, {3 * W}, rng), random_tensor(DType::F16, {W}, rng),
                                    random_tensor(DType::F16, {W}, rng)};
    Tensor ya = with->run(in)[0], yb = without->run(in)[0];
    ASSERT_EQ(ya.nbytes(), yb.nbytes());
    EXPECT_EQ(std::memcmp(ya.raw(), yb.raw(), ya.nbytes()), 0) << "run " << run << ": graph replay differs from direct launches";
    if (run == 0) {
      const std::string report = with->dispatch_report();
      for (const char* k : {"cudnn sdpa", "cudnn matmul", "cudnn layer_norm"}) expect_used(report, k, "graphs on");
      EXPECT_NE(report.find("cuda graphs on"), std::string::npos) << report;
    }
    const RunResult cpu = run_graph("cpu", g, in);
    Tensor f = ya.to(DType::F32);
    expect_close(std::vector<float>(f.data<float>(), f.data<float>() + f.numel()), cpu.out, 2e-2, "block vs cpu");
  }
}
