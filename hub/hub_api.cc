#include "hub/hub_api.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "hub/snapshot.h"

namespace hubzoo {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool retryable(long status) { return status == 429 || (status >= 500 && status <= 599); }

// Seconds to wait before attempt `attempt` (0-based): Retry-After when the
// server gave one (seconds), else 0.5 * 2^attempt; both capped.
double backoff_seconds(const HttpOptions& o, int attempt, const std::string& retry_after) {
  double wait = 0.5 * static_cast<double>(1 << std::min(attempt, 10));
  if (!retry_after.empty()) {
    char* end = nullptr;
    const double v = std::strtod(retry_after.c_str(), &end);
    if (end != retry_after.c_str() && *end == '\0' && v >= 0) wait = v;
  }
  return std::min(wait, o.max_backoff_s);
}

void sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(s * 1000)));
}

std::string bounded(std::string s) {
  if (s.size() > 300) s = s.substr(0, 300) + "...";
  for (char& ch : s) {
    if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  }
  return s;
}

int64_t parse_size(const std::string& v) {
  if (v.empty() || v.size() > 18 ||
      !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoll(v);
}

}  // namespace

std::string hf_endpoint() {
  std::string e = env("HF_ENDPOINT");
  if (e.empty()) e = "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string hf_token() {
  if (std::string t = trimmed(env("HF_TOKEN")); !t.empty()) return t;
  std::string path = env("HF_TOKEN_PATH");
  if (path.empty()) {
    std::string home = env("HF_HOME");
    if (home.empty()) {
      const std::string xdg = env("XDG_CACHE_HOME");
      home = xdg.empty() ? env("HOME") + "/.cache/huggingface" : xdg + "/huggingface";
    }
    path = home + "/token";
  }
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return trimmed(line.substr(0, 4096));
}

HubSession make_hub_session(const std::string& repo_id) {
  return {hf_endpoint(), hf_token(), repo_id, http_options_from_env(),
          RepoCache{hf_hub_cache_dir(), repo_id}};
}

std::vector<std::string> hub_headers(const HubSession& s, const std::string& url) {
  std::vector<std::string> h;
  if (!s.token.empty() && url_origin(url) == url_origin(s.endpoint)) {
    h.push_back("Authorization: Bearer " + s.token);
  }
  return h;
}

HttpResponse send_with_retries(const HubSession& s, const HttpRequest& request) {
  for (int attempt = 0;; ++attempt) {
    try {
      HttpResponse r = http_send(request, s.http);
      if (!retryable(r.status) || attempt >= s.http.max_retries) return r;
      sleep_s(backoff_seconds(s.http, attempt, r.header("retry-after")));
    } catch (const NetworkError&) {
      if (attempt >= s.http.max_retries) throw;
      sleep_s(backoff_seconds(s.http, attempt, ""));
    }
  }
}

void raise_hub_error(const HubSession& s, const HttpResponse& r, const std::string& file) {
  const std::string code = r.header("x-error-code");
  const std::string msg = bounded(r.header("x-error-message"));
  const std::string where = "'" + s.repo_id + "'" + (file.empty() ? "" : " file '" + file + "'");
  const std::string detail = " (HTTP " + std::to_string(r.status) + " from " + r.url +
                             (msg.empty() ? "" : ": " + msg) + ")";
  const std::string token_hint =
      s.token.empty()
          ? "set HF_TOKEN or log in with `hf auth login`"
          : "the token in use (HF_TOKEN or the token file) may be invalid or lack access";
  if (code == "GatedRepo" || (r.status == 403 && r.body.find("gated") != std::string::npos)) {
    throw DownloadError("access to " + where + " is gated: request it at " + s.endpoint + "/" +
                        s.repo_id + " and use a token of an account that has access (" +
                        token_hint + ")" + detail);
  }
  if (code == "RepoNotFound" || r.status == 401) {
    throw NotFoundError("repository " + where +
                        " not found, or private and the request not authorized: " + token_hint +
                        detail);
  }
  if (code == "RevisionNotFound") throw NotFoundError("revision not found for " + where + detail);
  if (r.status == 404) {
    throw NotFoundError((file.empty() ? "repository or revision not found: " : "not found: ") +
                        where + detail);
  }
  if (r.status == 403) throw DownloadError("forbidden: " + where + ": " + token_hint + detail);
  if (retryable(r.status)) {
    throw DownloadError("the Hub kept answering " + std::to_string(r.status) + " for " + where +
                        " after " + std::to_string(s.http.max_retries) +
                        " retries; try again later" + detail);
  }
  throw DownloadError("unexpected answer for " + where + detail);
}

RepoInfo fetch_repo_info(const HubSession& s, const std::string& revision) {
  HttpRequest req;
  req.url = s.endpoint + "/api/models/" + s.repo_id + "/revision/" + url_quote(revision, false);
  req.headers = hub_headers(s, req.url);
  req.max_body = kMaxRepoInfoBytes;
  const HttpResponse r = send_with_retries(s, req);
  if (r.status != 200) raise_hub_error(s, r, "");
  return parse_repo_info(r.body);
}

FileMeta head_file(const HubSession& s, const std::string& commit, const std::string& file) {
  HttpRequest req;
  req.method = "HEAD";
  req.url = s.endpoint + "/" + s.repo_id + "/resolve/" + commit + "/" + url_quote(file, true);
  HttpResponse r;
  // Relative redirects (a renamed repo) are followed; one to another host (the
  // CDN) ends here: the metadata is on this answer, the download goes there.
  for (int hops = 0;; ++hops) {
    req.headers = hub_headers(s, req.url);
    req.headers.push_back("Accept-Encoding: identity");
    r = send_with_retries(s, req);
    const std::string location = r.header("location");
    if (r.status < 300 || r.status >= 400 || location.empty()) break;
    const std::string next = resolve_url(req.url, location);
    if (url_origin(next) != url_origin(req.url) || hops >= 10) {
      req.url = next;
      break;
    }
    req.url = next;
  }
  if (r.status >= 400) raise_hub_error(s, r, file);
  FileMeta m;
  m.etag = normalize_etag(!r.header("x-linked-etag").empty() ? r.header("x-linked-etag")
                                                             : r.header("etag"));
  if (!is_safe_etag(m.etag)) {
    throw DownloadError("no usable ETag for '" + file + "' from " + r.url + ": '" +
                        bounded(m.etag) + "'");
  }
  const bool redirect = r.status >= 300 && r.status < 400;
  m.size = parse_size(r.header("x-linked-size"));
  if (m.size < 0 && !redirect) m.size = parse_size(r.header("content-length"));
  m.url = req.url;
  return m;
}

}  // namespace hubzoo
