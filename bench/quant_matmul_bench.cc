// quant_matmul (ops/quant.h) per block type and mode beside the fp32 matmul,
// on Qwen2.5-0.5B's MLP shapes: decode (m = 1, GB/s of weight bytes read)
// and prefill (m = 512, GFLOP/s).
//
//   quant_matmul_bench [--quick] [--cpu] [--hot] [--tiled] [--one-stream] [--streams S]
//                      [--prefetch 0|1] [--amx] [--threads T] [--type Q4_K] [--m M]
//                      [--shape NxK] [--target AVX2]
//
// --target NAME: dispatch to that Highway target (one this CPU runs and the
// build compiled, e.g. AVX2 on an AVX-512 machine) instead of the best one,
// to time another target's kernels on this machine.
//
// --shape NxK: that shape instead of Qwen's (e.g. SmolLM2's 1536x576 gate/up).
//
// "i8p": the int8 mode on the weights' panels (QuantMatrix::panels, made at
// load where the CPU has AVX512-VNNI), for the types that have them.
// --tiled: the int8 mode also without its few-rows kernels (label "i8t":
// for the K types the tiled path that decodes weights to an int16 buffer, for
// the 32-weight block types the panel of 16 packed weight rows), for a
// before / after in one run.
// --one-stream: m = 1 on panels also with each thread's range read front to
// back as one stream (label "i8p1"; quant::set_int8_decode_streams(1), no
// long pieces),
// against the default several streams at once ("i8p").
// --streams S, --prefetch 0|1: the decode streams "i8p" reads and whether it
// prefetches them in software (quant::set_int8_decode_streams, _prefetch)
// instead of this CPU's defaults, to tune those on a new CPU.
// --amx: m > 16 on panels also with the AMX tiles on (label "i8pa";
// quant::set_int8_amx_enabled, off by default), where the CPU has them, beside
// the default vpdpbusd quad tile ("i8p").
//
// m = 1 cycles through enough copies of the weights to overflow the last-level
// cache, so its GB/s is the weight streaming rate a decode step sees (the
// panels on huge pages, as a load leaves them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "ops/cpu_amx.h"
#include "ops/matmul.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"
#include "ops/thread_pool.h"
#include "ops/weight_arena.h"

namespace {

using namespace hubzoo;

struct Shape {
  const char* name;
  int64_t n, k;
};
// Qwen2.5-0.5B: hidden 896, intermediate 4864.
constexpr Shape kShapes[] = {{"gate/up 4864x896", 4864, 896}, {"down 896x4864", 896, 4864}};

// --cpu: process CPU time instead of wall time (a shared, loaded machine: the
// wall clock then counts other processes' time slices; with one thread the
// CPU time is this product's own).
bool g_cpu_time = false;
struct CpuClock {
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<CpuClock>;
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return time_point(duration(ts.tv_sec * 1000000000ll + ts.tv_nsec));
  }
};

