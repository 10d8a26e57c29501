#include "rlx/serve/embed_service.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "rlx/core/error.h"
#include "rlx/models/tokenizers/utf8.h"

namespace rlx::serve {
namespace {

using nlohmann::json;

// A request whose content is wrong: the message goes back with `status`.
struct RequestError {
  int status;
  std::string message;
};

json parse_body(const HttpRequest& r) {
  try {
    return json::parse(r.body);
  } catch (const json::exception& e) {
    throw RequestError{400, std::string("request body is not valid JSON: ") + e.what()};
  }
}

// "inputs"/"input": one string or a non-empty array of strings.
std::vector<std::string> texts_of(const json& body, const char* field, size_t max_inputs) {
  if (!body.is_object() || !body.contains(field))
    throw RequestError{422, std::string("expected a JSON object with an \"") + field + "\" field"};
  const json& in = body[field];
  std::vector<std::string> texts;
  if (in.is_string()) {
    texts.push_back(in.get<std::string>());
  } else if (in.is_array()) {
    if (in.empty()) throw RequestError{422, std::string("\"") + field + "\" is an empty list"};
    if (in.size() > max_inputs)
      throw RequestError{413, std::string("\"") + field + "\" has " + std::to_string(in.size()) +
                                  " inputs; at most " + std::to_string(max_inputs) + " per request"};
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].is_string())
        throw RequestError{422, std::string("\"") + field + "\"[" + std::to_string(i) + "] is " + in[i].type_name() +
                                    ", expected a string (token-id inputs are not supported)"};
      texts.push_back(in[i].get<std::string>());
    }
  } else {
    throw RequestError{422, std::string("\"") + field + "\" must be a string or a list of strings, got " +
                                in.type_name()};
  }
  for (size_t i = 0; i < texts.size(); ++i)
    if (const size_t bad = utf8::first_invalid(texts[i]); bad != std::string::npos)
      throw RequestError{422, "input " + std::to_string(i) + ": invalid UTF-8 at byte " + std::to_string(bad + 1)};
  return texts;
}

void append_float(std::string& out, float v) {
  char buf[32];
  if (!std::isfinite(v)) {  // JSON has no NaN or infinity
    out += "null";
    return;
  }
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_vector(std::string& out, const std::vector<float>& row) {
  out += '[';
  for (size_t j = 0; j < row.size(); ++j) {
    if (j) out += ',';
    append_float(out, row[j]);
  }
  out += ']';
}

std::string base64(const std::vector<float>& row) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(row.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), row.data(), bytes.size());  // little-endian f32, as OpenAI's clients decode it
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    const auto b1 = i + 1 < bytes.size() ? static_cast<unsigned char>(bytes[i + 1]) : 0u;
    const auto b2 = i + 2 < bytes.size() ? static_cast<unsigned char>(bytes[i + 2]) : 0u;
    out += kAlphabet[b0 >> 2];
    out += kAlphabet[((b0 & 3) << 4) | (b1 >> 4)];
    out += i + 1 < bytes.size() ? kAlphabet[((b1 & 15) << 2) | (b2 >> 6)] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[b2 & 63] : '=';
  }
  return out;
}

}  // namespace

EmbeddingService::EmbeddingService(EmbedFn embed, CountFn count_tokens, ServiceInfo info, BatchingOptions options)
    : embed_(std::move(embed)), count_tokens_(std::move(count_tokens)), info_(std::move(info)), options_(options) {
  RLX_CHECK(options_.max_batch_texts >= 1 && options_.max_client_batch >= 1,
            "serve: batch sizes must be at least 1");
  worker_ = std::thread([this] { worker(); });
}

EmbeddingService::~EmbeddingService() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

size_t EmbeddingService::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}
size_t EmbeddingService::largest_call() const {
  std::lock_guard lock(mu_);
  return largest_;
}

std::vector<std::vector<float>> EmbeddingService::embed(std::vector<std::string> texts) {
  Job job{std::move(texts), {}};
  auto result = job.result.get_future();
  {
    std::lock_guard lock(mu_);
    RLX_CHECK(!stopping_, "serve: the service is shutting down");
    queue_.push_back(&job);
  }
  cv_.notify_all();
  return result.get();
}

