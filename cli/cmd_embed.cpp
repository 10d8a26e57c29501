// rlx embed: sentence embeddings from a BERT-family model, one vector per
// text, in input order (rlx::bert::SentenceEmbedder does the work).
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/common.h"
#include "rlx/models/bert/embedder.h"

namespace rlx::cli {
namespace {

struct EmbedOptions {
  std::string model;
  std::string device = "auto";
  std::string dtype = "auto";
  int64_t batch = 0;
  int64_t max_length = 0;
  std::string format = "jsonl";
  std::string output = "-";
  std::string input;
  std::vector<std::string> texts;
};

// Every line is one text (empty lines included), so output row i is line i.
void read_lines(std::istream& in, std::vector<std::string>& out) {
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(std::move(line));
  }
}

// One JSON array per row; floats in their shortest round-trip form.
void write_jsonl(std::ostream& os, const Tensor& emb) {
  const float* p = emb.data<float>();
  const int64_t rows = emb.dim(0), dim = emb.dim(1);
  std::string line;
  char buf[32];
  for (int64_t r = 0; r < rows; ++r) {
    line.assign("[");
    for (int64_t j = 0; j < dim; ++j) {
      if (j) line += ',';
      auto res = std::to_chars(buf, buf + sizeof buf, p[r * dim + j]);
      line.append(buf, res.ptr);
    }
    line += "]\n";
    os << line;
  }
}

void run_embed(const EmbedOptions& o) {
  if (o.texts.empty() && o.input.empty())
    throw CLI::ValidationError("rlx embed", "give TEXT arguments or --input FILE");
  if (std::filesystem::path(o.model).extension() == ".gguf")
    not_available("embed", "GGUF embedding models; pass a Hugging Face model folder");
  RLX_CHECK(std::filesystem::is_directory(o.model), "embed: --model '", o.model,
            "' is not a model folder (config.json, model.safetensors, tokenizer.json or vocab.txt)");
  std::vector<std::string> texts;
  if (o.input == "-") {
    read_lines(std::cin, texts);
  } else if (!o.input.empty()) {
    std::ifstream f(o.input);
    RLX_CHECK(f.is_open(), "embed: cannot read --input '", o.input, "'");
    read_lines(f, texts);
  }
  texts.insert(texts.end(), o.texts.begin(), o.texts.end());

  bert::EmbedOptions eo;
  eo.device = o.device;
  if (o.dtype != "auto") eo.dtype = *dtype_from_name(o.dtype);
  eo.batch = o.batch;
  eo.max_length = o.max_length;
  bert::SentenceEmbedder embedder(o.model, eo);
  const Tensor emb = embedder.embed(texts);

  if (o.format == "npy") {
    write_npy_file(o.output, emb);
  } else if (o.output == "-") {
    write_jsonl(std::cout, emb);
    std::cout.flush();
    RLX_CHECK(std::cout.good(), "embed: writing to stdout failed");
  } else {
    std::ofstream f(o.output);
    RLX_CHECK(f.is_open(), "embed: cannot open '", o.output, "' for writing");
    write_jsonl(f, emb);
    f.close();
    RLX_CHECK(!f.fail(), "embed: writing '", o.output, "' failed");
  }
  if (o.output != "-") {
    const auto& s = embedder.last_stats();
    std::cerr << "embedded " << s.texts << " texts (" << s.tokens << " tokens) into " << o.output << " in "
              << s.seconds << " s on " << embedder.device().name << " (" << dtype_name(embedder.dtype()) << ")\n";
  }
}

}  // namespace

void add_embed_command(CLI::App& app) {
  auto o = std::make_shared<EmbedOptions>();
  auto* cmd = app.add_subcommand("embed", "Embed sentences with a BERT-family model (one vector per text)");
  cmd->add_option("--model", o->model,
                  "Model folder: config.json, model.safetensors and tokenizer.json or vocab.txt "
                  "(sentence-transformers layout; a GGUF file is not supported yet)")
      ->type_name("PATH")
      ->required();
  cmd->add_option("--device", o->device, "Device: auto, cpu, cuda or cuda:N")
      ->check(device_validator())
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Compute precision; auto = f16 on a GPU, f32 on the CPU")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "Texts per forward pass; 0 = 256 on a GPU, 32 on the CPU")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-length", o->max_length,
                  "Truncate inputs to N tokens including [CLS]/[SEP]; 0 = the model's limit")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--format", o->format,
                  "Output format: jsonl (one JSON array per line, in input order) or npy (float32 [N, dim])")
      ->check(CLI::IsMember({"jsonl", "npy"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Output file ('-' = stdout)")->type_name("FILE")->capture_default_str();
  cmd->add_option("--input", o->input, "Read texts from FILE, one per line ('-' = stdin)")->type_name("FILE");
  cmd->add_option("text", o->texts, "Texts to embed (after those from --input)");
  cmd->callback([o] { run_embed(*o); });
}

}  // namespace rlx::cli
