// The machine's own limits, measured in the same run as the engines they bound:
//   fp32 FMA peak: independent FMA chains in registers, per thread (bounds prefill)
//   read bandwidth: SIMD sums over a buffer far larger than the caches (bounds decode),
//                   the best of each thread reading its part as one stream and as
//                   3, 5 or 7 at once (read_gbs; read_gbs_one_stream: one stream),
//                   on transparent huge pages as hubzoo's weights are (ops/weight_arena.h):
//                   on 4 KiB pages one thread read 21-27 GB/s where huge pages gave 30-33,
//                   a bound that low would flatter every engine measured against it
//                   (buffer_huge_page_bytes: how much of the buffer the kernel gave them)
// Both with the widest SIMD target Highway dispatches to, on 1..--threads threads
// (std::thread each; every thread reads its own part of the buffer).
//   core-to-core round trip (pingpong_ns, with 2 threads or more): two threads
//                   hand one cache line back and forth; the median of 5 runs of
//                   20000 round trips. What a thread pool's fork and join pay
//                   per job: on an EPYC whose 2 vCPUs may sit on one CCD or on
//                   two, it tells which (the two CCDs' read bandwidth adds up).
//
//   machine_bench [--threads N] [--mib 1024]   -> one JSON object on stdout
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/machine_bench.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/weight_arena.h"

HWY_BEFORE_NAMESPACE();
namespace machine {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t Target() { return HWY_TARGET; }

// 2 * lanes * 16 chains * iters flops; 16 chains cover latency 4 x 2 ports.
double FmaFlops(int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  V acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = hn::Set(d, 0.001f * static_cast<float>(i));
  const V a = hn::Set(d, 0.999999f), b = hn::Set(d, 1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = hn::MulAdd(acc[i], a, b);
  }
  V s = acc[0];
  for (int i = 1; i < 16; ++i) s = hn::Add(s, acc[i]);
  *sink = hn::GetLane(s);
  return 2.0 * static_cast<double>(hn::Lanes(d)) * 16.0 * static_cast<double>(iters);
}

float SumFloats(const float* p, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + i + L));
    a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * L));
    a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * L));
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += p[i];
  return s;
}

// The same sum over [p, p + n) read as S contiguous parts at once (one
// vector of each per step): a core keeps more reads in flight over several
// sequential streams than over one (Zen 2: one thread 25-27 GB/s over five
// or seven where one stream reads 16-17; two threads up to 46 where one
// stream each reads 28-33). Odd counts: parts a power of two apart fall on
// the same DRAM banks (two or four streams read no faster than one there).
template <int S>
float SumStreams(const float* p, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t part = n / S / L * L;
  using V = hn::Vec<decltype(d)>;
  V acc[S];
  for (int s = 0; s < S; ++s) acc[s] = hn::Zero(d);
  for (int64_t i = 0; i < part; i += L) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) acc[s] = hn::Add(acc[s], hn::LoadU(d, p + s * part + i));
  }
  V sum = acc[0];
  for (int s = 1; s < S; ++s) sum = hn::Add(sum, acc[s]);
  float out = hn::GetLane(hn::SumOfLanes(d, sum));
  for (int64_t i = S * part; i < n; ++i) out += p[i];
  return out;
}
float SumFloatsStreams(const float* p, int64_t n, int streams) {
  switch (streams) {
    case 3:
      return SumStreams<3>(p, n);
    case 5:
      return SumStreams<5>(p, n);
    default:
      return SumStreams<7>(p, n);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace machine
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace machine {
HWY_EXPORT(Target);
HWY_EXPORT(FmaFlops);
HWY_EXPORT(SumFloats);
HWY_EXPORT(SumFloatsStreams);

using Clock = std::chrono::steady_clock;

// Runs fn(thread index) on `threads` threads started together; returns the
// wall time from the common start to the last finish.
template <typename Fn>
double run_threads(int threads, Fn fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) {
      }
      fn(t);
    });
  }
  while (ready.load() < threads) {
  }
  const auto t0 = Clock::now();
  go.store(true);
  for (auto& t : ts) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Nanoseconds per round trip of one cache line between two threads: thread
