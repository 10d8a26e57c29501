// ScaledMatMul (fp8) on CUDA against a float64 product of the same fp8
// values, at sizes cuBLASLt's fp8 GEMM takes (K and N multiples of 16) and
// at ones it does not, every fp8 pair, both scale forms, with and without a
// bias, f32/f16/bf16 results. The dispatch report must name the path the
// comparison tests: cuBLASLt's fp8 GEMM on sm_89+ wherever it has an
// algorithm, the f32 fallback for e5m2 x e5m2. Tolerance: |got − ref| ≤
// 2^-10 · sa·sb·Σ|a·b| (the tensor cores sum fp8 products with about 14
// significant bits between cuBLASLt's f32 promotions: 2^-14 measured on an
// H100) + the result's rounding (f32 1e-6, f16 2^-11, bf16 2^-8 relative) —
// the fp8 products themselves are exact.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/cuda/device.h"
#include "rlx/core/half.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/cuda_backend_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace rlx;
using rlx::test::rng;
using rlx::test::uniform_f32;

// Random fp8 codes of finite values within ±`top` (rejection-sampled).
Tensor random_fp8(DType t, std::vector<int64_t> shape, double top) {
  Tensor x = Tensor::empty(t, std::move(shape));
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t i = 0; i < x.numel(); ++i) {
    for (;;) {
      const auto c = static_cast<uint8_t>(code(rng()));
      const float v = t == DType::F8E4M3 ? fp8_e4m3_to_f32(c) : fp8_e5m2_to_f32(c);
      if (std::isfinite(v) && std::fabs(v) <= top) {
        static_cast<uint8_t*>(x.raw_mut())[i] = c;
        break;
      }
    }
  }
  return x;
}

struct Case {
  int64_t M, N, K;
  DType at, bt;
  bool rows_a, rows_b, bias;
};

bool fp8_tensor_cores() {
  const auto& p = cuda::device_props(0);
  return p.cc_major * 10 + p.cc_minor >= 89;
}

TEST(ScaledMatMulGpu, MatchesFloat64OnEveryPath) {
  SKIP_WITHOUT_CUDA();
  RLX_TRACE_SEED();
  const DType e4 = DType::F8E4M3, e5 = DType::F8E5M2;
  const Case cases[] = {
      {512, 384, 1024, e4, e4, true, true, true},   // cuBLASLt fp8, outer-vector scales
      {333, 272, 512, e4, e4, false, false, true},  // M not a multiple of 16
      {1, 4096, 4096, e4, e4, true, true, false},   // a decode-shaped GEMV
      {64, 128, 256, e4, e5, true, false, false},
      {64, 128, 256, e5, e4, false, true, true},
      {96, 64, 128, e5, e5, true, true, true},      // no e5m2 x e5m2 fp8 GEMM: the f32 fallback
      {37, 40, 20, e4, e4, true, false, true},      // K = 20
  };
  for (const Case& c : cases) {
    const Tensor a = random_fp8(c.at, {c.M, c.K}, 64), b = random_fp8(c.bt, {c.N, c.K}, 64);
    const Tensor sa = uniform_f32(c.rows_a ? std::vector<int64_t>{c.M, 1} : std::vector<int64_t>{1}, 0.01f, 0.1f);
    const Tensor sb = uniform_f32(c.rows_b ? std::vector<int64_t>{c.N, 1} : std::vector<int64_t>{1}, 0.01f, 0.1f);
    const Tensor bias = uniform_f32({c.N}, -4.0f, 4.0f);
    for (DType out : {DType::F32, DType::F16, DType::BF16}) {
      SCOPED_TRACE(testing::Message() << c.M << "x" << c.N << "x" << c.K << " " << dtype_name(c.at) << " x "
                                      << dtype_name(c.bt) << " -> " << dtype_name(out) << (c.rows_a ? " rows_a" : "")
                                      << (c.rows_b ? " rows_b" : "") << (c.bias ? " bias" : ""));
      const Tensor bias_t = bias.to(out);
      Graph g;
      auto ai = input(g, "a", c.at, {c.M, c.K});
      auto bi = param(g, "b", c.bt, {c.N, c.K});
      auto sai = input(g, "sa", DType::F32, Shape(sa.shape().begin(), sa.shape().end()));
      auto sbi = param(g, "sb", DType::F32, Shape(sb.shape().begin(), sb.shape().end()));
      Value bv = c.bias ? param(g, "bias", out, {c.N}) : Value{};
      output("y", scaled_matmul(ai, bi, sai, sbi, out, bv));
      Session s("cuda");
      auto exe = s.compile(g);
      exe->set_param("b", b);
      exe->set_param("sb", sb);
      if (c.bias) exe->set_param("bias", bias_t);
      const Tensor y = exe->run({a, sa})[0].to(DType::F32);
      const std::string report = exe->dispatch_report();
      const bool fast = fp8_tensor_cores() && !(c.at == e5 && c.bt == e5) && c.K % 16 == 0;
      if (fast) {
        EXPECT_NE(report.find("cublasLt gemm f8"), std::string::npos) << report;
      }
      if (c.at == e5 && c.bt == e5) {
        EXPECT_NE(report.find("fp8 widened to f32"), std::string::npos) << report;
      }

      const Tensor af = a.to(DType::F32), bf = b.to(DType::F32), biasf = bias_t.to(DType::F32);
      const double rel = out == DType::F32 ? 1e-6 : out == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      int bad = 0;
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          double sum = 0, mag = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            const double p = static_cast<double>(af.data<float>()[m * c.K + k]) * bf.data<float>()[n * c.K + k];
            sum += p, mag += std::fabs(p);
          }
          const double s2 =
              static_cast<double>(sa.data<float>()[c.rows_a ? m : 0]) * sb.data<float>()[c.rows_b ? n : 0];
          const double want = s2 * sum + (c.bias ? biasf.data<float>()[n] : 0.0);
          const double got = y.data<float>()[m * c.N + n];
          const double tol = std::ldexp(1.0, -10) * s2 * mag + rel * (std::fabs(want) + 1e-30) + 1e-30;
          if (!(std::fabs(got - want) <= tol) && ++bad <= 5)
            ADD_FAILURE() << "y[" << m << ", " << n << "] = " << got << ", want " << want << " (tol " << tol << ")";
        }
      EXPECT_EQ(bad, 0);
    }
  }
}

