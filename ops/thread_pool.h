// The one parallelism primitive: a persistent pool running parallel_for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hubzoo {

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each chunk a
  // multiple of `grain` (except the last). The calling thread takes part.
  // Blocks until all chunks are done. Chunking never affects results: callers
  // only split independent work (rows, columns), never a reduction.
  // The first exception thrown by fn is rethrown here once every chunk is done.
  // A parallel_for issued from inside fn runs inline on the calling thread.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  // Implementation detail, see thread_pool.cc.
  void worker(int index);
  void run_chunk(int chunk);
  void wait_for_workers();

  int num_threads_ = 1;
  std::vector<std::thread> threads_;
  std::mutex call_mu_;  // one parallel_for at a time per pool
  std::mutex mu_;       // guards the sleeping side of the job hand-off
  std::condition_variable cv_start_, cv_done_;

  // The job being run; written before generation_ is bumped (release).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_grain_ = 1;
  int job_chunks_ = 0;
  std::exception_ptr error_;  // first exception, guarded by mu_

  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers that have not finished the current job
  std::atomic<bool> stop_{false};
};

}  // namespace hubzoo
