// Shared helpers for the benchmarks: medians, JSON lines, the measured H200
// ceilings every benchmark prints beside its figures.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace rlx::bench {

// Measured on the project's H200 (see README): device copy counting read +
// write bytes, and cuBLAS bf16 and fp8 (e4m3) GEMM at 8192³.
inline constexpr double kCopyTBps = 4.22;
inline constexpr double kGemmBf16Tflops = 698.0;
inline constexpr double kGemmFp8Tflops = 1282.0;

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One JSON object per line on stdout, for bench/compare.py.
inline void json_line(const std::string& bench, const std::string& key, double value, const std::string& unit,
                      const std::string& impl = "rlx") {
  std::printf("{\"bench\": \"%s\", \"case\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", \"impl\": \"%s\"}\n",
              bench.c_str(), key.c_str(), value, unit.c_str(), impl.c_str());
}

// For a benchmark that takes no options: prints `about` (what it measures)
// and returns 0 for -h/--help, prints the usage and returns 2 for any other
// argument, and returns -1 (run) when there are none.
inline int no_options(int argc, char** argv, const char* name, const char* about) {
  if (argc < 2) return -1;
  const std::string a = argv[1];
  const bool help = a == "-h" || a == "--help";
  std::fprintf(help ? stdout : stderr, "usage: %s\n%s%s\n", name, help ? "" : "(takes no arguments)\n", about);
  return help ? 0 : 2;
}

// Deterministic LLM prompt token ids from the ordinary part of the
// vocabulary, BOS first (the generation benchmarks time tokens, not text).
inline std::vector<int32_t> synthetic_prompt(int64_t n, int64_t vocab, int32_t bos) {
  std::vector<int32_t> ids{bos};
  uint32_t state = 12345;
  const auto span = static_cast<uint32_t>(std::min<int64_t>(vocab, 30000) - 1000);
  while (static_cast<int64_t>(ids.size()) < n) {
    state = state * 1664525u + 1013904223u;
    ids.push_back(static_cast<int32_t>(1000 + (state >> 8) % span));
  }
  return ids;
}

}  // namespace rlx::bench
