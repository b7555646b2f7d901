// What a Hub repo holds and which of it hubzoo fetches: the model-info answer
// (untrusted: bounded and validated), glob matching and the default selection.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hubzoo {

// GET /api/models/{repo}/revision/{rev} -> the commit and the file list.
struct RepoInfo {
  std::string commit;              // 40 hex
  std::vector<std::string> files;  // "siblings[].rfilename", each a safe relative path
};

// Parses and validates the JSON answer: a bounded size, a 40-hex "sha", at most
// kMaxRepoFiles siblings whose names pass is_safe_repo_path. Throws
// DownloadError naming what is wrong (the server is untrusted).
RepoInfo parse_repo_info(std::string_view json);
constexpr size_t kMaxRepoFiles = 100000;
constexpr size_t kMaxRepoInfoBytes = 16u << 20;

// A repo file name usable under snapshots/<commit>/: relative, '/'-separated,
// no empty, "." or ".." component, no backslash or control character, at most
// 1024 bytes.
bool is_safe_repo_path(std::string_view path);

// An ETag usable as a blob file name: [A-Za-z0-9._-], 1..128 bytes, not "." or "..".
bool is_safe_etag(std::string_view etag);

// W/"abc" or "abc" -> abc (as huggingface_hub's _normalize_etag).
std::string normalize_etag(std::string_view etag);

bool is_commit_hash(std::string_view s);  // 40 lower-case hex digits
bool is_sha256_hex(std::string_view s);   // 64 lower-case hex digits

// fnmatch as Python's (huggingface_hub's allow/ignore patterns): '*' and '?'
// also match '/', [abc] / [!a-z] classes; a pattern ending in '/' matches
// everything under that folder.
bool glob_match(std::string_view pattern, std::string_view name);

struct FileSelection {
  std::vector<std::string> include;  // added to the defaults
  std::vector<std::string> exclude;  // removed from the result
  std::string gguf_file;             // a GGUF repo: this file only (plus include)
};

// The files to fetch, in the repo's order. Defaults: config.json,
// generation_config.json, *.safetensors and their index, tokenizer and chat
// template files, sentence-transformers module files (modules.json,
// N_Name/ folders); never pytorch_model.bin, ONNX, TF or Flax weights. Throws
// DownloadError when gguf_file is not in the repo, or when the repo holds only
// GGUF weights and no gguf_file is named (the message lists them).
std::vector<std::string> select_files(const std::vector<std::string>& files,
                                      const FileSelection& selection);

}  // namespace hubzoo
