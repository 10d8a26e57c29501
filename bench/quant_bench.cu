// Quantized weights on the GPU (launchers in rlx/backends/cuda/kernels/quant.h):
//   gemv     the fused GEMV, m = 1, x and y f16, for every quant type at
//            N×K = 4096×4096 and 1024×3072, then the GEMV shapes of Gemma 3
//            270M decode (its Q5_0, Q8_0, Q4_K and Q6_K projections and the
//            262144×640 Q8_0 output head). Cold L2: the weights are copied
//            until the copies exceed 256 MB and every launch reads the next
//            copy. GB/s counts quantized weight bytes + x + y per call;
//            "% of copy" is against the measured 4.22 TB/s (bench_util.h,
//            an H200); the header also prints this GPU's own copy rate.
//            Each shape also gets a "gemv-staged" row: the bulk-copy GEMV for
//            large matrices (launch_quant_gemv_staged, sm_90+), and the
//            N = 4096 shapes add m = 8 rows of both kernels.
//            The 4096×4096 and 1024×3072 shapes also get "(graph)" rows: one
//            CUDA graph of a launch per cold copy, captured by the runtime's
//            encoder as a decode step is (programmatic edges on Hopper, so
//            each GEMV fetches its first weights before waiting for the one
//            before), per-call time = replay time / launches. That is what a
//            GEMV costs inside `rlx generate`; the plain rows above also pay
//            a stream launch gap per call.
//            Each GEMV is checked once (f32 x and y, 32 sampled rows) against
//            the CPU dequantizer + float64; a mismatch prints FAIL and the
//            bench exits 1.
//   dequant  quant → f16 of a 4096×4096 weight (bytes = quant read + f16 written).
//   prefill  m = 512 and 128 at N = K = 4096, and Gemma 3 270M's prefill
//            projections at m = 512, in TFLOP/s: dequantize to f16 + cuBLASLt
//            (the DequantMatMul prefill path), and on sm_90 the quantized
//            wgmma GEMM for the types it takes ("qgemm-sm90", which the
//            runtime picks where quant_gemm_sm90_preferred() says it wins;
//            checked at 64 sampled outputs against float64,
//            a mismatch prints FAIL and the bench exits 1), next to cuBLASLt
//            f16 on the already dequantized weights. Prefill rows are timed
//            as CUDA graphs, as the runtime's encoder runs them (at Gemma's
//            sizes a stream launch costs more than the GEMM).
// Timing: CUDA events around groups of 20 launches (per-call time = group / 20),
// 5 warm-up groups, median of 30 groups. JSON lines (bench "quant", impl "rlx")
// for bench/compare.py; the peer is bench/quant_torch.py (torch f16 GEMV and
// matmul on the same shapes).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_cuda.cuh"
#include "bench/bench_util.h"
#include "bench/graph_timing.cuh"
#include "rlx/backends/cuda/cublaslt.h"
#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/encoder.h"
#include "rlx/backends/cuda/kernels/quant.h"
#include "rlx/core/dtype.h"
#include "rlx/core/half.h"
#include "rlx/formats/quant.h"

namespace {

using namespace rlx;

constexpr int kGroup = 20, kWarmGroups = 5, kGroups = 30;
constexpr size_t kColdBytes = size_t{256} << 20;

// Median milliseconds per call of launch(i).
double time_per_call(const std::function<void(int)>& launch) {
  cudaEvent_t a, b;
  RLX_CUDA_CHECK(cudaEventCreate(&a));
  RLX_CUDA_CHECK(cudaEventCreate(&b));
  int call = 0;
  for (int g = 0; g < kWarmGroups; ++g)
    for (int i = 0; i < kGroup; ++i) launch(call++);
  RLX_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int g = 0; g < kGroups; ++g) {
    rlx::bench::gpu_busy_wait();
    RLX_CUDA_CHECK(cudaEventRecord(a));
    for (int i = 0; i < kGroup; ++i) launch(call++);
    RLX_CUDA_CHECK(cudaEventRecord(b));
    RLX_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    RLX_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / kGroup);
  }
  RLX_CUDA_CHECK(cudaGetLastError());
  RLX_CUDA_CHECK(cudaEventDestroy(a));
  RLX_CUDA_CHECK(cudaEventDestroy(b));
  return bench::median(ms);
}

