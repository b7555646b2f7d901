#include "ops/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
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

TEST(ThreadPool, NestedParallelForRunsInline) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(8 * 8);
  pool.parallel_for(8, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) hits[i * 8 + j].fetch_add(1);
      });
    }
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

}  // namespace
}  // namespace hubzoo
