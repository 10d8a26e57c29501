// ScaledMatMul (fp8 matmul with f32 scales) on the CPU, and quantize_fp8:
// operand validation, dynamic quantization against its contract, the
// quantized product against the float product within fp8's error bound, and
// the precision policy keeping the scales f32. Exact values against float64
// are the conformance suite's (tests/ops, scaled_matmul_* cases).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/passes/pass_manager.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using rlx::test::error_of;
using rlx::test::rng;
using rlx::test::uniform_f32;

TEST(ScaledMatMul, ValidatesOperands) {
  Graph g;
  auto a = input(g, "a", DType::F8E4M3, {"B", 7, 64});
  auto b = param(g, "b", DType::F8E5M2, {48, 64});
  auto one = param(g, "one", DType::F32, {1});
  auto rows_a = input(g, "rows_a", DType::F32, {"B", 7, 1});
  auto rows_b = param(g, "rows_b", DType::F32, {48, 1});
  auto bias16 = param(g, "bias16", DType::F16, {48});
  auto y = scaled_matmul(a, b, rows_a, rows_b, DType::F16, bias16);
  EXPECT_EQ(shape_to_string(y.shape()), "[B, 7, 48]");
  EXPECT_EQ(y.dtype(), DType::F16);
  EXPECT_EQ(scaled_matmul(a, b, one, one, DType::BF16).dtype(), DType::BF16);

  auto h = input(g, "h", DType::F16, {7, 64});
  EXPECT_NE(error_of([&] { scaled_matmul(h, b, one, one, DType::F32); }).find("must be f8e4m3 or f8e5m2"),
            std::string::npos);
  auto k32 = param(g, "k32", DType::F8E4M3, {48, 32});
  EXPECT_NE(error_of([&] { scaled_matmul(a, k32, one, one, DType::F32); }).find("b's K"), std::string::npos);
  auto wrong_rows = param(g, "wrong_rows", DType::F32, {7, 2});
  EXPECT_NE(error_of([&] { scaled_matmul(a, b, wrong_rows, one, DType::F32); }).find("scale_a must hold one value"),
            std::string::npos);
  auto half_scale = param(g, "half_scale", DType::F16, {1});
  EXPECT_NE(error_of([&] { scaled_matmul(a, b, one, half_scale, DType::F32); }).find("scale_b must be f32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { scaled_matmul(a, b, one, one, DType::F32, bias16); }).find("bias must have the result"),
            std::string::npos);
  EXPECT_NE(error_of([&] { scaled_matmul(a, b, one, one, DType::I32); }).find("f32, f16 or bf16"), std::string::npos);
  EXPECT_THROW(quantize_fp8(h, DType::F16), Error);
}

// quantize_fp8's contract: each row's largest |x| becomes exactly the type's
// largest finite value, q · scale is x within half an fp8 step (2^-4 of |x|
// for e4m3, 2^-3 for e5m2, above the subnormal range), an all-zero row gives
// zeros; and the product of two quantized operands is the float product
// within the bound those steps imply.
TEST(ScaledMatMul, DynamicQuantizationThenMatmulOnCpu) {
  RLX_TRACE_SEED();
  for (DType fp8 : {DType::F8E4M3, DType::F8E5M2})
    for (bool per_row : {true, false}) {
      SCOPED_TRACE(testing::Message() << dtype_name(fp8) << (per_row ? " per row" : " per tensor"));
      const int64_t M = 9, N = 40, K = 96;
      Tensor x = uniform_f32({M, K}, -3.0f, 3.0f), w = uniform_f32({N, K}, -0.5f, 0.5f);
      for (int64_t k = 0; k < K; ++k) x.data<float>()[3 * K + k] = 0.0f;  // an all-zero row
      Graph g;
      auto xi = input(g, "x", DType::F32, {M, K});
      auto wi = input(g, "w", DType::F32, {N, K});
      const Fp8Quantized qx = quantize_fp8(xi, fp8, per_row), qw = quantize_fp8(wi, fp8, true);
      output("y", scaled_matmul(qx.q, qw.q, qx.scale, qw.scale, DType::F32));
      output("q", cast(qx.q, DType::F32));
      output("s", qx.scale);
      Session s("cpu");
      const auto out = s.compile(g)->run({x, w});
      const float* y = out[0].data<float>();
      const float* q = out[1].data<float>();
      const float* sc = out[2].data<float>();
      const double largest = fp8 == DType::F8E4M3 ? 448.0 : 57344.0;
      const double step = fp8 == DType::F8E4M3 ? 1.0 / 16 : 1.0 / 8;  // half the relative spacing
      const double min_normal = fp8 == DType::F8E4M3 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -14);
      double top = 0;
      for (int64_t m = 0; m < M; ++m) {
        const double scale = sc[per_row ? m : 0];
        double row_top = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double xv = x.data<float>()[m * K + k], qv = q[m * K + k];
          row_top = std::max(row_top, std::fabs(qv));
          const double tol = std::max(step * std::fabs(xv), min_normal * step * scale) + 1e-12;
          EXPECT_LE(std::fabs(qv * scale - xv), tol) << "x[" << m << ", " << k << "] = " << xv;
        }
        top = std::max(top, row_top);
        if (m == 3) {
          EXPECT_EQ(row_top, 0.0);
        } else if (per_row) {
          EXPECT_EQ(row_top, largest) << "row " << m;
        }
      }
      EXPECT_EQ(top, largest);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double p = static_cast<double>(x.data<float>()[m * K + k]) * w.data<float>()[n * K + k];
            want += p, mag += std::fabs(p);
          }
          // Each factor is within `step` (relative) or a subnormal step of its value.
          EXPECT_NEAR(y[m * N + n], want, 2.5 * step * mag + 1e-3) << "y[" << m << ", " << n << "]";
          if (m == 3) {
            EXPECT_EQ(y[m * N + n], 0.0f);
          }
        }
    }
}

