// The calibration store (round trip, invalidation by identity, corrupt files)
// and the cost model (units, monotonicity, variant and device choice) with
// fake calibrations; expected times are computed here in float64 from the
// formula time = per_node + max(FLOPs / rate, bytes / bandwidth).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "rlx/ir/builder.h"
#include "rlx/runtime/calibration.h"
#include "rlx/runtime/cost_model.h"

namespace {

using namespace rlx;
using namespace rlx::units;
namespace fs = std::filesystem;

CalibrationIdentity fake_identity() {
  return {"NVIDIA H200", "GPU-01234567-89ab-cdef-0123-456789abcdef", "13.0", "13.0", "130100", rlx_version()};
}

Calibration fake_calibration() {
  Calibration c;
  c.identity = fake_identity();
  c.created_utc = "2025-01-01T00:00:00Z";
  c.measure_s = 12.5;
  c.complete = true;
  c.launch_us = 2.25;
  c.graph_node_us = 1.5;
  c.sync_us = 8.0;
  c.d2d_gbps = 3500;
  c.h2d_gbps = 50;
  c.d2h_gbps = 40;
  c.buckets.push_back({"gemm.f32", {1024, 1024, 1024},
                       {{"algo0", 250.0, 8589.9, 50.0, {1, 2, 3}}, {"algo1", 200.0, 10737.4, 62.9, {4, 5, 6}}}});
  c.buckets.push_back({"gemm.f16", {1, 4096, 4096}, {{"algo0", 20.0, 1677.7, 1600.0, {7}}}});
  c.buckets.push_back({"attention.f16", {96, 512, 512, 64}, {{"prefill_mma", 40.0, 80000, 100, {}}}});
  return c;
}

// A fresh folder per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("rlx_calib_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

TEST(CalibrationStore, RoundTripGivesEqualData) {
  TempDir dir;
  const Calibration c = fake_calibration();
  const std::string path = dir.file("cal.json");
  save_calibration(c, path);
  const LoadResult r = load_calibration(path, fake_identity());
  ASSERT_EQ(r.status, CalibrationLoad::Loaded) << r.why;
  const Calibration& d = *r.calibration;
  EXPECT_EQ(d.identity, c.identity);
  EXPECT_EQ(d.created_utc, c.created_utc);
  EXPECT_EQ(d.complete, c.complete);
  EXPECT_EQ(d.problems, c.problems);
  EXPECT_EQ(d.launch_us, c.launch_us);
  EXPECT_EQ(d.graph_node_us, c.graph_node_us);
  EXPECT_EQ(d.sync_us, c.sync_us);
  EXPECT_EQ(d.d2d_gbps, c.d2d_gbps);
  EXPECT_EQ(d.h2d_gbps, c.h2d_gbps);
  EXPECT_EQ(d.d2h_gbps, c.d2h_gbps);
  ASSERT_EQ(d.buckets.size(), c.buckets.size());
  for (size_t i = 0; i < c.buckets.size(); ++i) {
    EXPECT_EQ(d.buckets[i].family, c.buckets[i].family);
    EXPECT_EQ(d.buckets[i].shape, c.buckets[i].shape);
    ASSERT_EQ(d.buckets[i].variants.size(), c.buckets[i].variants.size());
    for (size_t k = 0; k < c.buckets[i].variants.size(); ++k) {
      const auto &a = d.buckets[i].variants[k], &b = c.buckets[i].variants[k];
      EXPECT_EQ(a.variant, b.variant);
      EXPECT_EQ(a.us, b.us);
      EXPECT_EQ(a.gflops, b.gflops);
      EXPECT_EQ(a.gbps, b.gbps);
      EXPECT_EQ(a.config, b.config);
    }
  }
  // And the text is stable: writing what was read gives the same bytes.
  EXPECT_EQ(calibration_to_json(d), calibration_to_json(c));
}

TEST(CalibrationStore, ProblemsSayWhyItIsIncomplete) {
  TempDir dir;
  Calibration c = fake_calibration();
  c.complete = false;
  c.problems = {"attention: failed: attention: null q or out pointer",
                "gemm: its 22.5 s share of the 30 s budget ran out after 17 shape buckets"};
  const std::string path = dir.file("cal.json");
  save_calibration(c, path);
  const LoadResult r = load_calibration(path, fake_identity());
  ASSERT_EQ(r.status, CalibrationLoad::Loaded) << r.why;
  EXPECT_FALSE(r.calibration->complete);
  EXPECT_EQ(r.calibration->problems, c.problems);
}

TEST(CalibrationStore, UnitsAreInTheFieldNames) {
  const std::string j = calibration_to_json(fake_calibration());
  for (const char* f : {"\"launch_us\"", "\"graph_node_us\"", "\"sync_us\"", "\"d2d_gbps\"", "\"h2d_gbps\"",
                        "\"d2h_gbps\"", "\"gflops\"", "\"gbps\"", "\"us\"", "\"gpu_uuid\"", "\"driver_version\"",
                        "\"cuda_runtime_version\"", "\"rlx_version\"", "\"gpu_name\""})
    EXPECT_NE(j.find(f), std::string::npos) << f;
}

TEST(CalibrationStore, EachIdentityFieldInvalidates) {
  TempDir dir;
  const std::string path = dir.file("cal.json");
  save_calibration(fake_calibration(), path);
  struct Change {
    const char* field;
    std::string CalibrationIdentity::*member;
  };
  const Change changes[] = {{"gpu_uuid", &CalibrationIdentity::gpu_uuid}, {"gpu_name", &CalibrationIdentity::gpu_name},
                            {"driver", &CalibrationIdentity::driver}, {"cuda_runtime", &CalibrationIdentity::cuda_runtime},
                            {"cublaslt", &CalibrationIdentity::cublaslt}, {"rlx_version", &CalibrationIdentity::rlx}};
  for (const auto& ch : changes) {
    CalibrationIdentity running = fake_identity();
    running.*ch.member += "-other";
    const LoadResult r = load_calibration(path, running);
    EXPECT_EQ(r.status, CalibrationLoad::Stale) << ch.field;
    EXPECT_FALSE(r.calibration.has_value()) << ch.field;
    EXPECT_NE(r.why.find(ch.field), std::string::npos) << ch.field << ": " << r.why;
  }
  EXPECT_EQ(load_calibration(path, fake_identity()).status, CalibrationLoad::Loaded);
}

TEST(CalibrationStore, MissingFileIsNotAnError) {
  TempDir dir;
  const LoadResult r = load_calibration(dir.file("none.json"), fake_identity());
  EXPECT_EQ(r.status, CalibrationLoad::Missing);
  EXPECT_FALSE(r.calibration.has_value());
}

TEST(CalibrationStore, CorruptFilesAreIgnoredWithAWarning) {
  TempDir dir;
  const std::string good = calibration_to_json(fake_calibration());
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::pair<const char*, std::string> cases[] = {
      {"truncated", good.substr(0, good.size() / 2)},
      {"empty", ""},
      {"binary garbage", std::string("\x00\xff\x13garbage", 10)},
      {"wrong schema", replaced(str("\"schema_version\": ", Calibration::kSchemaVersion), "\"schema_version\": 99")},
      {"older schema", replaced(str("\"schema_version\": ", Calibration::kSchemaVersion), "\"schema_version\": 1")},
      {"no problems list", replaced("\"problems\"", "\"problem\"")},
      {"not an object", "[1, 2, 3]"},
      {"missing field", replaced("\"launch_us\"", "\"launch_ms\"")},
      {"wrong type", replaced("\"variant\": \"algo0\"", "\"variant\": 7")},
      {"negative time", replaced("\"sync_us\": 8.0", "\"sync_us\": -8.0")},
  };
  for (const auto& [name, text] : cases) {
    const std::string path = dir.file("cal.json");
    write_text(path, text);
    ::testing::internal::CaptureStderr();
    const LoadResult r = load_calibration(path, fake_identity());
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(r.status, CalibrationLoad::Corrupt) << name;
    EXPECT_FALSE(r.calibration.has_value()) << name;
    EXPECT_NE(err.find("warning: ignoring calibration file"), std::string::npos) << name << ": " << err;
    EXPECT_NE(err.find(path), std::string::npos) << name << ": " << err;
  }
  // A corrupt file is simply overwritten by the next save.
  save_calibration(fake_calibration(), dir.file("cal.json"));
  EXPECT_EQ(load_calibration(dir.file("cal.json"), fake_identity()).status, CalibrationLoad::Loaded);
}

TEST(CalibrationStore, PathFollowsTheEnvironment) {
  const char* old_dir = std::getenv("RLX_CALIB_DIR");
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string keep_dir = old_dir ? old_dir : "", keep_xdg = old_xdg ? old_xdg : "";
  unsetenv("RLX_CALIB_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(calibration_path("GPU-ab/cd"), "/tmp/xdg-test/rlx/cuda-calib-GPU-ab_cd.json");
  setenv("RLX_CALIB_DIR", "/tmp/calib-over", 1);
  EXPECT_EQ(calibration_path("GPU-1"), "/tmp/calib-over/cuda-calib-GPU-1.json");
  if (old_dir) setenv("RLX_CALIB_DIR", keep_dir.c_str(), 1);
  else unsetenv("RLX_CALIB_DIR");
  if (old_xdg) setenv("XDG_CACHE_HOME", keep_xdg.c_str(), 1);
  else unsetenv("XDG_CACHE_HOME");
}

TEST(CalibrationStore, NearestBucket) {
  const Calibration c = fake_calibration();
  double d = -1;
  EXPECT_EQ(c.nearest("gemm.f32", {1024, 1024, 1024}, &d), &c.buckets[0]);
  EXPECT_EQ(d, 0.0);
  EXPECT_EQ(c.nearest("gemm.f32", {512, 1024, 1024}, &d), &c.buckets[0]);
  EXPECT_DOUBLE_EQ(d, 1.0);
  EXPECT_EQ(c.nearest("gemm.bf16", {1, 1, 1}), nullptr);
  EXPECT_EQ(c.nearest("gemm.f32", {1024, 1024}), nullptr);  // another rank
  EXPECT_EQ(c.buckets[0].best()->variant, "algo1");
}

// ---- cost model ------------------------------------------------------------

// The mismatched unit combinations do not compile.
template <typename A, typename B>
concept Divisible = requires(A a, B b) { a / b; };
static_assert(Divisible<Flops, GflopRate>);
static_assert(Divisible<Bytes, GbyteRate>);
static_assert(!Divisible<Flops, GbyteRate>);
static_assert(!Divisible<Bytes, GflopRate>);
static_assert(!Divisible<double, GflopRate>);

TEST(CostModel, UnitsConvertGigaToMicro) {
  // 2e9 FLOP at 1000 GFLOP/s is 2 ms; the seed's mixup (FLOP/s read as GFLOP/s) would give 2e-6 us or 2e12 us.
  EXPECT_DOUBLE_EQ((Flops{2e9} / GflopRate{1000}).value, 2000.0);
  EXPECT_DOUBLE_EQ((Bytes{3e9} / GbyteRate{1500}).value, 2000.0);
  EXPECT_DOUBLE_EQ((Flops{1} / GflopRate{1}).value, 1e-3);
}

Graph matmul_graph(int64_t m, int64_t n, int64_t k, DType dt = DType::F32) {
  Graph g;
  output("y", matmul(input(g, "x", dt, {m, k}), param(g, "w", dt, {k, n})));
  return g;
}

NodeId last_node(const Graph& g) { return g.size() - 1; }

TEST(CostModel, CalibratedMatmulMatchesTheFormula) {
  const Calibration c = fake_calibration();
  const CostModel model(gpu_rates_from(c, "cuda:0"), c);
  EXPECT_TRUE(model.rates().calibrated);
  EXPECT_DOUBLE_EQ(model.rates().per_node.value, 1.5);        // graph_node_us
  EXPECT_DOUBLE_EQ(model.rates().memory.value, 3500);          // d2d_gbps
  EXPECT_DOUBLE_EQ(model.rates().matmul_f32.value, 10737.4);   // best f32 gflops
  const Graph g = matmul_graph(1024, 1024, 1024);
  const double flops = 2.0 * 1024 * 1024 * 1024, bytes = 3.0 * 1024 * 1024 * 4;
  const double expect = 1.5 + std::max(flops / (10737.4 * 1e3), bytes / (3500 * 1e3));
  EXPECT_NEAR(model.predict_node(g, last_node(g)).value, expect, 1e-9);
  EXPECT_NEAR(expect, 201.5, 0.1);  // the 200 us the best variant measured, plus a graph node
}

TEST(CostModel, HeuristicWithoutCalibrationAlwaysWorks) {
  const CostModel model(heuristic_gpu_rates());
  EXPECT_FALSE(model.rates().calibrated);
  const Graph g = matmul_graph(64, 64, 64);
  const double t = model.predict_node(g, last_node(g)).value;
  EXPECT_GT(t, 0);
  EXPECT_FALSE(model.choose_variant("gemm.f32", {64, 64, 64}, 10).has_value());
}

TEST(CostModel, MoreWorkTakesLonger) {
  for (const CostModel& model : {CostModel(heuristic_gpu_rates()), CostModel(heuristic_cpu_rates(8)),
                                 CostModel(gpu_rates_from(fake_calibration(), "cuda:0"), fake_calibration())}) {
    double prev = 0;
    for (int64_t k : {16, 64, 256, 1024, 4096, 16384}) {
      const Graph g = matmul_graph(512, 512, k);
      const double t = model.predict_node(g, last_node(g)).value;
      EXPECT_GT(t, prev) << model.rates().device << " k=" << k;
      prev = t;
    }
  }
}

TEST(CostModel, BandwidthBoundAndComputeBound) {
  const CostModel model(heuristic_gpu_rates());
  const DeviceRates& r = model.rates();
  // An add moves 12 bytes per FLOP: bandwidth-bound, time = per_node + bytes / bandwidth.
  Graph add;
  const int64_t n = 1 << 24;
  output("y", input(add, "a", DType::F32, {n}) + input(add, "b", DType::F32, {n}));
  EXPECT_NEAR(model.predict_node(add, last_node(add)).value, r.per_node.value + 12.0 * n / (r.memory.value * 1e3),
              1e-6);
  // A large square matmul does ~1000 FLOPs per byte: compute-bound, time = per_node + FLOPs / rate.
  const Graph mm = matmul_graph(8192, 8192, 8192, DType::F16);
  EXPECT_NEAR(model.predict_node(mm, last_node(mm)).value,
              r.per_node.value + 2.0 * 8192.0 * 8192 * 8192 / (r.matmul_half.value * 1e3), 1e-6);
  // Leaves cost nothing.
  EXPECT_EQ(model.predict_node(mm, 0).value, 0.0);
}

TEST(CostModel, ChoosesTheFastestVariantOfANearbyBucket) {
  const Calibration c = fake_calibration();
  const CostModel model(gpu_rates_from(c, "cuda:0"), c);
  auto ch = model.choose_variant("gemm.f32", {1024, 1024, 1024}, 2.0);
  ASSERT_TRUE(ch.has_value());
  EXPECT_EQ(ch->timing->variant, "algo1");
  EXPECT_EQ(ch->timing->config, (std::vector<int64_t>{4, 5, 6}));
  EXPECT_DOUBLE_EQ(ch->predicted.value, 200.0);
  // Half the m: the same winner, predicted at half the time.
  ch = model.choose_variant("gemm.f32", {512, 1024, 1024}, 2.0);
  ASSERT_TRUE(ch.has_value());
  EXPECT_DOUBLE_EQ(ch->predicted.value, 100.0);
  // Too far from anything measured: no choice (the engine keeps its default).
  EXPECT_FALSE(model.choose_variant("gemm.f32", {8, 64, 64}, 2.0).has_value());
  EXPECT_FALSE(model.choose_variant("gemm.bf16", {1024, 1024, 1024}, 2.0).has_value());
}

TEST(CostModel, BorrowsAWinnerOnlyFromAVeryCloseBucket) {
  const Calibration c = fake_calibration();
  const CostModel model(gpu_rates_from(c, "cuda:0"), c);
  const double near = CostModel::kBorrowDistance;
  // The measured shape itself, and m 1.25x away (|log2 1.25| = 0.32): the bucket's winner.
  for (int64_t m : {1024, 1280, 820}) {
    const auto ch = model.choose_variant("gemm.f32", {m, 1024, 1024}, near);
    ASSERT_TRUE(ch.has_value()) << m;
    EXPECT_EQ(ch->timing->variant, "algo1") << m;
    EXPECT_DOUBLE_EQ(ch->predicted.value, 200.0 * static_cast<double>(m) / 1024.0) << m;
  }
  // m a factor 2 away, or n and k each 1.3x away (0.38 + 0.38): cuBLASLt's heuristic decides.
  EXPECT_FALSE(model.choose_variant("gemm.f32", {2048, 1024, 1024}, near).has_value());
  EXPECT_FALSE(model.choose_variant("gemm.f32", {512, 1024, 1024}, near).has_value());
  EXPECT_FALSE(model.choose_variant("gemm.f32", {1024, 1331, 1331}, near).has_value());
}

TEST(CostModel, AttentionUsesItsCalibratedRate) {
  const Calibration c = fake_calibration();
  const CostModel model(gpu_rates_from(c, "cuda:0"), c);
  Graph g;
  AttentionAttrs a;
  a.num_heads = a.num_kv_heads = 12;
  a.head_dim = 64;
  auto q = input(g, "q", DType::F16, {8, 512, 768});
  output("o", op(OpKind::Attention, a, {q, q, q}));
  const double flops = 4.0 * 8 * 12 * 512 * 512 * 64;
  const double bytes = 4.0 * 8 * 512 * 768 * 2;
  EXPECT_NEAR(model.predict_node(g, last_node(g)).value,
              1.5 + std::max(flops / (80000 * 1e3), bytes / (3500 * 1e3)), 1e-9);
}

TEST(CostModel, AutoDeviceTinyGraphOnCpuLargeOnGpu) {
  const Calibration c = fake_calibration();
  const CostModel gpu(gpu_rates_from(c, "cuda:0"), c);
  const CostModel cpu(heuristic_cpu_rates(8));
  // Batch 1, tiny dims: the GPU's sync and host transfers dominate.
  const DeviceChoice tiny = choose_device(matmul_graph(1, 16, 16), cpu, gpu);
  EXPECT_FALSE(tiny.use_gpu) << tiny.reason;
  EXPECT_LT(tiny.cpu.value, tiny.gpu.value);
  EXPECT_NE(tiny.reason.find("cpu"), std::string::npos);
  // A large matmul: the GPU wins by orders of magnitude.
  const DeviceChoice big = choose_device(matmul_graph(1024, 1024, 1024), cpu, gpu);
  EXPECT_TRUE(big.use_gpu) << big.reason;
  EXPECT_GT(big.cpu.value, 10 * big.gpu.value);
  // The GPU prediction includes the run overhead and the host transfers.
  const Graph g = matmul_graph(1, 16, 16);
  const double io = (16 * 4 + 16 * 4) / (40.0 * 1e3);  // input x and output y over min(h2d, d2h)
  EXPECT_NEAR(tiny.gpu.value, (8.0 + 2.25) + gpu.predict_node(g, last_node(g)).value + io, 1e-9);
}

}  // namespace
