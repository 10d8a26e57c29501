// The persistent decode kernel (rlx/backends/cuda/persistent.h) against
// independent references:
//  - a chain of one-row norms and quantized GEMVs (GLU included) for every
//    weight type the kernel decodes, against a float64 evaluation of the
//    same dequantized weights; f32 and bf16 activations; the per-op kernels
//    (RLX_CUDA_PERSISTENT=0) give the same results;
//  - the tiny random-weight LLMs decoding 150 tokens (attention split over
//    several 64-key chunks, a sliding window crossed): CUDA logits against the
//    CPU's at every step, and against the per-op CUDA program.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "rlx/backends/cuda/persistent.h"
#include "rlx/core/half.h"
#include "rlx/formats/quant.h"
#include "rlx/ir/builder.h"
#include "rlx/models/llm/generator.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/cuda_backend_test_util.h"
#include "tests/models/tiny_llm.h"
#include "tests/test_util.h"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

constexpr const char* kFused = "persistent decode kernel: ";

// Random weights of type t as the file would hold them, and their values.
struct Weight {
  Tensor stored;
  std::vector<double> values;
};
// Types without a CPU quantizer (Q5_K, IQ4_XS) get random blocks whose f16
// super-block scales (byte offset 0, and 2 for Q5_K's dmin) are set to small
// realistic values.
Tensor random_blocks(DType t, int64_t n, int64_t k, std::mt19937_64& rng) {
  const DTypeInfo& info = dtype_info(t);
  std::vector<uint8_t> b(static_cast<size_t>(dtype_bytes(t, n * k)));
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> e(-4.0f, -3.0f);
  for (size_t at = 0; at < b.size(); at += static_cast<size_t>(info.block_bytes))
    for (int off : t == DType::Q5_K ? std::vector<int>{0, 2} : std::vector<int>{0}) {
      const uint16_t h = f32_to_f16((rng() & 1 ? 1.0f : -1.0f) * std::pow(10.0f, e(rng)));
      std::memcpy(&b[at + static_cast<size_t>(off)], &h, 2);
    }
  return Tensor::from_bytes(t, {n, k}, b.data(), b.size());
}

Weight random_weight(DType t, int64_t n, int64_t k, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
  Tensor f = Tensor::empty(DType::F32, {n, k});
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = d(rng);
  Weight w;
  w.stored = t == DType::F32 ? f : is_float(t) ? f.to(t) : has_cpu_quantize(t) ? quantize(f, t) : random_blocks(t, n, k, rng);
  const Tensor back = is_float(t) ? w.stored.to(DType::F32) : dequantize(w.stored);
  w.values.assign(back.data<float>(), back.data<float>() + back.numel());
  return w;
}

std::vector<double> gemv(const std::vector<double>& w, const std::vector<double>& x, int64_t n) {
  const auto k = static_cast<int64_t>(x.size());
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    double s = 0;
    for (int64_t c = 0; c < k; ++c) s += w[static_cast<size_t>(r * k + c)] * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = s;
  }
  return y;
}
std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& g, double eps) {
  double q = 0;
  for (double v : x) q += v * v;
  const double r = 1.0 / std::sqrt(q / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
  return y;
}
double gelu_tanh(double g) { return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))); }

std::vector<double> as_doubles(const Tensor& t) {
  const Tensor f = t.to(DType::F32);
  return {f.data<float>(), f.data<float>() + f.numel()};
}

// max |got − ref| relative to max |ref|.
double rel_err(const std::vector<double>& got, const std::vector<double>& ref) {
  double e = 0, s = 0;
  for (size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::abs(got[i] - ref[i])), s = std::max(s, std::abs(ref[i]));
  return e / std::max(s, 1e-30);
}

