#include "net/http_parser.h"

#include <algorithm>
#include <cstring>

namespace hubzoo::net {
namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// RFC 9110 tchar: the characters of a method or header name.
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Field values: visible characters, spaces, tabs and obs-text; no other controls.
bool valid_value(std::string_view v) {
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

// Strict decimal: digits only, no sign or spaces; nullopt on overflow.
std::optional<uint64_t> parse_decimal(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = lower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Calls fn(token) for each comma-separated, trimmed, non-empty token.
template <class Fn>
void for_each_token(std::string_view list, Fn fn) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view t = trim(list.substr(0, comma));
    if (!t.empty()) fn(t);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

const std::string* Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return &v;
  }
  return nullptr;
}

std::string Request::header_value(std::string_view name) const {
  const std::string* v = header(name);
  return v ? *v : std::string();
}

void RequestParser::reset() {
  const ParserLimits limits = limits_;
  *this = RequestParser(limits);
}

void RequestParser::fail(int status, std::string message) {
  if (state_ == State::kError) return;
  state_ = State::kError;
  error_ = {status, std::move(message)};
}

size_t RequestParser::feed(std::string_view data) {
  size_t used = 0;
  while (used < data.size()) {
    const std::string_view rest = data.substr(used);
    size_t n = 0;
    if (state_ == State::kHead) {
      n = feed_head(rest);
    } else if (state_ == State::kBody) {
      n = chunked_ ? feed_chunked(rest) : feed_body(rest);
    } else {
      break;  // paused
    }
    used += n;
    if (n == 0) break;
  }
  return used;
}

size_t RequestParser::take_line(std::string_view data, size_t max, int status, const char* what,
                                bool& complete) {
  complete = false;
  const size_t lf = data.find('\n');
  const size_t take = lf == std::string_view::npos ? data.size() : lf;
  if (line_.size() + take > max) {
    // Consumed up to the limit, not past it: the counts of what the head
    // took (head_bytes) stay within the limits even when the rest of the
    // connection's bytes came in the same feed.
    fail(status, std::string(what) + " exceeds " + std::to_string(max) + " bytes");
    return max - line_.size();
  }
  line_.append(data.data(), take);
  if (lf == std::string_view::npos) return take;
  complete = true;
  return take + 1;
}

size_t RequestParser::feed_head(std::string_view data) {
  const bool first = saw_request_line_;
  const size_t max = first ? limits_.max_header_line : limits_.max_request_line;
  bool complete = false;
  size_t n = take_line(data, max + 1, first ? 431 : 414,
                       first ? "A header line" : "The request line", complete);
  head_bytes_ += n;
  if (state_ == State::kError) return n;
  if (head_bytes_ > limits_.max_head_bytes) {
    fail(431, "The request head exceeds " + std::to_string(limits_.max_head_bytes) + " bytes");
    return n;
  }
  if (!complete) return n;
  std::string line = std::move(line_);
  line_.clear();
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.size() > max) {
    fail(first ? 431 : 414, std::string(first ? "A header line" : "The request line") +
                                " exceeds " + std::to_string(max) + " bytes");
    return n;
  }
  if (line.find('\r') != std::string::npos || line.find('\0') != std::string::npos) {
    fail(400, "Bare CR or NUL in the request head");
    return n;
  }
  head_line(line);
  return n;
}

void RequestParser::head_line(std::string_view line) {
  if (!saw_request_line_) {
    if (line.empty()) return;  // RFC 9112 2.2: empty lines before a request are ignored
    saw_request_line_ = true;
    request_line(line);
  } else if (line.empty()) {
    end_of_head();
  } else {
    header_line(line);
  }
}

void RequestParser::request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return fail(400, "Malformed request line");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "Malformed method");
  if (target.empty() || target[0] != '/') return fail(400, "The target must be an absolute path");
  for (char ch : target) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f) return fail(400, "Invalid character in the request target");
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return fail(400, "Malformed HTTP version");
  }
  if (version[5] != '1') return fail(505, "Only HTTP/1.0 and HTTP/1.1 are supported");
  req_.method = method;
  req_.target = target;
  const size_t q = target.find('?');
  req_.path = target.substr(0, q);
  req_.query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  req_.minor_version = version[7] == '0' ? 0 : 1;
}

void RequestParser::header_line(std::string_view line) {
  if (line[0] == ' ' || line[0] == '\t') return fail(400, "Obsolete header line folding");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return fail(400, "Header line without a colon");
  const std::string_view name = line.substr(0, colon);
  if (!is_token(name)) return fail(400, "Malformed header name");
  const std::string_view value = trim(line.substr(colon + 1));
  if (!valid_value(value)) return fail(400, "Control character in a header value");
  if (req_.headers.size() >= limits_.max_headers) {
    return fail(431, "More than " + std::to_string(limits_.max_headers) + " headers");
  }
  req_.headers.emplace_back(name, value);
}

