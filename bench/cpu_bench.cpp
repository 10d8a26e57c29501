// CPU backend micro-benchmarks: matmul through rlx (RLX_CPU_BLAS on and off:
// the OpenBLAS path and the built-in kernel, except on AVX-512 CPUs where
// both run the built-in kernel) next to cblas_sgemm called directly, attention throughput
// and layernorm bandwidth. Each figure is the median of timed runs after
// warm-up. "kernel" times come from the dispatch report (RLX_DISPATCH_REPORT,
// the kernel call alone); "run" times are whole Executable::run calls, which
// also copy inputs in and outputs out. The memcpy line gives the machine's
// practical memory-bandwidth ceiling for the bandwidth-bound ops.
//
// With --minilm DIR, instead: the BERT encoder of that model folder at
// embedding batch shapes (B texts x L tokens), whole-run time per batch and
// kernel time summed per kernel description, largest first.
//
// With --gemv, only the quantized decode GEMV (weight bytes read per second).
//
//   rlx_cpu_bench [--reps N] [--minilm DIR | --gemv]   (RLX_NUM_THREADS sets the thread count)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rlx/backends/cpu/kernels/gemm.h"  // which bf16 kernels this CPU has
#include "rlx/ir/builder.h"
#include "rlx/models/bert/bert.h"
#include "rlx/runtime/session.h"

#ifdef RLX_HAVE_BLAS
#include <cblas.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

double median_seconds(int reps, const std::function<void()>& fn) {
  fn();  // warm-up (compiles, faults pages in, spins up threads)
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

rlx::Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& x : v) x = dist(rng);
  return rlx::Tensor::from(v, std::move(shape));
}

void set_env(const char* name, const char* value) { setenv(name, value, 1); }

// Sum of the per-kernel times ("... 123.4 us" line ends) of the last run's
// dispatch report, in seconds; 0 when the report has none.
double kernel_seconds(const rlx::Executable& exe) {
  const std::string r = exe.dispatch_report();
  double total = 0;
  size_t pos = 0;
  while ((pos = r.find(" us\n", pos)) != std::string::npos) {
    size_t start = r.rfind(' ', pos - 1);
    total += std::atof(r.substr(start + 1, pos - start - 1).c_str());
    pos += 4;
  }
  return total * 1e-6;
}

struct Timing {
  double run = 0, kernel = 0;  // medians, seconds
};

Timing time_runs(int reps, rlx::Executable& exe, const std::vector<rlx::Tensor>& inputs) {
  exe.run(inputs);
  exe.run(inputs);
  std::vector<double> run, kern;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    exe.run(inputs);
    run.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    kern.push_back(kernel_seconds(exe));
  }
  std::sort(run.begin(), run.end());
  std::sort(kern.begin(), kern.end());
  return {run[run.size() / 2], kern[kern.size() / 2]};
}

void bench_matmul(int reps) {
  std::printf("\nmatmul f32 C[M,N] = A[M,K]·B[K,N] (B a param): GFLOP/s of the kernel (of the whole run), "
              "median of %d\n", reps);
  std::printf("  (on AVX-512 CPUs both rlx columns run the built-in kernel)\n");
  std::printf("  %-18s %20s %20s %12s\n", "M x K x N", "rlx, CPU_BLAS=1", "rlx, CPU_BLAS=0", "cblas_sgemm");
  struct S { int64_t m, k, n; };
  for (S s : {S{256, 256, 256}, S{512, 512, 512}, S{1024, 1024, 1024}, S{128, 384, 1536}, S{1, 4096, 4096},
              // MiniLM at 32 texts x 16 tokens: QKV, FFN up, FFN down
              S{512, 384, 1152}, S{512, 384, 1536}, S{512, 1536, 384}}) {
    rlx::Graph g;
    auto a = rlx::input(g, "a", rlx::DType::F32, {s.m, s.k});
    auto b = rlx::param(g, "b", rlx::DType::F32, {s.k, s.n});
    rlx::output("c", rlx::matmul(a, b));
    rlx::Session session("cpu");
    auto exe = session.compile(g);
    rlx::Tensor A = random_tensor({s.m, s.k}, 1), B = random_tensor({s.k, s.n}, 2);
    exe->set_param("b", B);
    const double gflop = 2.0 * static_cast<double>(s.m * s.k * s.n) * 1e-9;
    set_env("RLX_CPU_BLAS", "1");
    const Timing blas = time_runs(reps, *exe, {A});
    set_env("RLX_CPU_BLAS", "0");
    const Timing own = time_runs(reps, *exe, {A});
    set_env("RLX_CPU_BLAS", "1");
    std::string ref = "n/a";
#ifdef RLX_HAVE_BLAS
    std::vector<float> C(static_cast<size_t>(s.m * s.n));
    const double t_ref = median_seconds(reps, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
                  static_cast<int>(s.k), 1.0f, A.data<float>(), static_cast<int>(s.k), B.data<float>(),
                  static_cast<int>(s.n), 0.0f, C.data(), static_cast<int>(s.n));
    });
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", gflop / t_ref);
    ref = buf;
