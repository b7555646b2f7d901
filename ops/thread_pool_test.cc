#include "ops/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace hubzoo {
namespace {

// Runs parallel_for and checks every index is visited exactly once, by chunks
// that start on a multiple of grain.
void expect_exact_cover(ThreadPool& pool, int64_t n, int64_t grain, int max_chunks = 0) {
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> chunks{0};
  pool.parallel_for(
      n, grain,
      [&](int64_t begin, int64_t end) {
        EXPECT_LT(begin, end);
        EXPECT_EQ(begin % grain, 0) << "n=" << n << " grain=" << grain;
        if (end != n) {
          EXPECT_EQ(end % grain, 0) << "n=" << n << " grain=" << grain;
        }
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        chunks.fetch_add(1);
      },
      max_chunks);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " n=" << n;
  EXPECT_LE(chunks.load(), std::max(pool.num_threads(), max_chunks));
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 3, 7, 64, 100, 1001}) {
      for (int64_t grain : {1, 3, 16, 2000}) expect_exact_cover(pool, n, grain);
    }
  }
}

TEST(ThreadPool, MoreChunksThanThreadsCoverEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 5, 64, 1001}) {
      for (int max_chunks : {4, 16}) expect_exact_cover(pool, n, 3, max_chunks);
    }
  }
}

TEST(ThreadPool, MaxChunksCutsTheWorkFiner) {
  ThreadPool pool(2);
  std::atomic<int> chunks{0};
  pool.parallel_for(
      64, 1,
      [&](int64_t begin, int64_t end) {
        EXPECT_EQ(end - begin, 8);
        chunks.fetch_add(1);
      },
      8);
  EXPECT_EQ(chunks.load(), 8);
}

TEST(ThreadPool, DefaultUsesHardwareConcurrency) {
  ThreadPool pool(0);
  EXPECT_GE(pool.num_threads(), 1);
  expect_exact_cover(pool, 257, 4);
}

TEST(ThreadPool, EmptyRangeCallsNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.parallel_for(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPool, SplitsEvenlyOverThreads) {
  ThreadPool pool(2);
  std::atomic<int> chunks{0};
  pool.parallel_for(10, 1, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(end - begin, 5);
    chunks.fetch_add(1);
  });
  EXPECT_EQ(chunks.load(), 2);
}

TEST(ThreadPool, SingleChunkRunsInline) {
  ThreadPool pool(4);
  const auto caller = std::this_thread::get_id();
  pool.parallel_for(5, 8, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 5);
    EXPECT_EQ(std::this_thread::get_id(), caller);
  });
}

TEST(ThreadPool, ManyRepeatedJobs) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 20000; ++job) {
    pool.parallel_for(4, 1, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
  }
  EXPECT_EQ(total.load(), 4 * 20000);
}

TEST(ThreadPool, PropagatesExceptionsFromAnyChunk) {
  ThreadPool pool(3);
  for (int64_t bad : {0, 5, 9}) {
    std::atomic<int64_t> done{0};
    EXPECT_THROW(pool.parallel_for(10, 1,
                                   [&](int64_t begin, int64_t end) {
                                     for (int64_t i = begin; i < end; ++i) {
                                       if (i == bad) throw std::runtime_error("bad index");
                                       done.fetch_add(1);
                                     }
                                   }),
                 std::runtime_error);
    // The pool stays usable after a failed job.
    expect_exact_cover(pool, 50, 1);
  }
}

TEST(ThreadPool, PropagatesExceptionFromInlineRun) {
  ThreadPool pool(1);
  EXPECT_THROW(pool.parallel_for(10, 1, [](int64_t, int64_t) { throw std::logic_error("x"); }),
               std::logic_error);
}

// Plain and balanced jobs, each inside the other and inside itself.
TEST(ThreadPool, NestedParallelForRunsInline) {
  ThreadPool pool(2);
  const auto run = [&](bool balanced, int64_t n, const RangeFn& fn) {
    balanced ? pool.parallel_for_balanced(n, 1, fn) : pool.parallel_for(n, 1, fn);
  };
  for (int outer = 0; outer < 2; ++outer) {
    for (int inner = 0; inner < 2; ++inner) {
      std::vector<std::atomic<int>> hits(8 * 8);
      run(outer, 8, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          run(inner, 8, [&](int64_t b, int64_t e) {
            for (int64_t j = b; j < e; ++j) hits[i * 8 + j].fetch_add(1);
          });
        }
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1) << "outer " << outer << " inner " << inner;
    }
  }
}

TEST(ThreadPool, SharedPoolIsOnePerSize) {
  auto a = ThreadPool::shared(3);
  auto b = ThreadPool::shared(3);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->num_threads(), 3);
  auto c = ThreadPool::shared(2);
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(c->num_threads(), 2);
  // 0 means all cores: the same pool as asking for that many.
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(ThreadPool::shared(0).get(), ThreadPool::shared(all).get());
}

