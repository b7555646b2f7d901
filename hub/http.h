// One HTTP request over libcurl: no redirects followed (the caller decides, so
// that credentials never follow a redirect to another host), bounded headers,
// and a body either kept (bounded) or streamed to a sink.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"

namespace hubzoo {

// A download failed: network, HTTP status, checksum, disk. The message says what to do.
struct DownloadError : Error {
  using Error::Error;
};

// The server did not answer, or stopped answering, within the timeout; or the
// connection failed. Retried by the caller; a cached snapshot may still serve.
struct NetworkError : DownloadError {
  using DownloadError::DownloadError;
};

struct HttpOptions {
  double connect_timeout_s = 10;  // HF_HUB_ETAG_TIMEOUT
  double read_timeout_s = 10;     // HF_HUB_DOWNLOAD_TIMEOUT: no byte for this long = stalled
  int max_retries = 5;            // HUBZOO_HTTP_RETRIES: on 429, 5xx and dropped connections
  double max_backoff_s = 8;       // HUBZOO_HTTP_MAX_BACKOFF: caps Retry-After and backoff
};

// Timeouts and retries from the environment (huggingface_hub's names where it has them).
HttpOptions http_options_from_env();

struct HttpResponse {
  long status = 0;
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;                                          // unless streamed
  // First value of a header (name lower-case), or "".
  std::string header(std::string_view name) const;
};

struct HttpRequest {
  std::string method = "GET";  // GET or HEAD
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  int64_t range_start = -1;          // >= 0: "Range: bytes=N-"
  size_t max_body = 16u << 20;       // kept bodies beyond this are an error
  // Streamed body for 2xx answers: called with the status (200 or 206) and each
  // chunk; false aborts. Other bodies are kept (bounded) whatever this says.
  std::function<bool(long status, const char*, size_t)> sink;
};

// Sends one request. Throws NetworkError on connection failures and timeouts,
// DownloadError when the answer is too large; returns every HTTP status.
HttpResponse http_send(const HttpRequest& request, const HttpOptions& options);

// "Name: value\r\n" -> {"name", "value"}; false for the status line and blank lines.
bool parse_header_line(std::string_view line, std::string& name, std::string& value);

// `location` resolved against `base` (absolute, or relative as a browser would).
std::string resolve_url(const std::string& base, const std::string& location);
// "scheme://host:port" of a URL, lower-case, default port filled in: two URLs
// with the same origin may share credentials.
std::string url_origin(const std::string& url);

// Percent-encodes a path segment (a revision like "refs/pr/1" keeps no '/').
std::string url_quote(std::string_view s, bool keep_slash);

}  // namespace hubzoo
