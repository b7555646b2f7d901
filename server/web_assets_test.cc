// The embedded chat page (cmake/embed_files.cmake): what the table holds. That
// each file's bytes equal its source is checked over HTTP by
// python/tests/test_server_page.py.
#include "server/web_assets.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

namespace hubzoo::server {
namespace {

const WebAsset* find(std::string_view path) {
  for (const WebAsset& a : web_assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

TEST(WebAssets, PageFirstPathsUniqueTypedAndTagged) {
  const auto assets = web_assets();
  ASSERT_GE(assets.size(), 10u);
  EXPECT_EQ(assets[0].path, "/");
  EXPECT_EQ(assets[0].content_type, "text/html; charset=utf-8");
  std::set<std::string_view> paths, etags;
  for (const WebAsset& a : assets) {
    EXPECT_TRUE(paths.insert(a.path).second) << a.path;
    EXPECT_TRUE(a.path == "/" || a.path.starts_with("/assets/")) << a.path;
    EXPECT_FALSE(a.bytes.empty()) << a.path;
    EXPECT_LE(a.bytes.size(), size_t{8} << 20) << a.path;
    EXPECT_FALSE(a.content_type.empty()) << a.path;
    // "\"" + 20 hex digits + "\""
    EXPECT_TRUE(std::regex_match(std::string(a.etag), std::regex("\"[0-9a-f]{20}\""))) << a.etag;
    etags.insert(a.etag);
  }
  EXPECT_EQ(etags.size(), assets.size());  // distinct files, distinct tags
}

// Every script and stylesheet the page names is embedded: it loads offline.
TEST(WebAssets, EverythingThePageLoadsIsEmbedded) {
  const std::string page(web_assets()[0].bytes);
  const std::regex ref("(?:src|href)=\"([^\"]+)\"");
  int refs = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), ref); it != std::sregex_iterator();
       ++it) {
    const std::string url = (*it)[1];
    if (url.starts_with("#")) continue;  // the skip link
    ++refs;
    EXPECT_NE(find(url), nullptr) << url;
  }
  EXPECT_GE(refs, 10);
  ASSERT_NE(find("/assets/katex/fonts/KaTeX_Main-Regular.woff2"), nullptr);
  EXPECT_EQ(find("/assets/katex/fonts/KaTeX_Main-Regular.woff2")->content_type, "font/woff2");
}

TEST(WebAssets, EtagMatching) {
  const std::string_view tag = "\"0123456789abcdef0123\"";
  EXPECT_TRUE(etag_matches("\"0123456789abcdef0123\"", tag));
  EXPECT_TRUE(etag_matches("W/\"0123456789abcdef0123\"", tag));
  EXPECT_TRUE(etag_matches("\"x\", \"0123456789abcdef0123\"", tag));
  EXPECT_TRUE(etag_matches("*", tag));
  EXPECT_FALSE(etag_matches("", tag));
  EXPECT_FALSE(etag_matches("\"x\"", tag));
  EXPECT_FALSE(etag_matches("0123456789abcdef0123", tag));  // unquoted
  EXPECT_FALSE(etag_matches(",,", tag));
}

}  // namespace
}  // namespace hubzoo::server
