// libFuzzer entry point for the HTTP request parser. The input is a byte
// stream on one connection; it is parsed twice, whole and in slices whose
// sizes derive from the data, and both runs must see the same requests and
// errors. Invariants: no feed consumes more than it was given, bodies and
// heads stay within the limits, errors carry one of the parser's statuses.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "net/http_parser.h"

namespace {

using hubzoo::net::ParserLimits;
using hubzoo::net::RequestParser;
using State = RequestParser::State;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

ParserLimits small_limits() {
  ParserLimits l;
  l.max_request_line = 256;
  l.max_header_line = 256;
  l.max_headers = 16;
  l.max_head_bytes = 2048;
  l.max_body = 4096;
  l.max_chunk_line = 64;
  l.max_trailer_bytes = 512;
  return l;
}

// One line per event: each request (method, target, body) and the error.
std::vector<std::string> parse(std::string_view data, uint64_t seed) {
  const ParserLimits limits = small_limits();
  std::vector<std::string> events;
  RequestParser p(limits);
  uint64_t x = seed | 1;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t len = data.size() - pos;
    if (seed != 0) {  // xorshift: slices of 1..64 bytes
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      len = std::min<size_t>(len, 1 + x % 64);
    }
    std::string_view slice = data.substr(pos, len);
    while (!slice.empty()) {
      const size_t n = p.feed(slice);
      check(n <= slice.size());
      slice.remove_prefix(n);
      pos += n;
      check(p.request().body.size() <= limits.max_body);
      check(p.head_bytes() <= limits.max_head_bytes + limits.max_header_line + 1);
      switch (p.state()) {
        case State::kHeadComplete:
          p.continue_body();
          break;
        case State::kComplete: {
          auto r = p.take();
          events.push_back(r.method + " " + r.target + " " + std::to_string(r.body.size()) + ":" +
                           r.body);
          p.reset();
          break;
        }
        case State::kError: {
          const int s = p.error().status;
          check(s == 400 || s == 413 || s == 414 || s == 417 || s == 431 || s == 501 || s == 505);
          check(!p.error().message.empty());
          events.push_back("error " + std::to_string(s));
          return events;  // the server closes the connection here
        }
        default:
          check(n > 0 || slice.empty());
          if (n == 0) slice = {};
      }
    }
  }
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 0x100000001b3ull;
  check(parse(bytes, 0) == parse(bytes, seed));
  return 0;
}
