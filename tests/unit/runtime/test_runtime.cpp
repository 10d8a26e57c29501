// Runtime behaviour on the CPU backend: typed I/O, bad input errors, params,
// state persistence, the specialization cache, scratch shared between
// programs and the dispatch report.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <thread>

#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

using namespace rlx;

namespace {

using rlx::test::error_of;

Graph affine() {
  Graph g;
  auto x = input(g, "x", DType::F32, {"B", 3});
  auto w = param(g, "w", DType::F32, {3, 2});
  auto b = param(g, "b", DType::F32, {2});
  output("y", matmul(x, w) + b);
  return g;
}

}  // namespace

TEST(Runtime, RunsAGraphWithParamsAndSymbolicBatch) {
  Session s("cpu");
  auto exe = s.compile(affine());
  exe->set_param("w", Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}));
  exe->set_param("b", Tensor::from(std::vector<float>{0.5f, -0.5f}, {2}));
  auto y = exe->run({Tensor::from(std::vector<float>{1, 0, 2, 0, 1, 1}, {2, 3})})[0];
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 2}));
  const float* p = y.data<float>();
  EXPECT_FLOAT_EQ(p[0], 1 + 10 + 0.5f);
  EXPECT_FLOAT_EQ(p[1], 2 + 12 - 0.5f);
  EXPECT_FLOAT_EQ(p[2], 3 + 5 + 0.5f);
  EXPECT_FLOAT_EQ(p[3], 4 + 6 - 0.5f);
  auto y3 = exe->run({Tensor::from(std::vector<float>(9, 1.0f), {3, 3})})[0];
  EXPECT_EQ(y3.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(exe->cached_specializations(), 2u);
  exe->run({Tensor::from(std::vector<float>{1, 0, 2, 0, 1, 1}, {2, 3})});
  EXPECT_EQ(exe->cached_specializations(), 2u);
}

TEST(Runtime, BadInputsNameWhatIsWrong) {
  Session s("cpu");
  auto exe = s.compile(affine());
  EXPECT_NE(error_of([&] { exe->run({Tensor::zeros(DType::F32, {2, 3})}); }).find("params not set: b, w"),
            std::string::npos);
  exe->set_param("w", Tensor::zeros(DType::F32, {3, 2}));
  exe->set_param("b", Tensor::zeros(DType::F32, {2}));
  EXPECT_NE(error_of([&] { exe->set_param("w", Tensor::zeros(DType::F32, {2, 3})); }).find("set_param 'w': shape [2, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { exe->set_param("nope", Tensor::zeros(DType::F32, {2})); }).find("no param 'nope'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { exe->set_param("b", Tensor::zeros(DType::I32, {2})); }).find("got i32 data for a f32 param"),
            std::string::npos);
  EXPECT_NE(error_of([&] { exe->run({Tensor::zeros(DType::I32, {2, 3})}); }).find("input 'x': expected dtype f32, got i32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { exe->run({Tensor::zeros(DType::F32, {2, 4})}); }).find("input 'x' dim 1: expected 3, got 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { exe->run({}); }).find("expected 1 inputs, got 0"), std::string::npos);
}

TEST(Runtime, InconsistentSymbolBindingIsReported) {
  Graph g;
  auto ids = input(g, "ids", DType::I32, {"B", "L"});
  auto mask = input(g, "mask", DType::F32, {"B", "L"});
  output("m", reduce(ReduceFn::Sum, mask, {1}));
  output("n", argmax(cast(ids, DType::F32), 1));
  Session s("cpu");
  auto exe = s.compile(g);
  std::string msg = error_of([&] { exe->run({Tensor::zeros(DType::I32, {2, 5}), Tensor::zeros(DType::F32, {2, 6})}); });
  EXPECT_NE(msg.find("input 'mask' dim 1: symbol 'L' is 6 here but 5 in input 'ids' dim 1"), std::string::npos) << msg;
}

TEST(Runtime, StatePersistsAcrossRuns) {
  Graph g;
  auto cache = state(g, "cache", DType::F32, {1, 4, 2});
  auto upd = input(g, "upd", DType::F32, {1, 1, 2});
  auto pos = input(g, "pos", DType::I32, {1});
  auto w = write_slice(cache, upd, pos, 1);
  output("sum", reduce(ReduceFn::Sum, w, {1}));
  Session s("cpu");
  auto exe = s.compile(g);
  for (int step = 0; step < 3; ++step) {
    auto out = exe->run({Tensor::from(std::vector<float>{static_cast<float>(step + 1), 10.0f * static_cast<float>(step + 1)}, {1, 1, 2}),
                         Tensor::from(std::vector<int32_t>{step}, {1})})[0];
    const float* p = out.data<float>();
    float want = 0;
    for (int k = 0; k <= step; ++k) want += float(k + 1);
    EXPECT_FLOAT_EQ(p[0], want);
    EXPECT_FLOAT_EQ(p[1], 10.0f * want);
  }
  auto st = exe->read_state("cache");
  EXPECT_FLOAT_EQ(st.data<float>()[4], 3.0f);
  exe->reset_states();
  EXPECT_FLOAT_EQ(exe->read_state("cache").data<float>()[4], 0.0f);
  EXPECT_NE(error_of([&] {
              exe->run({Tensor::zeros(DType::F32, {1, 1, 2}), Tensor::from(std::vector<int32_t>{4}, {1})});
            }).find("WriteSlice"),
            std::string::npos);
}

