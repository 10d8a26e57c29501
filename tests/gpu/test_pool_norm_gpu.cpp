// An encoder's pooling tail as one kernel (lower_pool_norm.cpp,
// kernels/pool_norm.h) against the CPU backend running the same graph:
//   y = rms_norm(reshape(matmul(reshape(cast(mask), [B, 1, L]), h), [B, H]), gamma)
// with h = x + x computed on the device (as an encoder's last norm is), in
// f32/f16/bf16, masks with padded, full and empty rows, fewer tokens than the
// kernel's warps, and H from one 16-byte vector to 1024. Values are rounded
// to bf16 on the host, so every precision stores them exactly. Tolerance
// |got − ref| ≤ atol + rtol·|ref|: f32 1e-4/1e-4, f16 4e-3/4e-3, bf16
// 3e-2/1e-2 (the output is rounded to the dtype once; the unfused path also
// rounds the pooled sum). Each case checks from the dispatch report whether
// the fused kernel ran, so the comparison tests the path it names.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/cuda_backend_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using rlx::test::rng;
using rlx::test::ScopedEnv;

Tensor random_values(std::vector<int64_t> shape, float lo, float hi) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_f32(f32_to_bf16(d(rng())));
  return t;
}

// Row b keeps its first lens[b % lens.size()] tokens.
Tensor prefix_mask(int64_t B, int64_t L, const std::vector<int64_t>& lens) {
  Tensor m = Tensor::zeros(DType::I32, {B, L});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < std::min(L, lens[static_cast<size_t>(b) % lens.size()]); ++l)
      m.data<int32_t>()[b * L + l] = 1;
  return m;
}

struct Case {
  int64_t B, L, H;
  bool also_output_pooled = false;  // the matmul's result is read by more than the norm: no fusion
};

Graph tail_graph(const Case& c, const Tensor& gamma, float eps) {
  Graph g;
  auto x = input(g, "x", DType::F32, {c.B, c.L, c.H});
  auto mask = input(g, "mask", DType::I32, {c.B, c.L});
  auto h = x + x;
  auto pooled = reshape(matmul(reshape(cast(mask, DType::F32), {c.B, 1, c.L}), h), {c.B, c.H});
  output("y", rms_norm(pooled, constant(g, gamma, "gamma"), eps));
  if (c.also_output_pooled) output("pooled", pooled);
  return g;
}

std::vector<Tensor> run(const Graph& g, const std::string& device, DType precision, const std::vector<Tensor>& in,
                        std::string* report) {
  Session s(device);
  CompileOptions o;
  o.precision = precision;
  auto exe = s.compile(g, o);
  std::vector<Tensor> out = exe->run(in);
  if (report) *report = exe->dispatch_report();
  for (Tensor& t : out)
    if (t.dtype() != DType::F32) t = t.to(DType::F32);
  return out;
}

void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol) {
  ASSERT_EQ(got.numel(), want.numel());
  int64_t bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.data<float>()[i], v = got.data<float>()[i];
    if (!(std::fabs(v - w) <= atol + rtol * std::fabs(w)) && ++bad <= 5)
      ADD_FAILURE() << "[" << i << "] = " << v << ", want " << w;
  }
  EXPECT_EQ(bad, 0);
}

bool fused(const std::string& report) { return report.find("pool + rms_norm") != std::string::npos; }

TEST(PoolNormGpu, FusedTailMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  RLX_TRACE_SEED();
  const float eps = 1e-24f / 384.0f;  // the BERT builder's F.normalize as an RMS norm
  for (const Case& c : {Case{3, 5, 384}, Case{256, 128, 384}, Case{2, 37, 1024}, Case{4, 130, 8}, Case{5, 9, 768},
                        Case{3, 6, 384, true}}) {
    const Tensor x = random_values({c.B, c.L, c.H}, -2, 2), gamma = random_values({c.H}, 0.5f, 1.5f);
    const Tensor mask = prefix_mask(c.B, c.L, {c.L, 1, 0, c.L / 2 + 1});  // full, one token, empty, half
    const Graph g = tail_graph(c, gamma, eps);
    const std::vector<Tensor> ref = run(g, "cpu", DType::F32, {x, mask}, nullptr);
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      SCOPED_TRACE(testing::Message() << "B=" << c.B << " L=" << c.L << " H=" << c.H << " " << dtype_name(dt)
                                      << (c.also_output_pooled ? " (pooled also an output)" : ""));
      std::string report;
      const std::vector<Tensor> got = run(g, "cuda", dt, {x, mask}, &report);
      EXPECT_EQ(fused(report), !c.also_output_pooled) << report;
      const double atol = dt == DType::F32 ? 1e-4 : dt == DType::F16 ? 4e-3 : 3e-2;
      const double rtol = dt == DType::F32 ? 1e-4 : dt == DType::F16 ? 4e-3 : 1e-2;
      ASSERT_EQ(got.size(), ref.size());
      expect_close(got[0], ref[0], atol, rtol);
      // The pooled sums are of order L: relative tolerance only.
      if (c.also_output_pooled) expect_close(got[1], ref[1], atol, dt == DType::F32 ? 1e-4 : 1e-2);
    }
  }
}

// H = 12 has no whole 16-byte vectors in f16 (the kernel refuses; the nodes
// lower one by one), and RLX_CUDA_FUSE_POOL_NORM=0 turns the fusion off:
// both still match the CPU.
TEST(PoolNormGpu, UnfusedFallbacksMatchCpu) {
  SKIP_WITHOUT_CUDA();
  RLX_TRACE_SEED();
  for (const char* knob : {"1", "0"})
    for (const Case& c : {Case{3, 7, 12}, Case{2, 16, 384}}) {
      ScopedEnv env("RLX_CUDA_FUSE_POOL_NORM", knob);
      const Tensor x = random_values({c.B, c.L, c.H}, -2, 2), gamma = random_values({c.H}, 0.5f, 1.5f);
      const Tensor mask = prefix_mask(c.B, c.L, {c.L, 2});
      const Graph g = tail_graph(c, gamma, 1e-6f);
      const std::vector<Tensor> ref = run(g, "cpu", DType::F32, {x, mask}, nullptr);
      SCOPED_TRACE(testing::Message() << "H=" << c.H << " RLX_CUDA_FUSE_POOL_NORM=" << knob);
      std::string report;
      const std::vector<Tensor> got = run(g, "cuda", DType::F16, {x, mask}, &report);
      EXPECT_EQ(fused(report), knob[0] == '1' && c.H % 8 == 0) << report;
      expect_close(got[0], ref[0], 4e-3, 4e-3);
    }
}

}  // namespace