// quantize_fp8 gives the CPU's fp8 codes and scales bit for bit, fused into
// one kernel (the per-row chain: the dispatch report names it) or not
// (RLX_CUDA_FUSE_FP8_QUANT=0, and the per-tensor chain always), from f32 and
// f16 x; and the quantized product matches the CPU's.
TEST(ScaledMatMulGpu, DynamicQuantizationMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  RLX_TRACE_SEED();
  const int64_t M = 200, N = 256, K = 1024;
  const Tensor x32 = uniform_f32({M, K}, -5.0f, 5.0f), w = uniform_f32({N, K}, -0.2f, 0.2f);
  for (DType xt : {DType::F32, DType::F16})
    for (const char* fuse : {"1", "0"}) {
      SCOPED_TRACE(testing::Message() << dtype_name(xt) << " x, RLX_CUDA_FUSE_FP8_QUANT=" << fuse);
      rlx::test::ScopedEnv env("RLX_CUDA_FUSE_FP8_QUANT", fuse);
      const Tensor x = x32.to(xt);
      Graph g;
      auto xi = input(g, "x", xt, {M, K});
      auto wi = input(g, "w", DType::F32, {N, K});
      const Fp8Quantized qx = quantize_fp8(xi), qw = quantize_fp8(wi, DType::F8E4M3, false);
      output("y", scaled_matmul(qx.q, qw.q, qx.scale, qw.scale, DType::F32));
      output("q", bitcast(qx.q, DType::U8));
      output("s", qx.scale);
      Session cpu("cpu"), gpu("cuda");
      const auto want = cpu.compile(g)->run({x, w});
      auto exe = gpu.compile(g);
      const auto got = exe->run({x, w});
      const std::string report = exe->dispatch_report();
      EXPECT_EQ(report.find("fp8 quantization") != std::string::npos, fuse[0] == '1') << report;
      for (int64_t i = 0; i < M * K; ++i) ASSERT_EQ(got[1].data<uint8_t>()[i], want[1].data<uint8_t>()[i]) << i;
      for (int64_t i = 0; i < M; ++i) ASSERT_EQ(got[2].data<float>()[i], want[2].data<float>()[i]) << i;
      // The GEMMs differ in summation (the tensor cores keep ~14 bits between f32 promotions).
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double mag = 0;
          for (int64_t k = 0; k < K; ++k)
            mag += std::fabs(double(x32.data<float>()[m * K + k]) * w.data<float>()[n * K + k]);
          const int64_t i = m * N + n;
          ASSERT_NEAR(got[0].data<float>()[i], want[0].data<float>()[i], std::ldexp(mag, -11)) << i;
        }
    }
}

// Every form of the fused quantization kernel (a warp or a CTA per row with
// the row in registers, 1-8 vectors a thread; the scalar kernel for rows of
// no whole 16-byte vectors or too long for registers) gives the CPU's codes
// and scales bit for bit, from each float dtype to each fp8 type.
TEST(ScaledMatMulGpu, QuantizationKernelFormsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  RLX_TRACE_SEED();
  const int64_t M = 37;
  for (DType xt : {DType::F32, DType::F16, DType::BF16})
    for (DType qt : {DType::F8E4M3, DType::F8E5M2})
      for (int64_t K : {8, 384, 1001, 1024, 2048, 4000, 16384, 20000}) {
        SCOPED_TRACE(testing::Message() << dtype_name(xt) << " -> " << dtype_name(qt) << ", K=" << K);
        Tensor x = uniform_f32({M, K}, -3.0f, 3.0f);
        for (int64_t k = 0; k < K; ++k) x.data<float>()[5 * K + k] = 0.0f;  // an all-zero row
        x.data<float>()[7 * K + K / 2] = 1e4f;                                // a row with one outlier
        x = x.to(xt);
        Graph g;
        const Fp8Quantized q = quantize_fp8(input(g, "x", xt, {M, K}), qt);
        output("q", bitcast(q.q, DType::U8));
        output("s", q.scale);
        Session cpu("cpu"), gpu("cuda");
        const auto want = cpu.compile(g)->run({x});
        auto exe = gpu.compile(g);
        const auto got = exe->run({x});
        EXPECT_NE(exe->dispatch_report().find("fp8 quantization"), std::string::npos);
        for (int64_t i = 0; i < M; ++i) ASSERT_EQ(got[1].data<float>()[i], want[1].data<float>()[i]) << "scale " << i;
        for (int64_t i = 0; i < M * K; ++i) ASSERT_EQ(got[0].data<uint8_t>()[i], want[0].data<uint8_t>()[i]) << i;
      }
}

}  // namespace