#endif
    char name[64], c1[48], c2[48];
    std::snprintf(name, sizeof(name), "%lld x %lld x %lld", static_cast<long long>(s.m), static_cast<long long>(s.k),
                  static_cast<long long>(s.n));
    std::snprintf(c1, sizeof(c1), "%.1f (%.1f)", gflop / blas.kernel, gflop / blas.run);
    std::snprintf(c2, sizeof(c2), "%.1f (%.1f)", gflop / own.kernel, gflop / own.run);
    std::printf("  %-18s %20s %20s %12s\n", name, c1, c2, ref.c_str());
  }
}

// bf16 matmuls take AMX tiles, else AVX512-BF16's VDPBF16PS, else f32 on
// staged operands; each column forces one (n/a where the CPU lacks it).
void bench_matmul_bf16(int reps) {
  std::printf("\nmatmul bf16 C[M,N] = A[M,K]·B[K,N] (B a param): GFLOP/s of the kernel (of the whole run), "
              "median of %d\n", reps);
  std::printf("  %-18s %16s %16s %16s\n", "M x K x N", "AMX", "AVX512-BF16", "staged f32");
  struct S { int64_t m, k, n; };
  struct Path { const char *amx, *avx512; };
  for (S s : {S{1, 4096, 4096}, S{4, 4096, 4096}, S{8, 4096, 4096}, S{16, 4096, 4096}, S{32, 4096, 4096},
              S{64, 1024, 1024},
              // MiniLM at 32 texts x 16 tokens: FFN up, FFN down
              S{512, 384, 1536}, S{512, 1536, 384}}) {
    rlx::Graph g;
    auto a = rlx::input(g, "a", rlx::DType::BF16, {s.m, s.k});
    auto b = rlx::param(g, "b", rlx::DType::BF16, {s.k, s.n});
    rlx::output("c", rlx::matmul(a, b));
    rlx::Session session("cpu");
    auto exe = session.compile(g);
    const rlx::Tensor A = random_tensor({s.m, s.k}, 1).to(rlx::DType::BF16);
    exe->set_param("b", random_tensor({s.k, s.n}, 2).to(rlx::DType::BF16));
    const double gflop = 2.0 * static_cast<double>(s.m * s.k * s.n) * 1e-9;
    char name[64], col[3][48];
    std::snprintf(name, sizeof(name), "%lld x %lld x %lld", static_cast<long long>(s.m), static_cast<long long>(s.k),
                  static_cast<long long>(s.n));
    const Path paths[3] = {{"1", "0"}, {"0", "1"}, {"0", "0"}};  // each forced, whatever the auto rule picks
    for (int i = 0; i < 3; ++i) {
      set_env("RLX_CPU_AMX", paths[i].amx);
      set_env("RLX_CPU_AVX512_BF16", paths[i].avx512);
      const bool has = i == 0 ? rlx::cpu::amx_bf16_available() : i == 1 ? rlx::cpu::avx512_bf16_available() : true;
      if (!has) {
        std::snprintf(col[i], sizeof(col[i]), "n/a");
        continue;
      }
      const Timing t = time_runs(reps, *exe, {A});
      std::snprintf(col[i], sizeof(col[i]), "%.1f (%.1f)", gflop / t.kernel, gflop / t.run);
    }
    set_env("RLX_CPU_AMX", "1");
    set_env("RLX_CPU_AVX512_BF16", "auto");
    std::printf("  %-18s %16s %16s %16s\n", name, col[0], col[1], col[2]);
  }
}

