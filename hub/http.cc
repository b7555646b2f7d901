#include "hub/http.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

#include "hub/net_libs.h"

namespace hubzoo {

namespace {

constexpr size_t kMaxHeaderBytes = 64 << 10;  // all header lines of one answer

double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end || !(d > 0) || d > 3600) {
    throw InvalidArgument(std::string(name) + "='" + v + "': expected seconds in (0, 3600]");
  }
  return d;
}

struct Transfer {
  const HttpRequest* request = nullptr;
  HttpResponse* response = nullptr;
  CURL* curl = nullptr;
  size_t header_bytes = 0;
  bool too_large = false;
  bool aborted = false;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  t->header_bytes += n;
  if (t->header_bytes > kMaxHeaderBytes) {
    t->too_large = true;
    return 0;
  }
  const std::string_view line(data, n);
  if (line.rfind("HTTP/", 0) == 0) t->response->headers.clear();  // a new answer (after 100)
  std::string name, value;
  if (parse_header_line(line, name, value)) t->response->headers.emplace_back(name, value);
  return n;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  long status = 0;
  curl_lib().easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->request->sink && status >= 200 && status < 300) {
    if (!t->request->sink(status, data, n)) {
      t->aborted = true;
      return 0;
    }
    return n;
  }
  if (t->response->body.size() + n > t->request->max_body) {
    t->too_large = true;
    return 0;
  }
  t->response->body.append(data, n);
  return n;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_lib().easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* s) const { curl_lib().slist_free_all(s); }
};

// One handle per thread, reset between requests: its connection cache keeps
// connections to the Hub alive across files.
CURL* thread_handle() {
  const CurlLib& curl = curl_lib();
  thread_local std::unique_ptr<CURL, CurlDeleter> handle(curl.easy_init());
  if (!handle) throw DownloadError("libcurl: cannot create a handle");
  curl.easy_reset(handle.get());
  return handle.get();
}

void configure(CURL* c, const HttpRequest& r, const HttpOptions& o, curl_slist* headers,
               Transfer* t) {
  const CurlLib& curl = curl_lib();
  curl.easy_setopt(c, CURLOPT_URL, r.url.c_str());
#if LIBCURL_VERSION_NUM >= 0x075500
  curl.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
  curl.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl.easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl.easy_setopt(c, CURLOPT_USERAGENT, "hubzoo/0.1; libcurl");
  curl.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout_s * 1000));
  // Stalled: under 1 byte/s for read_timeout_s (whole seconds, at least 1).
  curl.easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl.easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>(o.read_timeout_s)));
  if (r.method == "HEAD") curl.easy_setopt(c, CURLOPT_NOBODY, 1L);
  if (r.sink) curl.easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);  // fewer, larger writes
  if (r.range_start >= 0) {
    const std::string range = std::to_string(r.range_start) + "-";
    curl.easy_setopt(c, CURLOPT_RANGE, range.c_str());  // copied by libcurl
  }
  curl.easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl.easy_setopt(c, CURLOPT_HEADERDATA, t);
  curl.easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl.easy_setopt(c, CURLOPT_WRITEDATA, t);
}

}  // namespace

HttpOptions http_options_from_env() {
  HttpOptions o;
  o.connect_timeout_s = env_seconds("HF_HUB_ETAG_TIMEOUT", o.connect_timeout_s);
  o.read_timeout_s = env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", o.read_timeout_s);
  o.max_backoff_s = env_seconds("HUBZOO_HTTP_MAX_BACKOFF", o.max_backoff_s);
  if (const char* v = std::getenv("HUBZOO_HTTP_RETRIES"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end || n < 0 || n > 100) {
      throw InvalidArgument(std::string("HUBZOO_HTTP_RETRIES='") + v + "': expected 0..100");
    }
    o.max_retries = static_cast<int>(n);
  }
  return o;
}

std::string HttpResponse::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

bool parse_header_line(std::string_view line, std::string& name, std::string& value) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0 || line.rfind("HTTP/", 0) == 0) return false;
  name.assign(line.substr(0, colon));
  for (char& ch : name) {
    if (ch == ' ' || ch == '\t') return false;  // "Bad Name:" is no header
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  std::string_view v = line.substr(colon + 1);
  auto space = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; };
  while (!v.empty() && space(v.front())) v.remove_prefix(1);
  while (!v.empty() && space(v.back())) v.remove_suffix(1);
  value.assign(v);
  return true;
}

HttpResponse http_send(const HttpRequest& request, const HttpOptions& options) {
  const CurlLib& curl = curl_lib();
  CURL* c = thread_handle();
  curl_slist* list = nullptr;
  for (const std::string& h : request.headers) list = curl.slist_append(list, h.c_str());
  const std::unique_ptr<curl_slist, SlistDeleter> headers(list);
  HttpResponse response;
  response.url = request.url;
  Transfer t{&request, &response, c};
  configure(c, request, options, list, &t);
  char error[CURL_ERROR_SIZE] = {0};
  curl.easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  const CURLcode rc = curl.easy_perform(c);
  curl.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  if (t.too_large) {
    throw DownloadError("answer from " + request.url + " is too large (headers over " +
                        std::to_string(kMaxHeaderBytes) + " bytes or body over " +
                        std::to_string(request.max_body) + " bytes)");
  }
  if (t.aborted) {
    throw DownloadError("download from " + request.url + " stopped while writing");
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    throw NetworkError("timed out waiting for " + request.url + " (" + error +
                       "); set HF_HUB_DOWNLOAD_TIMEOUT / HF_HUB_ETAG_TIMEOUT (seconds) to wait "
                       "longer");
  }
  if (rc != CURLE_OK) {
    throw NetworkError("request to " + request.url + " failed: " +
                       (error[0] ? std::string(error) : std::string(curl.easy_strerror(rc))));
  }
  return response;
}

std::string resolve_url(const std::string& base, const std::string& location) {
  const CurlLib& curl = curl_lib();
  CURLU* u = curl.url();
  std::string out;
  if (curl.url_set(u, CURLUPART_URL, base.c_str(), 0) == CURLUE_OK &&
      curl.url_set(u, CURLUPART_URL, location.c_str(), 0) == CURLUE_OK) {
    char* s = nullptr;
    if (curl.url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK) out = s;
    curl.free(s);
  }
  curl.url_cleanup(u);
  if (out.empty()) throw DownloadError("bad redirect from " + base + " to '" + location + "'");
  return out;
}

std::string url_origin(const std::string& url) {
  const CurlLib& curl = curl_lib();
  CURLU* u = curl.url();
  std::string out;
  if (curl.url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK) {
    char *scheme = nullptr, *host = nullptr, *port = nullptr;
    curl.url_get(u, CURLUPART_SCHEME, &scheme, 0);
    curl.url_get(u, CURLUPART_HOST, &host, 0);
    curl.url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
    if (scheme && host && port) out = std::string(scheme) + "://" + host + ":" + port;
    curl.free(scheme);
    curl.free(host);
    curl.free(port);
  }
  curl.url_cleanup(u);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string url_quote(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (const char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    if (std::isalnum(b) || ch == '-' || ch == '_' || ch == '.' || ch == '~' ||
        (keep_slash && ch == '/')) {
      out += ch;
    } else {
      out += '%';
      out += hex[b >> 4];
      out += hex[b & 15];
    }
  }
  return out;
}

}  // namespace hubzoo
