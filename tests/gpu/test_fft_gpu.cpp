// Fft on CUDA (cuFFT, lower_fft.cpp) against the CPU backend, which computes
// in double: shapes past the conformance table (4096 rows, n = 65536, a prime
// n for cuFFT's own Bluestein path), the staged inputs (f16/bf16/f64 real
// inputs converted, a narrowed input off 16-byte alignment, the bins a c2r
// transform would overwrite), and CUDA-graph replays with changing inputs.
//
// Tolerance: the worst |got − ref| over a row, relative to that row's RMS
// output, at most 2e-6·log2(n) (cuFFT's f32 error grows with the passes).
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/cuda_backend_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;

Tensor random_f32(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// Every output of `g` on CUDA within the tolerance of the CPU's, per row of
// the last axis (complex outputs are compared through their f32 views).
void expect_matches_cpu(const Graph& g, const std::vector<Tensor>& inputs, int64_t n, const std::string& what,
                        int runs = 1, const std::function<std::vector<Tensor>(int)>& inputs_for = nullptr) {
  auto gpu = Session("cuda").compile(g);
  auto cpu = Session("cpu").compile(g);
  for (int run = 0; run < runs; ++run) {
    const std::vector<Tensor> in = inputs_for ? inputs_for(run) : inputs;
    const auto got = gpu->run(in), want = cpu->run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      ASSERT_EQ(got[o].shape(), want[o].shape()) << what;
      const std::vector<double> a = got[o].to_f64(), b = want[o].to_f64();
      const int64_t len = std::max<int64_t>(1, want[o].numel() / want[o].shape()[0]);  // one row: [n] or [n, 2]
      double worst = 0.0;
      for (size_t r = 0; r < b.size(); r += static_cast<size_t>(len)) {
        double ss = 0.0, err = 0.0;
        for (size_t i = r; i < r + static_cast<size_t>(len); ++i) {
          ss += b[i] * b[i];
          err = std::max(err, std::abs(a[i] - b[i]));
        }
        const double rms = std::sqrt(ss / static_cast<double>(len));
        if (rms > 0) worst = std::max(worst, err / rms);
      }
      EXPECT_LE(worst, 2e-6 * std::max(1.0, std::log2(static_cast<double>(n))))
          << what << ", output " << o << ", run " << run << ": worst error relative to the row's RMS";
    }
  }
}

TEST(FftGpu, LargeComplexTransformsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{4096, 1024}, {16, 65536}, {64, 4099}, {300, 1}}) {
    Graph g;
    Value x = view_as_complex(input(g, "x", DType::F32, {rows, n, 2}));
    output("fwd", view_as_real(fft(x)));
    output("inv", view_as_real(ifft(x, FftNorm::Ortho)));
    expect_matches_cpu(g, {random_f32({rows, n, 2}, static_cast<uint32_t>(n))}, n,
                       str("c2c ", rows, "x", n));
  }
}

TEST(FftGpu, RealTransformsFromEveryFloatStorage) {
  SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int64_t n : {int64_t{4096}, int64_t{1001}}) {
      Graph g;
      Value x = input(g, "x", dt, {8, n});
      Value bins = rfft(x);
      output("bins", view_as_real(bins));
      output("back", irfft(bins, n, FftNorm::Backward));  // c2r overwrites what it reads: "bins" must not change
      expect_matches_cpu(g, {random_f32({8, n}, 3).to(dt)}, n, str("r2c/c2r ", dtype_name(dt), " n=", n));
    }
  }
}

// A narrow along the rows of a complex tensor starts 8 bytes past a 16-byte
// boundary: the lowering stages it.
TEST(FftGpu, MisalignedNarrowedInput) {
  SKIP_WITHOUT_CUDA();
  Graph g;
  Value x = view_as_complex(input(g, "x", DType::F32, {33, 1, 2}));
  output("y", view_as_real(fft(reshape(narrow(x, 0, 1, 32), {4, 8}))));
  expect_matches_cpu(g, {random_f32({33, 1, 2}, 5)}, 8, "narrowed");
}

// Replays of the captured graph with fresh inputs equal runs without graphs.
TEST(FftGpu, GraphReplaysWithChangingInputs) {
  SKIP_WITHOUT_CUDA();
  Graph g;
  Value x = input(g, "x", DType::F32, {64, 2048});
  output("y", irfft(rfft(x, FftNorm::Ortho), 2048, FftNorm::Ortho));
  output("bins", view_as_real(fft(view_as_complex(reshape(x, {64, 1024, 2})), FftNorm::Forward)));
  auto with = Session("cuda").compile(g);
  CompileOptions no_graphs;
  no_graphs.cuda_graphs = false;
  auto without = Session("cuda").compile(g, no_graphs);
  for (int run = 0; run < 6; ++run) {
    Tensor in = random_f32({64, 2048}, static_cast<uint32_t>(100 + run));
    const auto a = with->run({in}), b = without->run({in});
    for (size_t o = 0; o < a.size(); ++o)
      EXPECT_EQ(a[o].to_f64(), b[o].to_f64()) << "output " << o << " run " << run;
  }
  expect_matches_cpu(g, {}, 2048, "replays", 3, [](int run) { return std::vector<Tensor>{random_f32({64, 2048}, static_cast<uint32_t>(200 + run))}; });
}

}  // namespace