using bench::time_per_call_graph;

// Runs f with environment variable `name` set to `value`, then restores it.
void with_env(const char* name, const char* value, const std::function<void()>& f) {
  const char* user = std::getenv(name);
  const std::string saved = user ? user : "";
  setenv(name, value, 1);
  f();
  if (user) setenv(name, saved.c_str(), 1);
  else unsetenv(name);
}

}  // namespace

// The read-only ceiling of a GEMV row: the same weight bytes read once (16
// bytes a load, four in flight per thread) and folded into one word, in the
// same graph of programmatic launches. Named in rlx::cuda so the encoder gives
// it programmatic edges, as it does the GEMVs: it triggers its dependents at
// once and waits only before its (never taken) store, the most overlap a
// kernel of the chain can have.
namespace rlx::cuda {
__global__ void __launch_bounds__(512) bench_read_only_kernel(const uint4* __restrict__ p, int64_t n16,
                                                              uint32_t* out) {
  dev::pdl_trigger();
  uint32_t acc = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
                d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = __ldcs(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  dev::pdl_wait();
  if (acc == 0x9E3779B9u && out) *out = acc;  // keeps the loads; practically never stores
}
}  // namespace rlx::cuda

namespace {

// Random weight bytes; every odd byte has its top two bits cleared, which
// keeps the f16 scale fields (at even offsets in most layouts) finite and
// below 2. The values do not change the timing.
std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(rng()) & (i % 2 ? 0x3F : 0xFF);
  return v;
}

struct Weights {
  uint8_t* base = nullptr;
  size_t bytes = 0;        // one copy
  size_t bytes_pitch = 0;  // copy to copy, 256-byte aligned
  int copies = 0;
  Weights(DType t, int64_t n, int64_t k) {
    bytes = static_cast<size_t>(dtype_bytes(t, n * k));
    const size_t pitch = bytes_pitch = (bytes + 255) / 256 * 256;
    copies = static_cast<int>(std::max<size_t>(2, (kColdBytes + bytes - 1) / bytes));
    RLX_CUDA_CHECK(cudaMalloc(&base, pitch * copies));
    const std::vector<uint8_t> host = random_bytes(bytes, 42);
    for (int c = 0; c < copies; ++c) RLX_CUDA_CHECK(cudaMemcpy(base + pitch * c, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  ~Weights() { cudaFree(base); }
  const uint8_t* copy(int i) const { return base + bytes_pitch * (i % copies); }
};

void* device_f16(int64_t n, float scale) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, scale);
  for (auto& v : h) v = f32_to_f16(d(rng));
  void* p = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&p, h.size() * 2));
  RLX_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return p;
}

