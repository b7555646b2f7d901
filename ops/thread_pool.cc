#include "ops/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace hubzoo {
namespace {

// True while this thread runs a chunk of some pool's job: nested parallel_for
// calls then run inline instead of deadlocking on the busy pool.
thread_local bool t_in_job = false;
// The calling thread's prefetch_after_next_job() regions, until its next
// parallel_for; and a worker's copy of its job's, to fetch after its part.
thread_local std::vector<ThreadPool::Region> t_pending_later, t_later;

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

// A balanced job's share: grains [next, end) and the low bits of the job's
// generation, so that a thread still looking at an earlier job's shares
// cannot claim from a later one's (the tag would have to come round again,
// 2^24 jobs, between one thread's load and its compare-exchange).
constexpr int kShareBits = 20;
constexpr int64_t kMaxGrains = int64_t{1} << kShareBits;
constexpr uint64_t kShareMask = kMaxGrains - 1;
uint64_t share_tag(uint64_t gen) { return gen & 0xffffff; }

// A balanced job's grain and number of grains: with kMaxGrains or more, the
// grains are made coarser, still multiples of the caller's.
void balanced_grains(int64_t n, int64_t& grain, int64_t& grains) {
  grain = std::max<int64_t>(1, grain);
  grains = (n + grain - 1) / grain;
  if (grains >= kMaxGrains) {
    grain *= (grains + kMaxGrains - 2) / (kMaxGrains - 1);
    grains = (n + grain - 1) / grain;
  }
}
uint64_t share(uint64_t gen, int64_t next, int64_t end) {
  return share_tag(gen) << (2 * kShareBits) | static_cast<uint64_t>(end) << kShareBits |
         static_cast<uint64_t>(next);
}
uint64_t share_gen(uint64_t s) { return s >> (2 * kShareBits); }
int64_t share_next(uint64_t s) { return static_cast<int64_t>(s & kShareMask); }
int64_t share_end(uint64_t s) { return static_cast<int64_t>(s >> kShareBits & kShareMask); }

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
  shares_ = std::make_unique<Share[]>(num_threads_);
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
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

void ThreadPool::run_chunks(uint64_t gen, int self) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  bool claimed = false;
  for (;;) {
    if (ticket_gen(t) != gen || ticket_next(t) >= ticket_chunks(t)) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      continue;  // t reloaded
    }
    // Chunk ticket_next(t) of job `gen` is ours: the job cannot finish (and its
    // fields cannot change) before we report it done below.
    if (!claimed) {
      take_later(self);
      claimed = true;
    }
    const int chunks = ticket_chunks(t);
    int64_t begin, end;
    chunk_range(job_n_, job_grain_, chunks, ticket_next(t), &begin, &end);
    if (begin < end) run_range(begin, end);
    finish(1, chunks);
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::finish(int done, int total) {
  if (done_.fetch_add(done, std::memory_order_acq_rel) + done == total) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_done_.notify_one();
  }
}

// Runs grains [g0, g1) of the balanced job; the caller has claimed them, so
// the job (and its fields) lives until they are reported done.
void ThreadPool::run_grains(int64_t g0, int64_t g1) {
  run_range(g0 * job_grain_, std::min(job_n_, g1 * job_grain_));
  finish(static_cast<int>(g1 - g0), job_chunks_);
}

