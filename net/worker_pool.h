// A fixed set of threads running tasks from a bounded queue: the HTTP
// server's handlers. A full queue refuses at once (the caller answers 503)
// rather than growing.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hubzoo::net {

class WorkerPool {
 public:
  WorkerPool(int threads, size_t max_queued) : max_queued_(max_queued) {
    std::lock_guard lock(mu_);  // threads_ is read under it by try_submit
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~WorkerPool() { stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False when every thread is taken and `max_queued` tasks wait already (or
  // the pool stopped).
  bool try_submit(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      if (stopped_ || queue_.size() + running_ >= threads_.size() + max_queued_) return false;
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return true;
  }
  // Drops the tasks not yet started; waits for the running ones.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
      queue_.clear();
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopped_ || !queue_.empty(); });
      if (stopped_) return;
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      lock.unlock();
      task();
      task = nullptr;  // its captures die outside the lock
      lock.lock();
      --running_;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  size_t max_queued_;
  size_t running_ = 0;  // tasks a thread has taken: free threads take the rest at once
  bool stopped_ = false;
};

}  // namespace hubzoo::net
