// GaussianSplatRender on CUDA (lower_splat.cpp, kernels/splat.cu) against the
// CPU backend, past the conformance scenes: thousands of Gaussians over a
// larger image (many tiles, batches of 256, early-ended tiles), CUDA-graph
// replays with new scenes, an empty scene, and bad input reported through the
// node's error flag. Both project in f64 and blend in f64; the image may
// differ by f32 rounding of the inputs' products only: |got − ref| ≤ 2e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/cuda_backend_test_util.h"
#include "tests/splat_graph.h"

namespace {

using namespace rlx;

// A random scene of n Gaussians in front of a camera looking down +z.
std::vector<Tensor> scene(int64_t n, int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  auto uni = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  std::vector<float> means, scales, rot, opac, colors;
  for (int64_t i = 0; i < n; ++i) {
    means.insert(means.end(), {uni(-2, 2), uni(-1.5f, 1.5f), uni(-0.5f, 8)});
    scales.insert(scales.end(), {uni(0.01f, 0.2f), uni(0.01f, 0.2f), uni(0.01f, 0.2f)});
    rot.insert(rot.end(), {uni(0.1f, 1), uni(-1, 1), uni(-1, 1), uni(-1, 1)});
    opac.push_back(uni(0.02f, 1));
    colors.insert(colors.end(), {uni(0, 1), uni(0, 1), uni(0, 1)});
  }
  const float c = std::cos(0.05f), s = std::sin(0.05f);
  const std::vector<float> view = {c, 0, s, 0.05f, 0, 1, 0, 0, -s, 0, c, 0.1f, 0, 0, 0, 1};
  const float f = 0.9f * static_cast<float>(width);
  return {Tensor::from(means, {n, 3}), Tensor::from(scales, {n, 3}), Tensor::from(rot, {n, 4}),
          Tensor::from(opac, {n}),     Tensor::from(colors, {n, 3}), Tensor::from(view, {4, 4}),
          Tensor::from(std::vector<float>{f, f, width / 2.0f + 0.3f, height / 2.0f - 0.2f}, {4}),
          Tensor::from(std::vector<float>{0.2f, 0.1f, 0.05f}, {3})};
}

void expect_same_image(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const float* a = got.data<float>();
  const float* b = want.data<float>();
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double e = std::abs(double(a[i]) - b[i]);
    worst = std::max(worst, e);
    bad += e > 2e-5;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.numel() << " values differ from the CPU's by more than "
                    << "2e-5 (worst " << worst << ")";
}

TEST(SplatGpu, LargeScenesMatchCpu) {
  SKIP_WITHOUT_CUDA();
  for (auto [n, w, h] : {std::tuple<int64_t, int, int>{5000, 320, 240}, {700, 100, 37}, {0, 40, 30}}) {
    const Graph g = test::splat_graph(w, h);
    const auto in = scene(n, w, h, static_cast<uint32_t>(n + w));
    expect_same_image(Session("cuda").compile(g)->run(in)[0], Session("cpu").compile(g)->run(in)[0],
                      str(n, " gaussians, ", w, "x", h));
  }
}

TEST(SplatGpu, GraphReplaysWithNewScenes) {
  SKIP_WITHOUT_CUDA();
  const Graph g = test::splat_graph(96, 64);
  auto gpu = Session("cuda").compile(g);
  auto cpu = Session("cpu").compile(g);
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const auto in = scene(600, 96, 64, seed);
    expect_same_image(gpu->run(in)[0], cpu->run(in)[0], str("replay ", seed));
  }
}

TEST(SplatGpu, BadInputIsReported) {
  SKIP_WITHOUT_CUDA();
  const Graph g = test::splat_graph(32, 32);
  auto gpu = Session("cuda").compile(g);
  auto in = scene(50, 32, 32, 9);
  in[2].data<float>()[4 * 7 + 0] = 0;  // gaussian 7: a zero quaternion
  in[2].data<float>()[4 * 7 + 1] = 0;
  in[2].data<float>()[4 * 7 + 2] = 0;
  in[2].data<float>()[4 * 7 + 3] = 0;
  try {
    gpu->run(in);
    ADD_FAILURE() << "no error for a zero quaternion";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero rotation quaternion"), std::string::npos) << e.what();
  }
  in = scene(50, 32, 32, 9);  // and the program runs on afterwards
  expect_same_image(gpu->run(in)[0], Session("cpu").compile(g)->run(in)[0], "after the error");
}

}  // namespace
