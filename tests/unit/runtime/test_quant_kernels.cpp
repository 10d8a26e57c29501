// CPU DequantMatMul and quantized-table Gather against float64 math on the
// weights as the reference dequantizer (rlx/formats/quant.h, itself bit-exact
// with ggml) reads them. Covers the per-row decode path (few x rows), the
// tiled GEMM path (many rows, N not a multiple of the tile) and f16/bf16 x.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/cpu/kernels/gemm.h"
#include "rlx/backends/cpu/kernels/quant_dot.h"
#include "rlx/core/half.h"
#include "rlx/formats/quant.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

namespace rlx {
namespace {

std::vector<float> normal(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct Case {
  DType w;
  DType x;
  int64_t M, N, K;
};

// int8_x: allow the error of the decode GEMV's int8 activations
// (RLX_CPU_GEMV_Q8, quant_dot.cpp): Σ|w|·dx with dx = max|x| / (127·256) per
// 32 elements of x.
void check_dequant_matmul(const Case& c, uint32_t seed, bool int8_x = false) {
  SCOPED_TRACE(str(dtype_name(c.w), " x=", dtype_name(c.x), " M=", c.M, " N=", c.N, " K=", c.K,
                   int8_x ? " (int8 activations allowed)" : ""));
  const Tensor w = quantize(Tensor::from(normal(c.N * c.K, seed), {c.N, c.K}), c.w);
  const Tensor x = Tensor::from(normal(c.M * c.K, seed + 1), {c.M, c.K}).to(c.x);
  const std::vector<double> wd = dequantize(w).to_f64(), xd = x.to_f64();

  Graph g;
  Value xv = input(g, "x", c.x, make_shape({c.M, c.K}));
  Value wv = param(g, "w", c.w, make_shape({c.N, c.K}));
  output("y", dequant_matmul(xv, wv));
  Session s("cpu");
  auto exe = s.compile(g);
  exe->set_param("w", w);
  const Tensor y = exe->run({x}).at(0);
  ASSERT_EQ(y.dtype(), c.x);
  const std::vector<double> yd = y.to_f64();

  const double out_tol = c.x == DType::F32 ? 0.0 : c.x == DType::F16 ? 1e-3 : 8e-3;  // output rounding
  int bad = 0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double ref = 0.0, mag = 0.0, quant = 0.0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = xd[static_cast<size_t>(m * c.K + k)] * wd[static_cast<size_t>(n * c.K + k)];
        ref += p;
        mag += std::fabs(p);
        if (int8_x && k % 32 == 0) {
          double xmax = 0.0, wsum = 0.0;
          for (int64_t j = k; j < std::min(c.K, k + 32); ++j) {
            xmax = std::max(xmax, std::fabs(xd[static_cast<size_t>(m * c.K + j)]));
            wsum += std::fabs(wd[static_cast<size_t>(n * c.K + j)]);
          }
          quant += wsum * xmax / (127.0 * 256);
        }
      }
      const double got = yd[static_cast<size_t>(m * c.N + n)];
      // f32 sums over K: error bounded by a few ulps of the magnitude sum.
      if (std::fabs(got - ref) > 1e-5 * mag + quant + out_tol * std::fabs(ref) + 1e-6 && bad++ < 5)
        ADD_FAILURE() << "y[" << m << ", " << n << "] = " << got << ", want " << ref;
    }
  EXPECT_EQ(bad, 0);
}

TEST(QuantKernels, DequantMatMulEveryQuantizableType) {
  const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                         DType::Q4_K, DType::Q6_K, DType::F16,  DType::BF16};
  // Once with f32 activations everywhere (f32 rounding only), once with the
  // default, where m ≤ 8 rows may take int8 activations.
  for (bool int8_x : {false, true}) {
    test::ScopedEnv q8("RLX_CPU_GEMV_Q8", int8_x ? "1" : "0");
    uint32_t seed = 1;
    for (DType t : types) {
      if (!has_cpu_quantize(t)) continue;
      check_dequant_matmul({t, DType::F32, 1, 300, 512}, seed++, int8_x);   // decode row path
      check_dequant_matmul({t, DType::F32, 5, 33, 256}, seed++, int8_x);
      check_dequant_matmul({t, DType::F32, 12, 40, 256}, seed++, int8_x);   // 9-16 rows: two passes of 6
      check_dequant_matmul({t, DType::F32, 70, 300, 512}, seed++, int8_x);  // tiled GEMM path, partial tile
    }
  }
}