void bench_attention(int reps) {
  const int64_t B = 8, H = 12, L = 128, D = 64;
  std::printf("\nattention f32 B=%lld H=%lld L=%lld D=%lld, median of %d\n", static_cast<long long>(B),
              static_cast<long long>(H), static_cast<long long>(L), static_cast<long long>(D), reps);
  for (rlx::MaskKind mask : {rlx::MaskKind::None, rlx::MaskKind::Causal}) {
    rlx::Graph g;
    rlx::AttentionAttrs at;
    at.num_heads = static_cast<int>(H);
    at.num_kv_heads = static_cast<int>(H);
    at.head_dim = static_cast<int>(D);
    at.mask = mask;
    auto q = rlx::input(g, "q", rlx::DType::F32, {B, L, H * D});
    auto k = rlx::input(g, "k", rlx::DType::F32, {B, L, H * D});
    auto v = rlx::input(g, "v", rlx::DType::F32, {B, L, H * D});
    rlx::output("o", rlx::attention(q, k, v, at));
    rlx::Session session("cpu");
    auto exe = session.compile(g);
    std::vector<rlx::Tensor> ins = {random_tensor({B, L, H * D}, 3), random_tensor({B, L, H * D}, 4),
                                    random_tensor({B, L, H * D}, 5)};
    const Timing t = time_runs(reps, *exe, ins);
    // QKᵀ and PV: 2·2·L·L·D per (b, h); causal needs about half.
    const double flop = 4.0 * static_cast<double>(B * H * L * L * D) * (mask == rlx::MaskKind::Causal ? 0.5 : 1.0);
    std::printf("  %-8s kernel %8.3f ms  %7.1f GFLOP/s  %9.0f query rows/s   (run %8.3f ms)\n", rlx::mask_name(mask),
                t.kernel * 1e3, flop / t.kernel * 1e-9, static_cast<double>(B * H * L) / t.kernel, t.run * 1e3);
  }
  // Decode: one query over a 4096-key cache, GQA 32/8 heads.
  {
    rlx::Graph g;
    rlx::AttentionAttrs at;
    at.num_heads = 32;
    at.num_kv_heads = 8;
    at.head_dim = 128;
    at.mask = rlx::MaskKind::Causal;
    const int64_t Lk = 4096;
    auto q = rlx::input(g, "q", rlx::DType::F32, {1, 1, 32 * 128});
    auto k = rlx::input(g, "k", rlx::DType::F32, {1, Lk, 8 * 128});
    auto v = rlx::input(g, "v", rlx::DType::F32, {1, Lk, 8 * 128});
    rlx::output("o", rlx::attention(q, k, v, at));
    rlx::Session session("cpu");
    auto exe = session.compile(g);
    std::vector<rlx::Tensor> ins = {random_tensor({1, 1, 32 * 128}, 6), random_tensor({1, Lk, 8 * 128}, 7),
                                    random_tensor({1, Lk, 8 * 128}, 8)};
    const Timing t = time_runs(reps, *exe, ins);
    const double kv_bytes = 2.0 * static_cast<double>(Lk * 8 * 128) * 4;
    std::printf("  decode Lq=1 Lk=%lld H=32/8 D=128: kernel %8.3f ms, reads K+V (%.0f MB) at %.1f GB/s"
                "   (run %8.3f ms)\n",
                static_cast<long long>(Lk), t.kernel * 1e3, kv_bytes * 1e-6, kv_bytes / t.kernel * 1e-9, t.run * 1e3);
  }
}

