// Counters of the HTTP layer and the Prometheus text exposition of them plus
// the scheduler's state (format 0.0.4).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/scheduler.h"

namespace hubzoo::server {

class Metrics {
 public:
  void count_response(const std::string& path, int status);
  void count_disconnect() { ++disconnects_; }
  void observe_completion(const Completion& c);
  std::string render(const SchedulerStats& s, const std::string& model) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> responses_;
  std::atomic<uint64_t> disconnects_{0};
  double ttft_sum_ = 0, latency_sum_ = 0, queue_sum_ = 0;
  uint64_t ttft_count_ = 0, completions_ = 0;
};

// Resident set size of this process, from /proc/self/statm (0 if unknown).
int64_t resident_memory_bytes();

}  // namespace hubzoo::server
