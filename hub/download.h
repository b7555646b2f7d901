// Downloading a repo snapshot into the HF cache (the layout in hub/cache.h),
// and the one entry every front end calls before loading a model.
#pragma once

#include <filesystem>
#include <string>

#include "hub/http.h"
#include "hub/progress.h"
#include "hub/repo_files.h"

namespace hubzoo {

struct PullOptions {
  std::string revision;  // branch, tag or commit; empty: "main"
  FileSelection files;
  ProgressOptions progress;
  int workers = 8;  // files downloaded at once
};

// Fetches the selected files of `repo_id` at `revision` that the cache lacks
// and returns snapshots/<commit>/. Each blob streams to blobs/<etag>.incomplete
// (resumed with a Range request), is checked against its sha256 (LFS files) and
// renamed into place under a per-blob lock; links go into snapshots/<commit>/
// only for complete blobs, and refs/<revision> is written last, so a killed
// download never leaves a snapshot that resolves as complete.
std::filesystem::path pull_snapshot(const std::string& repo_id, const PullOptions& options);

struct EnsureOptions {
  bool offline = false;   // --offline; HF_HUB_OFFLINE=1 means the same
  std::string gguf_file;  // a GGUF repo: the one file to fetch
  ProgressOptions progress;
};

// HF_HUB_OFFLINE set to 1/true/yes/on.
bool hub_offline_from_env();

// A model reference ("org/name[@rev]" or a directory) -> its snapshot
// directory, downloading what is missing unless offline (then resolve_snapshot
// and its NotFoundError, unchanged). When the Hub cannot be reached and the
// cache already resolves the reference, the cached snapshot is used.
std::filesystem::path ensure_snapshot(const std::string& model_ref, const EnsureOptions& options);

}  // namespace hubzoo