TEST(Runtime, DispatchReportNamesKernels) {
  setenv("RLX_DISPATCH_REPORT", "1", 1);
  Session s("cpu");
  auto exe = s.compile(affine());
  exe->set_param("w", Tensor::zeros(DType::F32, {3, 2}));
  exe->set_param("b", Tensor::zeros(DType::F32, {2}));
  exe->run({Tensor::zeros(DType::F32, {1, 3})});
  unsetenv("RLX_DISPATCH_REPORT");
  std::string r = exe->dispatch_report();
  EXPECT_NE(r.find("dispatch report (cpu"), std::string::npos) << r;
  EXPECT_NE(r.find("FusedMatMulBiasAct"), std::string::npos) << r;
}

TEST(Runtime, UnknownDeviceIsAClearError) {
  EXPECT_NE(error_of([] { Session s("tpu"); }).find("unknown device 'tpu'"), std::string::npos);
  EXPECT_NE(error_of([] { Session s("cpu:3"); }).find("not available"), std::string::npos);
}

TEST(Runtime, HalfPolicyRunsAndReturnsF32) {
  Session s("cpu");
  CompileOptions o;
  o.precision = DType::BF16;
  auto exe = s.compile(affine(), o);
  exe->set_param("w", Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}));
  exe->set_param("b", Tensor::from(std::vector<float>{0.5f, -0.5f}, {2}));
  auto y = exe->run({Tensor::from(std::vector<float>{1, 0, 2, 0, 1, 1}, {2, 3})})[0];
  EXPECT_EQ(y.dtype(), DType::F32);
  EXPECT_NEAR(y.data<float>()[0], 11.5f, 0.1f);
}

// CPU programs borrow their arena from a shared pool for each run, so one run's
// leftovers are the next one's starting memory, and concurrent runs must each
// hold their own. Two Executables on two threads, each cycling through batch
// sizes (new specializations, larger and smaller arenas, B = 1 making the
// narrow a view into the arena), against a float64 host reference.
TEST(Runtime, ProgramsShareScratchAcrossShapesAndThreads) {
  auto worker = [](unsigned seed, std::string* failure) {
    Graph g;
    auto x = input(g, "x", DType::F32, {"B", 4});
    auto w = param(g, "w", DType::F32, {4, 4});
    auto b = param(g, "b", DType::F32, {4});
    output("y", narrow(relu(matmul(x, w) + b), 1, 1, 2) * scalar(g, 2.0f) - narrow(x, 1, 0, 2));
    Session s("cpu");
    auto exe = s.compile(g);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> wv(16), bv(4);
    for (float& v : wv) v = u(rng);
    for (float& v : bv) v = u(rng);
    exe->set_param("w", Tensor::from(wv, {4, 4}));
    exe->set_param("b", Tensor::from(bv, {4}));
    for (int it = 0; it < 200; ++it) {
      const int64_t B = std::vector<int64_t>{4096, 1, 17, 3, 2048}[static_cast<size_t>(it) % 5];
      std::vector<float> xv(static_cast<size_t>(B) * 4);
      for (float& v : xv) v = u(rng);
      const Tensor y = exe->run({Tensor::from(xv, {B, 4})})[0];
      for (int64_t r = 0; r < B; ++r)
        for (int64_t c = 0; c < 2; ++c) {
          double h = bv[static_cast<size_t>(c + 1)];
          for (int64_t k = 0; k < 4; ++k)
            h += double{xv[static_cast<size_t>(r * 4 + k)]} * wv[static_cast<size_t>(k * 4 + c + 1)];
          const double want = 2.0 * std::max(h, 0.0) - xv[static_cast<size_t>(r * 4 + c)];
          const double got = y.data<float>()[r * 2 + c];
          if (std::abs(got - want) > 1e-5) {
            *failure = str("seed ", seed, " run ", it, " B=", B, " [", r, ", ", c, "]: ", got, " want ", want);
            return;
          }
        }
    }
  };
  std::string f1, f2;
  std::thread t1(worker, 1u, &f1), t2(worker, 2u, &f2);
  t1.join();
  t2.join();
  EXPECT_EQ(f1, "");
  EXPECT_EQ(f2, "");
}
