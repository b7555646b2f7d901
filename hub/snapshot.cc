#include "hub/snapshot.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include "base/error.h"

namespace hubzoo {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string home_dir() {
  std::string h = env("HOME");
  if (!h.empty()) return h;
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return {};
}

// "~" and "~/x" -> $HOME, "$HOME/x" (as Python's expanduser).
fs::path expand_user(const std::string& s) {
  if (s == "~" || s.rfind("~/", 0) == 0) return fs::path(home_dir() + s.substr(1));
  return fs::path(s);
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Hub repo ids: "name" or "org/name" with [A-Za-z0-9._-] parts, no "--" or "..".
bool is_repo_id(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash != std::string::npos && s.find('/', slash + 1) != std::string::npos) return false;
  auto part_ok = [](std::string_view p) {
    if (p.empty() || p.front() == '-' || p.front() == '.' || p.back() == '.') return false;
    if (p.find("--") != std::string_view::npos || p.find("..") != std::string_view::npos) {
      return false;
    }
    return std::all_of(p.begin(), p.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '-' || c == '_' || c == '.';
    });
  };
  if (slash == std::string::npos) return part_ok(s);
  return part_ok(std::string_view(s).substr(0, slash)) &&
         part_ok(std::string_view(s).substr(slash + 1));
}

// Strings that can only mean a filesystem path.
bool looks_like_path(const std::string& s) {
  return s.empty() || s[0] == '/' || s[0] == '.' || s[0] == '~' ||
         s.find('\\') != std::string::npos || !is_repo_id(s);
}

// A revision must stay inside refs/ and snapshots/ when used as a path.
bool safe_revision(const std::string& r) {
  if (r.empty() || r[0] == '/') return false;
  for (const auto& c : fs::path(r)) {
    if (c == ".." || c == ".") return false;
  }
  return true;
}

std::string download_hint(const std::string& repo, const std::string& revision) {
  std::string cmd = "hf download " + repo;
  if (revision != "main") cmd += " --revision " + revision;
  return "download it with `" + cmd +
         "` (or huggingface_hub.snapshot_download) or pass a local directory";
}

}  // namespace

bool is_hub_repo_id(const std::string& s) { return is_repo_id(s); }

ModelRef parse_model_ref(const std::string& s) {
  std::error_code ec;
  if (fs::is_directory(expand_user(s), ec)) return {s, ""};
  // Repo ids never contain '@'; revisions may contain '/' (e.g. "refs/pr/1").
  const size_t at = s.find('@');
  if (at != std::string::npos && !looks_like_path(s.substr(0, at))) {
    return {s.substr(0, at), s.substr(at + 1)};
  }
  return {s, ""};
}

fs::path hf_hub_cache_dir() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return expand_user(v);
  if (std::string v = env("HF_HOME"); !v.empty()) return expand_user(v) / "hub";
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) {
    return expand_user(v) / "huggingface" / "hub";
  }
  return fs::path(home_dir()) / ".cache" / "huggingface" / "hub";
}

fs::path resolve_snapshot(const ModelRef& ref) {
  std::error_code ec;
  const fs::path as_path = expand_user(ref.repo_or_path);
  if (fs::is_directory(as_path, ec)) return as_path;  // an existing directory wins

  const std::string& repo = ref.repo_or_path;
  if (looks_like_path(repo)) {
    if (fs::exists(as_path, ec)) throw NotFoundError(repo + ": not a directory");
    throw NotFoundError(repo + ": no such directory");
  }
  const std::string revision = ref.revision.empty() ? "main" : ref.revision;
  const fs::path cache = hf_hub_cache_dir();
  std::string folder = "models--" + repo;  // "org/name" -> "models--org--name"
  if (size_t slash = folder.find('/'); slash != std::string::npos) folder.replace(slash, 1, "--");
  const fs::path repo_dir = cache / folder;

  // Bare names ("gpt2") may also have been meant as a local directory.
  const std::string prefix = repo.find('/') == std::string::npos && ref.revision.empty()
                                 ? "no such directory '" + repo + "', and "
                                 : "";
  auto not_found = [&](const std::string& why) {
    return NotFoundError(prefix + "model '" + repo + "' (revision '" + revision +
                         "') not found in the Hugging Face cache " + cache.string() + ": " + why +
                         "; " + download_hint(repo, revision));
  };

  if (!safe_revision(revision)) throw not_found("invalid revision");
  if (!fs::is_directory(repo_dir, ec)) throw not_found(repo_dir.string() + " does not exist");

  std::string commit = revision;
  const fs::path ref_file = repo_dir / "refs" / revision;
  if (fs::is_regular_file(ref_file, ec)) {
    std::ifstream in(ref_file);
    std::getline(in, commit);
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) {
      commit.pop_back();
    }
    if (!is_commit_hash(commit)) {
      throw not_found(ref_file.string() + " does not hold a commit hash");
    }
  } else if (!is_commit_hash(revision)) {
    throw not_found("no ref " + ref_file.string());
  }
  const fs::path snap = repo_dir / "snapshots" / commit;
  if (!fs::is_directory(snap, ec)) throw not_found(snap.string() + " does not exist");
  return snap;
}

fs::path resolve_snapshot(const std::string& ref) { return resolve_snapshot(parse_model_ref(ref)); }

}  // namespace hubzoo
