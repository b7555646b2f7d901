// The chat page's routes: each embedded file (web_assets.h) at its own path,
// answered on the reactor (the bytes are in the binary; nothing blocks).
// Caching: every file revalidates (Cache-Control: no-cache) against its ETag,
// so a browser re-downloads nothing unchanged and never mixes files of two
// builds. The page's Content-Security-Policy runs only the served scripts:
// markup a model writes cannot run script even if the sanitiser missed it.
#include "server/server_impl.h"
#include "server/web_assets.h"

namespace hubzoo::server {
namespace {

// KaTeX sets inline style attributes, so styles allow 'unsafe-inline'; scripts do not.
constexpr const char* kPagePolicy =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace

bool etag_matches(std::string_view header, std::string_view etag) {
  if (header == "*") return true;
  while (!header.empty()) {
    const size_t comma = header.find(',');
    std::string_view item = header.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.starts_with("W/")) item.remove_prefix(2);
    if (item == etag) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

namespace {

void serve_asset(const WebAsset& a, const net::Request& req, net::Response& res) {
  res.content_type = std::string(a.content_type);
  res.set_header("ETag", std::string(a.etag));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  if (a.path == "/") {
    res.set_header("Content-Security-Policy", kPagePolicy);
    res.set_header("Referrer-Policy", "no-referrer");
  }
  if (etag_matches(req.header_value("If-None-Match"), a.etag)) {
    res.status = 304;
    return;
  }
  res.body = std::string(a.bytes);
}

}  // namespace

void add_web_routes(std::vector<net::Route>& routes) {
  for (const WebAsset& a : web_assets()) {
    net::Route r;
    r.method = "GET";
    r.path = std::string(a.path);
    r.auth = false;  // the page asks for the key itself
    r.inline_ = true;
    r.handler = [&a](const net::Request& req, net::Response& res) { serve_asset(a, req, res); };
    routes.push_back(std::move(r));
  }
}

bool is_web_path(const std::string& path) {
  for (const WebAsset& a : web_assets()) {
    if (a.path == path) return true;
  }
  return false;
}

}  // namespace hubzoo::server
