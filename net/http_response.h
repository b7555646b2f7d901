// What a handler answers: a whole body, or a stream its producer writes as
// chunks (server-sent events) on a worker thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hubzoo::net {

// Writes a streamed body to the client as HTTP/1.1 chunks (HTTP/1.0: raw,
// then close). A write that fails (client gone, write timeout, server
// aborting) returns false, and every later one too.
class StreamWriter {
 public:
  struct Target {
    int fd = -1;
    bool chunked = true;
    std::chrono::milliseconds timeout{10000};     // per write
    const std::atomic<bool>* stopping = nullptr;  // stop() called: end with a last event
    const std::atomic<bool>* abort = nullptr;     // stop()'s grace is over: writes fail
  };
  explicit StreamWriter(const Target& target) : t_(target) {}
  bool write(std::string_view data);
  // The terminating chunk; called by the server after the producer returned.
  bool finish();
  bool failed() const { return failed_; }
  // The server is stopping: a producer should write its last event and return.
  bool stopping() const { return t_.stopping && t_.stopping->load(); }
  // Bytes of the head and body before the first chunk (the server's).
  bool write_raw(std::string_view data);

 private:
  Target t_;
  bool failed_ = false;
};

struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // When set, the body is what this writes (chunked); it runs on a worker
  // after the handler returned, and should return once a write fails.
  std::function<void(StreamWriter&)> stream;

  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
  void set_content(std::string text, std::string type) {
    body = std::move(text);
    content_type = std::move(type);
  }
};

const char* reason_phrase(int status);

struct HeadOptions {
  bool keep_alive = true;
  int minor_version = 1;
  bool streamed = false;  // chunked (1.1) or close-delimited (1.0) body
};
// The status line and headers (with Content-Length unless streamed).
std::string serialize_head(const Response& res, const HeadOptions& o);

// Sends all of `data` on a non-blocking socket, waiting up to `timeout` for
// room; false on error, timeout or `abort`. Never raises SIGPIPE.
bool send_all(int fd, std::string_view data, std::chrono::milliseconds timeout,
              const std::atomic<bool>* abort);

}  // namespace hubzoo::net