// Two threads (a server's generation loop and an embeddings handler) issue
// jobs on one pool at once: each job still covers its own range exactly once
// and computes what it computes alone.
TEST(ThreadPool, TwoCallersAtOnceOnOneSharedPool) {
  auto pool = ThreadPool::shared(3);
  constexpr int kJobs = 2000;
  auto caller = [&](int64_t n, int64_t scale, std::vector<int64_t>& sums) {
    std::vector<int64_t> out(n);
    for (int job = 0; job < kJobs; ++job) {
      const auto fill = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = scale * i + job;
      };
      // Balanced jobs among the others: a thread still in one job's shares
      // never claims from another's.
      if (job % 3 == 2) {
        pool->parallel_for_balanced(n, 1, fill);
      } else if (job % 5 == 1) {  // hinted: both callers' jobs learn and prefetch
        pool->parallel_for_balanced(
            n, 1, fill,
            {.key = &sums[job % 4], .ctx = out.data(), .where = [](const void* ctx, int64_t i) {
               const auto* p = static_cast<const int64_t*>(ctx);
               return ThreadPool::Region{p + i, 64};
             }});
      } else {
        pool->parallel_for(n, 1, fill, job % 2 ? 8 : 0);
      }
      sums[job] = std::accumulate(out.begin(), out.end(), int64_t{0});
    }
  };
  std::vector<int64_t> sums_a(kJobs), sums_b(kJobs);
  std::thread a([&] { caller(37, 3, sums_a); });
  std::thread b([&] { caller(101, 5, sums_b); });
  a.join();
  b.join();
  for (int job = 0; job < kJobs; ++job) {
    ASSERT_EQ(sums_a[job], 3 * (36 * 37 / 2) + 37 * job) << "job " << job;
    ASSERT_EQ(sums_b[job], 5 * (100 * 101 / 2) + 101 * job) << "job " << job;
  }
}

TEST(ThreadPool, TwoCallersAtOnceWithExceptions) {
  ThreadPool pool(2);
  std::atomic<int> thrown{0};
  auto caller = [&](bool fail) {
    for (int job = 0; job < 500; ++job) {
      try {
        pool.parallel_for(16, 1, [&](int64_t begin, int64_t) {
          if (fail && begin == 8) throw std::runtime_error("bad chunk");
        });
      } catch (const std::runtime_error&) {
        thrown.fetch_add(1);
      }
    }
  };
  std::thread a([&] { caller(true); });
  std::thread b([&] { caller(false); });
  a.join();
  b.join();
  // Only the failing caller's jobs throw, every one of them.
  EXPECT_EQ(thrown.load(), 500);
}

// parallel_for_balanced: every index once, pieces on multiples of grain.
void expect_balanced_cover(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(n);
  pool.parallel_for_balanced(n, grain, [&](int64_t begin, int64_t end) {
    EXPECT_LT(begin, end);
    EXPECT_EQ(begin % grain, 0) << "n=" << n << " grain=" << grain;
    if (end != n) {
      EXPECT_EQ(end % grain, 0) << "n=" << n << " grain=" << grain;
    }
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " n=" << n;
}

TEST(ThreadPool, BalancedCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 64, 100, 1001}) {
      for (int64_t grain : {1, 3, 16, 2000}) expect_balanced_cover(pool, n, grain);
    }
  }
}

// More grains than a share's 20-bit counters hold: the grain is coarsened to
// a multiple of the caller's.
TEST(ThreadPool, BalancedCoarsensTooManyGrains) {
  ThreadPool pool(2);
  const int64_t n = (int64_t{1} << 21) + 7;
  std::atomic<int64_t> covered{0};
  pool.parallel_for_balanced(n, 2, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(begin % 2, 0);
    if (end != n) {
      EXPECT_EQ(end % 2, 0);
    }
    covered.fetch_add(end - begin);
  });
  EXPECT_EQ(covered.load(), n);
}

// Each thread claims its own share front to back, 7/8 of it first and then
// half of what is left: with nobody slow, two threads cut 64 grains into
// pieces of 28, 2, 1, 1 per share (or take a piece of the other's back when
// one finishes first: the last 4 grains of a share still go in 2 or more).
TEST(ThreadPool, BalancedClaimsSevenEighthsThenHalfOfWhatIsLeft) {
  ThreadPool pool(1);
  std::vector<std::pair<int64_t, int64_t>> pieces;
  pool.parallel_for_balanced(64, 1, [&](int64_t b, int64_t e) { pieces.emplace_back(b, e); });
  ASSERT_EQ(pieces.size(), 1u);  // one thread: one call
  ThreadPool two(2);
  std::mutex mu;
  pieces.clear();
  two.parallel_for_balanced(64, 1, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    pieces.emplace_back(b, e);
  });
  int64_t largest = 0;
  for (const auto& [b, e] : pieces) largest = std::max(largest, e - b);
  EXPECT_EQ(largest, 28);  // 7/8 of a 32-grain share, never the whole share
  EXPECT_GE(pieces.size(), 6u);
}

