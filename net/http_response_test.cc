#include "net/http_response.h"

#include <gtest/gtest.h>

namespace hubzoo::net {
namespace {

TEST(HttpResponse, HeadCarriesTheBodyLength) {
  Response res;
  res.set_content("hello", "text/plain");
  res.set_header("ETag", "\"abc\"");
  const std::string head = serialize_head(res, {});
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 5\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("ETag: \"abc\"\r\n"), std::string::npos) << head;
}

// A 304 has no body; a Content-Length would have to be the 200's (RFC 9110 8.6).
TEST(HttpResponse, NotModifiedHasNoContentLength) {
  Response res;
  res.status = 304;
  const std::string head = serialize_head(res, {});
  EXPECT_EQ(head.rfind("HTTP/1.1 304 Not Modified\r\n", 0), 0u) << head;
  EXPECT_EQ(head.find("Content-Length"), std::string::npos) << head;
}

}  // namespace
}  // namespace hubzoo::net