void bench_layernorm(int reps) {
  const int64_t rows = 4096, n = 4096;
  std::printf("\nlayernorm f32 %lld x %lld, median of %d\n", static_cast<long long>(rows), static_cast<long long>(n),
              reps);
  rlx::Graph g;
  auto x = rlx::input(g, "x", rlx::DType::F32, {rows, n});
  auto gm = rlx::param(g, "g", rlx::DType::F32, {n});
  auto bt = rlx::param(g, "b", rlx::DType::F32, {n});
  rlx::output("y", rlx::layer_norm(x, gm, bt));
  rlx::Session session("cpu");
  auto exe = session.compile(g);
  exe->set_param("g", random_tensor({n}, 9));
  exe->set_param("b", random_tensor({n}, 10));
  rlx::Tensor X = random_tensor({rows, n}, 11);
  const Timing t = time_runs(reps, *exe, {X});
  const double bytes = 2.0 * static_cast<double>(rows * n) * 4;  // read x, write y
  std::printf("  kernel %8.3f ms: %.1f GB/s (read x + write y)   (run %8.3f ms)\n", t.kernel * 1e3,
              bytes / t.kernel * 1e-9, t.run * 1e3);
  // Practical ceiling: memcpy of the same size (read + write).
  std::vector<float> src(static_cast<size_t>(rows * n), 1.0f), dst(static_cast<size_t>(rows * n));
  const double tc = median_seconds(reps, [&] { std::memcpy(dst.data(), src.data(), src.size() * sizeof(float)); });
  std::printf("  memcpy same size (1 thread): %.1f GB/s (read + write)\n", bytes / tc * 1e-9);
}

volatile double g_sink = 0;  // keeps the bandwidth loop's sums alive

// Read bandwidth of the machine with every hardware thread: the decode GEMV's
// ceiling. GB/s over a 512 MB buffer, best of 5.
double read_bandwidth_gbs() {
  const size_t n = size_t{64} << 20;  // 8-byte words
  std::vector<uint64_t> buf(n, 1);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<uint64_t> part(threads);
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t b = n * t / threads, e = n * (t + 1) / threads;
        uint64_t acc[8] = {};
        for (size_t i = b; i + 8 <= e; i += 8) {
          __builtin_prefetch(buf.data() + i + 512);  // 4 KB ahead, as the GEMV asks
          for (int l = 0; l < 8; ++l) acc[l] ^= buf[i + l];
        }
        part[t] = acc[0] ^ acc[7];
      });
    for (auto& th : pool) th.join();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  for (uint64_t p : part) g_sink = g_sink + static_cast<double>(p);
  return static_cast<double>(n * sizeof(uint64_t)) / best * 1e-9;
}