// The caller's share is stuck (its first piece waits until the worker has
// done everything else): the worker takes the rest of the caller's share,
// half of what is left at a time, instead of stopping at its own half. The
// worker's first piece waits until the caller holds its own first piece: on a
// loaded machine the caller may otherwise not run before the worker has
// finished its share and stolen half of the caller's.
TEST(ThreadPool, BalancedWorkerTakesTheShareOfAStuckThread) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::atomic<int64_t> by_worker{0};
  std::atomic<bool> caller_in{false}, timed_out{false};
  const auto wait_until = [&](const auto& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) {
        timed_out = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  };
  pool.parallel_for_balanced(64, 1, [&](int64_t begin, int64_t end) {
    if (std::this_thread::get_id() != caller) {
      wait_until([&] { return caller_in.load(); });
      by_worker.fetch_add(end - begin);
      return;
    }
    EXPECT_EQ(begin, 0);  // the caller's first piece: 7/8 of its share
    EXPECT_EQ(end, 28);
    caller_in = true;
    wait_until([&] { return by_worker.load() >= 36; });
  });
  EXPECT_FALSE(timed_out.load());
  EXPECT_EQ(by_worker.load(), 36);
}

TEST(ThreadPool, BalancedPropagatesExceptionsAndStaysUsable) {
  ThreadPool pool(3);
  for (int64_t bad : {0, 31, 63}) {
    EXPECT_THROW(pool.parallel_for_balanced(64, 1,
                                            [&](int64_t begin, int64_t end) {
                                              if (begin <= bad && bad < end)
                                                throw std::runtime_error("bad index");
                                            }),
                 std::runtime_error);
    expect_balanced_cover(pool, 100, 1);
    expect_exact_cover(pool, 50, 1);
  }
}

// A StreamHint's where() over a fake address space: index i reads from
// base + 1000 * i, `bytes` of it (never dereferenced: only prefetched).
struct FakeStream {
  const char* base;
  int64_t bytes;
  static ThreadPool::Region where(const void* ctx, int64_t i) {
    const auto& f = *static_cast<const FakeStream*>(ctx);
    return {f.base + 1000 * i, f.bytes};
  }
};

std::vector<const void*> starts_of(const std::vector<ThreadPool::Region>& regions) {
  std::vector<const void*> out;
  for (const auto& r : regions) out.push_back(r.at);
  return out;
}

// The pool learns which hinted job follows which: after A then B, A's next
// stream is where B's shares start, one region per thread; an unhinted job
// in between changes nothing; a later successor replaces the earlier one.
TEST(ThreadPool, StreamHintLearnsTheJobThatFollows) {
  ThreadPool pool(3);
  std::vector<char> mem(1 << 20);
  const FakeStream fa{mem.data(), 64}, fb{mem.data() + 1, 128}, fc{mem.data() + 2, 256};
  int a = 0, b = 0, c = 0;
  const auto noop = [](int64_t, int64_t) {};
  const auto run = [&](const void* key, const FakeStream& f, int64_t n, int64_t grain) {
    pool.parallel_for_balanced(n, grain, noop,
                               {.key = key, .ctx = &f, .where = &FakeStream::where});
  };
  run(&a, fa, 90, 1);
  EXPECT_TRUE(pool.next_stream(&a).empty());  // nothing followed A yet
  pool.parallel_for(64, 1, noop);
  pool.parallel_for_balanced(64, 1, noop);  // unhinted: not a successor
  run(&b, fb, 30, 2);
  const auto next_a = pool.next_stream(&a);
  ASSERT_EQ(next_a.size(), 3u);
  for (int t = 0; t < 3; ++t) {
    const int64_t begin = pool.balanced_share_begin(30, 2, t);
    EXPECT_EQ(begin, std::vector<int64_t>({0, 10, 20})[t]);  // 15 grains of 2: 5 each
    EXPECT_EQ(next_a[t].at, fb.base + 1000 * begin) << "thread " << t;
    EXPECT_EQ(next_a[t].bytes, 128);
  }
  run(&a, fa, 90, 1);
  run(&c, fc, 90, 1);
  EXPECT_EQ(starts_of(pool.next_stream(&b)),  // A followed B: 90 grains, 30 a thread
            std::vector<const void*>({fa.base, fa.base + 30000, fa.base + 60000}));
  const auto next_a2 = pool.next_stream(&a);  // now C followed A
  ASSERT_EQ(next_a2.size(), 3u);
  EXPECT_EQ(next_a2[1].at, fc.base + 30000);
  EXPECT_EQ(next_a2[1].bytes, 256);
}

