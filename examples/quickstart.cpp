// rlx quickstart: describe a graph, compile it for a device, upload the
// weights, run it.   y = layer_norm(gelu(x · W + b))
#include <cstdio>

#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"

int main() try {
  using rlx::DType;

  // 1. The graph. "B" is a symbolic batch size: one compiled executable
  //    serves every batch size (each new size is specialized once, then cached).
  rlx::Graph g;
  auto x = rlx::input(g, "x", DType::F32, {"B", 3});
  auto w = rlx::param(g, "w", DType::F32, {3, 4});
  auto b = rlx::param(g, "b", DType::F32, {4});
  auto gamma = rlx::param(g, "gamma", DType::F32, {4});
  auto beta = rlx::param(g, "beta", DType::F32, {4});
  rlx::output("y", rlx::layer_norm(rlx::gelu(rlx::matmul(x, w) + b), gamma, beta));

  // 2. Compile for a device: "cpu", "cuda", "cuda:1" or "auto".
  rlx::Session session("cpu");
  auto exe = session.compile(g);

  // 3. Upload the parameters (host tensors; copied to the device).
  exe->set_param("w", rlx::Tensor::from<float>({0.1f, 0.2f, -0.3f, 0.4f,
                                                0.5f, -0.6f, 0.7f, 0.8f,
                                                -0.9f, 1.0f, 0.1f, -0.2f}, {3, 4}));
  exe->set_param("b", rlx::Tensor::from<float>({0.1f, -0.1f, 0.2f, 0.0f}, {4}));
  exe->set_param("gamma", rlx::Tensor::from<float>({1.0f, 1.0f, 2.0f, 0.75f}, {4}));
  exe->set_param("beta", rlx::Tensor::from<float>({0.0f, 0.1f, 0.0f, -0.25f}, {4}));

  // 4. Run: inputs in declaration order, one output tensor per graph output.
  auto xv = rlx::Tensor::from<float>({1.0f, 2.0f, 3.0f,
                                      -1.0f, 1.0f, 2.0f}, {2, 3});
  rlx::Tensor y = exe->run({xv})[0];

  const float* p = y.data<float>();
  for (int64_t i = 0; i < y.dim(0); ++i) {
    std::printf("y[%ld] =", static_cast<long>(i));
    for (int64_t j = 0; j < y.dim(1); ++j) std::printf(" %.4f", p[i * y.dim(1) + j]);
    std::printf("\n");
  }
  return 0;
} catch (const rlx::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
