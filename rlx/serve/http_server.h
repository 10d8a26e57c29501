// A small HTTP/1.1 server on POSIX sockets for `rlx serve`: requests with a
// Content-Length body (no chunked uploads), persistent connections, one
// thread per connection, bounded header and body sizes. It parses and frames;
// what a request means is the handler's business (embed_service.h).
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rlx::serve {

struct HttpRequest {
  std::string method, path, version;      // path without the query string
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// A JSON error body: {"error": message, "error_type": kind} (TEI's shape).
HttpResponse error_response(int status, const std::string& message);
const char* status_text(int status);

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpLimits {
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 64 << 20;
  int max_connections = 256;     // more are answered 503 and closed
  int idle_timeout_ms = 60'000;  // a kept-alive connection with no request for this long is closed
};

class HttpServer {
 public:
  // Binds and listens at once (port 0: an ephemeral port, see port());
  // throws rlx::Error naming the address when it cannot.
  HttpServer(const std::string& host, int port, HttpHandler handler, HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Accepts connections until stop(); returns after every connection thread ended.
  void serve();
  // Safe from any thread and from a signal handler's flag check; serve() returns soon after.
  void stop();

 private:
  void handle_connection(int fd);

  HttpHandler handler_;
  HttpLimits limits_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that interrupts poll() on stop()
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex threads_mu_;
  std::vector<Connection> threads_;
};

}  // namespace rlx::serve
