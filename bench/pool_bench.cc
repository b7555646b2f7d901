// What one job of the thread pool costs beyond its work: the fork, the
// hand-out of pieces and the join, as a decode step pays them a hundred times
// a token. Each job is a 2-thread ThreadPool job over `n` units whose work is
// writing one float per unit (a decode product's outputs, so the caller reads
// lines the worker wrote); the figure is the median over 9 runs of 5000 jobs
// of the time per job, for parallel_for_balanced with and without a
// StreamHint and for parallel_for. Beside it the core-to-core round trip of
// one cache line (as machine_bench's pingpong_ns), which on an EPYC whose two
// vCPUs sit on one CCD or on two tells which.
//
//   pool_bench [--threads 2] [--n 40]   -> one JSON object on stdout
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ops/thread_pool.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

double pingpong_ns(int64_t trips) {
  alignas(64) std::atomic<int64_t> line{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::thread other([&] {
    for (int64_t k = 0; k < trips; ++k) {
      while (line.load(std::memory_order_acquire) != 2 * k + 1) {
      }
      line.store(2 * k + 2, std::memory_order_release);
    }
  });
  for (int64_t k = 0; k < trips; ++k) {
    while (line.load(std::memory_order_acquire) != 2 * k) {
    }
    line.store(2 * k + 1, std::memory_order_release);
  }
  other.join();
  return seconds_since(t0) * 1e9 / static_cast<double>(trips);
}

// A StreamHint whose regions are the outputs themselves (tiny, in cache).
hubzoo::ThreadPool::Region where_out(const void* ctx, int64_t index) {
  return {static_cast<const float*>(ctx) + index, 64};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int64_t n = 40;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--n") && i + 1 < argc) {
      n = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--n UNITS]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 2 || n < 2 || n > (1 << 20)) {
    std::fprintf(stderr, "pool_bench: --threads >= 2 and 2 <= --n <= 2^20\n");
    return 2;
  }
  hubzoo::ThreadPool pool(threads);
  std::vector<float> out(static_cast<size_t>(n) * 16, 0.0f);  // a line per unit
  float sum = 0;
  const auto write = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i) * 16] += 1.0f;
  };
  const auto time_jobs = [&](auto job) {
    std::vector<double> ns;
    for (int run = 0; run < 9; ++run) {
      constexpr int kJobs = 5000;
      const auto t0 = std::chrono::steady_clock::now();
      for (int j = 0; j < kJobs; ++j) {
        job();
        sum += out[static_cast<size_t>(j % n) * 16];  // the caller reads what the job wrote
      }
      ns.push_back(seconds_since(t0) * 1e9 / kJobs);
    }
    return median(ns);
  };
  const double pp0 = pingpong_ns(20000);
  const double balanced = time_jobs([&] { pool.parallel_for_balanced(n, 1, write); });
  const hubzoo::ThreadPool::StreamHint hint{.key = &out, .ctx = out.data(), .where = &where_out};
  const double hinted = time_jobs([&] { pool.parallel_for_balanced(n, 1, write, hint); });
  const double plain = time_jobs([&] { pool.parallel_for(n, 1, write); });
  const double pp1 = pingpong_ns(20000);
  std::printf(
      "{\n  \"threads\": %d,\n  \"units\": %lld,\n  \"pingpong_ns\": [%.1f, %.1f],\n"
      "  \"balanced_ns\": %.1f,\n  \"balanced_hinted_ns\": %.1f,\n  \"parallel_for_ns\": %.1f,\n"
      "  \"checksum\": %g\n}\n",
      threads, static_cast<long long>(n), pp0, pp1, balanced, hinted, plain, sum);
  return 0;
}