void RequestParser::end_of_head() {
  bool te = false, te_chunked_only = true;
  int te_tokens = 0;
  for (const auto& [name, value] : req_.headers) {
    if (iequals(name, "Content-Length")) {
      const auto v = parse_decimal(value);
      if (!v) return fail(400, "Malformed Content-Length");
      if (content_length_ && *content_length_ != *v) return fail(400, "Conflicting Content-Length");
      content_length_ = v;
    } else if (iequals(name, "Transfer-Encoding")) {
      te = true;
      for_each_token(value, [&](std::string_view t) {
        ++te_tokens;
        if (!iequals(t, "chunked")) te_chunked_only = false;
      });
    } else if (iequals(name, "Connection")) {
      for_each_token(value, [&](std::string_view t) {
        if (iequals(t, "close")) req_.keep_alive = false;
      });
    }
  }
  req_.keep_alive = req_.keep_alive && req_.minor_version == 1;
  if (req_.minor_version == 0) {
    const std::string c = req_.header_value("Connection");
    req_.keep_alive = iequals(trim(c), "keep-alive");
  }
  if (te) {
    if (req_.minor_version == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (content_length_) return fail(400, "Both Content-Length and Transfer-Encoding");
    if (te_tokens != 1 || !te_chunked_only) {
      return fail(501, "Only the chunked transfer coding is supported");
    }
    chunked_ = true;
  }
  if (const std::string* expect = req_.header("Expect")) {
    if (!iequals(*expect, "100-continue")) return fail(417, "Only 'Expect: 100-continue'");
    req_.expect_continue = req_.minor_version == 1;
  }
  state_ = State::kHeadComplete;
}

void RequestParser::continue_body() {
  if (state_ != State::kHeadComplete) return;
  if (chunked_) {
    state_ = State::kBody;
    chunk_ = Chunk::kSize;
  } else if (content_length_ && *content_length_ > limits_.max_body) {
    fail(413, "The request body exceeds " + std::to_string(limits_.max_body) + " bytes");
  } else if (content_length_ && *content_length_ > 0) {
    state_ = State::kBody;
    remaining_ = *content_length_;
  } else {
    state_ = State::kComplete;
  }
}

size_t RequestParser::feed_body(std::string_view data) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size()));
  req_.body.append(data.data(), n);
  remaining_ -= n;
  if (remaining_ == 0) state_ = State::kComplete;
  return n;
}

size_t RequestParser::feed_chunked(std::string_view data) {
  bool complete = false;
  size_t n = 0;
  switch (chunk_) {
    case Chunk::kSize:
      n = take_line(data, limits_.max_chunk_line, 400, "A chunk size line", complete);
      if (complete) {
        std::string line = std::move(line_);
        line_.clear();
        chunk_line(line);
      }
      return n;
    case Chunk::kData:
      n = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size()));
      req_.body.append(data.data(), n);
      remaining_ -= n;
      if (remaining_ == 0) chunk_ = Chunk::kDataEnd;
      return n;
    case Chunk::kDataEnd:  // CRLF (or a bare LF) after the chunk's data
      if (data[0] == '\r' && line_.empty()) {
        line_ = "\r";
        return 1;
      }
      if (data[0] != '\n') {
        fail(400, "Chunk data not followed by CRLF");
        return 0;
      }
      line_.clear();
      chunk_ = Chunk::kSize;
      return 1;
    case Chunk::kTrailer:
      n = take_line(data, limits_.max_header_line, 431, "A trailer line", complete);
      trailer_bytes_ += n;
      if (trailer_bytes_ > limits_.max_trailer_bytes) {
        fail(431, "Trailers exceed " + std::to_string(limits_.max_trailer_bytes) + " bytes");
      } else if (complete) {
        std::string_view line = line_;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) {
          state_ = State::kComplete;
        } else if (line.find(':') == std::string_view::npos || !valid_value(line)) {
          fail(400, "Malformed trailer line");
        }  // trailers are read and dropped
        line_.clear();
      }
      return n;
  }
  return n;
}

void RequestParser::chunk_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  uint64_t size = 0;
  size_t i = 0;
  for (; i < line.size() && hex_value(line[i]) >= 0; ++i) {
    if (size > (limits_.max_body >> 4)) {
      return fail(
          413, "A chunk exceeds the body limit of " + std::to_string(limits_.max_body) + " bytes");
    }
    size = size * 16 + static_cast<uint64_t>(hex_value(line[i]));
  }
  if (i == 0) return fail(400, "Malformed chunk size");
  const std::string_view ext = trim(line.substr(i));
  if (!ext.empty() && (ext[0] != ';' || !valid_value(ext))) {
    return fail(400, "Malformed chunk extension");
  }
  if (size > limits_.max_body - req_.body.size()) {
    return fail(413, "The request body exceeds " + std::to_string(limits_.max_body) + " bytes");
  }
  if (size == 0) {
    chunk_ = Chunk::kTrailer;
  } else {
    remaining_ = size;
    chunk_ = Chunk::kData;
  }
}

}  // namespace hubzoo::net
