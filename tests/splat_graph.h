// The graph of one gaussian_splat render with every operand a program input
// (N Gaussians, N symbolic), shared by the CPU and CUDA splat tests. run()
// takes the inputs in this order: means [N, 3], scales [N, 3], rotations
// [N, 4], opacities [N], colors [N, 3], view [4, 4], intrinsics [4],
// background [3].
#pragma once
#include "rlx/ir/builder.h"

namespace rlx::test {

inline Graph splat_graph(int width, int height) {
  Graph g;
  // Declared one by one: the order a call evaluates its arguments in is unspecified.
  Value means = input(g, "means", DType::F32, {"N", 3});
  Value scales = input(g, "scales", DType::F32, {"N", 3});
  Value rotations = input(g, "rotations", DType::F32, {"N", 4});
  Value opacities = input(g, "opacities", DType::F32, {"N"});
  Value colors = input(g, "colors", DType::F32, {"N", 3});
  Value view = input(g, "view", DType::F32, {4, 4});
  Value intrinsics = input(g, "intrinsics", DType::F32, {4});
  Value background = input(g, "background", DType::F32, {3});
  output("image", gaussian_splat(means, scales, rotations, opacities, colors, view, intrinsics, background,
                                 SplatAttrs{.width = width, .height = height}));
  return g;
}

}  // namespace rlx::test
