// Hands one generation's events from the engine thread (the scheduler's
// callbacks) to the HTTP thread that answers the request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/scheduler.h"

namespace hubzoo::server {

class Channel {
 public:
  // Wires `r`'s callbacks to `ch`; they keep it alive as long as the request.
  static void attach(const std::shared_ptr<Channel>& ch, GenerationRequest& r) {
    r.on_token = [ch](const TokenEvent& e) {
      std::lock_guard lock(ch->mu_);
      ch->events_.push_back(e);
      ch->cv_.notify_all();
    };
    r.on_finish = [ch](const Completion& c) {
      std::lock_guard lock(ch->mu_);
      ch->done_ = c;
      ch->cv_.notify_all();
    };
  }
  // Waits up to `timeout` for news; moves pending events into `events` and
  // returns the completion once it arrived (after its events).
  std::optional<Completion> wait(std::vector<TokenEvent>& events,
                                 std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty() || done_.has_value(); });
    events.insert(events.end(), std::make_move_iterator(events_.begin()),
                  std::make_move_iterator(events_.end()));
    events_.clear();
    return done_;
  }
  // Blocks until the generation finished; every event is in `events`.
  Completion wait_done(std::vector<TokenEvent>& events) {
    while (true) {
      if (auto c = wait(events, std::chrono::milliseconds(1000))) return *c;
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenEvent> events_;
  std::optional<Completion> done_;
};

}  // namespace hubzoo::server
