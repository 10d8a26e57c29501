// The embedding endpoints of `rlx serve`, with dynamic batching: requests
// that arrive while the model is busy (or within a short window after the
// first) are embedded in one call, so many small clients share the GPU's
// large batches, as text-embeddings-inference does.
//
//   POST /embed          text-embeddings-inference: {"inputs": "text" | ["a", ...],
//                        "normalize": true} → [[f32, ...], ...]
//   POST /v1/embeddings  OpenAI: {"input": "text" | ["a", ...], "model": ...,
//                        "encoding_format": "float"} → {"object": "list", "data":
//                        [{"object": "embedding", "index": i, "embedding": [...]}],
//                        "model": ..., "usage": {"prompt_tokens": n, "total_tokens": n}}
//   GET  /health         {"status": "ok"}
//   GET  /info           the model, its dimension, input limit, device and dtype
// Malformed JSON, wrong types, empty inputs, invalid UTF-8 and too many
// inputs are 4xx errors with a message naming what is wrong.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rlx/core/tensor.h"
#include "rlx/serve/http_server.h"

namespace rlx::serve {

struct ServiceInfo {
  std::string model_id;
  int64_t dim = 0;
  int64_t max_input_length = 0;  // tokens
  std::string device, dtype;
};

struct BatchingOptions {
  size_t max_batch_texts = 256;                       // texts per model call (a larger request runs alone)
  std::chrono::microseconds window{2000};             // how long the first request waits for company
  size_t max_client_batch = 4096;                     // inputs per request
};

class EmbeddingService {
 public:
  // `embed`: texts → f32 [n, dim] (one call at a time, from the batching thread);
  // `count_tokens`: tokens the model sees for a text (for OpenAI's usage).
  using EmbedFn = std::function<Tensor(const std::vector<std::string>&)>;
  using CountFn = std::function<int64_t(const std::string&)>;
  EmbeddingService(EmbedFn embed, CountFn count_tokens, ServiceInfo info, BatchingOptions options = {});
  ~EmbeddingService();
  EmbeddingService(const EmbeddingService&) = delete;
  EmbeddingService& operator=(const EmbeddingService&) = delete;

  HttpResponse handle(const HttpRequest& request);

  // Embeds `texts` together with whatever else is queued; rows in order.
  std::vector<std::vector<float>> embed(std::vector<std::string> texts);

  // Model calls made so far and the largest number of texts in one (for tests and logs).
  size_t calls() const;
  size_t largest_call() const;

 private:
  struct Job {
    std::vector<std::string> texts;
    std::promise<std::vector<std::vector<float>>> result;
  };
  void worker();
  HttpResponse embed_tei(const HttpRequest& request);
  HttpResponse embed_openai(const HttpRequest& request);

  EmbedFn embed_;
  CountFn count_tokens_;
  ServiceInfo info_;
  BatchingOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;
  bool stopping_ = false;
  size_t calls_ = 0, largest_ = 0;
  std::thread worker_;
};

}  // namespace rlx::serve
