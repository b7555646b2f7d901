#include "hub/download.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

#include "hub/hub_api.h"
#include "hub/net_libs.h"
#include "hub/snapshot.h"

namespace hubzoo {

namespace fs = std::filesystem;

namespace {

// blobs/<etag>.incomplete, appended to with its sha256 kept running (the bytes
// already there from an earlier attempt are hashed first, in 1 MiB reads).
class BlobWriter {
 public:
  explicit BlobWriter(fs::path path)
      : path_(std::move(path)), crypto_(crypto_lib()), md_(crypto_.md_ctx_new()) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw FileError("cannot open " + path_.string() + ": " + std::strerror(errno));
    crypto_.digest_init_ex(md_, crypto_.sha256(), nullptr);
    std::vector<char> buf(1 << 20);
    for (;;) {
      const ssize_t n = ::read(fd_, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw FileError("cannot read " + path_.string() + ": " + std::strerror(errno));
      if (n == 0) break;
      crypto_.digest_update(md_, buf.data(), static_cast<size_t>(n));
      offset_ += n;
    }
  }
  ~BlobWriter() {
    if (fd_ >= 0) ::close(fd_);
    crypto_.md_ctx_free(md_);
  }
  BlobWriter(const BlobWriter&) = delete;
  BlobWriter& operator=(const BlobWriter&) = delete;

  int64_t offset() const { return offset_; }
  const std::string& error() const { return error_; }

  void restart() {
    if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0) {
      throw FileError("cannot truncate " + path_.string() + ": " + std::strerror(errno));
    }
    crypto_.digest_init_ex(md_, crypto_.sha256(), nullptr);
    offset_ = 0;
  }

  bool write(const char* data, size_t n) {
    crypto_.digest_update(md_, data, n);
    while (n > 0) {
      const ssize_t w = ::write(fd_, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        error_ = (errno == ENOSPC ? "disk full writing " : "cannot write ") + path_.string() +
                 " (" + std::strerror(errno) + "); " + std::to_string(offset_) +
                 " bytes are kept there: free space and run again to resume";
        return false;
      }
      data += w;
      n -= static_cast<size_t>(w);
      offset_ += w;
    }
    return true;
  }

  std::string sha256_hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_MD_CTX* copy = crypto_.md_ctx_new();
    crypto_.md_ctx_copy_ex(copy, md_);
    crypto_.digest_final_ex(copy, digest, &len);
    crypto_.md_ctx_free(copy);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
      out += hex[digest[i] >> 4];
      out += hex[digest[i] & 15];
    }
    return out;
  }

  void close() {
    if (fd_ >= 0 && ::close(fd_) != 0) {
      fd_ = -1;
      throw FileError("cannot close " + path_.string() + ": " + std::strerror(errno));
    }
    fd_ = -1;
  }

 private:
  fs::path path_;
  int fd_ = -1;
  const CryptoLib& crypto_;
  EVP_MD_CTX* md_;
  int64_t offset_ = 0;
  std::string error_;
};

void sleep_backoff(const HttpOptions& o, int attempt) {
  const double s = std::min(0.5 * static_cast<double>(1 << std::min(attempt, 10)), o.max_backoff_s);
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(s * 1000)));
}

struct BlobJob {
  const HubSession* session;
  const FileMeta* meta;
  const std::string* file;
  DownloadProgress* progress;
};

// GETs until the blob is whole: redirects followed (credentials only to the
// endpoint's origin), dropped connections resumed with Range, 429/5xx retried.
void transfer(const BlobJob& job, BlobWriter& w) {
  const HubSession& s = *job.session;
  std::string url = job.meta->url;
  for (int hops = 0, attempt = 0;;) {
    HttpRequest req;
    req.url = url;
    req.headers = hub_headers(s, url);
    req.range_start = w.offset() > 0 ? w.offset() : -1;
    bool first = true;
    req.sink = [&](long status, const char* data, size_t n) {
      if (first && status == 200 && w.offset() > 0) w.restart();  // the server ignored Range
      first = false;
      if (!w.write(data, n)) return false;
      job.progress->add_bytes(*job.file, n,
                              static_cast<uint64_t>(std::max<int64_t>(job.meta->size, 0)));
      return true;
    };
    HttpResponse r;
    try {
      r = http_send(req, s.http);
    } catch (const DownloadError& e) {
      if (!w.error().empty()) throw DownloadError("'" + *job.file + "': " + w.error());
      if (!dynamic_cast<const NetworkError*>(&e) || attempt >= s.http.max_retries) {
        throw DownloadError(std::string(e.what()) + "; " + std::to_string(w.offset()) +
                            " bytes of '" + *job.file + "' are kept: run again to resume");
      }
      sleep_backoff(s.http, attempt++);
      continue;
    }
    const std::string location = r.header("location");
    if (r.status >= 300 && r.status < 400 && !location.empty()) {
      if (++hops > 10) throw DownloadError("too many redirects downloading '" + *job.file + "'");
      url = resolve_url(url, location);
      continue;
    }
    if (r.status == 416 && attempt < s.http.max_retries) {  // stale partial file: start over
      w.restart();
      ++attempt;
      continue;
    }
    if ((r.status == 429 || r.status >= 500) && attempt < s.http.max_retries) {
      sleep_backoff(s.http, attempt++);
      continue;
    }
    if (r.status >= 300) raise_hub_error(s, r, *job.file);
    return;
  }
}

