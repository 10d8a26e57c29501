// Fourier transforms on the GPU through the runtime, as a user's graph runs
// them: an Executable whose graph applies K transforms in a chain to a
// parameter (random data, 128 MB per tensor, so nothing stays in L2) and
// returns one element. The time per transform is the difference between a
// chain of 22 and a chain of 2, divided by 20, which removes the launch and
// the copies in and out. Medians of 15 host-timed runs each. Peer:
// bench/fft_torch.py (torch.fft, CUDA events, same shapes).
//
// Bandwidth counts each transform's bytes read + written once; the ceiling is
// the measured device copy (4.22 TB/s). The brief measured cuFFT c2c at about
// 4.0 TB/s for n <= 4096 and 1.8 TB/s at n = 65536 on this H200.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"

using namespace rlx;

namespace {

struct FftCase {
  const char* kind;  // "c2c" (fft then ifft, neither scaled), "c2c+scale" (ifft scaled 1/n), "r2c" (rfft then irfft)
  int64_t rows, n;
};

// The graph: K transforms in a chain from the parameter, one element out.
std::shared_ptr<Executable> chain(Session& s, const FftCase& c, int k) {
  Graph g;
  const bool real = std::string(c.kind) == "r2c";
  Value x = param(g, "x", real ? DType::F32 : DType::C64, {c.rows, c.n});
  for (int i = 0; i < k; ++i) {
    if (real) x = i % 2 ? irfft(x, c.n, FftNorm::Forward) : rfft(x, FftNorm::Backward);
    else if (i % 2 == 0) x = fft(x, FftNorm::Backward);
    else x = ifft(x, std::string(c.kind) == "c2c" ? FftNorm::Forward : FftNorm::Backward);
  }
  if (x.dtype() == DType::C64) x = view_as_real(x);
  output("y", reshape(narrow(narrow(x, 0, 0, 1), 1, 0, 1), {-1}));
  auto exe = s.compile(g);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(c.rows * c.n * (real ? 1 : 2)));
  for (auto& e : v) e = d(rng);
  Tensor t = Tensor::from(v, real ? std::vector<int64_t>{c.rows, c.n} : std::vector<int64_t>{c.rows, c.n, 2});
  if (!real) t = Tensor::from_bytes(DType::C64, {c.rows, c.n}, t.data<float>(), v.size() * sizeof(float));
  exe->set_param("x", t);
  return exe;
}

double median_run_ms(Executable& exe) {
  for (int i = 0; i < 3; ++i) exe.run({});
  std::vector<double> ms;
  for (int i = 0; i < 15; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    exe.run({});
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  if (int rc = bench::no_options(argc, argv, "rlx_fft_bench",
                                 "Fourier transforms (cuFFT through the runtime) per transform, beside the copy ceiling;\n"
                                 "peer: bench/fft_torch.py");
      rc >= 0)
    return rc;
  Session s("cuda");
  const FftCase cases[] = {{"c2c", 16384, 1024}, {"c2c", 4096, 4096},  {"c2c", 256, 65536},
                           {"c2c", 16384, 1000}, {"c2c+scale", 16384, 1024}, {"r2c", 8192, 4096}};
  std::printf("%-12s %8s %7s %10s %9s %8s\n", "transform", "rows", "n", "us", "GB/s", "of copy");
  for (const FftCase& c : cases) {
    auto short_chain = chain(s, c, 2), long_chain = chain(s, c, 22);
    const double us = (median_run_ms(*long_chain) - median_run_ms(*short_chain)) / 20.0 * 1e3;
    // Bytes of one transform, read + write (r2c: the mean of rfft and irfft).
    const double complex_bytes = 8.0 * static_cast<double>(c.rows * c.n);
    const double bytes = std::string(c.kind) == "r2c"
                             ? 4.0 * static_cast<double>(c.rows * c.n) + 8.0 * static_cast<double>(c.rows * (c.n / 2 + 1))
                             : 2.0 * complex_bytes;
    const double gbps = bytes / (us * 1e-6) / 1e9;
    std::printf("%-12s %8ld %7ld %10.2f %9.0f %7.1f%%\n", c.kind, static_cast<long>(c.rows), static_cast<long>(c.n), us,
                gbps, 100.0 * gbps / (bench::kCopyTBps * 1e3));
    bench::json_line("fft", str(c.kind, " ", c.rows, "x", c.n), us, "us");
  }
  std::printf("ceiling: device copy %.2f TB/s (read + write)\n", bench::kCopyTBps);
  return 0;
}