// An fp8 weight (param) is widened and packed once and kept; setting it again
// drops the packed copy. Packed or not, the sums are the same (bit for bit),
// and each run matches float64 on the weights of the time. M = 2 takes the
// GEMV (nothing packed), the others the packed path.
TEST(ScaledMatMul, Fp8WeightPackedOnceAndRepackedWhenSet) {
  RLX_TRACE_SEED();
  const int64_t K = 96, N = 40;
  Graph g;
  auto a = input(g, "a", DType::F8E4M3, {"M", K});
  auto sa = input(g, "sa", DType::F32, {"M", 1});
  auto b = param(g, "b", DType::F8E4M3, {N, K});
  auto sb = param(g, "sb", DType::F32, {N, 1});
  output("y", scaled_matmul(a, b, sa, sb, DType::F32));
  Session s("cpu");
  auto exe = s.compile(g);
  for (int version = 0; version < 3; ++version) {
    const Tensor B = uniform_f32({N, K}, -4.0f, 4.0f).to(DType::F8E4M3), SB = uniform_f32({N, 1}, 0.1f, 1.0f);
    exe->set_param("b", B);
    exe->set_param("sb", SB);
    const Tensor Bf = B.to(DType::F32);
    for (int64_t M : {70, 2, 13, 70}) {
      SCOPED_TRACE(testing::Message() << "weights version " << version << ", M=" << M);
      const Tensor A = uniform_f32({M, K}, -4.0f, 4.0f).to(DType::F8E4M3), SA = uniform_f32({M, 1}, 0.1f, 1.0f);
      const Tensor Af = A.to(DType::F32);
      const Tensor y = exe->run({A, SA})[0];
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double p = double(Af.data<float>()[m * K + k]) * Bf.data<float>()[n * K + k];
            want += p, mag += std::fabs(p);
          }
          const double sc = double(SA.data<float>()[m]) * SB.data<float>()[n];
          ASSERT_NEAR(y.data<float>()[m * N + n], sc * want, 1e-6 * sc * mag + 1e-6) << m << ", " << n;
        }
      rlx::test::ScopedEnv off("RLX_CPU_PACK_WEIGHTS", "0");
      const Tensor unpacked = exe->run({A, SA})[0];
      ASSERT_EQ(std::memcmp(y.raw(), unpacked.raw(), y.nbytes()), 0);
    }
  }
}