void EmbeddingService::worker() {
  for (;;) {
    std::vector<Job*> jobs;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      // Give other requests a short window to join this call.
      auto queued = [&] {
        size_t n = 0;
        for (const Job* j : queue_) n += j->texts.size();
        return n;
      };
      const auto deadline = std::chrono::steady_clock::now() + options_.window;
      cv_.wait_until(lock, deadline, [&] { return stopping_ || queued() >= options_.max_batch_texts; });
      size_t taken = 0;
      while (!queue_.empty() && (jobs.empty() || taken + queue_.front()->texts.size() <= options_.max_batch_texts)) {
        taken += queue_.front()->texts.size();
        jobs.push_back(queue_.front());
        queue_.pop_front();
      }
      ++calls_;
      largest_ = std::max(largest_, taken);
    }
    std::vector<std::string> texts;
    for (Job* j : jobs) texts.insert(texts.end(), j->texts.begin(), j->texts.end());
    try {
      const Tensor emb = embed_(texts);
      RLX_CHECK(emb.rank() == 2 && emb.dim(0) == static_cast<int64_t>(texts.size()) && emb.dtype() == DType::F32,
                "serve: the model returned a ", dtype_name(emb.dtype()), " tensor of rank ", emb.rank(), " for ",
                texts.size(), " texts");
      const float* p = emb.data<float>();
      const auto dim = static_cast<size_t>(emb.dim(1));
      size_t row = 0;
      for (Job* j : jobs) {
        std::vector<std::vector<float>> rows;
        for (size_t k = 0; k < j->texts.size(); ++k, ++row) rows.emplace_back(p + row * dim, p + (row + 1) * dim);
        j->result.set_value(std::move(rows));
      }
    } catch (...) {
      for (Job* j : jobs) j->result.set_exception(std::current_exception());
    }
  }
}

HttpResponse EmbeddingService::handle(const HttpRequest& r) {
  try {
    if (r.path == "/health") {
      if (r.method != "GET") return error_response(405, "use GET for /health");
      return {200, "application/json", R"({"status":"ok"})"};
    }
    if (r.path == "/info") {
      if (r.method != "GET") return error_response(405, "use GET for /info");
      return {200, "application/json",
              json{{"model_id", info_.model_id}, {"model_dtype", info_.dtype}, {"device", info_.device},
                   {"dimension", info_.dim}, {"max_input_length", info_.max_input_length},
                   {"max_batch_texts", options_.max_batch_texts}, {"max_client_batch_size", options_.max_client_batch}}
                  .dump()};
    }
    if (r.path == "/embed") {
      if (r.method != "POST") return error_response(405, "use POST for /embed");
      return embed_tei(r);
    }
    if (r.path == "/v1/embeddings" || r.path == "/embeddings") {
      if (r.method != "POST") return error_response(405, "use POST for /v1/embeddings");
      return embed_openai(r);
    }
    return error_response(404,
                          "no route for " + r.path + " (POST /embed, POST /v1/embeddings, GET /health, GET /info)");
  } catch (const RequestError& e) {
    return error_response(e.status, e.message);
  } catch (const InvalidArgument& e) {
    return error_response(422, e.what());
  } catch (const std::exception& e) {
    return error_response(500, e.what());
  }
}

HttpResponse EmbeddingService::embed_tei(const HttpRequest& r) {
  const json body = parse_body(r);
  const std::vector<std::string> texts = texts_of(body, "inputs", options_.max_client_batch);
  bool normalize = true;
  if (body.contains("normalize")) {
    if (!body["normalize"].is_boolean()) throw RequestError{422, "\"normalize\" must be true or false"};
    normalize = body["normalize"].get<bool>();
  }
  std::vector<std::vector<float>> rows = embed(texts);
  if (normalize)
    for (auto& row : rows) {
      double ss = 0;
      for (float v : row) ss += double(v) * v;
      if (ss > 0)
        for (float& v : row) v = static_cast<float>(v / std::sqrt(ss));
    }
  std::string out = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i) out += ',';
    append_vector(out, rows[i]);
  }
  out += ']';
  return {200, "application/json", std::move(out)};
}

HttpResponse EmbeddingService::embed_openai(const HttpRequest& r) {
  const json body = parse_body(r);
  const std::vector<std::string> texts = texts_of(body, "input", options_.max_client_batch);
  std::string format = "float";
  if (body.contains("encoding_format")) {
    if (!body["encoding_format"].is_string() ||
        (body["encoding_format"] != "float" && body["encoding_format"] != "base64"))
      throw RequestError{422, "\"encoding_format\" must be \"float\" or \"base64\""};
    format = body["encoding_format"].get<std::string>();
  }
  if (body.contains("dimensions") && !(body["dimensions"].is_number_integer() && body["dimensions"] == info_.dim))
    throw RequestError{422, "\"dimensions\" must be " + std::to_string(info_.dim) + " (this model's size)"};
  const std::string model = body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>()
                                                                                 : info_.model_id;
  int64_t tokens = 0;
  for (const std::string& t : texts) tokens += count_tokens_(t);
  const std::vector<std::vector<float>> rows = embed(texts);
  std::string out = R"({"object":"list","data":[)";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i) out += ',';
    out += R"({"object":"embedding","index":)" + std::to_string(i) + R"(,"embedding":)";
    if (format == "base64") out += json(base64(rows[i])).dump();
    else append_vector(out, rows[i]);
    out += '}';
  }
  out += R"(],"model":)" + json(model).dump() + R"(,"usage":{"prompt_tokens":)" + std::to_string(tokens) +
         R"(,"total_tokens":)" + std::to_string(tokens) + "}}";
  return {200, "application/json", std::move(out)};
}

}  // namespace rlx::serve
