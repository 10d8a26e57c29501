// GaussianSplatRender on the CPU beyond the conformance scenes: closed forms
// (one isotropic Gaussian facing the camera, two stacked ones blended front
// to back whatever their order in the inputs), culling behind the near
// plane, a symbolic number of Gaussians, and the errors bad inputs get.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"
#include "tests/splat_graph.h"

namespace rlx {
namespace {

struct Scene {
  std::vector<float> means, scales, rotations, opacities, colors;
  std::vector<float> view = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  std::vector<float> intrinsics = {100, 100, 32, 24};
  std::vector<float> background = {0.1f, 0.2f, 0.3f};
  void add(std::vector<float> mean, float scale, float opacity, std::vector<float> color) {
    means.insert(means.end(), mean.begin(), mean.end());
    scales.insert(scales.end(), {scale, scale, scale});
    rotations.insert(rotations.end(), {1, 0, 0, 0});
    opacities.push_back(opacity);
    colors.insert(colors.end(), color.begin(), color.end());
  }
  int64_t n() const { return static_cast<int64_t>(opacities.size()); }
};

Tensor render(const Scene& s, int width = 64, int height = 48) {
  const Graph g = test::splat_graph(width, height);
  const int64_t n = s.n();
  return Session("cpu").compile(g)->run({Tensor::from(s.means, {n, 3}), Tensor::from(s.scales, {n, 3}),
                                         Tensor::from(s.rotations, {n, 4}), Tensor::from(s.opacities, {n}),
                                         Tensor::from(s.colors, {n, 3}), Tensor::from(s.view, {4, 4}),
                                         Tensor::from(s.intrinsics, {4}), Tensor::from(s.background, {3})})[0];
}

const float* pixel(const Tensor& img, int u, int v) { return img.data<float>() + (v * img.dim(1) + u) * 3; }

// Mean at (0, 0, 4), σ = 0.05: on the image a circular Gaussian of variance
// (fx·σ/z)² + 0.3 centred on the principal point; every pixel is
// α·colour + (1 − α)·background with α = o·exp(−d²/(2·variance)).
TEST(Splat, OneGaussianHasItsClosedForm) {
  Scene s;
  s.add({0, 0, 4}, 0.05f, 0.8f, {1.0f, 0.5f, 0.0f});
  const Tensor img = render(s);
  ASSERT_EQ(img.shape(), (std::vector<int64_t>{48, 64, 3}));
  const double var = std::pow(100.0 * 0.05 / 4.0, 2) + 0.3;
  int blended = 0;
  for (int v = 0; v < 48; ++v)
    for (int u = 0; u < 64; ++u) {
      const double dx = u + 0.5 - 32.0, dy = v + 0.5 - 24.0;
      double alpha = 0.8 * std::exp(-(dx * dx + dy * dy) / (2 * var));
      if (alpha < 1.0 / 255.0) alpha = 0;
      blended += alpha > 0;
      for (int k = 0; k < 3; ++k)
        EXPECT_NEAR(pixel(img, u, v)[k], alpha * s.colors[k] + (1 - alpha) * s.background[k], 2e-6)
            << "pixel (" << u << ", " << v << ") channel " << k;
      if (HasFailure()) return;
    }
  EXPECT_GT(blended, 20);  // the test looked at a real footprint
}

// Two Gaussians on one line of sight: the nearer blends first, whichever
// comes first in the inputs; a third behind the camera changes nothing.
TEST(Splat, FrontToBackAndTheNearPlane) {
  Scene s;
  s.add({0, 0, 6}, 0.2f, 0.6f, {0, 0, 1});   // far, blue, first in the inputs
  s.add({0, 0, 3}, 0.1f, 0.5f, {1, 0, 0});   // near, red
  s.add({0, 0, -3}, 0.5f, 1.0f, {0, 1, 0});  // behind the camera
  const Tensor img = render(s);
  const double var_near = std::pow(100.0 * 0.1 / 3.0, 2) + 0.3, var_far = std::pow(100.0 * 0.2 / 6.0, 2) + 0.3;
  const int u = 33, v = 24;  // (33.5, 24.5): 1.5 and 0.5 pixels off the centre
  const double d2 = 1.5 * 1.5 + 0.5 * 0.5;
  const double a1 = 0.5 * std::exp(-d2 / (2 * var_near)), a2 = 0.6 * std::exp(-d2 / (2 * var_far));
  const double want[3] = {a1 * 1 + (1 - a1) * (1 - a2) * s.background[0],
                          (1 - a1) * (1 - a2) * s.background[1],
                          (1 - a1) * a2 * 1 + (1 - a1) * (1 - a2) * s.background[2]};
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(pixel(img, u, v)[k], want[k], 2e-6) << "channel " << k;
  // Far from both footprints: the background, exactly.
  for (int k = 0; k < 3; ++k) EXPECT_EQ(pixel(img, 2, 2)[k], s.background[k]);
}

// Many opaque Gaussians on one pixel: blending stops before the one that
// would take the transmittance below 1e-4, so at most a handful count.
TEST(Splat, SaturationEndsThePixel) {
  Scene s;
  for (int i = 0; i < 40; ++i) s.add({0, 0, 2.0f + 0.01f * static_cast<float>(i)}, 0.3f, 1.0f, {i == 0 ? 1.0f : 0.0f, 0, 0});
  const Tensor img = render(s);
  // Near the centre every α is capped at 0.99: the first (red) leaves T = 0.01,
  // the second (black) T = 1e-4, and the third would go below, so the pixel
  // ends there: red 0.99, and 1e-4 of the background.
  const float* p = pixel(img, 31, 23);
  const double var = std::pow(100.0 * 0.3 / 2.0, 2) + 0.3;
  const double a0 = std::min(0.99, std::exp(-0.5 / (2 * var)));
  EXPECT_NEAR(p[0], a0 + 1e-4 * s.background[0], 1e-7);
  EXPECT_NEAR(p[2], 1e-4 * s.background[2], 1e-7);
}

TEST(Splat, SymbolicCountAndEmptyScene) {
  Scene s;
  const Tensor empty = render(s, 8, 4);
  for (int64_t i = 0; i < empty.numel(); ++i) EXPECT_EQ(empty.data<float>()[i], s.background[i % 3]);
  s.add({0.1f, -0.1f, 2}, 0.05f, 0.9f, {1, 1, 1});
  const Tensor one = render(s, 8, 4);
  EXPECT_EQ(one.shape(), (std::vector<int64_t>{4, 8, 3}));
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Splat, BadInputsAreNamedErrors) {
  Scene s;
  s.add({0, 0, 4}, 0.05f, 0.8f, {1, 1, 1});
  s.add({0, 0, 5}, 0.05f, 0.8f, {1, 1, 1});
  Scene zero_q = s;
  zero_q.rotations[4] = 0;
  expect_error([&] { render(zero_q); }, "gaussian 1 has a zero rotation quaternion");
  Scene nan_mean = s;
  nan_mean.means[1] = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { render(nan_mean); }, "gaussian 0 has a non-finite parameter");
  Scene bad_fx = s;
  bad_fx.intrinsics[0] = 0;
  expect_error([&] { render(bad_fx); }, "fx and fy must be positive");
  expect_error([&] { render(s, 0, 4); }, "image size 0x4");
  expect_error(
      [&] {
        Graph g;
        auto in = [&](const char* name, Shape shape) { return input(g, name, DType::F32, std::move(shape)); };
        output("y", gaussian_splat(in("means", {5, 3}), in("scales", {4, 3}), in("rotations", {5, 4}),
                                   in("opacities", {5}), in("colors", {5, 3}), in("view", {4, 4}),
                                   in("intrinsics", {4}), in("background", {3}), SplatAttrs{.width = 4, .height = 4}));
      },
      "scales");
}

}  // namespace
}  // namespace rlx