// x → rms → W1 (K → N1) → rms → geglu(W2, stacked 2·F rows) → y1 + rms(·)·g → W3 (→ K) → rms → W4 (→ N1).
struct Chain {
  static constexpr int64_t K = 512, N1 = 2048, F = 2048;
  DType wt;
  Weight w1, w2, w3, w4;
  std::vector<double> g0, g1, g2, g3, x;
  explicit Chain(DType t, std::mt19937_64& rng)
      : wt(t), w1(random_weight(t, N1, K, rng)), w2(random_weight(t, 2 * F, N1, rng)), w3(random_weight(t, K, F, rng)),
        w4(random_weight(t, N1, K, rng)) {
    std::uniform_real_distribution<double> u(0.5, 1.5), v(-1.0, 1.0);
    for (auto* g : {&g0, &g1, &g2, &g3})
      for (int64_t i = 0; i < (g == &g0 || g == &g3 ? K : N1); ++i) g->push_back(static_cast<float>(u(rng)));
    for (int64_t i = 0; i < K; ++i) x.push_back(static_cast<float>(v(rng)));
  }
  Graph graph() const {
    Graph g;
    Value xv = input(g, "x", DType::F32, {1, 1, K});
    auto p = [&](const char* name, DType t, std::vector<int64_t> s) { return param(g, name, t, Shape(s.begin(), s.end())); };
    Value y1 = dequant_matmul(rms_norm(xv, p("g0", DType::F32, {K})), p("w1", wt, {N1, K}));
    Value y2 = geglu(dequant_matmul(rms_norm(y1, p("g1", DType::F32, {N1})), p("w2", wt, {2 * F, N1})), true);
    Value h2 = post_rms_norm(y1, y2, p("g2", DType::F32, {N1}));
    Value y3 = dequant_matmul(h2, p("w3", wt, {K, F}));
    Value y4 = dequant_matmul(rms_norm(y3, p("g3", DType::F32, {K})), p("w4", wt, {N1, K}));
    output("y2", y2);
    output("y4", y4);
    return g;
  }
  void set(Executable& e) const {
    auto vec = [](const std::vector<double>& v) {
      std::vector<float> f(v.begin(), v.end());
      return Tensor::from(f, {static_cast<int64_t>(f.size())});
    };
    e.set_param("g0", vec(g0));
    e.set_param("g1", vec(g1));
    e.set_param("g2", vec(g2));
    e.set_param("g3", vec(g3));
    e.set_param("w1", w1.stored);
    e.set_param("w2", w2.stored);
    e.set_param("w3", w3.stored);
    e.set_param("w4", w4.stored);
  }
  // The float64 reference: y2, y4.
  std::pair<std::vector<double>, std::vector<double>> reference() const {
    const auto y1 = gemv(w1.values, rms(x, g0, 1e-6), N1);
    const auto gu = gemv(w2.values, rms(y1, g1, 1e-6), 2 * F);
    std::vector<double> y2(static_cast<size_t>(F));
    for (int64_t i = 0; i < F; ++i) y2[static_cast<size_t>(i)] = gelu_tanh(gu[static_cast<size_t>(i)]) * gu[static_cast<size_t>(F + i)];
    auto h2 = rms(y2, g2, 1e-6);
    for (int64_t i = 0; i < N1; ++i) h2[static_cast<size_t>(i)] += y1[static_cast<size_t>(i)];
    const auto y3 = gemv(w3.values, h2, K);
    return {y2, gemv(w4.values, rms(y3, g3, 1e-6), N1)};
  }
  // Runs on cuda; returns y2, y4 and the dispatch report.
  std::vector<std::vector<double>> run(DType precision, std::string* report) const {
    Session s("cuda");
    CompileOptions o;
    o.precision = precision;
    auto e = s.compile(graph(), o);
    set(*e);
    std::vector<float> xf(x.begin(), x.end());
    const auto outs = e->run({Tensor::from(xf, {1, 1, K})});
    *report = e->dispatch_report();
    return {as_doubles(outs[0]), as_doubles(outs[1])};
  }
};

TEST(PersistentGpu, GemvChainEveryWeightTypeMatchesFloat64) {
  SKIP_WITHOUT_CUDA();
  RLX_TRACE_SEED();
  const test::ScopedEnv on("RLX_CUDA_PERSISTENT", "1");  // opt-in (docs/env.md)
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS,
                  DType::F16, DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(t));
    const Chain c(t, test::rng());
    const auto [r2, r4] = c.reference();
    std::string fused, plain;
    const auto got = c.run(DType::F32, &fused);
    const char* why = cuda::persistent_disabled_reason();
    EXPECT_NE(fused.find(kFused), std::string::npos) << "the chain did not become one persistent launch ("
                                                     << (why ? why : "persistent segments are enabled") << ")\n"
                                                     << fused;
    // f32 activations, f32 sums in another order: well under 1e-4 of the largest value.
    EXPECT_LT(rel_err(got[0], r2), 1e-4);
    EXPECT_LT(rel_err(got[1], r4), 1e-4);
    std::vector<std::vector<double>> per_op;
    {
      test::ScopedEnv off("RLX_CUDA_PERSISTENT", "0");
      per_op = c.run(DType::F32, &plain);
    }
    EXPECT_EQ(plain.find(kFused), std::string::npos) << "RLX_CUDA_PERSISTENT=0 still fused\n" << plain;
    // The per-op GEMV may take int8 activations (about 2^-15 of a block's largest |x|).
    EXPECT_LT(rel_err(per_op[1], r4), 2e-3);
    // bf16 activations: each stored value rounded to 8 bits of mantissa, both paths.
    const auto half = c.run(DType::BF16, &fused);
    EXPECT_NE(fused.find(kFused), std::string::npos) << fused;
    EXPECT_LT(rel_err(half[1], r4), 4e-2);
  }
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("rlx_test_persistent_" + std::to_string(::getpid()) + "_" + name)).string();
}

