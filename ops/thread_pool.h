// The one parallelism primitive: a persistent pool running parallel_for.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace hubzoo {

// A non-owning reference to a callable fn(begin, end). Unlike std::function it
// never allocates: a decode step issues hundreds of parallel_for calls whose
// lambdas capture more than std::function's small buffer holds. The callable
// must outlive the call it is passed to (a lambda temporary in the call does).
class RangeFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(const F& f)  // NOLINT(google-explicit-constructor): implicit from lambdas
      : obj_(&f),
        call_([](const void* o, int64_t b, int64_t e) { (*static_cast<const F*>(o))(b, e); }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  const void* obj_;
  void (*call_)(const void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // The process's pool of `num_threads` threads (<= 0: hardware_concurrency()),
  // created on first use and shared by every model that asks for that many:
  // a server's generation and embedding models then run on one set of threads
  // rather than two sets spinning on the same cores. A caller asking for a
  // different count gets the (equally shared) pool of that size, so --threads
  // and num_threads= keep meaning what they say. A pool lives while someone
  // holds it.
  static std::shared_ptr<ThreadPool> shared(int num_threads = 0);

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each chunk a
  // multiple of `grain` (except the last). The calling thread takes part.
  // Blocks until all chunks are done. Chunking never affects results: callers
  // only split independent work (rows, columns), never a reduction.
  // The first exception thrown by fn is rethrown here once every chunk is done.
  // A parallel_for issued from inside fn runs inline on the calling thread.
  // Safe to call from several threads at once (two models sharing the pool):
  // their jobs run one after the other, each on every thread of the pool.
  //
  // By default there are as many chunks as threads (each thread takes one
  // contiguous share). With max_chunks > num_threads() the work is cut into
  // up to max_chunks smaller chunks that threads claim as they finish: a
  // thread slowed down (by memory, or the OS) then takes fewer of them.
  void parallel_for(int64_t n, int64_t grain, RangeFn fn, int max_chunks = 0);

  // fn(begin, end) over rows [0, m) of row-wise work (elementwise ops of a
  // step's activations): on the calling thread alone for fewer than
  // min_rows rows (a decode step's, where a hand-off costs more than the
  // work), else as parallel_for.
  void parallel_rows(int64_t m, int64_t min_rows, RangeFn fn) {
    // (min_rows: min_parallel_rows below, for rows of that many elements.)
    if (m < min_rows || num_threads_ == 1) {
      if (m > 0) fn(0, m);
      return;
    }
    parallel_for(m, 1, fn);
  }

  // parallel_for for a stream of independent work on threads that may run at
  // unequal speeds (on a shared machine one core can have a busy neighbour):
  // each thread owns the contiguous share parallel_for would give it and
  // claims it front to back, 7/8 of it first and then half of what is left
  // at a time; a thread whose share is done takes the back half of the
  // largest share left and goes on with that as its own. Each thread still
  // reads its share as one stream, and nobody waits for a slowed-down
  // thread's whole share (up to an eighth of it is left to take). fn(begin,
  // end) is called once per claimed piece (about log2 of an eighth of a
  // share's grains, plus one, per thread), pieces starting on multiples of
  // grain. The rest is as
  // parallel_for: results must not depend on the pieces, exceptions are
  // rethrown, nested calls run inline.
  void parallel_for_balanced(int64_t n, int64_t grain, RangeFn fn);

  // Bytes a piece of work reads from memory first.
  struct Region {
    const void* at = nullptr;
    int64_t bytes = 0;
  };
  // What a balanced job streams, for fetching ahead between jobs (a decode
  // step's products read their weights once each, in the same order every
  // step, with serial work between them during which a worker waits and the
  // memory idles). `key` stands for the job's work, the same each time it
  // runs (its weights, say); where(ctx, i) is what index i's work reads
  // first: from `at` on, `bytes` of one stream.
  struct StreamHint {
    const void* key = nullptr;
    const void* ctx = nullptr;
    Region (*where)(const void* ctx, int64_t index) = nullptr;
  };
  // parallel_for_balanced with a hint. The pool remembers which hinted job
  // followed which (the last one seen per key, for up to kMaxStreamKeys
  // keys); a worker whose part of a job is done then prefetches (a hint to
  // the CPU, never a load that can fault) the first kPrefetchAheadBytes of
  // its own share of the job that followed this one last time, while the
  // caller goes on. Results do not depend on it: a wrong guess costs only
  // the bytes fetched.
  void parallel_for_balanced(int64_t n, int64_t grain, RangeFn fn, const StreamHint& hint);
  static constexpr size_t kMaxStreamKeys = 4096;
  // SmolLM2 decode, on vs off within one process (bench/results/
  // stream_hint_ab.md): 1.045x Q8_0, 1.048x Q4_0, 1.031x the Q4_K file;
  // 32-512 KiB all gained, 128-256 KiB most.
  static constexpr int64_t kPrefetchAheadBytes = 128 * 1024;

  // Regions for the workers to fetch once their part of the calling thread's
  // next job is done, before the job's StreamHint fetch: data a job after it
  // reads that the caller knows of now. A decode step's attention reads its
  // keys and values after the q/k/v product and the serial work after it,
  // while a worker would wait; fetched then, they are in its cache when
  // attention starts. Each worker fetches every region, in order, up to
  // kMaxLaterBytes, and stops when the caller announces another job. Copied;
  // the calling thread's next job that runs on the workers takes them (one
  // run inline leaves them). A hint to the CPU, never a load that can fault:
  // results do not depend on it.
  void prefetch_after_next_job(const Region* regions, int64_t count);
  static constexpr int64_t kMaxLaterBytes = 1 << 20;
  // The regions the last job run on the workers handed them (tests, diagnostics).
  std::vector<Region> later_regions() const;

  // The first index of thread t's share in parallel_for_balanced(n, grain, ...)
  // before any is stolen (where a StreamHint's region of that thread starts).
  int64_t balanced_share_begin(int64_t n, int64_t grain, int t) const;
  // The regions (one per thread) remembered for the job that followed the
  // hinted job `key`; empty if none (tests, diagnostics).
  std::vector<Region> next_stream(const void* key) const;

 private:
  // Implementation detail, see thread_pool.cc.
  void worker(int self);
  // Claims and runs chunks of the job of generation `gen` until none is left.
  void run_chunks(uint64_t gen, int self);
  // Copies the job's later_ regions for thread self's fetch (a worker holding
  // a claimed piece of the job); fetch_later() fetches them until job `gen`
  // is no longer the newest.
  void take_later(int self);
  void fetch_later(uint64_t gen);
  // The balanced job of generation `gen`: thread self's share, then stolen ones.
  void run_shares(uint64_t gen, int self);
  bool steal_into(uint64_t gen, int self);
  void run_grains(int64_t g0, int64_t g1);
  void run_range(int64_t begin, int64_t end);
  void run_job(const RangeFn& fn, int64_t n, int64_t grain, int count, bool balanced,
               const StreamHint* hint = nullptr);
  // Learns `hint` as the job after the previous hinted one; sets each
  // thread's Share::after to the start of its share of the job that followed
  // `hint`'s last time (none without a hint). Under call_mu_, before the
  // job is announced.
  void plan_prefetch(int64_t n, int64_t grain, int64_t grains, const StreamHint* hint);
  void finish(int done, int total);
  void wait_for_chunks();

  int num_threads_ = 1;
  std::vector<std::thread> threads_;
  mutable std::mutex call_mu_;  // one parallel_for at a time per pool
  std::mutex mu_;               // guards the sleeping side of the job hand-off
  std::condition_variable cv_start_, cv_done_;

  // The job being run; written before ticket_ announces it (release), read
  // only by a thread holding a claimed chunk of it (so never while rewritten).
  const RangeFn* job_ = nullptr;
  int64_t job_n_ = 0, job_grain_ = 1;
  int job_chunks_ = 0;
  std::exception_ptr error_;  // first exception, guarded by mu_

  // generation << 32 | chunks << 16 | next unclaimed chunk. Any thread (the
  // caller included) claims the next chunk by compare-exchange, so a worker
  // the OS has not scheduled yet delays nothing: the others take its chunks.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> done_{0};  // chunks (a balanced job: grains) of the current job finished
  std::atomic<bool> stop_{false};

  // A balanced job's share of each thread: grains [next, end) of the job,
  // tagged with the job's generation (share() in thread_pool.cc), claimed by
  // compare-exchange: by its owner from the front, by others from the back.
  // Share::after: what the thread prefetches once its part of the job is
  // done; written before the job is announced, read by its thread only
  // while it holds a claimed piece of the job (so never while rewritten).
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
    Region after;
  };
  std::unique_ptr<Share[]> shares_;

  // Hinted jobs (guarded by call_mu_): key -> each thread's region of the
  // hinted job that followed it last; the key of the last hinted job.
  std::unordered_map<const void*, std::vector<Region>> next_streams_;
  const void* last_stream_key_ = nullptr;
  std::vector<Region> stream_starts_;  // scratch, one per thread
  // The current job's prefetch_after_next_job() regions: written under
  // call_mu_ before the job is announced, read by a worker only while it
  // holds a claimed piece of the job.
  std::vector<Region> later_;
};

// The fewest rows of `row_elements` elements each that parallel_rows splits
// over the threads: 32 Ki elements of elementwise work (~10 us) pay for the hand-off.
inline int64_t min_parallel_rows(int64_t row_elements) {
  return std::max<int64_t>(1, (int64_t{32} << 10) / std::max<int64_t>(1, row_elements));
}

}  // namespace hubzoo
