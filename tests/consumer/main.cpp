// Builds y = relu(x · W) + b, compiles it on the CPU, checks the result.
#include <cmath>
#include <cstdio>
#include <vector>

#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"

int main() try {
  rlx::Graph g;
  auto x = rlx::input(g, "x", rlx::DType::F32, {"B", 2});
  auto w = rlx::param(g, "w", rlx::DType::F32, {2, 2});
  auto b = rlx::param(g, "b", rlx::DType::F32, {2});
  rlx::output("y", rlx::relu(rlx::matmul(x, w)) + b);

  rlx::Session session("cpu");
  auto exe = session.compile(g);
  exe->set_param("w", rlx::Tensor::from<float>({1.f, -1.f, 2.f, 0.5f}, {2, 2}));
  exe->set_param("b", rlx::Tensor::from<float>({0.25f, 0.5f}, {2}));
  auto y = exe->run({rlx::Tensor::from<float>({1.f, 2.f, -3.f, 1.f}, {2, 2})})[0].to_vector<float>();

  // x·W = [[5, 0], [-1, 3.5]] → relu → [[5, 0], [0, 3.5]] → + b
  const std::vector<float> want = {5.25f, 0.5f, 0.25f, 4.0f};
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(y[i] - want[i]) > 1e-6f) {
      std::fprintf(stderr, "rlx_consumer: y[%zu] = %g, expected %g\n", i, y[i], want[i]);
      return 1;
    }
  }
  std::printf("rlx_consumer: ok (%s)\n", session.device().name.c_str());
  return 0;
} catch (const rlx::Error& e) {
  std::fprintf(stderr, "rlx_consumer: %s\n", e.what());
  return 1;
}