// One m = 1 GEMV of copy 0 with f32 x and y, 32 rows spread over N checked
// against CPU dequantization + float64 (|err| ≤ 2e-5 · Σ|x·w| + 1e-6, as
// tests/gpu/test_quant.cpp, plus Σ|w|·dx/2 where the int8 path runs,
// dx = max|x| / 31750 per 32 elements, gemv_q8.h). Returns "" or the first mismatch.
std::string check_gemv(DType t, const uint8_t* w_dev, int64_t n, int64_t k, bool staged = false) {
  std::vector<float> xh(static_cast<size_t>(k));
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : xh) v = d(rng);
  float *x = nullptr, *y = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&x, k * 4));
  RLX_CUDA_CHECK(cudaMalloc(&y, n * 4));
  RLX_CUDA_CHECK(cudaMemcpy(x, xh.data(), k * 4, cudaMemcpyHostToDevice));
  if (staged) cuda::launch_quant_gemv_staged(t, w_dev, DType::F32, x, y, 1, n, k, nullptr);
  else cuda::launch_quant_gemv(t, w_dev, DType::F32, x, y, 1, n, k, nullptr);
  std::vector<float> yh(static_cast<size_t>(n));
  RLX_CUDA_CHECK(cudaMemcpy(yh.data(), y, n * 4, cudaMemcpyDeviceToHost));
  cudaFree(x);
  cudaFree(y);
  const int64_t row_bytes = dtype_bytes(t, k);
  std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
  std::vector<float> wf(static_cast<size_t>(k));
  const bool q8 = !staged && cuda::quant_gemv_uses_q8(t, w_dev, 1, n, k);
  std::vector<double> half_dx(static_cast<size_t>(k), 0.0);  // the int8 path's rounding bound per element
  for (int64_t b = 0; q8 && b < k; b += 32) {
    double a = 0;
    for (int64_t e = b; e < b + 32; ++e) a = std::max(a, std::fabs(double(xh[e])));
    for (int64_t e = b; e < b + 32; ++e) half_dx[e] = 1.01 * a / (127.0 * 250.0) / 2 + 1e-6 * std::fabs(double(xh[e]));
  }
  for (int s = 0; s < 32; ++s) {
    const int64_t r = s == 31 ? n - 1 : s * n / 31;
    RLX_CUDA_CHECK(cudaMemcpy(row.data(), w_dev + r * row_bytes, row_bytes, cudaMemcpyDeviceToHost));
    dequantize_row(t, row.data(), wf.data(), k);
    double ref = 0, scale = 0, q8err = 0;
    for (int64_t e = 0; e < k; ++e) {
      ref += double(xh[e]) * wf[e];
      scale += std::fabs(double(xh[e]) * wf[e]);
      q8err += half_dx[e] * std::fabs(wf[e]);
    }
    // Random bytes can hold huge scales (MXFP4's e8m0 reaches 2^127): rows
    // whose sum leaves f32's range have no f32 answer to check.
    if (!std::isfinite(scale) || scale > 3.0e38) continue;
    const double bound = 2e-5 * scale + q8err + 1e-6;
    if (!(std::fabs(yh[r] - ref) <= bound))
      return str("y[", r, "] = ", yh[r], ", float64 reference ", ref, " (allowed error ", bound, q8 ? ", int8 x" : "", ")");
  }
  return "";
}

}  // namespace

// y (f16 [m, n], the last launch of the quantized GEMM on these weights) at
// 64 sampled (row, column) pairs against the f16-rounded CPU dequantization +
// float64: |err| ≤ 2e-3 · Σ|x·w| + 1e-6, as tests/gpu/test_quant.cpp allows f16.
std::string check_prefill(DType t, const uint8_t* w_dev, const std::vector<float>& x, const void* y, int64_t m,
                          int64_t n, int64_t k) {
  std::vector<uint16_t> yh(static_cast<size_t>(m * n));
  RLX_CUDA_CHECK(cudaMemcpy(yh.data(), y, yh.size() * 2, cudaMemcpyDeviceToHost));
  const int64_t row_bytes = dtype_bytes(t, k);
  std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
  std::vector<float> wf(static_cast<size_t>(k));
  for (int s = 0; s < 64; ++s) {
    const int64_t r = s * (m - 1) / 63, c = (s * 977 + 13) % n;
    RLX_CUDA_CHECK(cudaMemcpy(row.data(), w_dev + c * row_bytes, row_bytes, cudaMemcpyDeviceToHost));
    dequantize_row(t, row.data(), wf.data(), k);
    double ref = 0, scale = 0;
    for (int64_t e = 0; e < k; ++e) {
      const double w = f16_to_f32(f32_to_f16(wf[e])), xv = x[static_cast<size_t>(r * k + e)];
      ref += xv * w;
      scale += std::fabs(xv * w);
    }
    if (!std::isfinite(scale) || scale > 6.0e4) continue;  // past f16's range: no f16 answer to check
    const double got = f16_to_f32(yh[static_cast<size_t>(r * n + c)]), bound = 2e-3 * scale + 1e-6;
    if (!(std::fabs(got - ref) <= bound))
      return str("y[", r, ", ", c, "] = ", got, ", float64 reference ", ref, " (allowed error ", bound, ")");
  }
  return "";
}