// 0 writes an odd count, thread 1 answers with the next even one.
double pingpong_ns(int64_t trips) {
  alignas(64) std::atomic<int64_t> line{0};
  const double t = run_threads(2, [&](int i) {
    for (int64_t k = 0; k < trips; ++k) {
      const int64_t mine = 2 * k + 1 + i, theirs = 2 * k + i;
      while (line.load(std::memory_order_acquire) != theirs) {
      }
      line.store(mine, std::memory_order_release);
    }
  });
  return t * 1e9 / static_cast<double>(trips);
}

}  // namespace machine

int main(int argc, char** argv) {
  using namespace machine;
  int max_threads = 2;
  int64_t mib = 1024;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      max_threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--mib") && i + 1 < argc) {
      mib = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--mib MiB]\n", argv[0]);
      return 2;
    }
  }
  const int64_t n = mib * (1 << 20) / 4;
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (static_cast<size_t>(n) * 4 + kHuge - 1) / kHuge * kHuge;
  float* buf = static_cast<float*>(std::aligned_alloc(kHuge, bytes));
  if (!buf) {
    std::fprintf(stderr, "machine_bench: cannot allocate %lld MiB\n", static_cast<long long>(mib));
    return 1;
  }
  madvise(buf, bytes, MADV_HUGEPAGE);  // advice: where refused, 4 KiB pages
  const int64_t huge_before = hubzoo::anon_huge_page_bytes();
  for (int64_t i = 0; i < n; ++i) buf[i] = 1.0f;  // fault every page in
  const int64_t buffer_huge = hubzoo::anon_huge_page_bytes() - huge_before;
  std::vector<float> sinks(64);

  std::printf("{\n  \"simd_target\": \"%s\",\n  \"threads\": [\n",
              hwy::TargetName(HWY_DYNAMIC_DISPATCH(Target)()));
  for (int threads = 1; threads <= max_threads; ++threads) {
    const int64_t iters = 20'000'000;
    double best_flops = 0, best_bw = 0, best_one = 0;
    for (int rep = 0; rep < 5; ++rep) {
      double flops = 0;
      std::vector<double> per(threads);
      const double t = run_threads(threads, [&](int i) {
        per[i] = HWY_DYNAMIC_DISPATCH(FmaFlops)(iters, &sinks[i * 16 % 64]);
      });
      for (double f : per) flops += f;
      best_flops = std::max(best_flops, flops / t);
      for (const int streams : {1, 3, 5, 7}) {
        const double tb = run_threads(threads, [&](int i) {
          const int64_t b = n * i / threads, e = n * (i + 1) / threads;
          sinks[i * 16 % 64] +=
              streams == 1 ? HWY_DYNAMIC_DISPATCH(SumFloats)(buf + b, e - b)
                           : HWY_DYNAMIC_DISPATCH(SumFloatsStreams)(buf + b, e - b, streams);
        });
        best_bw = std::max(best_bw, n * 4.0 / tb);
        if (streams == 1) best_one = std::max(best_one, n * 4.0 / tb);
      }
    }
    std::printf(
        "    {\"threads\": %d, \"fma_gflops\": %.1f, \"read_gbs\": %.2f, "
        "\"read_gbs_one_stream\": %.2f}%s\n",
        threads, best_flops * 1e-9, best_bw * 1e-9, best_one * 1e-9,
        threads < max_threads ? "," : "");
  }
  std::printf("  ],\n");
  if (max_threads >= 2) {
    std::vector<double> trips;
    for (int rep = 0; rep < 5; ++rep) trips.push_back(pingpong_ns(20000));
    std::nth_element(trips.begin(), trips.begin() + 2, trips.end());
    std::printf("  \"pingpong_ns\": %.1f,\n", trips[2]);
  }
  std::printf("  \"buffer_huge_page_bytes\": %lld,\n", static_cast<long long>(buffer_huge));
  std::printf("  \"buffer_mib\": %lld,\n  \"checksum\": %g\n}\n", static_cast<long long>(mib),
              static_cast<double>(sinks[0]));
  std::free(buf);
  return 0;
}
#endif  // HWY_ONCE
