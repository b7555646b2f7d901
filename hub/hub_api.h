// The Hub's HTTP protocol as huggingface_hub speaks it (internal to hub/):
//   GET  {endpoint}/api/models/{repo}/revision/{rev}  -> {"sha", "siblings": [{"rfilename"}]}
//   HEAD {endpoint}/{repo}/resolve/{commit}/{file}    -> ETag / X-Linked-Etag (sha256 of LFS
//        files), X-Linked-Size, X-Repo-Commit; a 302 to a CDN host for LFS files
//   GET  the same URL (or the CDN's), "Range: bytes=N-" to resume.
// Retries 429 (Retry-After), 5xx and dropped connections with backoff; errors
// say what to do (token, gated access URL, missing repo/revision/file).
#pragma once

#include <cstdint>
#include <string>

#include "hub/cache.h"
#include "hub/http.h"
#include "hub/repo_files.h"

namespace hubzoo {

struct HubSession {
  std::string endpoint;  // no trailing '/'
  std::string token;     // empty: anonymous
  std::string repo_id;
  HttpOptions http;
  RepoCache cache;
};

// HF_ENDPOINT (default https://huggingface.co), HF_TOKEN / the token file,
// timeouts from the environment.
HubSession make_hub_session(const std::string& repo_id);

std::string hf_endpoint();
// HF_TOKEN, else the file at HF_TOKEN_PATH or $HF_HOME/token; "" when none.
std::string hf_token();

// "Authorization: Bearer ..." only when `url` has the endpoint's origin: a
// redirect to another host (the CDN) never receives the token.
std::vector<std::string> hub_headers(const HubSession& s, const std::string& url);

// One request with retries on dropped connections, 429 and 5xx (Retry-After
// honored up to HttpOptions::max_backoff_s). Returns the last answer.
HttpResponse send_with_retries(const HubSession& s, const HttpRequest& request);

// Throws the DownloadError (NotFoundError for 404s) an HTTP error status means;
// `file` is empty for the model-info call.
[[noreturn]] void raise_hub_error(const HubSession& s, const HttpResponse& r,
                                  const std::string& file);

RepoInfo fetch_repo_info(const HubSession& s, const std::string& revision);

struct FileMeta {
  std::string etag;   // blob name: sha256 for LFS files, the git blob sha otherwise
  int64_t size = -1;  // -1: unknown
  std::string url;    // where GET goes (the CDN after a redirect)
};
FileMeta head_file(const HubSession& s, const std::string& commit, const std::string& file);

}  // namespace hubzoo
