#include "rlx/serve/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "rlx/core/error.h"

namespace rlx::serve {

const char* status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

HttpResponse error_response(int status, const std::string& message) {
  const char* type = status >= 500 ? "Backend" : "Validation";
  // The message may quote the request's bytes: invalid UTF-8 in it becomes U+FFFD.
  return {status, "application/json",
          nlohmann::json{{"error", message}, {"error_type", type}}.dump(-1, ' ', false,
                                                                         nlohmann::json::error_handler_t::replace)};
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

bool send_response(int fd, const HttpResponse& r, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + status_text(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  out += r.body;
  return send_all(fd, out);
}

// Parses the request line and headers of `head` (without the blank line).
bool parse_head(const std::string& head, HttpRequest& req) {
  size_t pos = head.find("\r\n");
  const std::string line = head.substr(0, pos);
  const size_t a = line.find(' '), b = line.rfind(' ');
  if (a == std::string::npos || b == a) return false;
  req.method = line.substr(0, a);
  std::string target = line.substr(a + 1, b - a - 1);
  req.version = line.substr(b + 1);
  if (req.version != "HTTP/1.1" && req.version != "HTTP/1.0") return false;
  if (target.empty() || target[0] != '/') return false;
  req.path = target.substr(0, target.find('?'));
  while (pos != std::string::npos && pos + 2 < head.size()) {
    const size_t start = pos + 2;
    pos = head.find("\r\n", start);
    const std::string h = head.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
    const size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0) return false;
    req.headers[lower(h.substr(0, colon))] = trim(h.substr(colon + 1));
  }
  return true;
}

}  // namespace

HttpServer::HttpServer(const std::string& host, int port, HttpHandler handler, HttpLimits limits)
    : handler_(std::move(handler)), limits_(limits) {
  RLX_CHECK(port >= 0 && port <= 65535, "serve: port ", port, " is not in 0..65535");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  RLX_CHECK(rc == 0, "serve: cannot resolve host '", host, "': ", gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 512) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  RLX_CHECK(listen_fd_ >= 0, "serve: cannot listen on ", host, ":", port, ": ", last_error);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  RLX_CHECK(::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) == 0, "serve: pipe failed: ", std::strerror(errno));
}

HttpServer::~HttpServer() {
  stop();
  std::lock_guard lock(threads_mu_);
  for (auto& c : threads_)
    if (c.thread.joinable()) c.thread.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  const char c = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_[1], &c, 1);
}

void HttpServer::serve() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) break;
    if (stopping_) break;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connections_.load() >= limits_.max_connections) {
      send_response(fd, error_response(503, "too many connections"), false);
      ::close(fd);
      continue;
    }
    ++connections_;
    std::lock_guard lock(threads_mu_);
    // Join the threads whose connections have ended, so a long-running server does not collect them.
    std::erase_if(threads_, [](Connection& c) {
      if (!c.done->load()) return false;
      c.thread.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    threads_.push_back({std::thread([this, fd, done] {
                          handle_connection(fd);
                          ::close(fd);
                          --connections_;
                          done->store(true);
                        }),
                        done});
  }
  std::lock_guard lock(threads_mu_);
  for (auto& c : threads_)
    if (c.thread.joinable()) c.thread.join();
  threads_.clear();
}

void HttpServer::handle_connection(int fd) {
  std::string buf;
  char chunk[16384];
  // Reads until the end of the headers is buffered (`headers`), or until
  // `want` bytes are; false on a closed connection, the idle timeout or stop().
  auto fill = [&](bool headers, size_t want) {
    int waited = 0;
    while (headers ? buf.find("\r\n\r\n") == std::string::npos : buf.size() < want) {
      if (headers && buf.size() > limits_.max_header_bytes) return true;  // the caller answers 431
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, 200);
      if (stopping_) return false;
      if (r == 0) {
        waited += 200;
        if (waited >= limits_.idle_timeout_ms) return false;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf.append(chunk, static_cast<size_t>(n));
      waited = 0;
    }
    return true;
  };
  while (!stopping_) {
    if (!fill(true, 0)) return;
    const size_t end = buf.find("\r\n\r\n");
    if (end == std::string::npos || end > limits_.max_header_bytes) {
      send_response(fd, error_response(431, "request headers larger than " + std::to_string(limits_.max_header_bytes) +
                                                " bytes"), false);
      return;
    }
    HttpRequest req;
    if (!parse_head(buf.substr(0, end), req)) {
      send_response(fd, error_response(400, "malformed request line or header"), false);
      return;
    }
    buf.erase(0, end + 4);
    if (req.headers.count("transfer-encoding")) {
      send_response(fd, error_response(501, "chunked request bodies are not supported; send Content-Length"), false);
      return;
    }
    size_t length = 0;
    if (auto it = req.headers.find("content-length"); it != req.headers.end()) {
      char* stop = nullptr;
      const unsigned long long v = std::strtoull(it->second.c_str(), &stop, 10);
      if (it->second.empty() || *stop != '\0') {
        send_response(fd, error_response(400, "invalid Content-Length '" + it->second + "'"), false);
        return;
      }
      if (v > limits_.max_body_bytes) {
        send_response(fd, error_response(413, "request body of " + it->second + " bytes is larger than the limit of " +
                                                  std::to_string(limits_.max_body_bytes)), false);
        return;
      }
      length = static_cast<size_t>(v);
    }
    if (!fill(false, length)) return;
    req.body = buf.substr(0, length);
    buf.erase(0, length);
    const std::string conn = lower(req.headers.count("connection") ? req.headers["connection"] : "");
    const bool keep_alive = req.version == "HTTP/1.1" ? conn != "close" : conn == "keep-alive";
    HttpResponse res;
    try {
      res = handler_(req);
    } catch (const std::exception& e) {
      res = error_response(500, e.what());
    }
    if (!send_response(fd, res, keep_alive) || !keep_alive) return;
  }
}

}  // namespace rlx::serve
