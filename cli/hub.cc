// `hubzoo pull`, `hubzoo cache ls|rm`, and the download every -m command does
// before loading (hub/download.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "hub/cache.h"
#include "hub/download.h"
#include "hub/snapshot.h"

namespace hubzoo::cli {

void add_offline_flag(CLI::App* cmd, bool& offline) {
  cmd->add_flag("--offline", offline,
                "use the HF cache only, never download (as HF_HUB_OFFLINE=1)");
}

void ensure_model(const std::string& model, const std::string& gguf_file, bool offline,
                  const std::string& log_prefix) {
  std::error_code ec;
  // An existing path (a snapshot folder or a .gguf file) is the loader's to read.
  if (model.empty() || std::filesystem::exists(model, ec)) return;
  EnsureOptions o;
  o.offline = offline;
  o.gguf_file = gguf_file;
  if (!log_prefix.empty()) {
    o.progress.log = [log_prefix](const std::string& line) {
      std::fprintf(stderr, "%s%s\n", log_prefix.c_str(), line.c_str());
      std::fflush(stderr);
    };
  }
  ensure_snapshot(model, o);
}

CLI::App* add_pull_command(CLI::App& app, PullArgs& a) {
  auto* cmd = app.add_subcommand("pull", "download a model repo into the HF cache");
  cmd->add_option("repo", a.repo, "ORG/NAME[@REVISION] (branch, tag or commit)")->required();
  // One glob per flag, so `--include '*.bin' org/name` keeps the repo positional.
  cmd->add_option("--include", a.include, "also fetch files matching this glob (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--exclude", a.exclude, "skip files matching this glob (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--gguf-file", a.gguf_file, "a GGUF repo: the one .gguf file to fetch");
  cmd->add_option("--workers", a.workers, "files downloaded at once")->check(CLI::Range(1, 64));
  cmd->add_flag("-q,--quiet", a.quiet, "no progress output");
  return cmd;
}

int run_pull(const PullArgs& a) {
  const ModelRef ref = parse_model_ref(a.repo);
  if (!is_hub_repo_id(ref.repo_or_path)) {
    throw InvalidArgument("'" + a.repo + "' is not a repo id (ORG/NAME[@REVISION])");
  }
  if (hub_offline_from_env()) throw InvalidArgument("HF_HUB_OFFLINE is set: pull needs the Hub");
  PullOptions o;
  o.revision = ref.revision;
  o.files = {a.include, a.exclude, a.gguf_file};
  o.workers = a.workers;
  if (a.quiet) o.progress.mode = ProgressMode::kQuiet;
  const auto snap = pull_snapshot(ref.repo_or_path, o);
  std::printf("%s\n", snap.string().c_str());
  return 0;
}

CLI::App* add_cache_command(CLI::App& app, CacheArgs& a) {
  auto* cmd = app.add_subcommand("cache", "list or remove repos in the HF cache");
  cmd->require_subcommand(1);
  auto* ls = cmd->add_subcommand("ls", "repos, revisions, sizes and what hubzoo can run");
  ls->add_option("--format", a.format)->check(CLI::IsMember({"text", "json"}));
  ls->callback([&a] { a.action = "ls"; });
  auto* rm = cmd->add_subcommand("rm", "remove a repo, or one revision of it (ORG/NAME@REV)");
  rm->add_option("repo", a.repo, "ORG/NAME[@REVISION]")->required();
  rm->callback([&a] { a.action = "rm"; });
  return cmd;
}

namespace {

nlohmann::json cache_json(const std::vector<CachedRepo>& repos) {
  nlohmann::json out = nlohmann::json::array();
  for (const CachedRepo& r : repos) {
    nlohmann::json revs = nlohmann::json::array();
    for (const CachedRevision& v : r.revisions) {
      revs.push_back(
          {{"commit", v.commit}, {"refs", v.refs}, {"files", v.files}, {"runnable", v.runnable}});
    }
    out.push_back({{"repo", r.repo_id}, {"size_bytes", r.size_bytes}, {"revisions", revs}});
  }
  return out;
}

void print_cache_table(const std::vector<CachedRepo>& repos) {
  std::printf("%-44s %-10s %-12s %9s %6s %s\n", "REPO", "SIZE", "COMMIT", "REFS", "FILES",
              "RUNNABLE");
  for (const CachedRepo& r : repos) {
    if (r.revisions.empty()) {
      std::printf("%-44s %-10s %-12s\n", r.repo_id.c_str(), format_bytes(r.size_bytes).c_str(),
                  "-");
    }
    for (const CachedRevision& v : r.revisions) {
      std::string refs;
      for (const auto& ref : v.refs) refs += (refs.empty() ? "" : ",") + ref;
      std::printf("%-44s %-10s %-12s %9s %6llu %s\n", r.repo_id.c_str(),
                  format_bytes(r.size_bytes).c_str(), v.commit.substr(0, 12).c_str(),
                  refs.empty() ? "-" : refs.c_str(), static_cast<unsigned long long>(v.files),
                  v.runnable ? "yes" : "no");
    }
  }
}

}  // namespace

int run_cache(const CacheArgs& a) {
  const auto cache = hf_hub_cache_dir();
  if (a.action == "ls") {
    const auto repos = scan_cache(cache);
    if (a.format == "json") {
      std::cout << cache_json(repos).dump(2) << "\n";
    } else {
      print_cache_table(repos);
    }
    return 0;
  }
  const ModelRef ref = parse_model_ref(a.repo);
  std::optional<std::string> revision;
  if (!ref.revision.empty()) revision = ref.revision;
  const uint64_t freed = remove_from_cache(cache, ref.repo_or_path, revision);
  std::printf("removed %s (%s freed)\n", a.repo.c_str(), format_bytes(freed).c_str());
  return 0;
}

}  // namespace hubzoo::cli