// fn(begin, end) of the current job, its exception kept for the caller.
void ThreadPool::run_range(int64_t begin, int64_t end) {
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

// The caller saw generation `gen` announced, so every share of that job was
// set before: a share with another tag belongs to a job before or after it
// and is left alone.
void ThreadPool::run_shares(uint64_t gen, int self) {
  std::atomic<uint64_t>& own = shares_[self].range;
  uint64_t s = own.load(std::memory_order_acquire);
  Region after;
  bool claimed = false;
  for (;;) {
    const int64_t next = share_next(s), end = share_end(s);
    if (share_gen(s) != share_tag(gen) || next >= end) {
      if (!steal_into(gen, self)) break;
      s = own.load(std::memory_order_acquire);
      continue;
    }
    // The first piece is 7/8 of the share, the rest half of what is left.
    const int64_t take = claimed ? (end - next + 1) / 2 : (7 * (end - next) + 7) / 8;
    if (!own.compare_exchange_weak(s, share(gen, next + take, end), std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {
      continue;  // s reloaded: a thief took the back
    }
    if (!claimed) {  // the job lives until these grains are done: `after` is its own
      after = shares_[self].after;
      take_later(self);
      claimed = true;
    }
    run_grains(next, next + take);
    s = own.load(std::memory_order_acquire);
  }
  // The caller leaves at once (its `after` is empty); a worker fetches ahead
  // while it would otherwise wait for the next job: first what the caller
  // named for after this job, then its share of the next hinted one.
  if (claimed) fetch_later(gen);
  const char* p = static_cast<const char*>(after.at);
  for (int64_t i = 0; i < after.bytes; i += 64) __builtin_prefetch(p + i);
}

void ThreadPool::take_later(int self) {
  t_later.clear();
  if (self != 0) t_later.insert(t_later.end(), later_.begin(), later_.end());
}

void ThreadPool::fetch_later(uint64_t gen) {
  int64_t budget = kMaxLaterBytes;
  for (const Region& r : t_later) {
    const char* p = static_cast<const char*>(r.at);
    const int64_t bytes = std::min(r.bytes, budget);
    budget -= bytes;
    for (int64_t i = 0; i < bytes; i += 64) {
      // Every KiB, give way to a job announced meanwhile.
      if (i % 1024 == 0 && ticket_gen(ticket_.load(std::memory_order_relaxed)) != gen) {
        t_later.clear();
        return;
      }
      __builtin_prefetch(p + i);
    }
  }
  t_later.clear();
}

// Moves the back half of the largest other share of job `gen` into thread
// self's share; false when none is left.
bool ThreadPool::steal_into(uint64_t gen, int self) {
  for (;;) {
    int victim = -1;
    uint64_t vs = 0;
    int64_t most = 0;
    for (int t = 0; t < num_threads_; ++t) {
      const uint64_t s = shares_[t].range.load(std::memory_order_acquire);
      if (t != self && share_gen(s) == share_tag(gen) && share_end(s) - share_next(s) > most) {
        most = share_end(s) - share_next(s);
        victim = t;
        vs = s;
      }
    }
    if (victim < 0) return false;
    const int64_t next = share_next(vs), end = share_end(vs), take = (end - next + 1) / 2;
    if (shares_[victim].range.compare_exchange_strong(vs, share(gen, next, end - take),
                                                      std::memory_order_acq_rel)) {
      // The job lives until the stolen grains are done, and while this
      // thread's share is empty no one else writes it.
      shares_[self].range.store(share(gen, end - take, end), std::memory_order_release);
      return true;
    }
  }
}

void ThreadPool::worker(int self) {
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
    const uint64_t t = ticket_.load(std::memory_order_acquire);
    seen = ticket_gen(t);
    if (ticket_chunks(t) > 0) {
      run_chunks(seen, self);
      fetch_later(seen);
    } else {  // a balanced job
      run_shares(seen, self);
    }
  }
}

void ThreadPool::wait_for_chunks() {
  const auto done = [&] { return done_.load(std::memory_order_acquire) == job_chunks_; };
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, done);
}

void ThreadPool::prefetch_after_next_job(const Region* regions, int64_t count) {
  t_pending_later.assign(regions, regions + std::max<int64_t>(0, count));
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

  run_job(fn, n, grain, chunks, false);
}

void ThreadPool::parallel_for_balanced(int64_t n, int64_t grain, RangeFn fn) {
  parallel_for_balanced(n, grain, fn, StreamHint{});
}

void ThreadPool::parallel_for_balanced(int64_t n, int64_t grain, RangeFn fn,
                                       const StreamHint& hint) {
  if (n <= 0) return;
  int64_t grains;
  balanced_grains(n, grain, grains);
  if (num_threads_ <= 1 || grains <= 1 || t_in_job) {
    fn(0, n);
    return;
  }

  run_job(fn, n, grain, static_cast<int>(grains), true, hint.where ? &hint : nullptr);
}

int64_t ThreadPool::balanced_share_begin(int64_t n, int64_t grain, int t) const {
  int64_t grains;
  balanced_grains(n, grain, grains);
  return std::min(n, grains * t / num_threads_ * grain);
}

std::vector<ThreadPool::Region> ThreadPool::next_stream(const void* key) const {
  std::lock_guard<std::mutex> lock(call_mu_);
  const auto it = next_streams_.find(key);
  return it == next_streams_.end() ? std::vector<Region>{} : it->second;
}

std::vector<ThreadPool::Region> ThreadPool::later_regions() const {
  std::lock_guard<std::mutex> lock(call_mu_);
  return later_;
}

void ThreadPool::plan_prefetch(int64_t n, int64_t grain, int64_t grains, const StreamHint* hint) {
  for (int t = 0; t < num_threads_; ++t) shares_[t].after = Region{};
  if (!hint) return;
  stream_starts_.resize(num_threads_);
  for (int t = 0; t < num_threads_; ++t) {
    stream_starts_[t] = hint->where(hint->ctx, std::min(n, grains * t / num_threads_ * grain));
    stream_starts_[t].bytes = std::min(stream_starts_[t].bytes, kPrefetchAheadBytes);
  }
  if (last_stream_key_) {
    if (next_streams_.size() >= kMaxStreamKeys && !next_streams_.count(last_stream_key_)) {
      next_streams_.clear();  // bounded: forget all rather than grow
    }
    next_streams_[last_stream_key_] = stream_starts_;
  }
  last_stream_key_ = hint->key;
  const auto it = next_streams_.find(hint->key);
  if (it == next_streams_.end()) return;
  for (int t = 1; t < num_threads_; ++t) shares_[t].after = it->second[t];
}

// Announces the job (`count` chunks, or grains of a balanced job), takes part
// in it, waits for every part, then rethrows the first exception.
void ThreadPool::run_job(const RangeFn& fn, int64_t n, int64_t grain, int count, bool balanced,
                         const StreamHint* hint) {
  std::lock_guard<std::mutex> call_lock(call_mu_);
  if (balanced) plan_prefetch(n, grain, count, hint);
  later_.swap(t_pending_later);
  t_pending_later.clear();
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    job_chunks_ = count;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    gen = ticket_gen(ticket_.load(std::memory_order_relaxed)) + 1;
    uint64_t chunks = static_cast<uint64_t>(count) << 16;
    if (balanced) {
      for (int t = 0; t < num_threads_; ++t) {
        shares_[t].range.store(
            share(gen, int64_t{count} * t / num_threads_, int64_t{count} * (t + 1) / num_threads_),
            std::memory_order_relaxed);
      }
      chunks = 0;  // none: the workers go to their shares, set before (release)
    }
    ticket_.store(gen << 32 | chunks, std::memory_order_release);
  }
  cv_start_.notify_all();
  if (balanced) {
    run_shares(gen, 0);
  } else {
    run_chunks(gen, 0);
  }
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
