#include "hub/cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <set>

#include "base/error.h"
#include "hub/repo_files.h"

namespace hubzoo {

namespace fs = std::filesystem;

namespace {

std::string unique_suffix() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return "." + std::to_string(::getpid()) + "." + std::to_string(rng() % 1000000000) + ".tmp";
}

std::string read_small(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s.substr(0, 256);
}

// refs/ walked recursively ("refs/pr/1"): revision -> commit.
std::vector<std::pair<std::string, std::string>> read_refs(const fs::path& repo) {
  std::vector<std::pair<std::string, std::string>> out;
  std::error_code ec;
  const fs::path refs = repo / "refs";
  for (fs::recursive_directory_iterator it(refs, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) {
      out.emplace_back(fs::relative(it->path(), refs, ec).generic_string(), read_small(it->path()));
    }
  }
  return out;
}

bool is_runnable(const fs::path& snap, uint64_t& files) {
  bool config = false, safetensors = false, gguf = false;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(snap, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) continue;
    ++files;
    const std::string name = it->path().filename().string();
    const bool top = it->path().parent_path() == snap;
    config |= top && name == "config.json";
    safetensors |= top && name.size() > 12 && name.ends_with(".safetensors");
    gguf |= name.ends_with(".gguf");
  }
  return (config && safetensors) || gguf;
}

uint64_t dir_bytes(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return total;
}

// Deletes blobs no snapshot links to; returns the bytes freed.
uint64_t remove_unlinked_blobs(const fs::path& repo) {
  std::set<std::string> used;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(repo / "snapshots", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_symlink(ec)) used.insert(fs::read_symlink(it->path(), ec).filename().string());
  }
  uint64_t freed = 0;
  for (fs::directory_iterator it(repo / "blobs", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (used.count(name) || name.ends_with(".incomplete")) continue;
    freed += it->file_size(ec);
    fs::remove(it->path(), ec);
  }
  return freed;
}

}  // namespace

std::string repo_folder_name(const std::string& repo_id) {
  std::string folder = "models--" + repo_id;
  if (size_t slash = folder.find('/'); slash != std::string::npos) folder.replace(slash, 1, "--");
  return folder;
}

bool snapshot_has_file(const RepoCache& c, const std::string& commit, const std::string& file) {
  std::error_code ec;
  return fs::is_regular_file(c.snapshot(commit) / file, ec);  // follows the link
}

void link_snapshot_file(const RepoCache& c, const std::string& commit, const std::string& file,
                        const std::string& etag) {
  const fs::path dst = c.snapshot(commit) / file;
  fs::create_directories(dst.parent_path());
  // snapshots/<commit>/a/b -> ../../../blobs/<etag>: one ".." per folder below the repo.
  std::string target = "../../";
  for (char ch : file) {
    if (ch == '/') target += "../";
  }
  target += "blobs/" + etag;
  const fs::path tmp = dst.string() + unique_suffix();
  fs::create_symlink(target, tmp);
  std::error_code ec;
  fs::rename(tmp, dst, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw FileError("cannot link " + dst.string() + ": " + ec.message());
  }
}

void write_ref(const RepoCache& c, const std::string& revision, const std::string& commit) {
  const fs::path ref = c.ref(revision);
  std::error_code ec;
  if (fs::is_regular_file(ref, ec) && read_small(ref) == commit) return;
  fs::create_directories(ref.parent_path());
  const fs::path tmp = ref.string() + unique_suffix();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out) throw FileError("cannot write " + tmp.string());
  }
  fs::rename(tmp, ref, ec);
  if (ec) throw FileError("cannot write " + ref.string() + ": " + ec.message());
}

FileLock::FileLock(const fs::path& path) {
  fs::create_directories(path.parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FileError("cannot open lock " + path.string() + ": " + std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    throw FileError("cannot lock " + path.string() + ": " + std::strerror(err));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

std::vector<CachedRepo> scan_cache(const fs::path& cache) {
  std::vector<CachedRepo> repos;
  std::error_code ec;
  for (fs::directory_iterator it(cache, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!it->is_directory(ec) || name.rfind("models--", 0) != 0) continue;
    CachedRepo repo;
    repo.repo_id = name.substr(8);
    if (size_t dd = repo.repo_id.find("--"); dd != std::string::npos) {
      repo.repo_id.replace(dd, 2, "/");
    }
    repo.size_bytes = dir_bytes(it->path() / "blobs");
    const auto refs = read_refs(it->path());
    for (fs::directory_iterator s(it->path() / "snapshots", ec), send; !ec && s != send;
         s.increment(ec)) {
      CachedRevision rev;
      rev.commit = s->path().filename().string();
      for (const auto& [r, commit] : refs) {
        if (commit == rev.commit) rev.refs.push_back(r);
      }
      rev.runnable = is_runnable(s->path(), rev.files);
      repo.revisions.push_back(std::move(rev));
    }
    ec.clear();
    std::sort(repo.revisions.begin(), repo.revisions.end(),
              [](const auto& a, const auto& b) { return a.commit < b.commit; });
    repos.push_back(std::move(repo));
  }
  std::sort(repos.begin(), repos.end(),
            [](const auto& a, const auto& b) { return a.repo_id < b.repo_id; });
  return repos;
}

uint64_t remove_from_cache(const fs::path& cache, const std::string& repo_id,
                           const std::optional<std::string>& revision) {
  if (repo_id.empty() || repo_id.find("..") != std::string::npos || repo_id.front() == '/' ||
      std::count(repo_id.begin(), repo_id.end(), '/') > 1) {
    throw InvalidArgument("'" + repo_id + "' is not a repo id (org/name)");
  }
  const RepoCache c{cache, repo_id};
  std::error_code ec;
  if (!fs::is_directory(c.dir(), ec)) {
    throw NotFoundError("'" + repo_id + "' is not in the cache " + cache.string());
  }
  if (!revision) {
    const uint64_t freed = dir_bytes(c.dir() / "blobs");
    fs::remove_all(c.dir(), ec);
    fs::remove_all(cache / ".locks" / repo_folder_name(repo_id), ec);
    return freed;
  }
  std::string commit = *revision;
  for (const auto& [r, target] : read_refs(c.dir())) {
    if (r == *revision) commit = target;
  }
  if (!is_commit_hash(commit) || !fs::is_directory(c.snapshot(commit), ec)) {
    throw NotFoundError("revision '" + *revision + "' of '" + repo_id + "' is not in the cache");
  }
  fs::remove_all(c.snapshot(commit), ec);
  for (const auto& [r, target] : read_refs(c.dir())) {
    if (target == commit) fs::remove(c.ref(r), ec);
  }
  return remove_unlinked_blobs(c.dir());
}

}  // namespace hubzoo