TEST(QuantKernels, DequantMatMulHalfActivations) {
  check_dequant_matmul({DType::Q4_K, DType::F16, 3, 40, 256}, 7, true);
  check_dequant_matmul({DType::Q8_0, DType::BF16, 40, 40, 256}, 8);
  check_dequant_matmul({DType::Q5_0, DType::F16, 17, 260, 64}, 9);
}

TEST(QuantKernels, DequantMatMulBatchedLeadingDims) {
  const int64_t B = 2, L = 3, N = 20, K = 64;
  const Tensor w = quantize(Tensor::from(normal(N * K, 3), {N, K}), DType::Q8_0);
  const Tensor x = Tensor::from(normal(B * L * K, 4), {B, L, K});
  Graph g;
  output("y", dequant_matmul(input(g, "x", DType::F32, make_shape({B, L, K})), param(g, "w", DType::Q8_0, make_shape({N, K}))));
  Session s("cpu");
  auto exe = s.compile(g);
  exe->set_param("w", w);
  const Tensor y = exe->run({x}).at(0);
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{B, L, N}));
  const auto wd = dequantize(w).to_f64(), xd = x.to_f64(), yd = y.to_f64();
  for (int64_t r = 0; r < B * L; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0.0;
      for (int64_t k = 0; k < K; ++k) ref += xd[static_cast<size_t>(r * K + k)] * wd[static_cast<size_t>(n * K + k)];
      EXPECT_NEAR(yd[static_cast<size_t>(r * N + n)], ref, 1e-4) << r << "," << n;
    }
}

TEST(QuantKernels, GatherDequantizesRows) {
  const int64_t V = 50, D = 64;
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::Q5_0}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t d = t == DType::Q4_K || t == DType::Q6_K ? 256 : D;
    const Tensor table = quantize(Tensor::from(normal(V * d, 11), {V, d}), t);
    const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
    Graph g;
    output("y", gather(param(g, "table", t, make_shape({V, d})), input(g, "ids", DType::I32, make_shape({5}))));
    Session s("cpu");
    auto exe = s.compile(g);
    exe->set_param("table", table);
    const Tensor y = exe->run({Tensor::from(ids, {5})}).at(0);
    ASSERT_EQ(y.dtype(), DType::F32);
    const auto full = dequantize(table).to_f64(), yd = y.to_f64();
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t c = 0; c < d; ++c)
        ASSERT_EQ(yd[i * static_cast<size_t>(d) + static_cast<size_t>(c)], full[static_cast<size_t>(ids[i] * d + c)]);

    // An id outside the table is an error naming it, not a read past the end.
    try {
      exe->run({Tensor::from(std::vector<int32_t>{1, 2, 50, 3, 4}, {5})});
      ADD_FAILURE() << "expected an error for id 50";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("index 50"), std::string::npos) << e.what();
    }
  }
}

TEST(QuantKernels, ShapeErrorsAreClear) {
  Graph g;
  Value x = input(g, "x", DType::F32, make_shape({2, 48}));
  Value w = param(g, "w", DType::Q8_0, make_shape({4, 48}));  // K = 48: not a multiple of Q8_0's 32
  try {
    dequant_matmul(x, w);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block"), std::string::npos) << e.what();
  }
}

