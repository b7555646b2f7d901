// A small HTTP/1.1 server: one reactor thread (epoll) accepts and reads every
// connection without blocking, so an idle keep-alive connection costs a file
// descriptor and a small buffer, never a thread. A request's head is checked
// (route, method, authorization, declared size) before any body byte is read;
// complete requests run on a bounded worker pool, except `inline` routes
// (health, metrics, static pages), which the reactor answers itself so they
// answer while every worker is busy. Streamed responses are written by their
// worker; after a response the connection returns to the reactor.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/http_parser.h"
#include "net/http_response.h"

namespace hubzoo::net {

using Handler = std::function<void(const Request&, Response&)>;

struct Route {
  std::string method, path;
  bool prefix = false;   // matches every path starting with `path`
  bool auth = true;      // Hooks::authorize sees the head first
  bool inline_ = false;  // answered on the reactor: must be cheap and never block
  Handler handler;
};

struct Hooks {
  // A response (401) refuses the request; nullopt lets it through. Sees the head only.
  std::function<std::optional<Response>(const Request&)> authorize;
  // Shapes the errors the server answers itself (400, 404, 405, 408, 413, 500, 503, ...).
  std::function<Response(int status, const std::string& message)> error;
  // After every response (any thread): logs and metrics.
  std::function<void(const Request&, int status)> on_response;
};

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int workers = 16;
  size_t max_queued = 64;      // complete requests waiting for a worker; more: 503
  int max_connections = 4096;  // open at once; more are answered 503 and closed
  int max_connections_per_ip = 1024;
  ParserLimits limits;
  std::chrono::milliseconds idle_timeout{5000};     // keep-alive wait for the next request
  std::chrono::milliseconds header_timeout{10000};  // first byte to the end of the head
  std::chrono::milliseconds body_grace{10000};      // then the body must keep min_body_rate
  uint64_t min_body_rate = 4096;                    // bytes per second
  // Request bodies being read, all connections together; a body that would
  // pass it is answered 503 (1000 slow uploads cannot hold 1000 x max_body).
  uint64_t max_body_memory = 256 << 20;
  std::chrono::milliseconds write_timeout{10000};  // per write without progress
  std::chrono::milliseconds stop_grace{5000};      // stop(): in-flight requests may finish
  std::chrono::milliseconds linger{2000};          // reading what follows an error response
};

struct HttpStats {
  int64_t open_connections = 0;
  int64_t busy_connections = 0;    // with a worker
  uint64_t max_body_buffered = 0;  // largest request body held in memory
  uint64_t body_memory = 0;        // bodies being read now, all connections
  uint64_t refused_connections = 0;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, std::vector<Route> routes, Hooks hooks);
  ~HttpServer();
  // Binds and listens; returns the port. Throws hubzoo::Error when it cannot.
  int bind();
  // Serves on the calling thread until stop(); returns when every connection
  // is closed and every worker joined.
  void run();
  // Thread-safe, idempotent: stops accepting, closes idle connections, lets
  // in-flight requests finish for stop_grace (streams see StreamWriter::stopping),
  // then fails their writes.
  void stop();
  HttpStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hubzoo::net