// The decode GEMV (DequantMatMul, one activation row) on quantized weights:
// weight bytes read per second, with enough copies of W (each its own
// executable, run in turn) that every run reads from DRAM, not the caches.
// Shapes: Gemma 3 270M's q8_0 output head and FFN, and 4096-wide layers.
void bench_quant_gemv(int reps) {
  std::printf("\nquantized GEMV y[1,N] = x[1,K]·W[N,K]ᵀ (W in its GGUF blocks, cold: copies of W > 512 MB "
              "rotated), median of %d\n", reps);
  std::printf("  memory read ceiling (all threads, 512 MB): %.1f GB/s\n", read_bandwidth_gbs());
  std::printf("  %-8s %-22s %10s %10s %12s\n", "type", "N x K", "MB", "kernel ms", "GB/s of W");
  struct S { rlx::DType type; int64_t n, k, m = 1; };  // m: activation rows
  // Random blocks with the scale fields (f16, at these byte offsets; e8m0 / ue4m3 bytes) set to
  // realistic values.
  struct Layout { rlx::DType type; int64_t bytes; std::vector<int> f16_fields, byte_fields; uint8_t byte_value; };
  using rlx::DType;
  const Layout layouts[] = {
      {DType::Q8_0, 34, {0}, {}, 0},     {DType::Q4_0, 18, {0}, {}, 0},      {DType::Q5_0, 22, {0}, {}, 0},
      {DType::Q4_1, 20, {0, 2}, {}, 0},  {DType::Q5_1, 24, {0, 2}, {}, 0},   {DType::Q4_K, 144, {0, 2}, {}, 0},
      {DType::Q5_K, 176, {0, 2}, {}, 0}, {DType::Q6_K, 210, {208}, {}, 0},   {DType::Q2_K, 84, {80, 82}, {}, 0},
      {DType::Q3_K, 110, {108}, {}, 0},  {DType::IQ4_NL, 18, {0}, {}, 0},    {DType::IQ4_XS, 136, {0}, {}, 0},
      {DType::TQ2_0, 66, {64}, {}, 0},   {DType::MXFP4, 17, {}, {0}, 120},
      {DType::NVFP4, 36, {}, {0, 1, 2, 3}, 0x30}, {DType::IQ2_XXS, 66, {0}, {}, 0}, {DType::IQ2_XS, 74, {0}, {}, 0},
      {DType::IQ2_S, 82, {0}, {}, 0},    {DType::IQ3_XXS, 98, {0}, {}, 0},  {DType::IQ3_S, 110, {0}, {}, 0},
      {DType::IQ1_S, 50, {0}, {}, 0},    {DType::IQ1_M, 56, {}, {}, 0}};
  const std::vector<S> shapes = {
      S{DType::Q8_0, 262144, 640}, S{DType::Q4_K, 4096, 4096}, S{DType::Q5_K, 4096, 4096}, S{DType::Q6_K, 4096, 4096},
      S{DType::Q8_0, 4096, 4096},  S{DType::Q4_0, 4096, 4096}, S{DType::Q5_0, 2048, 640},  S{DType::Q4_K, 640, 2048},
      S{DType::Q4_1, 4096, 4096},  S{DType::Q5_1, 4096, 4096}, S{DType::Q2_K, 4096, 4096}, S{DType::Q3_K, 4096, 4096},
      S{DType::IQ4_NL, 4096, 4096}, S{DType::IQ4_XS, 4096, 4096}, S{DType::TQ2_0, 4096, 4096},
      S{DType::MXFP4, 4096, 4096}, S{DType::NVFP4, 4096, 4096}, S{DType::IQ2_XXS, 4096, 4096},
      S{DType::IQ2_XS, 4096, 4096}, S{DType::IQ2_S, 4096, 4096}, S{DType::IQ3_XXS, 4096, 4096},
      S{DType::IQ3_S, 4096, 4096}, S{DType::IQ1_S, 4096, 4096}, S{DType::IQ1_M, 4096, 4096},
      S{DType::Q4_K, 4096, 4096, 8}, S{DType::Q4_K, 4096, 4096, 12}, S{DType::IQ4_XS, 4096, 4096, 12},
      S{DType::IQ2_XXS, 4096, 4096, 12}, S{DType::Q4_K, 4096, 4096, 64}, S{DType::Q3_K, 4096, 4096, 64},
      S{DType::IQ4_XS, 4096, 4096, 64}, S{DType::IQ2_XXS, 4096, 4096, 64}};
  for (S s : shapes) {
    rlx::Graph g;
    auto x = rlx::input(g, "x", rlx::DType::F32, {s.m, s.k});
    auto w = rlx::param(g, "w", s.type, {s.n, s.k});
    rlx::output("y", rlx::dequant_matmul(x, w));
    rlx::Session session("cpu");
    const Layout& l =
        *std::find_if(std::begin(layouts), std::end(layouts), [&](const Layout& c) { return c.type == s.type; });
    const int64_t bytes = rlx::dtype_bytes(s.type, s.n * s.k);
    const int64_t copies = std::clamp<int64_t>((int64_t{512} << 20) / bytes + 1, 1, 512);
    std::vector<std::shared_ptr<rlx::Executable>> exes;
    std::mt19937_64 rng(12);
    for (int64_t c = 0; c < copies; ++c) {
      std::vector<uint8_t> blocks(static_cast<size_t>(bytes));
      for (size_t b = 0; b < blocks.size(); b += 8) {  // eight random bytes per draw: 512 MB per shape
        const uint64_t r = rng();
        std::memcpy(blocks.data() + b, &r, std::min<size_t>(8, blocks.size() - b));
      }
      const uint16_t scale = 0x211f;  // 0.01 in f16
      for (size_t b = 0; b < blocks.size(); b += static_cast<size_t>(l.bytes)) {
        for (int off : l.f16_fields) std::memcpy(blocks.data() + b + off, &scale, 2);
        for (int off : l.byte_fields) blocks[b + static_cast<size_t>(off)] = l.byte_value;
      }
      exes.push_back(session.compile(g));
      exes.back()->set_param("w", rlx::Tensor::from_bytes(s.type, {s.n, s.k}, blocks.data(), blocks.size()));
    }
    const std::vector<rlx::Tensor> in = {random_tensor({s.m, s.k}, 13)};
    for (auto& e : exes) e->run(in);  // warm-up: compile, fault pages in
    std::vector<double> kern;
    for (int i = 0; i < std::max<int64_t>(reps, copies); ++i) {
      auto& e = *exes[static_cast<size_t>(i % copies)];
      e.run(in);
      kern.push_back(kernel_seconds(e));
    }
    std::sort(kern.begin(), kern.end());
    const double t = kern[kern.size() / 2], mb = static_cast<double>(bytes) * 1e-6;
    char shape[32];
    std::snprintf(shape, sizeof(shape), "%lld x %lld%s", static_cast<long long>(s.n), static_cast<long long>(s.k),
                  s.m > 1 ? (", m " + std::to_string(s.m)).c_str() : "");
    const std::string type(rlx::dtype_name(s.type));
    std::printf("  %-8s %-22s %10.1f %10.3f %12.1f\n", type.c_str(), shape, mb, t * 1e3, mb / t * 1e-3);
  }
}