template <typename clock>
double time_median_on(const std::function<void(int)>& fn, double budget_s) {
  fn(0);
  std::vector<double> times;
  const auto start = clock::now();
  for (int rep = 1; rep <= 400; ++rep) {
    const auto t0 = clock::now();
    fn(rep);
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (times.size() >= 5 && std::chrono::duration<double>(clock::now() - start).count() > budget_s)
      break;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double time_median(const std::function<void(int)>& fn, double budget_s) {
  return g_cpu_time ? time_median_on<CpuClock>(fn, budget_s)
                    : time_median_on<std::chrono::steady_clock>(fn, budget_s);
}

std::vector<float> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Options {
  bool quick = false;
  int threads = 1;
  std::string type;
  int64_t m = 0;
  bool hot = false;         // m = 1 on one copy of the weights (cache-resident: compute speed)
  bool tiled = false;       // also time the int8 mode without the fused kernels
  bool one_stream = false;  // also time m = 1 on panels read as one stream per range
  bool amx = false;         // also time m > 16 on panels with the AMX tiles
  int64_t n = 0, k = 0;     // --shape NxK
};

// Seconds per product over `copies` weight matrices used in turn.
template <typename Run>
double bench(int64_t copies, double budget, Run run) {
  return time_median([&](int rep) { run(rep % copies); }, budget);
}

void report(const char* what, const Shape& s, int64_t m, int64_t bytes, double sec) {
  if (m <= 16) {  // decode: weights read once per product
    std::printf("  %-8s %-18s m=%-4lld %8.1f us  %6.1f GB/s\n", what, s.name,
                static_cast<long long>(m), sec * 1e6, bytes / sec / 1e9);
  } else {
    std::printf("  %-8s %-18s m=%-4lld %8.2f ms  %6.1f GFLOP/s\n", what, s.name,
                static_cast<long long>(m), sec * 1e3, 2.0 * m * s.n * s.k / sec / 1e9);
  }
}

void run_shape(const Shape& s, const Options& o, ThreadPool& pool) {
  const int64_t cold = o.hot ? 0 : 96ll << 20;
  const double budget = o.quick ? 0.15 : 0.5;
  const auto w = random_values(s.n * s.k, 1);
  const std::vector<int64_t> ms = o.m ? std::vector<int64_t>{o.m} : std::vector<int64_t>{1, 512};
  for (int64_t m : ms) {
    const auto x = random_values(m * s.k, 2);
    std::vector<float> y(m * s.n);
    {  // fp32 matmul
      const int64_t bytes = s.n * s.k * 4;
      const int64_t copies = m <= 16 ? std::max<int64_t>(1, cold / bytes + 1) : 1;
      std::vector<PackedMatrix> packed;
      for (int64_t c = 0; c < copies; ++c) packed.push_back(pack_weights(w.data(), s.n, s.k));
      const double sec = bench(copies, budget, [&](int64_t c) {
        matmul({x.data(), m, s.k, &packed[c], nullptr, y.data(), s.n}, pool);
      });
      report("fp32", s, m, bytes, sec);
    }
    for (const char* name :
         {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_G", "Q8_G"}) {
      if (!o.type.empty() && o.type != name) continue;
      const QuantType t = *parse_quant_name(name);
      // k = 896 is no whole number of 256-blocks (llama.cpp falls back to Q5_0/Q8_0 there).
      if (s.k % quant_traits(t).block_elems != 0) continue;
      // Q6_K/Q5_K/Q4_G/Q8_G have no quantizer here: Q4_K/Q8_0 blocks re-labelled
      // would be invalid, so quantize to Q8_0 and use random bytes of the same size.
      QuantMatrix q;
      std::vector<uint8_t> raw;
      if (can_quantize(t)) {
        q = quantize_matrix(t, w.data(), s.n, s.k, pool);
      } else {
        raw.resize(s.n * quant_row_bytes(t, s.k));
        std::mt19937 rng(3);
        for (auto& b : raw) b = static_cast<uint8_t>(rng() & 0x3F);  // small, finite fp16 scales
        if (t == QuantType::Q4_G || t == QuantType::Q8_G) {  // f32 scales (not denormals), zero 8
          const int64_t bb = quant_traits(t).block_bytes;
          for (size_t at = 0; at < raw.size(); at += bb) {
            const float scale = 0.01f;
            std::memcpy(raw.data() + at, &scale, 4);
            raw[at + 4] = 8;
          }
        }
        q = {t, s.n, s.k, quant_row_bytes(t, s.k), raw.data(), nullptr, {}, {}, nullptr};
      }
      const int64_t copies = m <= 16 ? std::max<int64_t>(1, cold / q.bytes() + 1) : 1;
      std::vector<std::vector<uint8_t>> store(copies);
      std::vector<QuantMatrix> mats(copies, q);
      for (int64_t c = 0; c < copies; ++c) {
        store[c].assign(q.data, q.data + q.bytes());
        mats[c].data = store[c].data();
        mats[c].keep = nullptr;
      }
      for (int run = 0; run < (o.tiled ? 3 : 2); ++run) {
        const QuantMode mode = run == 0 ? QuantMode::kExact : QuantMode::kInt8;
        quant::set_int8_fused_allowed(run != 2);
        const double sec = bench(copies, budget, [&](int64_t c) {
          quant_matmul({x.data(), m, s.k, &mats[c], nullptr, y.data(), s.n, mode}, pool);
        });
        const std::string label = std::string(name) + (run == 0   ? " ex"
                                                       : run == 1 ? " i8"
                                                                  : " i8t");
        report(label.c_str(), s, m, q.bytes(), sec);
      }
      quant::set_int8_fused_allowed(true);
      if (!quant_has_panel_layout(t)) continue;
      // The int8 mode as a GGUF loads it: panels in a WeightArena, on huge pages
      // once collapsed (Zen 4, 262144x640 Q8_0, m = 1: 1.10x the GB/s of
      // heap pages, median of 12 alternating runs; quant_bench_huge_pages.md).
      WeightArena arena;
      for (QuantMatrix& mc : mats) attach_panels(mc, {}, &arena);
      arena.collapse();
      WeightArena::wait_for_collapses();
      const auto panels_int8 = [&](int64_t c) {
        quant_matmul({x.data(), m, s.k, &mats[c], nullptr, y.data(), s.n, QuantMode::kInt8}, pool);
      };
      report((std::string(name) + " i8p").c_str(), s, m, q.bytes(),
             bench(copies, budget, panels_int8));
      if (o.one_stream && m == 1) {  // the same, reading each range as one stream
        const int streams = quant::int8_decode_streams();
        const int64_t long_bytes = quant::int8_long_piece_bytes();
        quant::set_int8_decode_streams(1);
        quant::set_int8_long_piece_bytes(std::numeric_limits<int64_t>::max());
        const double sec1 = bench(copies, budget, panels_int8);
        quant::set_int8_decode_streams(streams);
        quant::set_int8_long_piece_bytes(long_bytes);
        report((std::string(name) + " i8p1").c_str(), s, m, q.bytes(), sec1);
      }
      if (o.amx && m > 16 && amx_int8_ready()) {  // the same on AMX tiles
        quant::set_int8_amx_enabled(true);
        const double seca = bench(copies, budget, panels_int8);
        quant::set_int8_amx_enabled(false);
        report((std::string(name) + " i8pa").c_str(), s, m, q.bytes(), seca);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string target;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      o.quick = true;
    } else if (!std::strcmp(argv[i], "--hot")) {
      o.hot = true;
    } else if (!std::strcmp(argv[i], "--tiled")) {
      o.tiled = true;
    } else if (!std::strcmp(argv[i], "--amx")) {
      o.amx = true;
    } else if (!std::strcmp(argv[i], "--one-stream")) {
      o.one_stream = true;
    } else if (!std::strcmp(argv[i], "--streams") && i + 1 < argc) {
      quant::set_int8_decode_streams(std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--prefetch") && i + 1 < argc) {
      quant::set_int8_decode_prefetch(std::atoi(argv[++i]) != 0);
    } else if (!std::strcmp(argv[i], "--cpu")) {
      g_cpu_time = true;
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      o.threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--type") && i + 1 < argc) {
      o.type = argv[++i];
    } else if (!std::strcmp(argv[i], "--target") && i + 1 < argc) {
      target = argv[++i];
    } else if (!std::strcmp(argv[i], "--m") && i + 1 < argc) {
      o.m = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%lldx%lld", reinterpret_cast<long long*>(&o.n),
                           reinterpret_cast<long long*>(&o.k)) == 2 &&
               o.n > 0 && o.k > 0 && o.n * o.k <= (int64_t{1} << 30)) {
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--cpu] [--hot] [--tiled] [--one-stream] [--streams S] "
                   "[--prefetch 0|1] [--amx] [--threads T] [--type Q4_K] [--m M] [--shape NxK] "
                   "[--target AVX2]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!target.empty()) {
    int64_t chosen = 0;
    for (int64_t t : hwy::SupportedAndGeneratedTargets())
      if (target == hwy::TargetName(t)) chosen = t;
    if (chosen == 0) {
      std::fprintf(stderr, "--target %s: not a target this build compiled and this CPU runs\n",
                   target.c_str());
      return 2;
    }
    hwy::SetSupportedTargetsForTest(chosen);
  }
  ThreadPool pool(o.threads);
  std::printf("quant target: %s, matmul target: %s, threads: %d\n", quant_target_name(),
              matmul_target_name(), o.threads);
  if (o.n > 0) {
    const std::string name = std::to_string(o.n) + "x" + std::to_string(o.k);
    run_shape({name.c_str(), o.n, o.k}, o, pool);
    return 0;
  }
  for (const Shape& s : kShapes) run_shape(s, o, pool);
  return 0;
}