llm::GeneratorOptions options(const std::string& device, int64_t ctx) {
  llm::GeneratorOptions o;
  o.device = device;
  o.ctx = ctx;
  o.logits = true;
  o.kv_dtype = DType::F16;
  return o;
}

double max_abs_diff(const Tensor& a, const Tensor& b, double* scale) {
  double worst = 0;
  *scale = 0;
  for (int64_t j = 0; j < a.numel(); ++j) {
    worst = std::max(worst, std::abs(static_cast<double>(a.data<float>()[j]) - b.data<float>()[j]));
    *scale = std::max(*scale, static_cast<double>(std::abs(a.data<float>()[j])));
  }
  return worst;
}

// 150 decode steps: the caches grow past two 64-key chunks and the gemma3
// window of 80 keys. CUDA (persistent) against the CPU and against the
// per-op CUDA program, at every step.
TEST(PersistentGpu, LongDecodeMatchesCpuAndPerOpKernels) {
  SKIP_WITHOUT_CUDA();
  const test::ScopedEnv on("RLX_CUDA_PERSISTENT", "1");
  for (const std::string arch : {"gemma3", "qwen3", "qwen2", "llama"}) {
    SCOPED_TRACE(arch);
    test::TinySpec spec = test::tiny_spec(arch);
    if (arch == "gemma3") spec.window = 80;
    const std::string path = temp_path(arch + ".gguf");
    test::write_tiny_gguf(spec, path);
    llm::Generator cpu(path, options("cpu", 192));
    llm::Generator gpu(path, options("cuda", 192));
    std::unique_ptr<llm::Generator> per_op;
    {
      test::ScopedEnv off("RLX_CUDA_PERSISTENT", "0");
      per_op = std::make_unique<llm::Generator>(path, options("cuda", 192));
      per_op->forward({1}, 0);  // compile the decode program (L = 1) while the knob is off
    }
    std::mt19937 rng(7);
    std::vector<int32_t> seq = {5, 17, 250, 3, 99, 42, 8, 120, 31};
    cpu.forward(seq, 0);
    gpu.forward(seq, 0);
    per_op->forward(seq, 0);
    double worst_cpu = 0, worst_op = 0;
    for (int step = 0; step < 150; ++step) {
      const int32_t tok = static_cast<int32_t>(rng() % static_cast<uint32_t>(spec.vocab));
      const int64_t pos = static_cast<int64_t>(seq.size());
      seq.push_back(tok);
      const auto a = cpu.forward({tok}, pos);
      const auto b = gpu.forward({tok}, pos);
      const auto c = per_op->forward({tok}, pos);
      double scale = 0;
      const double d_cpu = max_abs_diff(a.logits, b.logits, &scale) / std::max(1.0, scale);
      const double d_op = max_abs_diff(c.logits, b.logits, &scale) / std::max(1.0, scale);
      worst_cpu = std::max(worst_cpu, d_cpu);
      worst_op = std::max(worst_op, d_op);
      ASSERT_LE(d_cpu, 1e-2) << "CUDA vs CPU logits at step " << step << " (" << seq.size() << " cached keys)";
      ASSERT_LE(d_op, 1e-2) << "persistent vs per-op CUDA logits at step " << step;
    }
    std::printf("%s: 150 decode steps, worst |cuda - cpu| %.2e, |persistent - per-op| %.2e of the largest logit\n",
                arch.c_str(), worst_cpu, worst_op);
    const std::string report = gpu.executable().dispatch_report();
    if (arch == "gemma3" || arch == "qwen3") {  // every decode op of these two can run persistent
      EXPECT_NE(report.find(kFused), std::string::npos) << report;
    }
    EXPECT_EQ(per_op->executable().dispatch_report().find(kFused), std::string::npos);
    fs::remove(path);
  }
}

}  // namespace