// Every GGUF quant type's block: its size, the offsets of its scale fields
// (set to realistic values; the rest of a random block is random bytes) and
// whether quant_dot's int8 path takes it.
struct QuantCase {
  DType type;
  int64_t block_bytes, block_elems;
  std::vector<int> f16_fields;   // byte offsets of the block's f16 scales
  std::vector<int> byte_fields;  // its e8m0 (mxfp4) or ue4m3 (nvfp4) scale bytes
  bool int8;                     // the int8 path takes it
};
const QuantCase kQuantCases[] = {
    {DType::Q8_0, 34, 32, {0}, {}, false},          {DType::Q4_0, 18, 32, {0}, {}, true},
    {DType::Q4_1, 20, 32, {0, 2}, {}, true},        {DType::Q5_0, 22, 32, {0}, {}, true},
    {DType::Q5_1, 24, 32, {0, 2}, {}, true},        {DType::Q2_K, 84, 256, {80, 82}, {}, true},
    {DType::Q3_K, 110, 256, {108}, {}, true},       {DType::Q4_K, 144, 256, {0, 2}, {}, true},
    {DType::Q5_K, 176, 256, {0, 2}, {}, true},      {DType::Q6_K, 210, 256, {208}, {}, true},
    {DType::TQ2_0, 66, 256, {64}, {}, true},        {DType::IQ4_NL, 18, 32, {0}, {}, true},
    {DType::IQ4_XS, 136, 256, {0}, {}, true},       {DType::MXFP4, 17, 32, {}, {0}, true},
    {DType::NVFP4, 36, 64, {}, {0, 1, 2, 3}, true}, {DType::IQ2_XXS, 66, 256, {0}, {}, true},
    {DType::IQ2_XS, 74, 256, {0}, {}, true},        {DType::IQ2_S, 82, 256, {0}, {}, true},
    {DType::IQ3_XXS, 98, 256, {0}, {}, true},       {DType::IQ3_S, 110, 256, {0}, {}, true},
    {DType::IQ1_S, 50, 256, {0}, {}, true},         {DType::IQ1_M, 56, 256, {}, {}, true},
    {DType::Q8_1, 36, 32, {0, 2}, {}, false},       {DType::Q8_K, 292, 256, {}, {}, false},
    {DType::Q1_0, 18, 128, {0}, {}, true},          {DType::TQ1_0, 54, 256, {52}, {}, true}};

