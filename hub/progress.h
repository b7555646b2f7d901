// Download progress on stderr: on a terminal, one redrawn line with the current
// file's and the total's percentage, rate and ETA; otherwise one line per file
// (or per line through a logger, for the server); nothing when quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

namespace hubzoo {

enum class ProgressMode { kAuto, kQuiet, kLines, kBar };

struct ProgressOptions {
  ProgressMode mode = ProgressMode::kAuto;  // kAuto: kBar on a terminal, else kLines
  std::FILE* out = stderr;
  // kLines: each line goes here instead of `out` (the server's log).
  std::function<void(const std::string&)> log;
};

// "1.5 MB", "312 kB", "12 B".
std::string format_bytes(uint64_t n);

class DownloadProgress {
 public:
  explicit DownloadProgress(ProgressOptions options);
  // A repo's download begins: files to fetch and their total size (0: unknown).
  void begin(const std::string& repo, size_t files, uint64_t total_bytes);
  void add_bytes(const std::string& file, uint64_t n, uint64_t file_size);  // thread-safe
  void file_done(const std::string& file, uint64_t size, bool cached);      // thread-safe
  void finish(const std::string& snapshot);

 private:
  void emit(const std::string& line);
  void redraw_locked(const std::string& file, uint64_t file_done, uint64_t file_size);

  ProgressOptions options_;
  bool bar_ = false;
  std::mutex mutex_;
  std::string repo_;
  size_t files_ = 0, files_done_ = 0;
  uint64_t total_ = 0, done_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::string current_;
  uint64_t current_done_ = 0;
};

}  // namespace hubzoo
