// Test support for the engine's gtests (scheduler_test.cc,
// seq2seq_causal_test.cc): a request's events collected as the Scheduler
// calls back, and requests run to completion on a Scheduler.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/scheduler.h"

namespace hubzoo {

// Collects one request's events; wait() blocks until it finished.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenEvent> events;
  std::optional<Completion> done;
  void attach(GenerationRequest& r) {
    r.on_token = [this](const TokenEvent& e) {
      std::lock_guard lock(mu);
      events.push_back(e);
    };
    r.on_finish = [this](const Completion& c) {
      std::lock_guard lock(mu);
      done = c;
      cv.notify_all();
    };
  }
  Completion wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done.has_value(); });
    return *done;
  }
};

// Submits `requests` and waits for them all; their completions in order.
// One at a time (Scheduler::submit), or together (submit_all: admitted
// together, so they share steps whatever the engine thread's timing).
inline std::vector<Completion> submit_and_wait(Scheduler& s,
                                               std::vector<GenerationRequest> requests,
                                               bool together = false) {
  std::vector<Collector> collectors(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    collectors[i].attach(requests[i]);
    if (!together) s.submit(std::move(requests[i]));
  }
  if (together) s.submit_all(std::move(requests));
  std::vector<Completion> out;
  for (auto& c : collectors) out.push_back(c.wait());
  return out;
}

}  // namespace hubzoo
