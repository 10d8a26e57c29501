// rlx serve: an HTTP embedding server (text-embeddings-inference's /embed and
// OpenAI's /v1/embeddings) over one SentenceEmbedder, with dynamic batching
// across concurrent requests (rlx/serve/).
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/common.h"
#include "cli/embedder_flags.h"
#include "rlx/models/bert/embedder.h"
#include "rlx/serve/embed_service.h"

namespace rlx::cli {
namespace {

struct ServeOptions {
  EmbedderFlags model;
  std::string model_id;
  std::string host = "127.0.0.1";
  int port = 8080;
  size_t max_batch_texts = 256;
  int64_t window_us = 2000;
  size_t max_client_batch = 4096;
};

serve::HttpServer* g_server = nullptr;
extern "C" void on_signal(int) {
  if (g_server) g_server->stop();
}

void run_serve(ServeOptions o) {
  const std::string model = resolve_embedding_model(o.model, "serve");
  const std::unique_ptr<bert::TextEmbedder> embedder = bert::open_text_embedder(model, embed_options(o.model));
  if (o.model_id.empty()) {  // the folder's name, or its parent's for a package's ".../model"
    const std::filesystem::path p = std::filesystem::absolute(model).lexically_normal();
    o.model_id = (p.filename() == "model" && p.has_parent_path() ? p.parent_path().filename() : p.filename()).string();
  }
  serve::ServiceInfo info{o.model_id, embedder->dim(), embedder->max_length(), embedder->device().name,
                          std::string(dtype_name(embedder->dtype()))};
  serve::BatchingOptions bo;
  bo.max_batch_texts = o.max_batch_texts;
  bo.window = std::chrono::microseconds(o.window_us);
  bo.max_client_batch = o.max_client_batch;
  serve::EmbeddingService service(
      [&](const std::vector<std::string>& texts) { return embedder->embed(texts); },
      [&](const std::string& text) { return embedder->count_tokens(text); },
      info, bo);
  serve::HttpServer server(o.host, o.port, [&](const serve::HttpRequest& r) { return service.handle(r); });
  g_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::fprintf(stderr, "rlx serve: %s (dim %ld, %s, %s) on http://%s:%d  (POST /embed, POST /v1/embeddings)\n",
               info.model_id.c_str(), static_cast<long>(info.dim), info.device.c_str(), info.dtype.c_str(),
               o.host.c_str(), server.port());
  server.serve();
  g_server = nullptr;
  std::fprintf(stderr, "rlx serve: stopped after %zu model calls\n", service.calls());
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve", "Serve sentence embeddings over HTTP (text-embeddings-inference's /embed, OpenAI's /v1/embeddings)");
  add_embedder_flags(cmd, o->model);
  cmd->add_option("--model-id", o->model_id,
                  "Name reported by /info and in OpenAI responses; default: the model's folder")
      ->type_name("NAME");
  cmd->add_option("--host", o->host, "Address to listen on (0.0.0.0: every interface)")->capture_default_str();
  cmd->add_option("--port", o->port, "TCP port (0: any free one)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--max-batch-texts", o->max_batch_texts,
                  "Texts from concurrent requests embedded in one model call")
      ->type_name("N")
      ->check(positive_validator())
      ->capture_default_str();
  cmd->add_option("--batch-window-us", o->window_us,
                  "How long a request waits for others to share its model call (microseconds)")
      ->type_name("US")
      ->check(non_negative_validator())
      ->capture_default_str();
  cmd->add_option("--max-client-batch", o->max_client_batch, "Inputs allowed in one request")
      ->type_name("N")
      ->check(positive_validator())
      ->capture_default_str();
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace rlx::cli
