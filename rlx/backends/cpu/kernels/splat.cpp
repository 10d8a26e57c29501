// GaussianSplatRender on the CPU (the contract is in ops.h): the reference the
// GPU rasterizer is checked against, so Gaussians are projected in double.
//
// 1. Project every Gaussian (in parallel): camera depth, 2D mean, inverse 2D
//    covariance ("conic"), and the radius beyond which its α is below 1/255
//    whatever the direction: opacity·exp(−q/2) < 1/255 once q > 2·ln(255·o),
//    and q ≥ |d|²/λmax, so r = √(2·ln(255·o)·λmax). Exactly the Gaussians a
//    pixel could blend reach it, so tiles cannot change the result.
// 2. Order them by depth (then index) and bin them into 16×16-pixel tiles,
//    each tile's list in that order.
// 3. Blend each tile's pixels front to back (tiles in parallel).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "rlx/backends/cpu/kernel.h"

namespace rlx::cpu {
namespace {

constexpr int kTile = 16;
constexpr double kMinAlpha = 1.0 / 255.0;
constexpr double kMaxAlpha = 0.99;
constexpr double kMinTransmittance = 1e-4;

struct Projected {
  double depth = 0;
  double mx = 0, my = 0;           // pixel coordinates of the mean
  double ca = 0, cb = 0, cc = 0;   // conic: inverse of [[a, b], [b, c]]
  double radius = 0;               // support, pixels
  float opacity = 0;
  float r = 0, g = 0, b = 0;
  bool visible = false;
};

struct Camera {
  double R[3][3], t[3];
  double fx, fy, cx, cy;
  int width, height;
};

Projected project(const float* mean, const float* scale, const float* quat, float opacity, const float* color,
                  const Camera& cam, const SplatAttrs& a) {
  Projected p;
  double tc[3];
  for (int i = 0; i < 3; ++i)
    tc[i] = cam.R[i][0] * mean[0] + cam.R[i][1] * mean[1] + cam.R[i][2] * mean[2] + cam.t[i];
  if (!(tc[2] > a.near_plane)) return p;

  // Σ = R·S²·Rᵀ from the normalized quaternion (w, x, y, z).
  const double qn = std::sqrt(double(quat[0]) * quat[0] + double(quat[1]) * quat[1] + double(quat[2]) * quat[2] +
                              double(quat[3]) * quat[3]);
  const double w = quat[0] / qn, x = quat[1] / qn, y = quat[2] / qn, z = quat[3] / qn;
  const double Rq[3][3] = {{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
                           {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
                           {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}};
  const double s2[3] = {double(scale[0]) * scale[0], double(scale[1]) * scale[1], double(scale[2]) * scale[2]};
  // M = Rv·Rq: the Gaussian's axes in camera space; Σcam = M·S²·Mᵀ.
  double M[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) M[i][j] = cam.R[i][0] * Rq[0][j] + cam.R[i][1] * Rq[1][j] + cam.R[i][2] * Rq[2][j];
  double S[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      S[i][j] = M[i][0] * s2[0] * M[j][0] + M[i][1] * s2[1] * M[j][1] + M[i][2] * s2[2] * M[j][2];

  // The Jacobian of (fx·x/z, fy·y/z) at the mean, x/z and y/z clamped.
  const double mx_lim = 0.15 * cam.width / cam.fx, my_lim = 0.15 * cam.height / cam.fy;
  const double iz = 1.0 / tc[2];
  const double xz = std::clamp(tc[0] * iz, -cam.cx / cam.fx - mx_lim, (cam.width - cam.cx) / cam.fx + mx_lim);
  const double yz = std::clamp(tc[1] * iz, -cam.cy / cam.fy - my_lim, (cam.height - cam.cy) / cam.fy + my_lim);
  const double J[2][3] = {{cam.fx * iz, 0, -cam.fx * xz * iz}, {0, cam.fy * iz, -cam.fy * yz * iz}};
  double JS[2][3];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) JS[i][j] = J[i][0] * S[0][j] + J[i][1] * S[1][j] + J[i][2] * S[2][j];
  const double ca = JS[0][0] * J[0][0] + JS[0][1] * J[0][1] + JS[0][2] * J[0][2] + a.eps2d;
  const double cb = JS[0][0] * J[1][0] + JS[0][1] * J[1][1] + JS[0][2] * J[1][2];
  const double cc = JS[1][0] * J[1][0] + JS[1][1] * J[1][1] + JS[1][2] * J[1][2] + a.eps2d;
  const double det = ca * cc - cb * cb;
  if (!(det > 0) || !(255.0 * opacity > 1.0)) return p;  // singular, or never reaches α = 1/255

  const double mid = 0.5 * (ca + cc), lambda_max = mid + std::sqrt(std::max(0.0, mid * mid - det));
  p.radius = std::sqrt(2.0 * std::log(255.0 * opacity) * lambda_max) * 1.001 + 0.01;  // a hair wide: never narrow
  p.depth = tc[2];
  p.mx = cam.fx * tc[0] * iz + cam.cx;
  p.my = cam.fy * tc[1] * iz + cam.cy;
  p.ca = cc / det;
  p.cb = -cb / det;
  p.cc = ca / det;
  p.opacity = opacity;
  p.r = color[0];
  p.g = color[1];
  p.b = color[2];
  p.visible = true;
  return p;
}

// The first pixel index whose centre (u + ½) is at or past `x`, clamped to [0, n].
int first_pixel_at(double x, int n) { return static_cast<int>(std::clamp(std::ceil(x - 0.5), 0.0, double(n))); }

void splat_kernel(KernelArgs& args) {
  const auto& a = args.attrs<SplatAttrs>();
  const int64_t n = args.in_dims(0)[0];
  const float* means = args.in<float>(0);
  const float* scales = args.in<float>(1);
  const float* quats = args.in<float>(2);
  const float* opac = args.in<float>(3);
  const float* colors = args.in<float>(4);
  const float* view = args.in<float>(5);
  const float* intr = args.in<float>(6);
  const float* bg = args.in<float>(7);
  float* out = args.out<float>();

  auto bad = [&](bool cond, const auto&... what) {
    if (cond) throw InvalidArgument(str(args.where(), ": ", what...));
  };
  for (int i = 0; i < 16; ++i) bad(!std::isfinite(view[i]), "the view matrix has a non-finite entry");
  for (int i = 0; i < 4; ++i) bad(!std::isfinite(intr[i]), "the intrinsics have a non-finite entry");
  bad(!(intr[0] > 0 && intr[1] > 0), "fx and fy must be positive, got ", intr[0], " and ", intr[1]);
  for (int64_t i = 0; i < n; ++i) {
    bool finite = std::isfinite(opac[i]);
    for (int k = 0; k < 3; ++k)
      finite = finite && std::isfinite(means[i * 3 + k]) && std::isfinite(scales[i * 3 + k]) &&
               std::isfinite(colors[i * 3 + k]);
    double qq = 0;
    for (int k = 0; k < 4; ++k) {
      finite = finite && std::isfinite(quats[i * 4 + k]);
      qq += double(quats[i * 4 + k]) * quats[i * 4 + k];
    }
    bad(!finite, "gaussian ", i, " has a non-finite parameter");
    bad(!(qq > 0), "gaussian ", i, " has a zero rotation quaternion");
  }

  Camera cam{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) cam.R[i][j] = view[i * 4 + j];
    cam.t[i] = view[i * 4 + 3];
  }
  cam.fx = intr[0];
  cam.fy = intr[1];
  cam.cx = intr[2];
  cam.cy = intr[3];
  cam.width = a.width;
  cam.height = a.height;

  std::vector<Projected> proj(static_cast<size_t>(n));
  args.pool.parallel_for(n, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      proj[static_cast<size_t>(i)] =
          project(means + i * 3, scales + i * 3, quats + i * 4, opac[i], colors + i * 3, cam, a);
  });
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i)
    if (proj[static_cast<size_t>(i)].visible) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return proj[static_cast<size_t>(x)].depth < proj[static_cast<size_t>(y)].depth;
  });

  const int tiles_x = (a.width + kTile - 1) / kTile, tiles_y = (a.height + kTile - 1) / kTile;
  std::vector<std::vector<int64_t>> bins(static_cast<size_t>(tiles_x) * tiles_y);
  for (int64_t i : order) {
    const Projected& p = proj[static_cast<size_t>(i)];
    const int u0 = first_pixel_at(p.mx - p.radius, a.width), u1 = first_pixel_at(p.mx + p.radius + 1e-9, a.width);
    const int v0 = first_pixel_at(p.my - p.radius, a.height), v1 = first_pixel_at(p.my + p.radius + 1e-9, a.height);
    if (u0 >= u1 || v0 >= v1) continue;
    for (int ty = v0 / kTile; ty <= (v1 - 1) / kTile; ++ty)
      for (int tx = u0 / kTile; tx <= (u1 - 1) / kTile; ++tx) bins[static_cast<size_t>(ty * tiles_x + tx)].push_back(i);
  }

  args.pool.parallel_for(static_cast<int64_t>(bins.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t tile = b; tile < e; ++tile) {
      const int tx = static_cast<int>(tile % tiles_x), ty = static_cast<int>(tile / tiles_x);
      const auto& list = bins[static_cast<size_t>(tile)];
      for (int v = ty * kTile; v < std::min(a.height, (ty + 1) * kTile); ++v)
        for (int u = tx * kTile; u < std::min(a.width, (tx + 1) * kTile); ++u) {
          const double px = u + 0.5, py = v + 0.5;
          double T = 1.0, cr = 0, cg = 0, cbl = 0;
          for (int64_t i : list) {
            const Projected& p = proj[static_cast<size_t>(i)];
            const double dx = px - p.mx, dy = py - p.my;
            const double power = -0.5 * (p.ca * dx * dx + p.cc * dy * dy) - p.cb * dx * dy;
            if (power > 0) continue;
            const double alpha = std::min(kMaxAlpha, p.opacity * std::exp(power));
            if (alpha < kMinAlpha) continue;
            const double next_T = T * (1.0 - alpha);
            if (next_T < kMinTransmittance) break;
            cr += p.r * alpha * T;
            cg += p.g * alpha * T;
            cbl += p.b * alpha * T;
            T = next_T;
          }
          float* o = out + (static_cast<int64_t>(v) * a.width + u) * 3;
          o[0] = static_cast<float>(cr + T * bg[0]);
          o[1] = static_cast<float>(cg + T * bg[1]);
          o[2] = static_cast<float>(cbl + T * bg[2]);
        }
    }
  });
}

}  // namespace

void register_splat_kernels() {
  register_cpu_kernel(OpKind::GaussianSplatRender,
                      {DType::F32, DType::F32, DType::F32, DType::F32, DType::F32, DType::F32, DType::F32, DType::F32,
                       DType::F32},
                      splat_kernel, "cpu gaussian splat (f64 projection, 16x16 tiles)");
}

}  // namespace rlx::cpu
