// Calibration on a real GPU: it finishes within its 30 s budget, writes the
// cache, and a second use loads it; over the embedding and LLM benchmark GEMM
// shapes the cost model's cuBLASLt algorithm is never more than 5% slower than
// the best of the candidates, each measured here (a table is printed); the
// dispatch report shows predicted and measured times; Session("auto") puts a
// tiny graph on the CPU and a large one on the GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "rlx/backends/cuda/calibration.h"
#include "rlx/backends/cuda/cudnn_graph.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/gemm_choices.h"
#include "rlx/backends/cuda/memory.h"
#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"

namespace {

using namespace rlx;
using namespace rlx::cuda;
namespace fs = std::filesystem;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

// ctest runs each test in its own process: they share one cache folder (not
// the user's) with RLX_CALIBRATE=auto, so the first to need a calibration
// measures it and the others load it.
void use_test_cache() {
  const fs::path p = fs::temp_directory_path() / "rlx_calib_gpu_test";
  setenv("RLX_CALIB_DIR", p.c_str(), 1);
  setenv("RLX_CALIBRATE", "auto", 1);
}

const Calibration& calibration() {
  use_test_cache();
  const auto& c = device_calibration(0);
  if (!c) throw Error("no calibration with RLX_CALIBRATE=auto");
  return *c;
}

TEST(CalibrationGpu, FinishesWithinBudgetWritesAndReloads) {
  SKIP_WITHOUT_GPU();
  use_test_cache();
  const auto t0 = std::chrono::steady_clock::now();
  const Calibration c = measure_calibration(0);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("calibration measured in %.2f s (wall %.2f s), %zu buckets\n", c.measure_s, wall, c.buckets.size());
  EXPECT_LE(wall, 31.0) << "calibration took longer than its 30 s budget";
  save_calibration(c, calibration_path(c.identity.gpu_uuid));
  EXPECT_LE(c.measure_s, 30.5) << "calibration took longer than its 30 s budget";
  std::string problems;
  for (const auto& p : c.problems) problems += "\n  " + p;
  EXPECT_TRUE(c.complete) << "calibration incomplete:" << problems;
  EXPECT_TRUE(c.problems.empty()) << problems;
  EXPECT_GT(c.launch_us, 0.1);
  EXPECT_LT(c.launch_us, 100);
  EXPECT_GT(c.graph_node_us, 0.0);
  EXPECT_LT(c.graph_node_us, 50);
  EXPECT_GT(c.d2d_gbps, 500) << "device copy bandwidth implausibly low";
  EXPECT_GT(c.h2d_gbps, 1);
  EXPECT_GT(c.d2h_gbps, 1);
  for (const char* fam : {"gemm.f16", "gemm.bf16", "gemm.f32", "attention.f16", "attention.bf16", "attention.f32",
                          "gemv.q4_0", "gemv.q8_0", "gemv.q4_k", "gemv.q6_k", "gemv.iq4_xs"}) {
    const auto fams = c.families();
    EXPECT_NE(std::find(fams.begin(), fams.end(), fam), fams.end()) << fam << " was not measured";
  }
  for (const auto& b : c.buckets) {
    ASSERT_NE(b.best(), nullptr) << b.family;
    for (const auto& v : b.variants) {
      EXPECT_GT(v.us, 0) << b.family << " " << v.variant;
      EXPECT_TRUE(std::isfinite(v.gflops) && v.gflops < 2.5e6) << b.family << " " << v.variant << " " << v.gflops;
    }
  }
  // Both quantized matmul paths compete at every gemv bucket; where cuDNN
  // loads, its SDPA competes with rlx's attention kernel.
  size_t cudnn_buckets = 0;
  for (const auto& b : c.buckets) {
    if (b.family.rfind("gemv.", 0) == 0) {
      EXPECT_EQ(b.variants.size(), 2u) << b.family;
    }
    if (b.family.rfind("attention.", 0) == 0) {
      for (const auto& v : b.variants) cudnn_buckets += v.variant == "cudnn";
    }
  }
  if (cuda::cudnn::available()) {
    EXPECT_GT(cudnn_buckets, 0u) << "no attention bucket timed the cuDNN variant";
  }
  // The file is there, and the backend's first use loads it instead of measuring.
  const std::string path = calibration_path(c.identity.gpu_uuid);
  ASSERT_TRUE(fs::exists(path)) << path;
  const auto t1 = std::chrono::steady_clock::now();
  const auto& loaded = device_calibration(0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->created_utc, c.created_utc);
  EXPECT_EQ(calibration_to_json(*loaded), calibration_to_json(c));
  EXPECT_LT(s, 2.0) << "loading took " << s << " s: it measured again";
}

// GPU time of one call of each function: each is captured `calls` times back
// to back into its own CUDA graph, the graphs are replayed in turn for
// `rounds` rounds (so clock changes hit them alike), median per function.
std::vector<double> replay_each_us(cudaStream_t s, const std::vector<std::function<void(cudaStream_t)>>& fns,
                                   int calls, int rounds) {
  std::vector<GraphExec> execs;
  for (const auto& fn : fns) {
    fn(s);
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    for (int i = 0; i < calls; ++i) fn(s);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    execs.emplace_back(graph);
    cudaGraphDestroy(graph);
    execs.back().launch(s);
  }
  Event a, b;
  std::vector<std::vector<double>> t(fns.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < execs.size(); ++i) {
      a.record(s);
      execs[i].launch(s);
      b.record(s);
      b.synchronize();
      t[i].push_back(b.elapsed_ms_since(a) * 1e3 / calls);
    }
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

TEST(CalibrationGpu, GemmChoiceWithinFivePercentOfBestCandidate) {
  SKIP_WITHOUT_GPU();
  constexpr double kNoiseUs = 0.5;
  const Calibration& c = calibration();
  // The benchmark shapes: MiniLM and BERT-base layers at batch×seq 128, 4096
  // and 32768 rows (bench/bert), Gemma 3 270M at decode (1) and prefill (512).
  struct Case {
    const char* name;
    int64_t m, n, k;
  };
  std::vector<Case> cases;
  for (int64_t m : {128, 4096, 32768})
    for (auto [name, n, k] : {std::tuple{"minilm qkv", 1152, 384}, {"minilm out", 384, 384}, {"minilm up", 1536, 384},
                              {"minilm down", 384, 1536}, {"bert qkv", 2304, 768}, {"bert up", 3072, 768},
                              {"bert down", 768, 3072}})
      cases.push_back({name, m, n, k});
  for (int64_t m : {1, 512})
    for (auto [name, n, k] : {std::tuple{"gemma q", 1024, 640}, {"gemma kv", 256, 640}, {"gemma o", 640, 1024},
                              {"gemma gate/up", 2048, 640}, {"gemma down", 640, 2048}, {"gemma logits", 262144, 640}})
      cases.push_back({name, m, n, k});

  GemmEngine engine(0);
  engine.set_algo_chooser(gemm_chooser(c));
  Stream stream;
  const size_t bytes = size_t{3} << 30;
  DeviceBuffer buf(0, bytes, "test scratch");
  char* base = static_cast<char*>(buf.data());

  std::printf("%-6s %-14s %6s %6s %5s | %-8s %9s | %-6s %9s | %6s  %s\n", "dtype", "layer", "m", "n", "k", "chosen",
              "us", "best", "us", "ratio", "how chosen");
  int failures = 0;
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    // Random operands, as the tuner and the calibration time and as models
    // run: a GEMM's clock depends on its data (on constant operands an H100
    // ranked MiniLM's down-projection algorithms 5% apart the other way round).
    fill_uniform(base, bytes, dt);
    for (const auto& cs : cases) {
      const int64_t e = dtype_size(dt);
      GemmArgs g;
      g.dtype = dt;
      g.trans_b = true;
      g.M = cs.m, g.N = cs.n, g.K = cs.k;
      g.A = base;
      g.B = base + (size_t{1} << 30);
      g.C = base + (size_t{2} << 30);
      g.lda = g.ldb = cs.k;
      g.ldc = cs.n;
      ASSERT_LE(static_cast<size_t>(cs.m * cs.k * e), size_t{1} << 30);
      ASSERT_LE(static_cast<size_t>(cs.n * cs.k * e), size_t{1} << 30);
      ASSERT_LE(static_cast<size_t>(cs.m * cs.n * e), size_t{1} << 30);
      const auto cands = engine.candidates(g);
      const int chosen = engine.chosen_rank(g);
      // Every candidate the calibration could have picked (its first 4) plus the chosen one.
      const int n_cand = std::min<int>(static_cast<int>(cands.size()), 4);
      double single = 0;
      {
        Event a, b;
        engine.run(g, stream.get());
        a.record(stream.get());
        engine.run(g, stream.get());
        b.record(stream.get());
        b.synchronize();
        single = std::max(1e-3, b.elapsed_ms_since(a) * 1e3);
      }
      const int calls = std::clamp(static_cast<int>(500.0 / single), 1, 100);
      auto run_rank = [&](int r) { return [&engine, g, r](cudaStream_t s) { engine.run_candidate(g, r, s); }; };
      std::vector<int> ranks;
      for (int r = 0; r < std::max(n_cand, chosen + 1); ++r)
        if (r < n_cand || r == chosen) ranks.push_back(r);
      std::vector<std::function<void(cudaStream_t)>> fns;
      for (int r : ranks) fns.push_back(run_rank(r));
      const std::vector<double> us = replay_each_us(stream.get(), fns, calls, 7);
      std::vector<double> t(static_cast<size_t>(ranks.back() + 1), 0.0);
      for (size_t i = 0; i < ranks.size(); ++i) t[static_cast<size_t>(ranks[i])] = us[i];
      int best = chosen;
      for (int r : ranks)
        if (t[static_cast<size_t>(r)] < t[static_cast<size_t>(best)]) best = r;
      double ratio = t[static_cast<size_t>(chosen)] / t[static_cast<size_t>(best)];
      if (ratio > 1.05) {
        // Confirm with the two alone and more rounds, so that a noisy round
        // does not fail the test; the confirmed times are the ones reported.
        const auto again = replay_each_us(stream.get(), {run_rank(chosen), run_rank(best)}, calls, 21);
        std::printf("(re-measured %s %s m=%ld: chosen algo%d %.2f -> %.2f us, best algo%d %.2f -> %.2f us)\n",
                    std::string(dtype_name(dt)).c_str(), cs.name, static_cast<long>(cs.m), chosen,
                    t[static_cast<size_t>(chosen)], again[0], best, t[static_cast<size_t>(best)], again[1]);
        t[static_cast<size_t>(chosen)] = again[0];
        t[static_cast<size_t>(best)] = again[1];
        ratio = again[0] / again[1];
      }
      // Few-microsecond GEMMs: the same kernel measures differently minutes
      // or seconds apart (session 43, H200: Gemma's m = 512 o projection,
      // algo 0, 4.37 us in the calibration, then 4.99 and 4.69 us in this
      // test's two timings), so a difference under 0.5 us is noise.
      const double diff_us = t[static_cast<size_t>(chosen)] - t[static_cast<size_t>(best)];
      const bool ok = ratio <= 1.05 || diff_us < kNoiseUs;
      failures += !ok;
      std::printf("%-6s %-14s %6ld %6ld %5ld | algo%-4d %9.2f | algo%-2d %9.2f | %5.3f%s %s\n",
                  std::string(dtype_name(dt)).c_str(), cs.name, static_cast<long>(cs.m), static_cast<long>(cs.n),
                  static_cast<long>(cs.k), chosen, t[static_cast<size_t>(chosen)], best,
                  t[static_cast<size_t>(best)], ratio, ok ? " " : "!", engine.choice_note(g).c_str());
      EXPECT_TRUE(ok) << "ratio " << ratio << ", " << diff_us << " us: " << dtype_name(dt) << " " << cs.name << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k
                             << ": chosen algo" << chosen << " " << t[static_cast<size_t>(chosen)]
                             << " us vs best algo" << best << " " << t[static_cast<size_t>(best)] << " us ("
                             << engine.choice_note(g) << ")";
    }
  }
  std::printf("%d of %zu shapes more than 5%% (and %.1f us) slower than the best candidate\n", failures,
              3 * cases.size(), kNoiseUs);
}

// RLX_CUDA_GEMM_TUNE: the first plan of a large GEMM times cuBLASLt's
// candidates and keeps the fastest. Checked against each candidate measured
// here (CUDA-graph replays), the result against the heuristic's first choice,
// the knob off, and a second plan of the shape at another alignment.
TEST(CalibrationGpu, GemmTuningKeepsTheFastestCandidate) {
  SKIP_WITHOUT_GPU();
  setenv("RLX_CUDA_GEMM_TUNE", "1", 1);
  setenv("RLX_CUDA_GEMM_CACHE", "0", 1);  // timed here, not taken from an earlier process's file
  GemmEngine engine(0);  // no chooser: the default engine of a program without calibration
  Stream stream;
  const int64_t M = 16384, N = 384, K = 1536;  // MiniLM's FFN down projection at 128 sequences of 128
  DeviceBuffer buf(0, size_t{256} << 20, "test scratch");
  char* base = static_cast<char*>(buf.data());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<uint16_t> host(static_cast<size_t>(M * K + N * K + N));
  for (auto& h : host) h = f32_to_f16(uni(rng));
  ASSERT_EQ(cudaMemcpy(base, host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  GemmArgs g;
  g.dtype = DType::F16;
  g.trans_b = true;
  g.M = M, g.N = N, g.K = K;
  g.A = base;
  g.B = base + M * K * 2;
  g.bias = base + (M * K + N * K) * 2;
  g.C = base + (size_t{128} << 20);
  g.lda = g.ldb = K;
  g.ldc = N;
  const std::string note = engine.choice_note(g);
  EXPECT_EQ(note.rfind("measured: algo ", 0), 0u) << note;
  const auto cands = engine.candidates(g);
  const int chosen = engine.chosen_rank(g);
  ASSERT_GT(cands.size(), 1u);

  std::vector<std::function<void(cudaStream_t)>> fns;
  for (size_t r = 0; r < cands.size(); ++r)
    fns.push_back([&engine, g, r](cudaStream_t s) { engine.run_candidate(g, static_cast<int>(r), s); });
  std::vector<double> us = replay_each_us(stream.get(), fns, 20, 7);
  const size_t best = static_cast<size_t>(std::min_element(us.begin(), us.end()) - us.begin());
  std::printf("tuned choice algo%d %.2f us, best here algo%zu %.2f us, heuristic's first %.2f us (%s)\n", chosen,
              us[static_cast<size_t>(chosen)], best, us[best], us[0], note.c_str());
  if (us[static_cast<size_t>(chosen)] > 1.03 * us[best]) {  // confirm the two alone, longer
    us = replay_each_us(stream.get(), {fns[static_cast<size_t>(chosen)], fns[best]}, 20, 21);
    EXPECT_LE(us[0], 1.03 * us[1]) << "tuned algo" << chosen << " vs algo" << best;
  }

  // Same values as the heuristic's first choice (f16 rounding of two sums).
  std::vector<uint16_t> c_tuned(static_cast<size_t>(M * N)), c_first(c_tuned.size());
  engine.run(g, stream.get());
  stream.synchronize();
  ASSERT_EQ(cudaMemcpy(c_tuned.data(), g.C, c_tuned.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  engine.run_candidate(g, 0, stream.get());
  stream.synchronize();
  ASSERT_EQ(cudaMemcpy(c_first.data(), g.C, c_first.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  double worst = 0.0;
  for (size_t i = 0; i < c_tuned.size(); i += 97) {
    const double a = f16_to_f32(c_tuned[i]), b = f16_to_f32(c_first[i]);
    worst = std::max(worst, std::abs(a - b) / (1.0 + std::abs(b)));
  }
  EXPECT_LT(worst, 2e-2);
  // And the first choice is right: one row against a float64 dot product.
  for (int64_t n = 0; n < N; n += 37) {
    double ref = f16_to_f32(host[static_cast<size_t>(M * K + N * K + n)]);
    for (int64_t k = 0; k < K; ++k)
      ref += double{f16_to_f32(host[static_cast<size_t>(5 * K + k)])} *
             f16_to_f32(host[static_cast<size_t>(M * K + n * K + k)]);
    std::vector<uint16_t> row(static_cast<size_t>(N));
    ASSERT_EQ(cudaMemcpy(row.data(), static_cast<char*>(g.C) + 5 * N * 2, N * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_NEAR(f16_to_f32(row[static_cast<size_t>(n)]), ref, 0.02 + 0.005 * std::abs(ref)) << "n=" << n;
  }

  // Another alignment of the same shape: a new plan that keeps the winner.
  GemmArgs shifted = g;
  shifted.C = static_cast<char*>(g.C) + 32;
  bool winner_offered = false;
  for (const GemmAlgo& c : engine.candidates(shifted))
    winner_offered |= c.config == cands[static_cast<size_t>(chosen)].config;
  const std::string again = engine.choice_note(shifted);
  EXPECT_EQ(again.rfind("measured: algo ", 0), 0u) << again;
  if (winner_offered) {
    EXPECT_NE(again.find("first planned"), std::string::npos) << again;
  }

  // A GEMM of a millisecond or more is not timed (short samples cannot rank
  // such kernels): it keeps the heuristic's first choice, as torch.matmul does.
  GemmArgs square = g;
  square.M = square.N = square.K = 8192;
  square.lda = square.ldb = square.ldc = 8192;
  square.bias = nullptr;
  EXPECT_EQ(engine.chosen_rank(square), 0);
  EXPECT_EQ(engine.choice_note(square).rfind("heuristic", 0), 0u) << engine.choice_note(square);

  setenv("RLX_CUDA_GEMM_TUNE", "0", 1);
  GemmEngine plain(0);
  EXPECT_EQ(plain.chosen_rank(g), 0);
  EXPECT_EQ(plain.choice_note(g).rfind("heuristic", 0), 0u) << plain.choice_note(g);
  unsetenv("RLX_CUDA_GEMM_TUNE");
  unsetenv("RLX_CUDA_GEMM_CACHE");
}

// RLX_CUDA_GEMM_CACHE: a timed choice is kept in the cache folder, and a
// later engine (another process, in effect) plans the shape from the file
// without timing it, to the same algorithm.
TEST(CalibrationGpu, GemmTimingsAreKeptForTheNextEngine) {
  SKIP_WITHOUT_GPU();
  const fs::path dir = fs::temp_directory_path() / ("rlx_gemm_cache_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  setenv("RLX_CALIB_DIR", dir.c_str(), 1);
  setenv("RLX_CUDA_GEMM_TUNE", "1", 1);
  setenv("RLX_CUDA_GEMM_CACHE", "1", 1);
  GemmArgs g;
  g.dtype = DType::F16;
  g.trans_b = true;
  g.M = 8192, g.N = 1536, g.K = 384;  // MiniLM's FFN up at 64 sequences of 128: 9.7 GFLOP, timed
  DeviceBuffer buf(0, size_t{64} << 20, "test scratch");
  char* base = static_cast<char*>(buf.data());
  g.A = base;
  g.B = base + g.M * g.K * 2;
  g.C = base + (size_t{32} << 20);
  g.lda = g.ldb = g.K;
  g.ldc = g.N;
  int first_rank = -1;
  {
    GemmEngine first(0);
    const std::string note = first.choice_note(g);
    EXPECT_EQ(note.rfind("measured: algo ", 0), 0u) << note;
    EXPECT_NE(note.find("fastest of"), std::string::npos) << note;
    first_rank = first.chosen_rank(g);
  }
  ASSERT_TRUE(fs::exists(gemm_choices_path(device_props(0).uuid))) << "no file in " << dir;
  GemmEngine later(0);
  const std::string note = later.choice_note(g);
  EXPECT_NE(note.find("first planned"), std::string::npos) << note;
  EXPECT_EQ(later.chosen_rank(g), first_rank);
  setenv("RLX_CUDA_GEMM_CACHE", "0", 1);
  GemmEngine without(0);
  EXPECT_NE(without.choice_note(g).find("fastest of"), std::string::npos) << without.choice_note(g);
  unsetenv("RLX_CUDA_GEMM_CACHE");
  unsetenv("RLX_CUDA_GEMM_TUNE");
  unsetenv("RLX_CALIB_DIR");
  fs::remove_all(dir);
}

// RLX_CUDA_GEMM_TUNE_NEAR: a timed winner is lent to a later GEMM whose M is
// in the same power of two (cuBLASLt's algorithm and prefer_sm90's kernel),
// and not to one in another power of two; the lent choice computes the same
// product (checked against a float64 row).
TEST(CalibrationGpu, GemmWinnersAreLentToNearShapes) {
  SKIP_WITHOUT_GPU();
  setenv("RLX_CUDA_GEMM_TUNE", "1", 1);
  setenv("RLX_CUDA_GEMM_CACHE", "0", 1);
  setenv("RLX_CUDA_GEMM_TUNE_NEAR", "1", 1);
  GemmEngine engine(0);
  const int64_t N = 1536, K = 384, kMaxM = 256 * 120;  // MiniLM's FFN up at batch lengths 72-120
  DeviceBuffer buf(0, size_t{160} << 20, "test scratch");
  char* base = static_cast<char*>(buf.data());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<uint16_t> host(static_cast<size_t>(8 * K + N * K));
  for (auto& h : host) h = f32_to_f16(uni(rng));
  auto gemm = [&](int64_t M) {
    GemmArgs g;
    g.dtype = DType::F16;
    g.trans_b = true;
    g.M = M, g.N = N, g.K = K;
    g.A = base;
    g.B = base + kMaxM * K * 2;
    g.C = base + (size_t{64} << 20);
    g.lda = g.ldb = K;
    g.ldc = N;
    return g;
  };
  const GemmArgs timed = gemm(256 * 72), lent = gemm(256 * 80), other = gemm(256 * 120);  // 18432, 20480, 30720
  ASSERT_EQ(std::bit_floor(static_cast<uint64_t>(timed.M)), std::bit_floor(static_cast<uint64_t>(lent.M)));
  const std::string first = engine.choice_note(timed);
  EXPECT_NE(first.find("fastest of"), std::string::npos) << first;
  const auto winner = engine.candidates(timed)[static_cast<size_t>(engine.chosen_rank(timed))].config;
  for (const GemmArgs& g : {lent, other}) {  // 20480 and 30720 are in [16384, 32768) too
    const std::string note = engine.choice_note(g);
    bool offered = false;  // cuBLASLt's candidates may differ with M; only an offered winner is lent
    for (const GemmAlgo& c : engine.candidates(g)) offered |= c.config == winner;
    if (!offered) {
      std::printf("M = %lld: the winner at 18432 is not among its candidates (%s)\n", static_cast<long long>(g.M),
                  note.c_str());
      continue;
    }
    EXPECT_NE(note.find("fastest at M = 18432"), std::string::npos) << note;
    EXPECT_EQ(engine.candidates(g)[static_cast<size_t>(engine.chosen_rank(g))].config, winner);
  }
  const GemmArgs below = gemm(256 * 56);  // 14336: the power of two below, timed on its own
  EXPECT_NE(engine.choice_note(below).find("fastest of"), std::string::npos) << engine.choice_note(below);

  std::string sm90_first, sm90_lent;
  const auto k_timed = engine.prefer_sm90(timed, Activation::GeluErf, &sm90_first);
  const auto k_lent = engine.prefer_sm90(lent, Activation::GeluErf, &sm90_lent);
  if (sm90_first.find("measured fastest") != std::string::npos) {  // timed (an sm_90a build on Hopper)
    EXPECT_NE(sm90_lent.find("fastest at M = 18432"), std::string::npos) << sm90_lent;
    EXPECT_EQ(k_timed.has_value(), k_lent.has_value());
    if (k_timed && k_lent) {
      EXPECT_EQ(*k_timed, *k_lent);
    }
  }

  // The lent algorithm's product at M = 20480: a row against float64.
  ASSERT_EQ(cudaMemcpy(base, host.data(), 8 * K * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(base + kMaxM * K * 2, host.data() + 8 * K, N * K * 2, cudaMemcpyHostToDevice), cudaSuccess);
  Stream stream;
  engine.run(lent, stream.get());
  stream.synchronize();
  std::vector<uint16_t> row(static_cast<size_t>(N));
  ASSERT_EQ(cudaMemcpy(row.data(), static_cast<char*>(lent.C) + 3 * N * 2, N * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int64_t n = 0; n < N; n += 29) {
    double ref = 0.0;
    for (int64_t k = 0; k < K; ++k)
      ref += double{f16_to_f32(host[static_cast<size_t>(3 * K + k)])} *
             f16_to_f32(host[static_cast<size_t>(8 * K + n * K + k)]);
    EXPECT_NEAR(f16_to_f32(row[static_cast<size_t>(n)]), ref, 0.02 + 0.005 * std::abs(ref)) << "n=" << n;
  }

  setenv("RLX_CUDA_GEMM_TUNE_NEAR", "0", 1);
  GemmEngine exact(0);
  (void)exact.choice_note(timed);
  EXPECT_NE(exact.choice_note(lent).find("fastest of"), std::string::npos) << exact.choice_note(lent);
  unsetenv("RLX_CUDA_GEMM_TUNE_NEAR");
  unsetenv("RLX_CUDA_GEMM_CACHE");
  unsetenv("RLX_CUDA_GEMM_TUNE");
}

TEST(CalibrationGpu, DispatchReportShowsPredictedAndMeasured) {
  SKIP_WITHOUT_GPU();
  calibration();
  // A MiniLM up-projection x·Wᵀ at a calibrated bucket (m=512 n=1536 k=384),
  // on cuBLASLt (not the optional cuDNN matmul path). Inputs are declared one
  // statement each: run() takes them in declaration order, and the order
  // function arguments are evaluated in is unspecified.
  setenv("RLX_CUDNN_MATMUL", "0", 1);
  auto graph = [] {
    Graph g;
    auto x = input(g, "x", DType::F16, {512, 384});
    auto w = input(g, "w", DType::F16, {1536, 384});
    output("y", matmul(x, w, MatMulAttrs{false, true}));
    return g;
  };
  const std::vector<Tensor> in = {Tensor::zeros(DType::F16, {512, 384}), Tensor::zeros(DType::F16, {1536, 384})};
  Session s("cuda");
  setenv("RLX_DISPATCH_REPORT", "1", 1);
  auto exe = s.compile(graph());
  exe->run(in);
  const std::string report = exe->dispatch_report();
  unsetenv("RLX_DISPATCH_REPORT");
  std::printf("%s", report.c_str());
  EXPECT_NE(report.find("cost model: calibrated"), std::string::npos) << report;
  EXPECT_NE(report.find("node predicted"), std::string::npos) << report;
  EXPECT_NE(report.find(" us, measured "), std::string::npos) << report;
  EXPECT_EQ(report.find("not measured"), std::string::npos) << report;
  EXPECT_NE(report.find("calibrated: algo"), std::string::npos)
      << "the GEMM at a calibrated bucket did not use the calibration:\n" << report;
  // Without RLX_DISPATCH_REPORT nothing is timed, and the report says so instead of "measured 0 us".
  auto quiet = s.compile(graph());
  quiet->run(in);
  const std::string untimed = quiet->dispatch_report();
  std::printf("%s", untimed.c_str());
  EXPECT_NE(untimed.find("node predicted"), std::string::npos) << untimed;
  EXPECT_NE(untimed.find("not measured"), std::string::npos) << untimed;
  EXPECT_EQ(untimed.find("measured 0 us"), std::string::npos) << untimed;
}

TEST(CalibrationGpu, AutoDevicePicksCpuForTinyAndGpuForLarge) {
  SKIP_WITHOUT_GPU();
  calibration();
  Session s("auto");
  auto graph = [](int64_t m, int64_t n, int64_t k) {
    Graph g;
    auto x = input(g, "x", DType::F32, {m, k});  // declared first: run() takes x, then w
    auto w = input(g, "w", DType::F32, {k, n});
    output("y", matmul(x, w));
    return g;
  };
  auto tiny = s.compile(graph(1, 8, 8));
  EXPECT_EQ(tiny->backend().name(), "cpu") << s.last_device_choice();
  std::printf("tiny: %s\n", s.last_device_choice().c_str());
  auto large = s.compile(graph(4096, 4096, 4096));
  EXPECT_EQ(large->backend().name(), "cuda") << s.last_device_choice();
  std::printf("large: %s\n", s.last_device_choice().c_str());
  // Both still compute the right thing: y = x·w with x = 1, w = 0.5 → every element 0.5·k.
  const auto out = tiny->run({Tensor::from(std::vector<float>(8, 1.0f), {1, 8}),
                              Tensor::from(std::vector<float>(64, 0.5f), {8, 8})});
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out[0].data<float>()[i], 4.0f) << i;
}

}  // namespace
