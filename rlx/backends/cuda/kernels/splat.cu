#include "rlx/backends/cuda/kernels/splat.h"

#include <algorithm>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"

namespace rlx::cuda {
namespace {

constexpr int kTile = 16;
constexpr int kThreads = kTile * kTile;
constexpr uint64_t kHidden = ~uint64_t{0};  // the depth key of a culled Gaussian: sorted last

struct Projected {
  double mx, my;      // 2D mean, pixels
  double ca, cb, cc;  // conic
  double radius;      // support, pixels (< 0: culled)
  float opacity, r, g, b;
};

struct Layout {
  size_t proj, keys_a, keys_b, idx_a, idx_b, temp, temp_bytes, total;
};

size_t align_up(size_t b) { return (b + 255) / 256 * 256; }

Layout layout(int64_t n) {
  Layout l{};
  const auto un = static_cast<size_t>(n);
  l.proj = 0;
  l.keys_a = align_up(un * sizeof(Projected));
  l.keys_b = l.keys_a + align_up(un * sizeof(uint64_t));
  l.idx_a = l.keys_b + align_up(un * sizeof(uint64_t));
  l.idx_b = l.idx_a + align_up(un * sizeof(int32_t));
  l.temp = l.idx_b + align_up(un * sizeof(int32_t));
  cub::DoubleBuffer<uint64_t> k(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> v(nullptr, nullptr);
  RLX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, l.temp_bytes, k, v, n, 0, 64));
  l.total = l.temp + align_up(l.temp_bytes);
  return l;
}

__device__ bool is_finite_f(float x) { return isfinite(x); }

// Step 1: the same arithmetic as the CPU's project() (kernels/splat.cpp), in f64.
__global__ void project_kernel(SplatArgs a, Projected* proj, uint64_t* keys, int32_t* idx) {
  dev::pdl_begin();
  const float* V = a.view;
  const float* K = a.intrinsics;
  bool camera_ok = K[0] > 0 && K[1] > 0;
  for (int i = 0; i < 16; ++i) camera_ok = camera_ok && is_finite_f(V[i]);
  for (int i = 0; i < 4; ++i) camera_ok = camera_ok && is_finite_f(K[i]);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    Projected p{};
    p.radius = -1;
    keys[i] = kHidden;
    idx[i] = static_cast<int32_t>(i);
    const float* mean = a.means + i * 3;
    const float* scale = a.scales + i * 3;
    const float* q = a.rotations + i * 4;
    const float opacity = a.opacities[i];
    const float* color = a.colors + i * 3;
    bool ok = camera_ok && is_finite_f(opacity);
    double qq = 0;
    for (int k = 0; k < 3; ++k) ok = ok && is_finite_f(mean[k]) && is_finite_f(scale[k]) && is_finite_f(color[k]);
    for (int k = 0; k < 4; ++k) {
      ok = ok && is_finite_f(q[k]);
      qq += double(q[k]) * q[k];
    }
    if (!ok || !(qq > 0)) {
      atomicOr(a.error_flag, kSplatBadInput);
      proj[i] = p;
      continue;
    }
    double R[3][3], t[3];
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) R[r][c] = V[r * 4 + c];
      t[r] = V[r * 4 + 3];
    }
    double tc[3];
    for (int r = 0; r < 3; ++r) tc[r] = R[r][0] * mean[0] + R[r][1] * mean[1] + R[r][2] * mean[2] + t[r];
    if (!(tc[2] > a.near_plane) || !(255.0 * opacity > 1.0)) {
      proj[i] = p;
      continue;
    }
    const double qn = sqrt(qq);
    const double w = q[0] / qn, x = q[1] / qn, y = q[2] / qn, z = q[3] / qn;
    const double Rq[3][3] = {{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
                             {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
                             {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}};
    const double s2[3] = {double(scale[0]) * scale[0], double(scale[1]) * scale[1], double(scale[2]) * scale[2]};
    double M[3][3], S[3][3];
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) M[r][c] = R[r][0] * Rq[0][c] + R[r][1] * Rq[1][c] + R[r][2] * Rq[2][c];
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c)
        S[r][c] = M[r][0] * s2[0] * M[c][0] + M[r][1] * s2[1] * M[c][1] + M[r][2] * s2[2] * M[c][2];
    const double fx = K[0], fy = K[1], cx = K[2], cy = K[3];
    const double mx_lim = 0.15 * a.width / fx, my_lim = 0.15 * a.height / fy;
    const double iz = 1.0 / tc[2];
    const double xz = fmin(fmax(tc[0] * iz, -cx / fx - mx_lim), (a.width - cx) / fx + mx_lim);
    const double yz = fmin(fmax(tc[1] * iz, -cy / fy - my_lim), (a.height - cy) / fy + my_lim);
    const double J[2][3] = {{fx * iz, 0, -fx * xz * iz}, {0, fy * iz, -fy * yz * iz}};
    double JS[2][3];
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) JS[r][c] = J[r][0] * S[0][c] + J[r][1] * S[1][c] + J[r][2] * S[2][c];
    const double ca = JS[0][0] * J[0][0] + JS[0][1] * J[0][1] + JS[0][2] * J[0][2] + a.eps2d;
    const double cb = JS[0][0] * J[1][0] + JS[0][1] * J[1][1] + JS[0][2] * J[1][2];
    const double cc = JS[1][0] * J[1][0] + JS[1][1] * J[1][1] + JS[1][2] * J[1][2] + a.eps2d;
    const double det = ca * cc - cb * cb;
    if (!(det > 0)) {
      proj[i] = p;
      continue;
    }
    const double mid = 0.5 * (ca + cc), lambda_max = mid + sqrt(fmax(0.0, mid * mid - det));
    p.radius = sqrt(2.0 * log(255.0 * opacity) * lambda_max) * 1.001 + 0.01;
    p.mx = fx * tc[0] * iz + cx;
    p.my = fy * tc[1] * iz + cy;
    p.ca = cc / det;
    p.cb = -cb / det;
    p.cc = ca / det;
    p.opacity = opacity;
    p.r = color[0];
    p.g = color[1];
    p.b = color[2];
    proj[i] = p;
    keys[i] = static_cast<uint64_t>(__double_as_longlong(tc[2]));  // positive doubles order as their bits
  }
}