// Per kernel description: summed "... -> desc  T us" times of the last run.
void add_kernel_times(const rlx::Executable& exe, std::map<std::string, double>& by_kernel) {
  const std::string r = exe.dispatch_report();
  size_t line = 0;
  while (line < r.size()) {
    size_t end = r.find('\n', line);
    if (end == std::string::npos) end = r.size();
    const std::string l = r.substr(line, end - line);
    line = end + 1;
    const size_t arrow = l.find(" -> "), us = l.rfind(" us");
    if (arrow == std::string::npos || us == std::string::npos || us + 3 != l.size()) continue;
    const size_t sp = l.rfind("  ", us);
    by_kernel[l.substr(arrow + 4, sp - arrow - 4)] += std::atof(l.substr(sp + 2, us - sp - 2).c_str()) * 1e-6;
  }
}

void bench_minilm(int reps, const std::string& dir) {
  const rlx::bert::BertConfig cfg = rlx::bert::BertConfig::from_dir(dir);
  rlx::Session session("cpu");
  auto exe = session.compile(rlx::bert::build_graph(cfg));
  for (auto& [name, t] : rlx::bert::load_weights(cfg, dir)) exe->set_param(name, t);
  std::printf("\nBERT encoder of %s (%lld layers, hidden %lld), f32; median of %d runs per shape\n", dir.c_str(),
              static_cast<long long>(cfg.layers), static_cast<long long>(cfg.hidden), reps);
  struct S { int64_t b, l; };
  for (S s : {S{32, 16}, S{32, 32}, S{32, 128}, S{8, 256}}) {
    std::vector<int32_t> ids(static_cast<size_t>(s.b * s.l)), mask(ids.size(), 1), pos(static_cast<size_t>(s.l));
    std::mt19937 rng(1);
    for (auto& x : ids) x = static_cast<int32_t>(1000 + rng() % 20000);
    for (int64_t i = 0; i < s.l; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    // Every other text is half as long (padded), as in a real batch.
    for (int64_t b = 1; b < s.b; b += 2)
      for (int64_t i = s.l / 2; i < s.l; ++i) mask[static_cast<size_t>(b * s.l + i)] = 0;
    const std::vector<rlx::Tensor> ins = {rlx::Tensor::from(ids, {s.b, s.l}),
                                          rlx::Tensor::zeros(rlx::DType::I32, {s.b, s.l}),
                                          rlx::Tensor::from(mask, {s.b, s.l}), rlx::Tensor::from(pos, {s.l})};
    exe->run(ins);
    std::vector<double> run, cpu;
    std::vector<std::map<std::string, double>> kern;
    for (int i = 0; i < reps; ++i) {
      auto t0 = Clock::now();
      const std::clock_t c0 = std::clock();
      exe->run(ins);
      cpu.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
      run.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      kern.emplace_back();
      add_kernel_times(*exe, kern.back());
    }
    std::vector<double> sorted = run;
    std::sort(sorted.begin(), sorted.end());
    const double med = sorted[sorted.size() / 2];
    std::sort(cpu.begin(), cpu.end());
    // CPU time (all threads) is steadier than wall time on a shared machine.
    std::printf("  B=%lld L=%lld: run %8.3f ms (%.0f texts/s), process CPU time %8.3f ms\n",
                static_cast<long long>(s.b), static_cast<long long>(s.l), med * 1e3, static_cast<double>(s.b) / med,
                cpu[cpu.size() / 2] * 1e3);
    // Kernel split of the median run.
    const auto& k = kern[static_cast<size_t>(std::find(run.begin(), run.end(), med) - run.begin())];
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [d, t] : k) rows.emplace_back(t, d);
    std::sort(rows.rbegin(), rows.rend());
    for (const auto& [t, d] : rows)
      if (t >= 0.01 * med) std::printf("    %7.3f ms %5.1f%%  %s\n", t * 1e3, 100.0 * t / med, d.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  std::string minilm;
  bool gemv_only = false, bf16_only = false;
  const char* usage =
      "usage: rlx_cpu_bench [--reps N] [--minilm DIR | --gemv | --bf16]   (RLX_NUM_THREADS sets the thread count)\n"
      "CPU matmul (f32: rlx with and without OpenBLAS, beside cblas_sgemm; bf16: AMX, AVX512-BF16 and staged\n"
      "f32), attention, layernorm and the quantized decode GEMV; with --minilm DIR, that model's BERT encoder at\n"
      "embedding batch shapes; with --gemv, the quantized GEMV alone; with --bf16, the bf16 matmuls alone.\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--minilm" && i + 1 < argc) minilm = argv[++i];
    else if (a == "--gemv") gemv_only = true;
    else if (a == "--bf16") bf16_only = true;
    else {
      std::fprintf(stderr, "cpu_bench: unexpected argument '%s'\n%s", a.c_str(), usage);
      return 2;
    }
  }
  set_env("RLX_DISPATCH_REPORT", "1");  // per-kernel times
  rlx::Session session("cpu");
  std::printf("rlx cpu bench: %s (%s)\n", session.device().name.c_str(), session.device().details.c_str());
#ifndef RLX_HAVE_BLAS
  std::printf("built without OpenBLAS: the rlx+blas column runs the built-in kernel\n");
#endif
  if (!minilm.empty()) {
    bench_minilm(reps, minilm);
    return 0;
  }
  if (bf16_only) {
    bench_matmul_bf16(reps);
    return 0;
  }
  if (!gemv_only) {
    bench_matmul(reps);
    bench_matmul_bf16(reps);
    bench_attention(reps);
    bench_layernorm(reps);
  }
  bench_quant_gemv(reps);
  return 0;
}
