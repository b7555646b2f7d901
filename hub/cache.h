// The Hugging Face cache layout, written as huggingface_hub writes it:
//   <cache>/models--org--name/blobs/<etag>              file contents (etag: sha256 for LFS)
//   <cache>/models--org--name/blobs/<etag>.incomplete   a download in progress (resumed)
//   <cache>/models--org--name/snapshots/<commit>/<file> -> ../../blobs/<etag> (relative)
//   <cache>/models--org--name/refs/<revision>           the commit, no newline
//   <cache>/.locks/models--org--name/<etag>.lock        flock() held while a blob downloads
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hubzoo {

// "org/name" -> "models--org--name".
std::string repo_folder_name(const std::string& repo_id);

struct RepoCache {
  std::filesystem::path cache;  // the hub cache (hf_hub_cache_dir())
  std::string repo_id;

  std::filesystem::path dir() const { return cache / repo_folder_name(repo_id); }
  std::filesystem::path blob(const std::string& etag) const { return dir() / "blobs" / etag; }
  std::filesystem::path incomplete(const std::string& etag) const {
    return dir() / "blobs" / (etag + ".incomplete");
  }
  std::filesystem::path lock(const std::string& etag) const {
    return cache / ".locks" / repo_folder_name(repo_id) / (etag + ".lock");
  }
  std::filesystem::path snapshot(const std::string& commit) const {
    return dir() / "snapshots" / commit;
  }
  std::filesystem::path ref(const std::string& revision) const { return dir() / "refs" / revision; }
};

// snapshots/<commit>/<file> is a link whose target is a complete blob (or a file).
bool snapshot_has_file(const RepoCache& c, const std::string& commit, const std::string& file);

// Points snapshots/<commit>/<file> at blobs/<etag> with a relative link,
// replacing an existing entry atomically (link to a temporary name, rename).
void link_snapshot_file(const RepoCache& c, const std::string& commit, const std::string& file,
                        const std::string& etag);

// Writes refs/<revision> = commit (no newline) atomically, if it differs.
void write_ref(const RepoCache& c, const std::string& revision, const std::string& commit);

// An exclusive flock() on a lock file, released by the destructor.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// `hubzoo cache ls`: what the cache holds.
struct CachedRevision {
  std::string commit;
  std::vector<std::string> refs;  // revisions (refs/) pointing here
  uint64_t files = 0;
  bool runnable = false;  // config.json with safetensors weights, or a .gguf file
};
struct CachedRepo {
  std::string repo_id;
  uint64_t size_bytes = 0;  // blobs/, complete and incomplete
  std::vector<CachedRevision> revisions;
};
std::vector<CachedRepo> scan_cache(const std::filesystem::path& cache);

// `hubzoo cache rm`: the whole repo (no revision), or one revision's snapshot
// and the refs naming it, then blobs no remaining snapshot links to. Returns
// the bytes freed; throws NotFoundError when there is nothing to remove.
uint64_t remove_from_cache(const std::filesystem::path& cache, const std::string& repo_id,
                           const std::optional<std::string>& revision);

}  // namespace hubzoo
