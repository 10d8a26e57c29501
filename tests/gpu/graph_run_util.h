// Shared by the GPU tests that compare a small hand-built graph on CUDA
// against the CPU backend (the lowering-time fusion tests): one compile and
// run with named parameters, and an element-wise check of every output.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rlx/core/half.h"
#include "rlx/ir/graph.h"
#include "rlx/runtime/session.h"

namespace rlx::test {

// `g` compiled on `device` at `precision`, `params` set by name, run on
// `inputs`; the outputs as f32, and the dispatch report in `report` if given.
inline std::vector<Tensor> run_graph(const Graph& g, const std::string& device, DType precision,
                                     const std::vector<std::pair<std::string, Tensor>>& params,
                                     const std::vector<Tensor>& inputs, std::string* report = nullptr) {
  Session s(device);
  CompileOptions o;
  o.precision = precision;
  auto exe = s.compile(g, o);
  for (const auto& [name, t] : params) exe->set_param(name, t);
  std::vector<Tensor> out = exe->run(inputs);
  if (report) *report = exe->dispatch_report();
  for (Tensor& t : out)
    if (t.dtype() != DType::F32) t = t.to(DType::F32);
  return out;
}

// An f32 tensor of uniform values in [lo, hi) from `r`, each rounded to
// bf16 (so f16 and bf16 runs read the CPU reference's values exactly).
template <typename Rng>
Tensor bf16_exact_uniform(std::vector<int64_t> shape, float lo, float hi, Rng& r) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_f32(f32_to_bf16(u(r)));
  return t;
}

// Every element of every output within tol·(1 + |ref|) of `ref`'s (f32 both).
inline void expect_outputs_close(const std::vector<Tensor>& ref, const std::vector<Tensor>& got, double tol) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t o = 0; o < ref.size(); ++o) {
    ASSERT_EQ(got[o].numel(), ref[o].numel()) << "output " << o;
    int64_t bad = 0;
    for (int64_t i = 0; i < ref[o].numel(); ++i) {
      const double want = ref[o].data<float>()[i], v = got[o].data<float>()[i];
      if (!(std::fabs(v - want) <= tol * (1.0 + std::fabs(want))) && ++bad <= 5)
        ADD_FAILURE() << "output " << o << "[" << i << "] = " << v << ", want " << want;
    }
    EXPECT_EQ(bad, 0) << "output " << o;
  }
}

}  // namespace rlx::test