// `blocks` random blocks of c's type; zero_second: the f16 at offset 2 (a
// k-quant's dmin, q4_1's m) is 0.
std::vector<uint8_t> random_blocks(const QuantCase& c, int64_t blocks, std::mt19937& rng, bool zero_second) {
  std::uniform_int_distribution<int> byte(0, 255), e8m0(118, 130), ue4m3(0x08, 0x5F);
  std::uniform_real_distribution<float> scale(1e-4f, 0.05f);
  std::vector<uint8_t> w(static_cast<size_t>(blocks * c.block_bytes));
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = w.data() + b * c.block_bytes;
    for (int off : c.f16_fields) {
      const float s = zero_second && off == 2 ? 0.0f : (byte(rng) & 1 ? scale(rng) : -scale(rng));
      const uint16_t h = f32_to_f16(s);
      std::memcpy(blk + off, &h, 2);
    }
    if (c.type == DType::Q8_K) {  // an f32 d
      const float d = scale(rng);
      std::memcpy(blk, &d, 4);
    }
    if (c.type == DType::IQ1_M) {  // its f16 d is spread over the top nibbles of the four u16 scales
      const uint16_t h = f32_to_f16(scale(rng));
      for (int k = 0; k < 4; ++k)
        blk[48 + 2 * k + 1] = static_cast<uint8_t>((blk[48 + 2 * k + 1] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
    }
    for (int off : c.byte_fields) blk[off] = static_cast<uint8_t>(c.type == DType::MXFP4 ? e8m0(rng) : ue4m3(rng));
  }
  return w;
}

// The CPU decode GEMV's in-register dot (quant_dot, AVX2 + FMA) against a
// float64 dot of the reference dequantizer's row: random blocks with scale
// fields drawn from realistic ranges, random activations, every supported
// type, 1-7 weight rows against 1-8 rows of x per call, on both of its paths:
// - f32 activations (RLX_CPU_GEMV_Q8=0, and the q8 formats always): f32
//   rounding of the terms it adds, |error| ≤ 2·√K·2⁻²⁴·Σ|x|·(|w| + max|w|)
//   (the errors seen are under 1% of it);
// - int8 activations (the default for the others): x re-quantized per 32
//   with step dx = max|x| / (127·256), |error| ≤ Σ|w|·dx + twice the f32 bound.
// One wrong weight costs about 1/K of Σ|x·w|, several times either bound.
TEST(QuantDot, MatchesFloat64DotOfDequantizedRow) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> xs(-2.0f, 2.0f);
  int ran = 0;
  double worst[2] = {0, 0};  // largest error / bound seen, f32 and int8 paths
  for (bool int8 : {false, true}) {
    test::ScopedEnv q8("RLX_CPU_GEMV_Q8", int8 ? "1" : "0");
    for (const auto& c : kQuantCases) {
      if (!cpu::quant_dot_supported(c.type)) continue;
      ++ran;
      const bool int8_path = int8 && c.int8;
      for (int64_t K : {int64_t{256}, int64_t{2048}}) {
        const int64_t nb = K / c.block_elems;
        for (int trial = 0; trial < 24; ++trial) {
          const int64_t rows = 1 + trial % 7, M = 1 + trial % 8, row_bytes = nb * c.block_bytes;
          const std::vector<uint8_t> w = random_blocks(c, rows * nb, rng, trial % 5 == 0);
          std::vector<float> x(static_cast<size_t>(M * K)), row(static_cast<size_t>(K));
          std::vector<float> got(static_cast<size_t>(M * rows));
          for (auto& v : x) v = xs(rng);
          if (trial % 4 == 1)  // a block of zeros and one with an outlier
            for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = 0.0f, x[static_cast<size_t>(32 + j)] *= 1e-3f;
          std::vector<double> dx(static_cast<size_t>(M * K / 32), 0.0);
          for (int64_t i = 0; i < M * K; ++i)
            dx[static_cast<size_t>(i / 32)] =
                std::max<double>(dx[static_cast<size_t>(i / 32)], std::fabs(x[static_cast<size_t>(i)]) / (127.0 * 256));
          const cpu::QuantDotX prepared(c.type, x.data(), M, K);
          ASSERT_EQ(prepared.int8, int8_path) << dtype_name(c.type);
          cpu::quant_dot_rows(c.type, w.data(), row_bytes, prepared, rows, got.data(), rows);
          if (trial == 3) {  // a NaN in the last row of x: the f32 path for all rows, and NaN out of that row
            std::vector<float> xn = x;
            xn[static_cast<size_t>((M - 1) * K + K / 2)] = std::nanf("");
            const cpu::QuantDotX nan_x(c.type, xn.data(), M, K);
            EXPECT_FALSE(nan_x.int8);
            std::vector<float> yn(static_cast<size_t>(M));
            cpu::quant_dot_rows(c.type, w.data(), row_bytes, nan_x, 1, yn.data(), 1);
            EXPECT_TRUE(std::isnan(yn[static_cast<size_t>(M - 1)])) << dtype_name(c.type);
            for (int64_t m = 0; m + 1 < M; ++m) EXPECT_FALSE(std::isnan(yn[static_cast<size_t>(m)]));
          }
          for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(c.type, w.data() + r * row_bytes, row.data(), K);
            for (int64_t m = 0; m < M; ++m) {
              const float* xm = x.data() + m * K;
              double want = 0, wmax = 0, mag = 0, quant = 0;
              for (int64_t i = 0; i < K; ++i) {
                want += static_cast<double>(xm[i]) * row[i];
                wmax = std::max(wmax, std::fabs(static_cast<double>(row[i])));
                quant += std::fabs(static_cast<double>(row[i])) * dx[static_cast<size_t>((m * K + i) / 32)];
              }
              for (int64_t i = 0; i < K; ++i) mag += std::fabs(static_cast<double>(xm[i])) * (std::fabs(row[i]) + wmax);
              const double f32 = 2.0 * std::sqrt(static_cast<double>(K)) * std::ldexp(1.0, -24) * mag;
              const double bound = int8_path ? quant + 2 * f32 : f32;
              const float y = got[static_cast<size_t>(m * rows + r)];
              const double err = std::fabs(y - want);
              worst[int8_path] = std::max(worst[int8_path], err / bound);
              ASSERT_LE(err, bound) << dtype_name(c.type) << (int8_path ? " int8" : " f32") << " K " << K << " trial "
                                    << trial << " weight row " << r << " of " << rows << ", x row " << m << " of "
                                    << M << ": " << y << " vs " << want;
              const float one = cpu::quant_dot(c.type, w.data() + r * row_bytes, xm, K);
              ASSERT_EQ(one, y) << dtype_name(c.type) << " (one row of x alone)";
            }
          }
        }
      }
    }
  }
  std::printf("worst error: %.2e of the f32 bound, %.2e of the int8 bound\n", worst[0], worst[1]);
  // Every GGUF quant type has a case here, and on an AVX2 CPU a kernel.
  for (int t = 0; t < static_cast<int>(DType::Count_); ++t) {
    const auto type = static_cast<DType>(t);
    if (!is_quant(type)) continue;
    EXPECT_TRUE(std::any_of(std::begin(kQuantCases), std::end(kQuantCases),
                            [&](const QuantCase& c) { return c.type == type; }))
        << dtype_name(type) << " has no case";
    if (ran > 0) {
      EXPECT_TRUE(cpu::quant_dot_supported(type)) << dtype_name(type) << " has no quant_dot kernel";
    }
  }

  if (ran == 0) GTEST_SKIP() << "this CPU has no AVX2: quant_dot is not used";
}

