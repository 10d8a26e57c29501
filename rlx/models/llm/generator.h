// Text generation with a GGUF LLM: loads the model once (weights stay in their
// GGUF dtype), then prefill (one run over the prompt) and decode (one run per
// token, reading back the sampled id: 4 bytes). On CUDA the decode runs one
// step ahead of the host, each step's token fed to the next on the device
// (Executable::launch; RLX_DECODE_RUN_AHEAD).
//
//   rlx::llm::Generator gen("gemma-3-270m-q4_k_m.gguf", {.device = "auto"});
//   gen.generate(prompt_ids, 64, {.temperature = 0}, [](int32_t id) { ...; return true; });
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rlx/formats/gguf.h"
#include "rlx/models/llm/config.h"
#include "rlx/runtime/session.h"

namespace rlx::llm {

struct GeneratorOptions {
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int64_t ctx = 0;              // KV cache size in tokens; 0 = min(model's context, 4096)
  DType dtype = DType::F32;     // compute precision: f32, f16 or bf16
  // KV cache: f16, bf16 or f32; Count_ = f32 on the CPU (its attention
  // converts a 16-bit cache's valid rows to f32 every step, a cost that grows
  // with the context: 768 tokens of Gemma 3 270M decoded 5-14% faster with
  // f32 on a 2-core Zen 4, for twice the cache's memory) and f16 on a GPU.
  DType kv_dtype = DType::Count_;
  bool logits = false;          // also read back the last position's logits (tests)
};

struct SamplingParams {
  float temperature = 0.8f;  // 0 = greedy
  int top_k = 40;            // 0 = all
  float top_p = 0.95f;       // 1 = off
  uint64_t seed = 0;
};
// Throws InvalidArgument naming the bad value.
void check_sampling(const SamplingParams& s);

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;  // prompt run until the first token is on the host
  double decode_seconds = 0;   // every later token
  double prefill_tok_s() const { return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0; }
  double decode_tok_s() const {
    return decode_seconds > 0 ? static_cast<double>(generated_tokens - 1) / decode_seconds : 0;
  }
};

class Generator {
 public:
  Generator(const std::string& model_path, GeneratorOptions options = {});

  // Generates up to n tokens after `prompt` (which starts a new sequence),
  // calling on_token for each; on_token returning false stops (end of
  // generation). Errors: empty prompt, prompt longer than ctx, prompt + n past
  // ctx, token ids out of range, invalid sampling values.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int64_t n, const SamplingParams& sampling,
                                const std::function<bool(int32_t)>& on_token = {});

  // One forward run: `tokens` at positions pos, pos+1, ... (the cache must
  // hold positions 0..pos-1 from earlier runs). Returns the sampled token and,
  // with options.logits, the last position's logits (f32 [1, vocab]).
  struct Step {
    int32_t token = 0;
    Tensor logits;
  };
  Step forward(const std::vector<int32_t>& tokens, int64_t pos, int64_t step = 0);
  // Sets the sampling attributes the graph is compiled with (recompiles and
  // reloads weights only when they change).
  void set_sampling(const SamplingParams& sampling);

  const LlmConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  int64_t ctx() const { return ctx_; }
  DType kv_dtype() const { return options_.kv_dtype; }  // the KV cache's, `auto` resolved
  DeviceInfo device() const { return exe_->backend().device_info(); }  // where the model runs
  const GenerationStats& stats() const { return stats_; }
  Executable& executable() { return *exe_; }

 private:
  void compile();

  GeneratorOptions options_;
  GgufFile file_;
  LlmConfig config_;
  int64_t ctx_ = 0;
  std::unique_ptr<Session> session_;
  std::shared_ptr<Executable> exe_;
  SamplingParams sampling_{0.0f, 0, 1.0f, 0};
  GenerationStats stats_;
};

}  // namespace rlx::llm
