// An incremental HTTP/1.1 request parser: bytes in, state out; no sockets, no
// threads, so it can be unit-tested split at every byte and fuzzed. Every
// buffer it grows is bounded by ParserLimits before it grows.
//
//   RequestParser p(limits);
//   n = p.feed(bytes);            // consumes what it can; stops at a pause
//   kHeadComplete: the caller looks at p.request() (route, auth, size) before
//                  any body byte is read, then p.continue_body() (or answers
//                  and closes);
//   kComplete:     p.take() the request; bytes after it (pipelining) were not
//                  consumed; p.reset() before the next one;
//   kError:        p.error() is the status (400, 413, 414, 431, 501, 505) and why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hubzoo::net {

struct ParserLimits {
  size_t max_request_line = 8192;   // longer: 414
  size_t max_header_line = 8192;    // one header line; longer: 431
  size_t max_headers = 100;         // more: 431
  size_t max_head_bytes = 65536;    // request line + headers; more: 431
  uint64_t max_body = 8 << 20;      // decoded body; more: 413
  size_t max_chunk_line = 1024;     // chunk size + extensions; longer: 400
  size_t max_trailer_bytes = 8192;  // chunked trailers in all; more: 431
};

struct Request {
  std::string method, target;                                // target as sent: path and query
  std::string path, query;                                   // target split at '?'
  int minor_version = 1;                                     // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  std::string body;
  std::string remote_ip;  // set by the server
  bool keep_alive = true;
  bool expect_continue = false;

  // The first header of that name (case-insensitive); nullptr if absent.
  const std::string* header(std::string_view name) const;
  std::string header_value(std::string_view name) const;
};

struct HttpError {
  int status = 0;
  std::string message;
};

bool iequals(std::string_view a, std::string_view b);

class RequestParser {
 public:
  enum class State { kHead, kHeadComplete, kBody, kComplete, kError };

  explicit RequestParser(const ParserLimits& limits = {}) : limits_(limits) {}

  // Consumes a prefix of `data`; returns its length. Consumes nothing while
  // paused (kHeadComplete, kComplete, kError).
  size_t feed(std::string_view data);
  // After kHeadComplete: read the body (kBody), or kComplete when there is
  // none, or kError 413 when Content-Length exceeds max_body.
  void continue_body();
  State state() const { return state_; }
  const Request& request() const { return req_; }
  Request take() { return std::move(req_); }
  const HttpError& error() const { return error_; }
  // Declared Content-Length (nullopt when chunked or absent).
  std::optional<uint64_t> content_length() const { return content_length_; }
  bool chunked() const { return chunked_; }
  // Bytes of the head consumed so far (the first byte starts a request).
  size_t head_bytes() const { return head_bytes_; }
  // Ready for the next request on the same connection.
  void reset();

 private:
  enum class Chunk { kSize, kData, kDataEnd, kTrailer };
  size_t feed_head(std::string_view data);
  size_t feed_body(std::string_view data);
  size_t feed_chunked(std::string_view data);
  // A complete line (without its LF) from the head or the chunk framing.
  void head_line(std::string_view line);
  void request_line(std::string_view line);
  void header_line(std::string_view line);
  void end_of_head();
  void chunk_line(std::string_view line);
  void fail(int status, std::string message);
  // Accumulates bytes up to LF into line_ (bounded by `max`); returns the
  // bytes consumed and sets `complete` when the LF was seen.
  size_t take_line(std::string_view data, size_t max, int status, const char* what, bool& complete);

  ParserLimits limits_;
  State state_ = State::kHead;
  Request req_;
  HttpError error_;
  std::string line_;
  size_t head_bytes_ = 0;
  bool saw_request_line_ = false;
  std::optional<uint64_t> content_length_;
  bool chunked_ = false;
  Chunk chunk_ = Chunk::kSize;
  uint64_t remaining_ = 0;  // body bytes (Content-Length) or of this chunk
  size_t trailer_bytes_ = 0;
};

}  // namespace hubzoo::net