// The int8 path's two ways of summing byte products (RLX_CPU_GEMV_VNNI: AVX512-
// VNNI's VPDPBUSD, or AVX2's byte and word multiply-adds) form the same
// integers, so they agree bit for bit: every int8 type, 1-8 rows of x. The
// float64 bounds of both are checked above (whichever this CPU runs by default).
TEST(QuantDot, VnniAndAvx2PathsAgreeBitForBit) {
  std::string flags;
  for (std::ifstream info("/proc/cpuinfo"); flags.empty() && std::getline(info, flags);)
    if (flags.rfind("flags", 0) != 0) flags.clear();
  if (flags.find(" avx512_vnni") == std::string::npos || flags.find(" avx512vl") == std::string::npos)
    GTEST_SKIP() << "no AVX512-VNNI with AVX512VL on this CPU";
  EXPECT_TRUE(cpu::quant_dot_vnni());
  {
    test::ScopedEnv off("RLX_CPU_GEMV_VNNI", "0");
    EXPECT_FALSE(cpu::quant_dot_vnni());
  }
  std::mt19937 rng(91);
  std::uniform_real_distribution<float> xs(-2.0f, 2.0f);
  int compared = 0;
  for (const auto& c : kQuantCases) {
    if (!c.int8 || !cpu::quant_dot_supported(c.type)) continue;
    const int64_t K = 512 / c.block_elems * c.block_elems, rows = 5, nb = K / c.block_elems;
    const std::vector<uint8_t> w = random_blocks(c, rows * nb, rng, false);
    for (int64_t M = 1; M <= cpu::QuantDotX::kMaxRows; ++M) {
      std::vector<float> x(static_cast<size_t>(M * K));
      for (auto& v : x) v = xs(rng);
      const cpu::QuantDotX prepared(c.type, x.data(), M, K);
      ASSERT_TRUE(prepared.int8) << dtype_name(c.type);
      std::vector<float> vnni(static_cast<size_t>(M * rows)), avx2(vnni.size());
      {
        test::ScopedEnv on("RLX_CPU_GEMV_VNNI", "1");
        cpu::quant_dot_rows(c.type, w.data(), nb * c.block_bytes, prepared, rows, vnni.data(), rows);
      }
      {
        test::ScopedEnv off("RLX_CPU_GEMV_VNNI", "0");
        cpu::quant_dot_rows(c.type, w.data(), nb * c.block_bytes, prepared, rows, avx2.data(), rows);
      }
      ASSERT_EQ(std::memcmp(vnni.data(), avx2.data(), vnni.size() * sizeof(float)), 0)
          << dtype_name(c.type) << " with " << M << " rows of x: " << vnni[0] << " vs " << avx2[0];
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// The CPU's row dequantizer for matmul tiles and gathers (quant_dot's layouts
// where it takes the type) gives the reference dequantizer's bits exactly,
// every type, random blocks (NaN or not: compared as bits).
TEST(QuantDot, DequantizeRowsEqualsReferenceBitForBit) {
  std::mt19937 rng(77);
  for (const auto& c : kQuantCases) {
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t K = c.block_elems * (1 + trial), rows = 1 + trial % 3;
      const int64_t row_bytes = K / c.block_elems * c.block_bytes;
      const std::vector<uint8_t> w = random_blocks(c, rows * (K / c.block_elems), rng, trial % 3 == 0);
      std::vector<float> got(static_cast<size_t>(rows * K), -1.0f), want(got.size(), -2.0f);
      cpu::dequantize_rows(c.type, w.data(), row_bytes, rows, K, got.data());
      for (int64_t r = 0; r < rows; ++r) dequantize_row(c.type, w.data() + r * row_bytes, want.data() + r * K, K);
      for (size_t i = 0; i < got.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &got[i], 4);
        std::memcpy(&b, &want[i], 4);
        ASSERT_EQ(a, b) << dtype_name(c.type) << " K " << K << " element " << i << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

}  // namespace
}  // namespace rlx
