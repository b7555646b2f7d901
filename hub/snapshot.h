// Model reference -> snapshot directory.
#pragma once

#include <filesystem>
#include <string>

namespace hubzoo {

struct ModelRef {
  std::string repo_or_path;  // "/path/to/dir" or "org/name"
  std::string revision;      // branch, tag or commit; empty means "main"
};

// Parses "org/name@revision" (revision optional) or a filesystem path.
ModelRef parse_model_ref(const std::string& s);

// "name" or "org/name" with [A-Za-z0-9._-] parts, no "--" or "..": a Hub repo id.
bool is_hub_repo_id(const std::string& s);

// The HF hub cache directory: $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
std::filesystem::path hf_hub_cache_dir();

// Resolves a reference to a directory holding config.json etc.
// - an existing directory is returned as is;
// - a repo id is looked up as <cache>/models--org--name/, where refs/<revision>
//   holds the commit and snapshots/<commit>/ the files (a 40-hex revision is
//   used directly as the commit).
// Throws NotFoundError saying where it looked and how to download the repo
// (`hf download org/name` or huggingface_hub.snapshot_download).
std::filesystem::path resolve_snapshot(const ModelRef& ref);
std::filesystem::path resolve_snapshot(const std::string& ref);

}  // namespace hubzoo
