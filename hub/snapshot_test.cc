#include "hub/snapshot.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include "base/test_util.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "base/error.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;

// Saves the cache-related environment and restores it on destruction.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* k : kVars) {
      const char* v = std::getenv(k);
      saved_.emplace_back(k, v ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  ~EnvGuard() {
    for (const auto& [k, v] : saved_) {
      if (v) {
        ::setenv(k.c_str(), v->c_str(), 1);
      } else {
        ::unsetenv(k.c_str());
      }
    }
  }
  void clear() {
    for (const char* k : kVars) ::unsetenv(k);
  }

 private:
  static constexpr const char* kVars[] = {"HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

using test_util::TempDir;

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

using test_util::expect_error;

const std::string kMain = "0123456789abcdef0123456789abcdef01234567";
const std::string kV1 = "fedcba9876543210fedcba9876543210fedcba98";

// <tmp>/hub/models--org--tiny/{refs/main, refs/v1, snapshots/<main>, snapshots/<v1>}
struct FakeCache {
  TempDir tmp;
  fs::path cache = tmp.path() / "hub";
  fs::path repo = cache / "models--org--tiny";
  FakeCache() {
    write_file(repo / "refs" / "main", kMain);  // no trailing newline, as huggingface_hub
    write_file(repo / "refs" / "v1", kV1 + "\n");
    write_file(repo / "snapshots" / kMain / "config.json", "{}");
    fs::create_directories(repo / "snapshots" / kV1);  // no config.json: still returned
  }
};

TEST(ModelRef, Parses) {
  auto r = parse_model_ref("org/name");
  EXPECT_EQ(r.repo_or_path, "org/name");
  EXPECT_EQ(r.revision, "");
  r = parse_model_ref("org/name@v1.0");
  EXPECT_EQ(r.repo_or_path, "org/name");
  EXPECT_EQ(r.revision, "v1.0");
  r = parse_model_ref("org/name@refs/pr/1");
  EXPECT_EQ(r.repo_or_path, "org/name");
  EXPECT_EQ(r.revision, "refs/pr/1");
  r = parse_model_ref("/models/x@y");  // paths are never split
  EXPECT_EQ(r.repo_or_path, "/models/x@y");
  EXPECT_EQ(r.revision, "");
  r = parse_model_ref("./local");
  EXPECT_EQ(r.repo_or_path, "./local");
  EXPECT_EQ(r.revision, "");
}

TEST(HubCacheDir, EnvPrecedence) {
  EnvGuard env;
  env.clear();
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(hf_hub_cache_dir(), fs::path("/h/.cache/huggingface/hub"));
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(hf_hub_cache_dir(), fs::path("/xdg/huggingface/hub"));
  ::setenv("HF_HOME", "/hfhome", 1);
  EXPECT_EQ(hf_hub_cache_dir(), fs::path("/hfhome/hub"));
  ::setenv("HF_HUB_CACHE", "/hubcache", 1);
  EXPECT_EQ(hf_hub_cache_dir(), fs::path("/hubcache"));
  ::setenv("HF_HUB_CACHE", "", 1);  // empty counts as unset
  EXPECT_EQ(hf_hub_cache_dir(), fs::path("/hfhome/hub"));
  ::setenv("HF_HOME", "~/hf", 1);
  EXPECT_EQ(hf_hub_cache_dir(), fs::path("/h/hf/hub"));
}

TEST(ResolveSnapshot, ByBranchTagAndCommit) {
  EnvGuard env;
  FakeCache fc;
  ::setenv("HF_HUB_CACHE", fc.cache.c_str(), 1);
  EXPECT_EQ(resolve_snapshot("org/tiny"), fc.repo / "snapshots" / kMain);
  EXPECT_EQ(resolve_snapshot("org/tiny@main"), fc.repo / "snapshots" / kMain);
  EXPECT_EQ(resolve_snapshot("org/tiny@v1"), fc.repo / "snapshots" / kV1);
  EXPECT_EQ(resolve_snapshot("org/tiny@" + kV1), fc.repo / "snapshots" / kV1);
  EXPECT_EQ(resolve_snapshot(ModelRef{"org/tiny", kMain}), fc.repo / "snapshots" / kMain);
}

TEST(ResolveSnapshot, ViaHfHome) {
  EnvGuard env;
  FakeCache fc;
  env.clear();
  ::setenv("HF_HOME", fc.tmp.path().c_str(), 1);
  EXPECT_EQ(resolve_snapshot("org/tiny"), fc.repo / "snapshots" / kMain);
}

TEST(ResolveSnapshot, MissingRepoSaysWhereAndHowToDownload) {
  EnvGuard env;
  FakeCache fc;
  ::setenv("HF_HUB_CACHE", fc.cache.c_str(), 1);
  expect_error<NotFoundError>(
      [] { resolve_snapshot("other/repo"); },
      {"'other/repo'", "'main'", fc.cache.string(),
       "download it with `hf download other/repo` (or huggingface_hub.snapshot_download) or "
       "pass a local directory"});
}

TEST(ResolveSnapshot, MissingRevisionOrSnapshot) {
  EnvGuard env;
  FakeCache fc;
  ::setenv("HF_HUB_CACHE", fc.cache.c_str(), 1);
  expect_error<NotFoundError>([] { resolve_snapshot("org/tiny@v2"); },
                              {"'org/tiny'", "'v2'", "hf download org/tiny --revision v2"});
  const std::string other = std::string(40, 'a');
  expect_error<NotFoundError>([&] { resolve_snapshot("org/tiny@" + other); },
                              {"'org/tiny'", other, "hf download org/tiny"});
  expect_error<NotFoundError>([] { resolve_snapshot("org/tiny@../../etc"); }, {"'org/tiny'"});
  write_file(fc.repo / "refs" / "broken", "not a hash");
  expect_error<NotFoundError>([] { resolve_snapshot("org/tiny@broken"); }, {"broken"});
}

TEST(ResolveSnapshot, LocalDirectoryWins) {
  EnvGuard env;
  FakeCache fc;
  ::setenv("HF_HUB_CACHE", fc.cache.c_str(), 1);
  const fs::path local = fc.tmp.path() / "org@x";
  fs::create_directories(local);
  EXPECT_EQ(resolve_snapshot(local.string()), local);
  // A relative directory shaped like a repo id is taken as the directory.
  const fs::path cwd = fs::current_path();
  fs::current_path(fc.tmp.path());
  fs::create_directories("org/tiny");
  fs::path got;
  EXPECT_NO_THROW(got = resolve_snapshot("org/tiny"));
  fs::current_path(cwd);
  EXPECT_EQ(got, fs::path("org/tiny"));
}

TEST(ResolveSnapshot, MissingPathIsNoSuchDirectory) {
  expect_error<NotFoundError>([] { resolve_snapshot("/nonexistent/hubzoo/model"); },
                              {"/nonexistent/hubzoo/model", "no such directory"});
  expect_error<NotFoundError>([] { resolve_snapshot("./nonexistent_hubzoo_model"); },
                              {"no such directory"});
  expect_error<NotFoundError>([] { resolve_snapshot("a/b/c"); }, {"no such directory"});
}

TEST(ResolveSnapshot, BareNameTriesDirectoryThenCache) {
  EnvGuard env;
  FakeCache fc;
  ::setenv("HF_HUB_CACHE", fc.cache.c_str(), 1);
  write_file(fc.cache / "models--gpt2" / "refs" / "main", kMain);
  fs::create_directories(fc.cache / "models--gpt2" / "snapshots" / kMain);
  EXPECT_EQ(resolve_snapshot("gpt2"), fc.cache / "models--gpt2" / "snapshots" / kMain);
  expect_error<NotFoundError>([] { resolve_snapshot("nonexistent_hubzoo_model"); },
                              {"no such directory", "hf download nonexistent_hubzoo_model"});
}

}  // namespace
}  // namespace hubzoo
