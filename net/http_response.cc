#include "net/http_response.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>

namespace hubzoo::net {

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Status";
  }
}

std::string serialize_head(const Response& res, const HeadOptions& o) {
  std::string out = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) +
                    "\r\nContent-Type: " + res.content_type + "\r\n";
  const bool chunked = o.streamed && o.minor_version == 1;
  if (chunked) {
    out += "Transfer-Encoding: chunked\r\n";
  } else if (!o.streamed && res.status != 304) {  // a 304 has no body, nor its length
    out += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  }
  // A close-delimited body (HTTP/1.0 stream) ends the connection.
  const bool keep = o.keep_alive && (!o.streamed || chunked);
  if (!keep) {
    out += "Connection: close\r\n";
  } else if (o.minor_version == 0) {
    out += "Connection: keep-alive\r\n";
  }
  for (const auto& [k, v] : res.headers) out += k + ": " + v + "\r\n";
  out += "\r\n";
  return out;
}

bool send_all(int fd, std::string_view data, std::chrono::milliseconds timeout,
              const std::atomic<bool>* abort) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  while (!data.empty()) {
    if (abort && abort->load()) return false;
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    // Short polls so an abort is seen within 100 ms.
    pollfd p{fd, POLLOUT, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (r < 0 && errno != EINTR) return false;
    if (r > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
  }
  return true;
}

bool StreamWriter::write_raw(std::string_view data) {
  if (failed_) return false;
  if (!send_all(t_.fd, data, t_.timeout, t_.abort)) failed_ = true;
  return !failed_;
}

bool StreamWriter::write(std::string_view data) {
  if (data.empty() || !t_.chunked) return data.empty() ? !failed_ : write_raw(data);
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string chunk = size;
  chunk.append(data);
  chunk += "\r\n";
  return write_raw(chunk);
}

bool StreamWriter::finish() { return t_.chunked ? write_raw("0\r\n\r\n") : !failed_; }

}  // namespace hubzoo::net
