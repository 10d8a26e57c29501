// GaussianSplatRender on CUDA (contract: SplatAttrs in rlx/ir/ops.h). Three
// steps over a workspace sized by the number of Gaussians alone, so a CUDA
// graph replays them with no host work:
//   1. project every Gaussian (f64, as the CPU reference): 2D mean, conic,
//      the radius past which its α is below 1/255, a depth key;
//   2. sort the Gaussians by their f64 depth (CUB radix sort, stable: ties keep index order);
//   3. one 16×16-pixel CTA per tile walks the sorted list in batches of 256,
//      keeps those whose support reaches the tile (in order) and blends them
//      front to back; it stops once every pixel of the tile has ended.
// Step 3 reads every visible Gaussian once per tile (O(tiles · N) rectangle
// tests), where a per-tile binning pass would read only the overlapping ones;
// binning needs a buffer whose size depends on the data, which a captured
// graph cannot reallocate.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace rlx::cuda {

// Error flag bit the projection sets for a non-finite parameter, a zero
// quaternion or fx, fy <= 0 (the image is then invalid).
inline constexpr int32_t kSplatBadInput = 4;

struct SplatArgs {
  const float *means, *scales, *rotations, *opacities, *colors, *view, *intrinsics, *background;
  float* out;  // [height, width, 3]
  int64_t n;
  int width, height;
  float near_plane, eps2d;
  int32_t* error_flag;
};

size_t splat_workspace_bytes(int64_t n);
void launch_splat(const SplatArgs& a, void* workspace, cudaStream_t stream);

}  // namespace rlx::cuda
