#include "hub/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>

namespace hubzoo {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string format_eta(double s) {
  if (!(s >= 0) || s > 359999) return "--:--";
  const auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02" PRId64 ":%02" PRId64, t / 60, t % 60);
  return buf;
}

}  // namespace

std::string format_bytes(uint64_t n) {
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

DownloadProgress::DownloadProgress(ProgressOptions options) : options_(std::move(options)) {
  if (options_.mode == ProgressMode::kAuto) {
    options_.mode = !options_.log && ::isatty(::fileno(options_.out)) ? ProgressMode::kBar
                                                                      : ProgressMode::kLines;
  }
  bar_ = options_.mode == ProgressMode::kBar;
}

void DownloadProgress::emit(const std::string& line) {
  if (options_.mode == ProgressMode::kQuiet) return;
  if (options_.log) {
    options_.log(line);
    return;
  }
  std::fprintf(options_.out, bar_ ? "\r\033[K%s\n" : "%s\n", line.c_str());
  std::fflush(options_.out);
}

void DownloadProgress::begin(const std::string& repo, size_t files, uint64_t total_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  repo_ = repo;
  files_ = files;
  total_ = total_bytes;
  start_ = std::chrono::steady_clock::now();
  last_draw_ = start_ - std::chrono::seconds(1);  // the first bytes draw the bar
  if (files > 0) {
    emit("downloading " + repo + ": " + std::to_string(files) + " files, " +
         format_bytes(total_bytes));
  }
}

void DownloadProgress::redraw_locked(const std::string& file, uint64_t file_done,
                                     uint64_t file_size) {
  const double elapsed = std::max(seconds_since(start_), 1e-3);
  const double rate = static_cast<double>(done_) / elapsed;
  const double eta = rate > 0 && total_ >= done_ ? static_cast<double>(total_ - done_) / rate : -1;
  auto pct = [](uint64_t a, uint64_t b) { return b ? 100.0 * static_cast<double>(a) / b : 0.0; };
  std::fprintf(options_.out, "\r\033[K[%zu/%zu] %s %3.0f%% | total %3.0f%% %s/%s %s/s ETA %s",
               files_done_, files_, file.c_str(), pct(file_done, file_size), pct(done_, total_),
               format_bytes(done_).c_str(), format_bytes(total_).c_str(),
               format_bytes(static_cast<uint64_t>(rate)).c_str(), format_eta(eta).c_str());
  std::fflush(options_.out);
}

void DownloadProgress::add_bytes(const std::string& file, uint64_t n, uint64_t file_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += n;
  if (current_ != file) {
    current_ = file;
    current_done_ = 0;
  }
  current_done_ += n;
  if (!bar_) return;
  if (seconds_since(last_draw_) < 0.1) return;  // at most 10 redraws a second
  last_draw_ = std::chrono::steady_clock::now();
  redraw_locked(file, current_done_, file_size);
}

void DownloadProgress::file_done(const std::string& file, uint64_t size, bool cached) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++files_done_;
  const double rate = static_cast<double>(done_) / std::max(seconds_since(start_), 1e-3);
  std::string line = "[" + std::to_string(files_done_) + "/" + std::to_string(files_) + "] " +
                     file + " " + format_bytes(size);
  line += cached ? " (cached)"
                 : " (total " + format_bytes(done_) + " at " +
                       format_bytes(static_cast<uint64_t>(rate)) + "/s)";
  emit(line);
}

void DownloadProgress::finish(const std::string& snapshot) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (files_ == 0) return;
  char buf[64];
  std::snprintf(buf, sizeof buf, " in %.1f s", seconds_since(start_));
  emit("downloaded " + repo_ + " (" + format_bytes(done_) + buf + ") to " + snapshot);
}

}  // namespace hubzoo