// Each thread's share starts where balanced_share_begin says (some piece
// starts there, whoever runs it), also where the grain is coarsened.
TEST(ThreadPool, BalancedShareBeginIsWhereASharePieceStarts) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (const auto& [n, grain] : std::vector<std::pair<int64_t, int64_t>>{
             {100, 1}, {101, 7}, {(int64_t{1} << 21) + 7, 2}}) {
      std::mutex mu;
      std::vector<int64_t> begins;
      pool.parallel_for_balanced(n, grain, [&](int64_t begin, int64_t) {
        std::lock_guard<std::mutex> lock(mu);
        begins.push_back(begin);
      });
      for (int t = 0; t < threads; ++t) {
        const int64_t at = pool.balanced_share_begin(n, grain, t);
        EXPECT_NE(std::find(begins.begin(), begins.end(), at), begins.end())
            << "thread " << t << " n=" << n << " grain=" << grain << " begin " << at;
      }
    }
  }
}

// The table of successors is bounded: past kMaxStreamKeys keys it starts
// over, so a stream of ever-new keys (models loaded and freed) cannot grow it.
TEST(ThreadPool, StreamHintKeysAreBounded) {
  ThreadPool pool(2);
  std::vector<char> mem(16);
  const FakeStream f{mem.data(), 64};
  std::vector<int> keys(ThreadPool::kMaxStreamKeys + 10);
  for (int& key : keys) {
    pool.parallel_for_balanced(8, 1, [](int64_t, int64_t) {},
                               {.key = &key, .ctx = &f, .where = &FakeStream::where});
  }
  EXPECT_TRUE(pool.next_stream(&keys[0]).empty());  // forgotten when the table filled
  EXPECT_EQ(pool.next_stream(&keys[keys.size() - 2]).size(), 2u);  // learnt since
}

// prefetch_after_next_job's regions go with the calling thread's next job
// that runs on the workers (not one run inline), and with that job only.
TEST(ThreadPool, LaterRegionsGoWithTheNextJobOnTheWorkers) {
  ThreadPool pool(2);
  std::vector<char> mem(4096);
  const std::vector<ThreadPool::Region> regions = {{mem.data(), 1024}, {mem.data() + 2048, 64}};
  const auto noop = [](int64_t, int64_t) {};
  const auto starts = [](const std::vector<ThreadPool::Region>& r) {
    std::vector<std::pair<const void*, int64_t>> out;
    for (const auto& x : r) out.emplace_back(x.at, x.bytes);
    return out;
  };
  pool.prefetch_after_next_job(regions.data(), 2);
  pool.parallel_for(1, 1, noop);  // one chunk: inline, leaves them
  EXPECT_TRUE(pool.later_regions().empty());
  pool.parallel_for_balanced(64, 1, noop);
  EXPECT_EQ(starts(pool.later_regions()), starts(regions));
  pool.parallel_for(64, 1, noop);  // the next job has none
  EXPECT_TRUE(pool.later_regions().empty());
  pool.prefetch_after_next_job(regions.data(), 1);
  pool.parallel_for(64, 1, noop);  // chunked jobs take them too
  EXPECT_EQ(starts(pool.later_regions()), starts({regions[0]}));

  // Another thread's regions stay its own: this thread's job takes none.
  std::thread other([&] { pool.prefetch_after_next_job(regions.data(), 2); });
  other.join();
  pool.parallel_for_balanced(64, 1, noop);
  EXPECT_TRUE(pool.later_regions().empty());
}

// The workers' fetch is a hint that never faults: regions of memory that is
// not mapped (and more of it than kMaxLaterBytes) leave the jobs' results and
// the pool intact.
TEST(ThreadPool, LaterRegionsNeverFault) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    const std::vector<ThreadPool::Region> regions = {
        {reinterpret_cast<const void*>(uintptr_t{64}), 4 * ThreadPool::kMaxLaterBytes},
        {nullptr, 4096}};
    for (int round = 0; round < 50; ++round) {
      pool.prefetch_after_next_job(regions.data(), static_cast<int64_t>(regions.size()));
      std::vector<std::atomic<int>> hits(256);
      if (round % 2) {
        pool.parallel_for_balanced(256, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
      } else {
        pool.parallel_for(256, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
      }
      for (int64_t i = 0; i < 256; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
    }
  }
}

}  // namespace
}  // namespace hubzoo
