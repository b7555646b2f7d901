#include "ops/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace hubzoo {
namespace {

// True while this thread runs a chunk of some pool's job: nested parallel_for
// calls then run inline instead of deadlocking on the busy pool.
thread_local bool t_in_job = false;

// Workers and the caller spin this long before sleeping on a condition variable:
// a decode step issues hundreds of short jobs, and a futex wake-up per job
// would cost more than the jobs themselves.
constexpr auto kSpin = std::chrono::microseconds(100);
constexpr auto kBusy = std::chrono::microseconds(20);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until pred() or kSpin has elapsed; returns pred(). After a short busy
// spin it yields, so that on an oversubscribed machine the thread it waits for
// can take this core.
template <typename Pred>
bool spin_until(Pred pred) {
  // Busy (pause) for up to kBusy first: between the jobs of a decode step the
  // gap is a few microseconds, and a thread inside sched_yield() answers late.
  const auto busy_until = std::chrono::steady_clock::now() + kBusy;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if (i % 64 == 63 && std::chrono::steady_clock::now() > busy_until) break;
  }
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    if (pred()) return true;
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() > deadline) return pred();
  }
}

// Chunk c of `chunks` over [0, n) in units of `grain`: contiguous, sized evenly.
void chunk_range(int64_t n, int64_t grain, int chunks, int c, int64_t* begin, int64_t* end) {
  const int64_t units = (n + grain - 1) / grain;
  *begin = std::min(n, units * c / chunks * grain);
  *end = std::min(n, units * (c + 1) / chunks * grain);
}

constexpr uint64_t kChunkMask = 0xffff;

uint64_t ticket_gen(uint64_t t) { return t >> 32; }
int ticket_chunks(uint64_t t) { return static_cast<int>((t >> 16) & kChunkMask); }
int ticket_next(uint64_t t) { return static_cast<int>(t & kChunkMask); }

}  // namespace

namespace {
// Chunks are counted in 16 bits of the ticket.
int resolve_threads(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(num_threads, 1, static_cast<int>(kChunkMask));
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  num_threads_ = resolve_threads(num_threads);
  threads_.reserve(num_threads_ - 1);
  for (int i = 0; i + 1 < num_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

std::shared_ptr<ThreadPool> ThreadPool::shared(int num_threads) {
  static std::mutex mu;
  static std::map<int, std::weak_ptr<ThreadPool>> pools;  // by resolved size
  const int n = resolve_threads(num_threads);
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<ThreadPool> pool = pools[n].lock();
  if (!pool) {
    pool = std::make_shared<ThreadPool>(n);
    pools[n] = pool;
  }
  return pool;
}

void ThreadPool::run_chunks(uint64_t gen) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    if (ticket_gen(t) != gen || ticket_next(t) >= ticket_chunks(t)) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      continue;  // t reloaded
    }
    // Chunk ticket_next(t) of job `gen` is ours: the job cannot finish (and its
    // fields cannot change) before we report it done below.
    const int chunks = ticket_chunks(t);
    int64_t begin, end;
    chunk_range(job_n_, job_grain_, chunks, ticket_next(t), &begin, &end);
    if (begin < end) {
      const bool was_in_job = t_in_job;
      t_in_job = true;
      try {
        (*job_)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      t_in_job = was_in_job;
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    const auto started = [&] {
      return ticket_gen(ticket_.load(std::memory_order_acquire)) != seen || stop_.load();
    };
    if (!spin_until(started)) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, started);
    }
    if (stop_.load()) return;
    seen = ticket_gen(ticket_.load(std::memory_order_acquire));
    run_chunks(seen);
  }
}

void ThreadPool::wait_for_chunks() {
  const auto done = [&] { return done_.load(std::memory_order_acquire) == job_chunks_; };
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, done);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, RangeFn fn, int max_chunks) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int64_t cap =
      num_threads_ <= 1 ? 1 : std::clamp<int64_t>(max_chunks, num_threads_, kChunkMask);
  const int chunks = static_cast<int>(std::min<int64_t>(units, cap));
  if (chunks <= 1 || t_in_job) {
    fn(0, n);
    return;
  }

  std::lock_guard<std::mutex> call_lock(call_mu_);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    job_chunks_ = chunks;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    gen = ticket_gen(ticket_.load(std::memory_order_relaxed)) + 1;
    ticket_.store(gen << 32 | static_cast<uint64_t>(chunks) << 16, std::memory_order_release);
  }
  cv_start_.notify_all();
  run_chunks(gen);
  wait_for_chunks();

  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = nullptr;
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace hubzoo