int main(int argc, char** argv) {
  // --only gemv|dequant|prefill (default: all three), --types q4_0,q8_0,...
  // (default: every quant type with a CUDA decoder), --prefill-shape MxNxK
  // (instead of the prefill shape list): for profiling one kernel.
  std::string only, type_list;
  int64_t shape_m = 0, shape_n = 0, shape_k = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--types" && i + 1 < argc) type_list = argv[++i];
    else if (a == "--prefill-shape" && i + 1 < argc) {
      long long mm = 0, nn = 0, kk = 0;
      char tail = 0;
      if (std::sscanf(argv[++i], "%lldx%lldx%lld%c", &mm, &nn, &kk, &tail) != 3 || mm < 1 || mm > 512 || nn < 1 ||
          nn > 4096 || kk < 1 || kk > 4096) {
        std::printf("quant_bench: --prefill-shape takes MxNxK with M <= 512 and N, K <= 4096, not '%s'\n", argv[i]);
        return 2;
      }
      shape_m = mm, shape_n = nn, shape_k = kk;
    } else {
      std::printf(
          "usage: rlx_quant_bench [--only gemv|dequant|prefill] [--types q4_0,q8_0,...] [--prefill-shape MxNxK]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (!only.empty() && only != "gemv" && only != "dequant" && only != "prefill") {
    std::printf("quant_bench: --only takes gemv, dequant or prefill, not '%s'\n", only.c_str());
    return 2;
  }
  const auto part = [&](const char* p) { return only.empty() || only == p; };
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("quant_bench: no CUDA device; skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  RLX_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("hardware limit: copy %.2f TB/s (measured on the H200, bench_util.h)\n", bench::kCopyTBps);
  {  // "% of copy" divides by the H200's figure; this GPU's own, to rescale them by
    const double tbps = bench::device_copy_tbps();
    std::printf("this GPU's device copy: %.2f TB/s (\"%% of copy\" x %.3f = %% of this GPU's copy)\n", tbps,
                bench::kCopyTBps / tbps);
    bench::json_line("quant", "device copy", tbps, "TB/s");
  }
  cuda::stage_quant_tables();

  std::vector<DType> types;
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i) {
    const auto t = static_cast<DType>(i);
    if (is_quant(t) && cuda::has_cuda_dequant_kernel(t)) types.push_back(t);
  }
  if (!type_list.empty()) {
    std::vector<DType> chosen;
    for (size_t at = 0; at <= type_list.size();) {
      const size_t comma = std::min(type_list.find(',', at), type_list.size());
      const std::string name = type_list.substr(at, comma - at);
      const auto t = dtype_from_name(name);
      if (!t || std::find(types.begin(), types.end(), *t) == types.end()) {
        std::printf("quant_bench: '%s' is not a quant type with a CUDA decoder\n", name.c_str());
        return 2;
      }
      chosen.push_back(*t);
      at = comma + 1;
    }
    types = chosen;
  }

  // ---- GEMV, m = 1 ----
  struct Shape {
    DType t;  // Count_: every type
    int64_t n, k;
  };
  const DType kAll = DType::Count_;
  const std::vector<Shape> shapes = {
      {kAll, 4096, 4096}, {kAll, 1024, 3072},
      // Gemma 3 270M decode: q/k/v/o, fused gate|up, down, output head.
      {DType::Q5_0, 1024, 640}, {DType::Q5_0, 256, 640}, {DType::Q5_0, 4096, 640}, {DType::Q8_0, 256, 640},
      {DType::Q4_K, 640, 2048}, {DType::Q4_K, 640, 1024}, {DType::Q6_K, 640, 2048}, {DType::Q6_K, 640, 1024},
      {DType::Q8_0, 262144, 640}};
  const int64_t max_n = 262144;
  void* x = device_f16(8 * 4096, 1.0f);  // up to m = 8 rows of K ≤ 4096
  void* y = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&y, 8 * max_n * 2));
  int failures = 0;
  if (part("gemv")) std::printf("\n%-34s %9s %9s %8s\n", "gemv m=1, x/y f16", "us", "GB/s", "of copy");
  for (const Shape& s : part("gemv") ? shapes : std::vector<Shape>{}) {
    const int64_t N = s.n, K = s.k;
    for (DType t : types) {
      if (s.t != kAll && s.t != t) continue;
      Weights w(t, N, K);
      const std::string key = str("gemv ", N, "x", K, " m=1 ", dtype_name(t));
      if (const std::string bad = check_gemv(t, w.copy(0), N, K); !bad.empty()) {
        std::printf("FAIL %s: %s\n", key.c_str(), bad.c_str());
        ++failures;
      }
      // One row: the median time of `launch` on the cold copies, as GB/s
      // of weights + x + y.
      auto report = [&](const std::string& name, int64_t m, double ms) {
        const double bytes = static_cast<double>(w.bytes) + 2.0 * m * K + 2.0 * m * N;
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        std::printf("%-34s %9.2f %9.1f %7.1f%%\n", name.c_str(), ms * 1e3, gbs,
                    100.0 * gbs / (bench::kCopyTBps * 1e3));
        bench::json_line("quant", name, gbs, "GB/s");
        bench::json_line("quant", name + " % of copy", 100.0 * gbs / (bench::kCopyTBps * 1e3), "%");
      };
      auto row = [&](const std::string& name, int64_t m, const std::function<void(int)>& launch) {
        report(name, m, time_per_call(launch));
      };
      const bool target_shape = (N == 4096 && K == 4096) || (N == 1024 && K == 3072);
      row(key, 1, [&](int i) { cuda::launch_quant_gemv(t, w.copy(i), DType::F16, x, y, 1, N, K, nullptr); });
      if (target_shape) {
        auto graph_row = [&](const std::string& name) {
          report(name, 1, time_per_call_graph(w.copies, [&](int i, cudaStream_t st) {
                   cuda::launch_quant_gemv(t, w.copy(i), DType::F16, x, y, 1, N, K, st);
                 }));
        };
        const bool q8 = cuda::quant_gemv_uses_q8(t, w.copy(0), 1, N, K);
        graph_row(key + (q8 ? " int8 x (graph)" : " (graph)"));
        // The streaming kernel (gemv_stream.cu) and, beside it, the unit
        // kernels it replaces at 4 MB+ (RLX_CUDA_GEMV_STREAM=0).
        if (!cuda::quant_gemv_stream_unsupported(t, w.copy(0), 1, N, K)) {
          const std::string stkey = str("gemv-stream ", N, "x", K, " m=1 ", dtype_name(t));
          with_env("RLX_CUDA_GEMV_STREAM", "1", [&] {
            if (const std::string bad = check_gemv(t, w.copy(0), N, K); !bad.empty()) {
              std::printf("FAIL %s: %s\n", stkey.c_str(), bad.c_str());
              ++failures;
            }
          });
          report(stkey + " (graph)", 1, time_per_call_graph(w.copies, [&](int i, cudaStream_t st) {
                   cuda::launch_quant_gemv_stream(t, w.copy(i), DType::F16, x, y, N, K, st);
                 }));
          with_env("RLX_CUDA_GEMV_STREAM", "0", [&] {
            graph_row(key + (cuda::quant_gemv_uses_q8(t, w.copy(0), 1, N, K) ? " unit int8 x (graph)" : " unit (graph)"));
          });
        }
        report(str("read-only ", N, "x", K, " ", dtype_name(t), " bytes (graph)"), 1,
               time_per_call_graph(w.copies, [&](int i, cudaStream_t st) {
                 cuda::bench_read_only_kernel<<<cuda::current_sm_count() * 4, 512, 0, st>>>(
                     reinterpret_cast<const uint4*>(w.copy(i)), static_cast<int64_t>(w.bytes / 16), nullptr);
               }));
        if (q8)  // the unit kernels on f32 activations (RLX_CUDA_GEMV_Q8=0)
          with_env("RLX_CUDA_GEMV_Q8", "0", [&] { graph_row(key + " f32 x (graph)"); });
      }
      if (!cuda::quant_gemv_staged_supported(t)) continue;
      const std::string skey = str("gemv-staged ", N, "x", K, " m=1 ", dtype_name(t));
      if (const std::string bad = check_gemv(t, w.copy(0), N, K, true); !bad.empty()) {
        std::printf("FAIL %s: %s\n", skey.c_str(), bad.c_str());
        ++failures;
      }
      row(skey, 1, [&](int i) { cuda::launch_quant_gemv_staged(t, w.copy(i), DType::F16, x, y, 1, N, K, nullptr); });
      if (target_shape)
        report(skey + " (graph)", 1, time_per_call_graph(w.copies, [&](int i, cudaStream_t st) {
                 cuda::launch_quant_gemv_staged(t, w.copy(i), DType::F16, x, y, 1, N, K, st);
               }));
      if (N == 4096 && K <= 4096) {
        row(str("gemv ", N, "x", K, " m=8 ", dtype_name(t)), 8,
            [&](int i) { cuda::launch_quant_gemv(t, w.copy(i), DType::F16, x, y, 8, N, K, nullptr); });
        row(str("gemv-staged ", N, "x", K, " m=8 ", dtype_name(t)), 8,
            [&](int i) { cuda::launch_quant_gemv_staged(t, w.copy(i), DType::F16, x, y, 8, N, K, nullptr); });
      }
    }
  }

  // ---- dequantization to f16, 4096 x 4096 ----
  const int64_t N = 4096, K = 4096;
  void* wf16 = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&wf16, N * K * 2));
  if (part("dequant")) std::printf("\n%-30s %9s %9s %8s\n", "dequant -> f16, 4096x4096", "us", "GB/s", "of copy");
  for (DType t : part("dequant") ? types : std::vector<DType>{}) {
    Weights w(t, N, K);
    const double ms =
        time_per_call([&](int i) { cuda::launch_dequantize(t, w.copy(i), DType::F16, wf16, N * K, nullptr); });
    const double gbs = (static_cast<double>(w.bytes) + 2.0 * N * K) / (ms * 1e-3) / 1e9;
    const std::string key = str("dequant f16 4096x4096 ", dtype_name(t));
    std::printf("%-30s %9.2f %9.1f %7.1f%%\n", key.c_str(), ms * 1e3, gbs, 100.0 * gbs / (bench::kCopyTBps * 1e3));
    bench::json_line("quant", key, gbs, "GB/s");
  }

  // ---- prefill: m = 512 and 128, N = K = 4096; Gemma 3 270M's projections at m = 512 ----
  const int64_t max_m = 512;
  void* xp = device_f16(max_m * K, 1.0f);
  void* yp = nullptr;
  RLX_CUDA_CHECK(cudaMalloc(&yp, max_m * N * 2));
  if (!part("prefill")) {
    if (failures) std::printf("\n%d check(s) FAILED\n", failures);
    return failures ? 1 : 0;
  }
  struct PrefillShape {
    DType t;  // Count_: every type
    int64_t m, n, k;
  };
  std::vector<PrefillShape> prefill_shapes = {
      {kAll, 512, 4096, 4096}, {kAll, 128, 4096, 4096},
      // Gemma 3 270M prefill: q, k/v, fused gate|up, o, down.
      {DType::Q5_0, 512, 1024, 640}, {DType::Q5_0, 512, 256, 640}, {DType::Q5_0, 512, 4096, 640},
      {DType::Q8_0, 512, 256, 640}, {DType::Q4_K, 512, 640, 1024}, {DType::Q4_K, 512, 640, 2048},
      {DType::Q6_K, 512, 640, 2048}};
  if (shape_m) prefill_shapes = {{kAll, shape_m, shape_n, shape_k}};
  // x in f32, for check_prefill.
  std::vector<float> x_host(static_cast<size_t>(max_m * K));
  {
    std::vector<uint16_t> xh(x_host.size());
    RLX_CUDA_CHECK(cudaMemcpy(xh.data(), xp, xh.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < xh.size(); ++i) x_host[i] = f16_to_f32(xh[i]);
  }
  cuda::GemmEngine engine(0);
  std::printf("\n%-44s %9s %9s\n", "prefill, x/y f16", "us", "TFLOP/s");
  for (const PrefillShape& s : prefill_shapes) {
    const int64_t pm = s.m, pn = s.n, pk = s.k;
    if (s.t != kAll && std::find(types.begin(), types.end(), s.t) == types.end()) continue;
    const std::string shape = str("prefill m=", pm, " ", pn, "x", pk);
    cuda::GemmArgs g;
    g.dtype = DType::F16;
    g.trans_b = true;
    g.M = pm;
    g.N = pn;
    g.K = pk;
    g.A = xp;
    g.lda = pk;
    g.B = wf16;
    g.ldb = pk;
    g.C = yp;
    g.ldc = pn;
    engine.plan(g);
    const double flops = 2.0 * pm * pn * pk;
    const auto tflops = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
    const double cublas_ms = time_per_call_graph(kGroup, [&](int, cudaStream_t st) { engine.run(g, st); });
    const std::string ckey = shape + " cublas f16";
    std::printf("%-44s %9.2f %9.1f   (dequantized W)\n", ckey.c_str(), cublas_ms * 1e3, tflops(cublas_ms));
    bench::json_line("quant", ckey, tflops(cublas_ms), "TFLOP/s");
    // x rows of pk f16 from the [max_m, K] buffer, read as [pm, pk].
    std::vector<float> xs(x_host.begin(), x_host.begin() + pm * pk);
    for (DType t : types) {
      if (s.t != kAll && s.t != t) continue;
      if (pk % dtype_info(t).block_elems != 0) {
        std::printf("%-44s skipped: K = %lld is not whole blocks\n", str(shape, " ", dtype_name(t)).c_str(),
                    static_cast<long long>(pk));
        continue;
      }
      Weights w(t, pn, pk);
      const double ms = time_per_call_graph(w.copies, [&](int i, cudaStream_t st) {
        cuda::launch_dequantize(t, w.copy(i), DType::F16, wf16, pn * pk, st);
        engine.run(g, st);
      });
      const std::string key = str(shape, " ", dtype_name(t));
      std::printf("%-44s %9.2f %9.1f   dequant+cuBLASLt\n", key.c_str(), ms * 1e3, tflops(ms));
      bench::json_line("quant", key, tflops(ms), "TFLOP/s");
      if (cuda::quant_gemm_sm90_unsupported(t, DType::F16, w.copy(0), xp, yp, pm, pn, pk) != nullptr) continue;
      const double qms = time_per_call_graph(w.copies, [&](int i, cudaStream_t st) {
        cuda::launch_quant_gemm_sm90(t, w.copy(i), DType::F16, xp, yp, pm, pn, pk, st);
      });
      const std::string qkey = key + " qgemm-sm90";
      const std::string bad = check_prefill(t, w.copy(0), xs, yp, pm, pn, pk);
      failures += !bad.empty();
      std::printf("%-44s %9.2f %9.1f   %.2fx dequant+cuBLASLt%s%s\n", qkey.c_str(), qms * 1e3, tflops(qms), ms / qms,
                  bad.empty() ? "" : "  FAIL: ", bad.c_str());
      bench::json_line("quant", qkey, tflops(qms), "TFLOP/s");
    }
  }
  cudaFree(x);
  cudaFree(y);
  cudaFree(wf16);
  cudaFree(xp);
  cudaFree(yp);
  if (failures) std::printf("\n%d check(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
