// rlx embed: sentence embeddings from a BERT-family model, one vector per
// text, in input order (rlx::bert::SentenceEmbedder does the work).
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/embedder_flags.h"
#include "rlx/models/bert/embedder.h"

namespace rlx::cli {
namespace {

struct EmbedOptions {
  EmbedderFlags model;
  std::string format = "jsonl";
  std::string output = "-";
  std::string input;
  std::vector<std::string> texts;
};

// Byte offset of the first invalid UTF-8 sequence in `s`, or npos.
size_t invalid_utf8_at(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1fu) : n == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return i;
      cp = (cp << 6) | (d & 0x3fu);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid.
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    i += n;
  }
  return std::string::npos;
}

// Texts from a file or stdin: one per line (empty lines included, so output
// row i is line i), or, for .jsonl files and lines that start with '{', JSON
// objects with a "text" field. A bad line is an error naming its number.
void read_texts(std::istream& in, const std::string& source, bool jsonl, std::vector<std::string>& out) {
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t bad = invalid_utf8_at(line);
    RLX_CHECK(bad == std::string::npos, "embed: ", source, " line ", number, ": invalid UTF-8 at byte ", bad + 1);
    if (jsonl || (!line.empty() && line[0] == '{')) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw InvalidArgument(str("embed: ", source, " line ", number, ": not valid JSON (", e.what(), ")"));
      }
      RLX_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), "embed: ", source, " line ", number,
                ": expected a JSON object with a string \"text\" field");
      out.push_back(j["text"].get<std::string>());
    } else {
      out.push_back(std::move(line));
    }
  }
  RLX_CHECK(number > 0, "embed: ", source, " is empty (no lines to embed)");
}

// A one-line progress bar on stderr, redrawn in place (only on a terminal).
void draw_progress(size_t done, size_t total) {
  const int width = 30;
  const int filled = total ? static_cast<int>(static_cast<double>(done) / static_cast<double>(total) * width) : width;
  std::fprintf(stderr, "\r[%s%s] %zu/%zu", std::string(static_cast<size_t>(filled), '#').c_str(),
               std::string(static_cast<size_t>(width - filled), ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
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

void run_embed(EmbedOptions o) {
  // No texts named: they come from stdin when it is a pipe or a file
  // (`... | rlx embed`); on a terminal that would sit waiting for typing.
  if (o.texts.empty() && o.input.empty()) {
    if (isatty(STDIN_FILENO))
      throw CLI::ValidationError("rlx embed", "give TEXT arguments, --input FILE, or pipe the texts into stdin");
    o.input = "-";
  }
  std::vector<std::string> texts;
  if (o.input == "-") {
    read_texts(std::cin, "stdin", false, texts);
  } else if (!o.input.empty()) {
    std::error_code ec;
    RLX_CHECK(!std::filesystem::is_directory(o.input, ec), "embed: --input '", o.input,
              "' is a directory; give a text file (one text per line) or a .jsonl file");
    std::ifstream f(o.input);
    RLX_CHECK(f.is_open(), "embed: cannot read --input '", o.input, "'");
    read_texts(f, "'" + o.input + "'", std::filesystem::path(o.input).extension() == ".jsonl", texts);
  }
  for (size_t i = 0; i < o.texts.size(); ++i) {
    const size_t bad = invalid_utf8_at(o.texts[i]);
    RLX_CHECK(bad == std::string::npos, "embed: text argument ", i + 1, ": invalid UTF-8 at byte ", bad + 1);
  }
  texts.insert(texts.end(), o.texts.begin(), o.texts.end());

  // The inputs are checked first: a bad input file is named before any model is looked for.
  const std::string model = resolve_embedding_model(o.model, "embed");
  bert::EmbedOptions eo = embed_options(o.model);
  if (isatty(STDERR_FILENO)) eo.progress = draw_progress;
  const std::unique_ptr<bert::TextEmbedder> embedder = bert::open_text_embedder(model, eo);
  const Tensor emb = embedder->embed(texts);

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
  const auto& st = embedder->last_stats();
  std::fprintf(stderr, "rlx embed: %zu texts, %zu tokens, %.3f s, %.0f texts/s on %s (%s)%s%s\n", st.texts, st.tokens,
               st.seconds, st.seconds > 0 ? static_cast<double>(st.texts) / st.seconds : 0.0,
               embedder->device().name.c_str(), std::string(dtype_name(embedder->dtype())).c_str(),
               o.output == "-" ? "" : " -> ", o.output == "-" ? "" : o.output.c_str());
}

}  // namespace

void add_embed_command(CLI::App& app) {
  auto o = std::make_shared<EmbedOptions>();
  auto* cmd = app.add_subcommand("embed", "Embed sentences with a BERT-family model (one vector per text)");
  add_embedder_flags(cmd, o->model);
  cmd->add_option("--format", o->format,
                  "Output format: jsonl (one JSON array per line, in input order) or npy (float32 [N, dim])")
      ->check(CLI::IsMember({"jsonl", "npy"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Output file ('-' = stdout)")->type_name("FILE")->capture_default_str();
  cmd->add_option("--input", o->input,
                  "Read texts from FILE ('-' = stdin): one per line, or JSON objects with a \"text\" field "
                  "(.jsonl files, or lines starting with '{'). Invalid UTF-8 or JSON is an error naming the line. "
                  "Without TEXT or --input, texts are read from stdin when it is not a terminal")
      ->type_name("FILE");
  cmd->add_option("text", o->texts, "Texts to embed (after those from --input)");
  cmd->callback([o] { run_embed(*o); });
}

}  // namespace rlx::cli