// blobs/<etag>, downloaded unless present; false when it already was.
bool fetch_blob(const BlobJob& job) {
  const HubSession& s = *job.session;
  const FileMeta& m = *job.meta;
  const FileLock lock(s.cache.lock(m.etag));  // another process may be fetching this blob
  std::error_code ec;
  if (fs::is_regular_file(s.cache.blob(m.etag), ec)) return false;
  fs::create_directories(s.cache.blob(m.etag).parent_path());
  const fs::path partial = s.cache.incomplete(m.etag);
  BlobWriter w(partial);
  if (m.size >= 0 && w.offset() > m.size) w.restart();
  if (m.size < 0 || w.offset() < m.size) transfer(job, w);
  if (m.size >= 0 && w.offset() != m.size) {
    w.close();
    fs::remove(partial, ec);
    throw DownloadError("'" + *job.file + "': got " + std::to_string(w.offset()) +
                        " bytes, the Hub announced " + std::to_string(m.size) +
                        "; the partial file was deleted, run again");
  }
  if (is_sha256_hex(m.etag)) {
    const std::string got = w.sha256_hex();
    if (got != m.etag) {
      w.close();
      fs::remove(partial, ec);
      throw DownloadError("sha256 mismatch for '" + *job.file + "': expected " + m.etag + ", got " +
                          got + "; the downloaded file was deleted, run again");
    }
  }
  w.close();
  fs::rename(partial, s.cache.blob(m.etag));
  return true;
}

// fn(i) for i in [0, n) on up to `workers` threads; the first exception stops
// the others (between items) and is rethrown.
void parallel_for(size_t n, int workers, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i; !failed && (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t count = std::min<size_t>(n, static_cast<size_t>(std::max(workers, 1)));
  for (size_t t = 1; t < count; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

bool safe_revision(const std::string& r) {
  if (r.empty() || r.size() > 256 || r[0] == '/' || r.back() == '/') return false;
  for (const auto& c : fs::path(r)) {
    if (c == ".." || c == "." || c.empty()) return false;
  }
  return r.find('\\') == std::string::npos;
}

}  // namespace

fs::path pull_snapshot(const std::string& repo_id, const PullOptions& o) {
  if (!is_hub_repo_id(repo_id))
    throw InvalidArgument("'" + repo_id + "' is not a repo id (org/name)");
  const std::string revision = o.revision.empty() ? "main" : o.revision;
  if (!safe_revision(revision)) throw InvalidArgument("invalid revision '" + revision + "'");
  const HubSession s = make_hub_session(repo_id);
  const RepoInfo info = fetch_repo_info(s, revision);
  const std::vector<std::string> files = select_files(info.files, o.files);
  if (files.empty()) {
    throw DownloadError("no file of '" + repo_id + "' matches the selection (" +
                        std::to_string(info.files.size()) + " files in the repo); use --include");
  }
  std::vector<std::string> todo;
  for (const std::string& f : files) {
    if (!snapshot_has_file(s.cache, info.commit, f)) todo.push_back(f);
  }
  std::vector<FileMeta> metas(todo.size());
  parallel_for(todo.size(), o.workers,
               [&](size_t i) { metas[i] = head_file(s, info.commit, todo[i]); });
  uint64_t total = 0;
  for (const FileMeta& m : metas) total += static_cast<uint64_t>(std::max<int64_t>(m.size, 0));
  DownloadProgress progress(o.progress);
  progress.begin(repo_id, todo.size(), total);
  parallel_for(todo.size(), o.workers, [&](size_t i) {
    const bool fetched = fetch_blob({&s, &metas[i], &todo[i], &progress});
    link_snapshot_file(s.cache, info.commit, todo[i], metas[i].etag);
    progress.file_done(todo[i], static_cast<uint64_t>(std::max<int64_t>(metas[i].size, 0)),
                       !fetched);
  });
  if (revision != info.commit) write_ref(s.cache, revision, info.commit);
  const fs::path snap = s.cache.snapshot(info.commit);
  if (!todo.empty()) progress.finish(snap.string());
  return snap;
}

bool hub_offline_from_env() {
  const char* v = std::getenv("HF_HUB_OFFLINE");
  if (!v) return false;
  std::string s(v);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

fs::path ensure_snapshot(const std::string& model_ref, const EnsureOptions& o) {
  const ModelRef ref = parse_model_ref(model_ref);
  if (o.offline || hub_offline_from_env() || !is_hub_repo_id(ref.repo_or_path)) {
    return resolve_snapshot(ref);
  }
  std::error_code ec;
  if (fs::is_directory(ref.repo_or_path, ec)) return ref.repo_or_path;  // "gpt2/" as a folder
  PullOptions p;
  p.revision = ref.revision;
  p.files.gguf_file = o.gguf_file;
  p.progress = o.progress;
  try {
    return pull_snapshot(ref.repo_or_path, p);
  } catch (const NetworkError& e) {
    fs::path cached;
    try {
      cached = resolve_snapshot(ref);
    } catch (const NotFoundError&) {
      throw e;
    }
    if (o.progress.mode != ProgressMode::kQuiet) {
      std::fprintf(o.progress.out, "hubzoo: cannot reach the Hub (%s); using the cached %s\n",
                   e.what(), cached.string().c_str());
    }
    return cached;
  }
}

}  // namespace hubzoo
