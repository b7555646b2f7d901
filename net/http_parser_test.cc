#include "net/http_parser.h"

#include <gtest/gtest.h>

namespace hubzoo::net {
namespace {

using State = RequestParser::State;

// Feeds `text` whole (continuing past the head); returns the final state.
State parse(RequestParser& p, std::string_view text, const ParserLimits& = {}) {
  size_t used = p.feed(text);
  if (p.state() == State::kHeadComplete) {
    p.continue_body();
    used += p.feed(text.substr(used));
  }
  return p.state();
}

int status_of(std::string_view text, const ParserLimits& limits = {}) {
  RequestParser p(limits);
  parse(p, text);
  return p.state() == State::kError ? p.error().status : 0;
}

TEST(HttpParser, SimpleGetAndHeaders) {
  RequestParser p;
  ASSERT_EQ(parse(p, "GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Key:  v v \r\n\r\n"),
            State::kComplete);
  const Request& r = p.request();
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "x=1");
  EXPECT_EQ(r.header_value("x-key"), "v v");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(r.body, "");
}

TEST(HttpParser, PausesAtHeadBeforeAnyBodyByte) {
  RequestParser p;
  const std::string text = "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
  const size_t n = p.feed(text);
  EXPECT_EQ(p.state(), State::kHeadComplete);
  EXPECT_EQ(n, text.size() - 5);
  EXPECT_EQ(p.feed(std::string_view(text).substr(n)), 0u);  // paused
  p.continue_body();
  EXPECT_EQ(p.feed(std::string_view(text).substr(n)), 5u);
  EXPECT_EQ(p.state(), State::kComplete);
  EXPECT_EQ(p.request().body, "hello");
}

TEST(HttpParser, KeepAliveSemantics) {
  RequestParser p;
  parse(p, "GET / HTTP/1.0\r\n\r\n");
  EXPECT_FALSE(p.request().keep_alive);
  p.reset();
  parse(p, "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
  EXPECT_TRUE(p.request().keep_alive);
  p.reset();
  parse(p, "GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n");
  EXPECT_FALSE(p.request().keep_alive);
}

TEST(HttpParser, ErrorsHaveTheirStatus) {
  EXPECT_EQ(status_of("GET\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET  / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET http://x/ HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("G(T / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /\x01 HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / HTTX/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nNoColon\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n"), 400);
  EXPECT_EQ(status_of(std::string("GET / HTTP/1.1\r\nA: b\0c\r\n\r\n", 24)), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n"), 417);
}

TEST(HttpParser, HeadLimits) {
  ParserLimits l;
  l.max_request_line = 64;
  l.max_header_line = 32;
  l.max_headers = 3;
  l.max_head_bytes = 200;
  EXPECT_EQ(status_of("GET /" + std::string(80, 'a') + " HTTP/1.1\r\n\r\n", l), 414);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nA: " + std::string(40, 'b') + "\r\n\r\n", l), 431);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", l), 431);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 3; ++i) many += "H: " + std::string(25, 'x') + "\r\n";
  EXPECT_EQ(status_of(many + "\r\n", l), 0);  // 3 x 30 bytes: under every limit
  l.max_head_bytes = 100;
  EXPECT_EQ(status_of(many + "\r\n", l), 431);
  // A request line that never ends fails at the limit, not at the end.
  RequestParser p(l);
  p.feed(std::string(100, 'G'));
  EXPECT_EQ(p.state(), State::kError);
  EXPECT_EQ(p.error().status, 414);
}

// A line over its limit is consumed up to the limit, not to the end of what
// was fed: what the head took stays within the limits (the fuzz target's
// invariant; fuzz/crashes/http/long-header-line-whole-feed).
TEST(HttpParser, AnOverlongLineIsNotConsumedPastItsLimit) {
  ParserLimits l;
  l.max_request_line = 64;
  l.max_header_line = 32;
  l.max_head_bytes = 200;
  for (const std::string& text :
       {"GET / HTTP/1.1\r\nA: " + std::string(1000, 'b'), "GET /" + std::string(1000, 'a')}) {
    RequestParser p(l);
    const size_t used = p.feed(text);
    ASSERT_EQ(p.state(), State::kError);
    EXPECT_LT(used, 200u);
    EXPECT_LE(p.head_bytes(), l.max_head_bytes + l.max_header_line + 1);
  }
}

TEST(HttpParser, ContentLengthIsStrict) {
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 5 5\r\n\r\nhello"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 0x5\r\n\r\nhello"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"), 0);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 5\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n"),
            400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n"),
            501);
  EXPECT_EQ(status_of("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  ParserLimits l;
  l.max_body = 4;
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", l), 413);
}

const char* kChunked =
    "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    "5;ext=1\r\nhello\r\n"
    "1A\r\nabcdefghijklmnopqrstuvwxyz\r\n"
    "0\r\nTrailer: x\r\n\r\n";

TEST(HttpParser, ChunkedSplitAtEveryByteBoundary) {
  const std::string text = kChunked;
  for (size_t split = 0; split <= text.size(); ++split) {
    RequestParser p;
    size_t used = 0;
    for (std::string_view part :
         {std::string_view(text).substr(0, split), std::string_view(text).substr(split)}) {
      size_t off = 0;
      while (off < part.size()) {
        const size_t n = p.feed(part.substr(off));
        off += n;
        if (p.state() == State::kHeadComplete)
          p.continue_body();
        else if (n == 0)
          break;
      }
      used += off;
    }
    ASSERT_EQ(p.state(), State::kComplete) << split;
    EXPECT_EQ(used, text.size());
    EXPECT_EQ(p.request().body, "helloabcdefghijklmnopqrstuvwxyz") << split;
  }
}

TEST(HttpParser, ChunkedOneByteAtATime) {
  const std::string text = kChunked;
  RequestParser p;
  for (char c : text) {
    ASSERT_EQ(p.feed(std::string_view(&c, 1)), 1u);
    if (p.state() == State::kHeadComplete) p.continue_body();
  }
  ASSERT_EQ(p.state(), State::kComplete);
  EXPECT_EQ(p.request().body.size(), 31u);
}

TEST(HttpParser, ChunkedErrorsAndLimits) {
  const std::string head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  ParserLimits l;
  l.max_body = 10;
  l.max_chunk_line = 16;
  l.max_trailer_bytes = 20;
  EXPECT_EQ(status_of(head + "5\r\nhello\r\n6\r\nworld!\r\n0\r\n\r\n", l), 413);
  EXPECT_EQ(status_of(head + "5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", l), 0);
  EXPECT_EQ(status_of(head + "ffffffffffffff\r\n", l), 413);  // 2^56-1: 413, not wrapped
  EXPECT_EQ(status_of(head + "zz\r\n", l), 400);
  EXPECT_EQ(status_of(head + "5 x\r\nhello\r\n0\r\n\r\n", l), 400);
  EXPECT_EQ(status_of(head + "5;" + std::string(20, 'e') + "\r\n", l), 400);
  EXPECT_EQ(status_of(head + "5\r\nhelloX\r\n", l), 400);
  EXPECT_EQ(status_of(head + "0\r\n" + std::string(30, 'T') + "\r\n\r\n", l), 431);
  EXPECT_EQ(status_of(head + "0\r\nno colon\r\n\r\n", l), 400);
  // The limit holds while decoding: a huge declared chunk fails before its data.
  RequestParser p(l);
  parse(p, head + "100000\r\n");
  EXPECT_EQ(p.state(), State::kError);
  EXPECT_EQ(p.error().status, 413);
}

TEST(HttpParser, PipelinedRequestsAreNotOverConsumed) {
  const std::string text =
      "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
      "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"
      "GET /c HTTP/1.1\r\n\r\n";
  std::string_view rest = text;
  std::vector<std::pair<std::string, std::string>> got;
  RequestParser p;
  while (!rest.empty()) {
    rest.remove_prefix(p.feed(rest));
    if (p.state() == State::kHeadComplete) {
      p.continue_body();
      rest.remove_prefix(p.feed(rest));
    }
    ASSERT_EQ(p.state(), State::kComplete);
    Request r = p.take();
    got.emplace_back(r.path, r.body);
    p.reset();
  }
  const std::vector<std::pair<std::string, std::string>> want = {
      {"/a", "abc"}, {"/b", "xy"}, {"/c", ""}};
  EXPECT_EQ(got, want);
}

TEST(HttpParser, ExpectContinueAndLeadingEmptyLines) {
  RequestParser p;
  p.feed("\r\n\r\nPOST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n");
  ASSERT_EQ(p.state(), State::kHeadComplete);
  EXPECT_TRUE(p.request().expect_continue);
  EXPECT_EQ(p.content_length(), 1u);
}

}  // namespace
}  // namespace hubzoo::net
