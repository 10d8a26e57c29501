#include "rlx/models/llm/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "rlx/core/env.h"
#include "rlx/core/log.h"
#include "rlx/models/llm/model.h"

namespace rlx::llm {

void check_sampling(const SamplingParams& s) {
  RLX_CHECK(std::isfinite(s.temperature) && s.temperature >= 0.0f, "generate: temperature must be >= 0, got ",
            s.temperature);
  RLX_CHECK(s.top_k >= 0, "generate: top-k must be >= 0 (0 = all tokens), got ", s.top_k);
  RLX_CHECK(s.top_p > 0.0f && s.top_p <= 1.0f, "generate: top-p must be in (0, 1], got ", s.top_p);
}

Generator::Generator(const std::string& model_path, GeneratorOptions options)
    : options_(std::move(options)), file_(GgufFile::open(model_path)), config_(LlmConfig::from_gguf(file_)) {
  RLX_CHECK(is_compute_float(options_.dtype), "generate: dtype must be f32, f16 or bf16, got ", options_.dtype);
  ctx_ = cache_rows(config_, options_.ctx, 4096, "generate: context size");
  session_ = std::make_unique<Session>(options_.device);
  if (options_.kv_dtype == DType::Count_)
    options_.kv_dtype = session_->device().backend == "cpu" ? DType::F32 : DType::F16;
  compile();
  log_verbose("generator: ", config_.summary(), "; ctx ", ctx_, " on ", session_->device().name);
}

void Generator::compile() {
  BuildOptions bo;
  bo.ctx = ctx_;
  bo.kv_dtype = options_.kv_dtype;
  bo.compute = options_.dtype;
  bo.logits = options_.logits;
  bo.token = true;
  bo.sampling = SampleAttrs{sampling_.temperature, sampling_.top_k, sampling_.top_p, sampling_.seed};
  CompileOptions co;
  co.precision = options_.dtype;
  exe_.reset();  // free the old caches and weights before uploading new ones
  exe_ = session_->compile(build_graph(config_, file_, bo), co);
  load_weights(*exe_, file_);
}

void Generator::set_sampling(const SamplingParams& s) {
  check_sampling(s);
  if (s.temperature == sampling_.temperature && s.top_k == sampling_.top_k && s.top_p == sampling_.top_p &&
      s.seed == sampling_.seed)
    return;
  sampling_ = s;
  compile();
}

Generator::Step Generator::forward(const std::vector<int32_t>& tokens, int64_t pos, int64_t step) {
  const auto L = static_cast<int64_t>(tokens.size());
  RLX_CHECK(L >= 1, "generate: no tokens to run");
  RLX_CHECK(pos >= 0 && pos + L <= ctx_, "generate: positions ", pos, "..", pos + L - 1,
            " do not fit the context of ", ctx_, " tokens");
  for (int32_t id : tokens)
    RLX_CHECK(id >= 0 && id < config_.vocab, "generate: token id ", id, " is outside the vocabulary [0, ",
              config_.vocab, ")");
  std::vector<int32_t> positions(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(pos + i);
  auto one = [](int64_t v) { return Tensor::from(std::vector<int32_t>{static_cast<int32_t>(v)}, {1}); };
  const auto outs = exe_->run({Tensor::from(tokens, {1, L}), Tensor::from(positions, {L}), one(pos), one(pos + L),
                               one(step)});
  Step s;
  s.token = outs.back().data<int32_t>()[0];  // "token" is the last output
  if (options_.logits) s.logits = outs.front();
  return s;
}

std::vector<int32_t> Generator::generate(const std::vector<int32_t>& prompt, int64_t n,
                                         const SamplingParams& sampling,
                                         const std::function<bool(int32_t)>& on_token) {
  check_sampling(sampling);
  const auto P = static_cast<int64_t>(prompt.size());
  RLX_CHECK(P >= 1, "generate: the prompt is empty (no tokens)");
  RLX_CHECK(P <= ctx_, "generate: the prompt has ", P, " tokens, more than the context of ", ctx_,
            " (raise --ctx or shorten the prompt)");
  RLX_CHECK(n >= 0, "generate: the number of tokens to generate must be >= 0, got ", n);
  RLX_CHECK(P + n <= ctx_, "generate: the prompt (", P, " tokens) plus ", n, " new tokens is ", P + n,
            ", past the context of ", ctx_, " (raise --ctx or lower -n)");
  set_sampling(sampling);
  stats_ = GenerationStats{P, 0, 0, 0};
  std::vector<int32_t> out;
  if (n == 0) return out;
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  int32_t token = forward(prompt, 0).token;
  stats_.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  t0 = clock::now();
  // Decode step k (k >= 1) reads token k-1 at position P+k-1 and samples token k.
  // Run ahead: step k+1 is launched before token k is read back, its input
  // fed on the device from step k's output, so the device goes from step to
  // step without waiting for the host. A stop (on_token false) then leaves
  // at most two launched steps whose tokens nobody reads.
  const bool ahead = exe_->can_queue() && env_bool("RLX_DECODE_RUN_AHEAD");
  const auto& outputs = exe_->graph().outputs();
  const size_t token_output = outputs.size() - 1;  // "token" is the last output
  RLX_CHECK(outputs.back().first == "token", "generate: the graph's last output is '", outputs.back().first,
            "', not 'token'");
  int64_t launched = 0;  // the last step launched (step 0 is the prefill)
  auto launch_step = [&] {
    const int64_t k = ++launched;
    const bool from_host = k == 1;
    Tensor fed_token = Tensor::from(std::vector<int32_t>{from_host ? token : 0}, {1, 1});
    auto one = [](int64_t v) { return Tensor::from(std::vector<int32_t>{static_cast<int32_t>(v)}, {1}); };
    std::vector<Feed> feeds;
    if (!from_host) feeds.push_back({0, token_output});  // tokens <- token
    exe_->launch({fed_token, one(P + k - 1), one(P + k - 1), one(P + k), one(k)}, feeds);
  };
  struct DropQueued {  // an error or a stop leaves no run queued
    Executable& exe;
    ~DropQueued() { exe.discard_queued(); }
  } drop{*exe_};
  for (int64_t i = 0;; ++i) {
    // token i is known here
    if (ahead)
      while (launched < n - 1 && launched < i + 2) launch_step();
    out.push_back(token);
    stats_.generated_tokens = static_cast<int64_t>(out.size());
    if (on_token && !on_token(token)) break;
    if (i + 1 == n) break;
    token = ahead ? exe_->finish().back().data<int32_t>()[0] : forward({token}, P + i, i + 1).token;
  }
  stats_.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return out;
}

}  // namespace rlx::llm
