// rlx generate: text generation with a GGUF LLM (Gemma 3, Qwen3, Llama family).
#include <cstdint>
#include <memory>
#include <string>

#include "cli/common.h"

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
  bool tokens = false;
};

void run_generate(const GenerateOptions&) { not_available("generate"); }

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate text with a GGUF language model");
  cmd->add_option("--model", o->model, "Model file (.gguf)")->type_name("FILE")->required()->check(CLI::ExistingFile);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate (stops early at end of sequence)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "Sampling temperature; 0 = greedy (argmax)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Sample among the K most likely tokens; 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling: smallest set with probability >= P; 1 = off")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed (the same seed gives the same tokens)")->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "Context length (KV cache size) in tokens; 0 = the model's")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--device", o->device, "Device: auto, cpu, cuda or cuda:N")
      ->check(device_validator())
      ->capture_default_str();
  cmd->add_flag("--tokens", o->tokens, "Print the prompt and generated token ids instead of text");
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace rlx::cli