// Under an f16 policy the product's result becomes f16 but its scales stay f32.
TEST(ScaledMatMul, PrecisionPolicyKeepsScalesF32) {
  Graph g;
  auto a = input(g, "a", DType::F8E4M3, {5, 32});
  auto b = param(g, "b", DType::F8E4M3, {16, 32});
  auto sa = param(g, "sa", DType::F32, {1});
  auto sb = param(g, "sb", DType::F32, {16});  // per row of b, through a reshape
  auto bias = param(g, "bias", DType::F32, {16});
  output("y", scaled_matmul(a, b, sa, reshape(sb, {16, 1}), DType::F32, bias));
  PassContext ctx;
  ctx.precision = DType::F16;
  const Graph h = apply_precision_policy(g, ctx);
  int found = 0;
  for (const Node& n : h.nodes()) {
    if (n.op != OpKind::ScaledMatMul) continue;
    ++found;
    EXPECT_EQ(n.type.dtype, DType::F16);
    EXPECT_EQ(h.node(n.inputs[2]).type.dtype, DType::F32);
    EXPECT_EQ(h.node(n.inputs[3]).type.dtype, DType::F32);
    EXPECT_EQ(h.node(n.inputs[4]).type.dtype, DType::F16);
  }
  for (NodeId id : h.leaves(OpKind::Param)) {
    if (h.node(id).attr<LeafAttrs>().name != "bias") {
      EXPECT_NE(h.node(id).type.dtype, DType::F16) << h.node(id).attr<LeafAttrs>().name;
    }
  }
  EXPECT_EQ(found, 1);
  EXPECT_EQ(h.node(h.outputs()[0].second).type.dtype, DType::F32);  // cast back at the exit
}

// quantize_fp8's chain (Abs, Reduce, Max, Div, Cast) stays f32 under an f16
// policy, so an all-zero row still quantizes to zeros (its guard constant
// would flush to zero in f16) and the result matches the f32 run's within
// the f16 result's rounding.
TEST(ScaledMatMul, QuantizationChainStaysF32UnderHalfPolicy) {
  RLX_TRACE_SEED();
  const int64_t M = 6, N = 24, K = 64;
  Tensor x = uniform_f32({M, K}, -2.0f, 2.0f), w = uniform_f32({N, K}, -1.0f, 1.0f);
  for (int64_t k = 0; k < K; ++k) x.data<float>()[1 * K + k] = 0.0f;
  Graph g;
  auto xi = input(g, "x", DType::F32, {M, K});
  auto wi = param(g, "w", DType::F32, {N, K});
  const Fp8Quantized qx = quantize_fp8(xi), qw = quantize_fp8(wi);
  output("y", scaled_matmul(qx.q, qw.q, qx.scale, qw.scale, DType::F32));
  PassContext ctx;
  ctx.precision = DType::F16;
  const Graph h = apply_precision_policy(g, ctx);
  for (const Node& n : h.nodes()) {
    if (n.op == OpKind::Reduce || (n.op == OpKind::Binary && n.attr<BinaryAttrs>().fn == BinaryFn::Div)) {
      EXPECT_EQ(n.type.dtype, DType::F32) << op_name(n.op);
    }
  }
  std::vector<Tensor> y;
  for (DType policy : {DType::F32, DType::F16}) {
    Session s("cpu");
    CompileOptions o;
    o.precision = policy;
    auto exe = s.compile(g, o);
    exe->set_param("w", w);
    y.push_back(exe->run({x})[0]);
  }
  for (int64_t i = 0; i < M * N; ++i) {
    const float want = y[0].data<float>()[i], got = y[1].data<float>()[i];
    ASSERT_TRUE(std::isfinite(got)) << i;
    EXPECT_NEAR(got, want, 2e-3 * (1 + std::fabs(want))) << i;
    if (i / N == 1) {
      EXPECT_EQ(got, 0.0f) << i;
    }
  }
}

}  // namespace