// Step 3: one CTA per tile, one thread per pixel.
__global__ void __launch_bounds__(kThreads) raster_kernel(SplatArgs a, const Projected* proj, const uint64_t* keys,
                                                          const int32_t* idx) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ Projected batch[kThreads];
  dev::pdl_begin();
  const int tx0 = blockIdx.x * kTile, ty0 = blockIdx.y * kTile;
  const int u = tx0 + static_cast<int>(threadIdx.x) % kTile, v = ty0 + static_cast<int>(threadIdx.x) / kTile;
  const bool inside = u < a.width && v < a.height;
  const double px = u + 0.5, py = v + 0.5;
  double T = 1.0, cr = 0, cg = 0, cbl = 0;
  bool done = !inside;
  const int tx1 = min(tx0 + kTile, a.width), ty1 = min(ty0 + kTile, a.height);
  for (int64_t base = 0; base < a.n; base += kThreads) {
    if (keys[base] == kHidden) break;  // the rest were culled (uniform across the CTA)
    const int64_t k = base + threadIdx.x;
    bool reaches = false;
    Projected g{};
    if (k < a.n && keys[k] != kHidden) {
      g = proj[idx[k]];
      // The pixels whose centres lie within the support, as the CPU bins them.
      const int u0 = static_cast<int>(ceil(g.mx - g.radius - 0.5)), u1 = static_cast<int>(ceil(g.mx + g.radius - 0.5 + 1e-9));
      const int v0 = static_cast<int>(ceil(g.my - g.radius - 0.5)), v1 = static_cast<int>(ceil(g.my + g.radius - 0.5 + 1e-9));
      reaches = u0 < tx1 && u1 > tx0 && v0 < ty1 && v1 > ty0;
    }
    int at = 0, total = 0;
    Scan(scan).ExclusiveSum(reaches ? 1 : 0, at, total);
    if (reaches) batch[at] = g;
    __syncthreads();
    if (!done)
      for (int j = 0; j < total; ++j) {
        const Projected& p = batch[j];
        const double dx = px - p.mx, dy = py - p.my;
        const double power = -0.5 * (p.ca * dx * dx + p.cc * dy * dy) - p.cb * dx * dy;
        if (power > 0) continue;
        const double alpha = fmin(0.99, p.opacity * exp(power));
        if (alpha < 1.0 / 255.0) continue;
        const double next_T = T * (1.0 - alpha);
        if (next_T < 1e-4) {
          done = true;
          break;
        }
        cr += p.r * alpha * T;
        cg += p.g * alpha * T;
        cbl += p.b * alpha * T;
        T = next_T;
      }
    // Every pixel ended: no later Gaussian can change the tile. (Also the
    // barrier before the next batch overwrites the shared list.)
    if (__syncthreads_and(done)) break;
  }
  if (inside) {
    float* o = a.out + (static_cast<int64_t>(v) * a.width + u) * 3;
    o[0] = static_cast<float>(cr + T * a.background[0]);
    o[1] = static_cast<float>(cg + T * a.background[1]);
    o[2] = static_cast<float>(cbl + T * a.background[2]);
  }
}

}  // namespace

size_t splat_workspace_bytes(int64_t n) { return n > 0 ? layout(n).total : 0; }

void launch_splat(const SplatArgs& a, void* workspace, cudaStream_t stream) {
  const dim3 tiles((a.width + kTile - 1) / kTile, (a.height + kTile - 1) / kTile);
  if (a.n == 0) {
    // No Gaussians: every pixel is the background (the raster kernel with an empty list).
    raster_kernel<<<tiles, kThreads, 0, stream>>>(a, nullptr, nullptr, nullptr);
    RLX_CUDA_CHECK_LAUNCH("GaussianSplatRender");
    return;
  }
  const Layout l = layout(a.n);
  char* ws = static_cast<char*>(workspace);
  auto* proj = reinterpret_cast<Projected*>(ws + l.proj);
  auto* keys_a = reinterpret_cast<uint64_t*>(ws + l.keys_a);
  auto* keys_b = reinterpret_cast<uint64_t*>(ws + l.keys_b);
  auto* idx_a = reinterpret_cast<int32_t*>(ws + l.idx_a);
  auto* idx_b = reinterpret_cast<int32_t*>(ws + l.idx_b);
  const int64_t blocks = std::min<int64_t>((a.n + 255) / 256, 4096);
  project_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(a, proj, keys_a, idx_a);
  RLX_CUDA_CHECK_LAUNCH("GaussianSplatRender");
  cub::DoubleBuffer<uint64_t> keys(keys_a, keys_b);
  cub::DoubleBuffer<int32_t> idx(idx_a, idx_b);
  size_t temp_bytes = l.temp_bytes;
  RLX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + l.temp, temp_bytes, keys, idx, a.n, 0, 64, stream));
  raster_kernel<<<tiles, kThreads, 0, stream>>>(a, proj, keys.Current(), idx.Current());
  RLX_CUDA_CHECK_LAUNCH("GaussianSplatRender");
}

}  // namespace rlx::cuda
