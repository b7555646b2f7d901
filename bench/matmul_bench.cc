// hubzoo's batch-invariant matmul vs oneDNN sgemm vs the scalar reference, on
// the SmolLM2-135M linear layers, at decode (M = 1) and prefill batch sizes.
//
//   matmul_bench [--json FILE] [--quick] [--bf16] [--bf16-activations [--no-bf16-dot]
//                [--tiles]] [--shape NAME|NxK] [--m M]
//
// --bf16-activations: bf16 weights marked as multiplying bf16 activations
// (eager bf16, ops/matmul.h): the CPU's bf16 dot products where it has them,
// or with --no-bf16-dot the FMA kernel under FTZ/DAZ (the same values).
// --tiles: those weights in the tile layout (the tile chain: AMX tiles where
// the CPU has AMX-BF16, else the scalar chain).
// --shape NxK runs one other shape (e.g. 2048x2048: a row stride of x that is a
// multiple of 4 KiB, see ops/matmul.cc).
// M = 1 cycles through enough copies of the weights to overflow the last-level
// cache, so its GB/s is the weight streaming rate a decode step sees.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/matmul.h"
#include "ops/thread_pool.h"

#if HUBZOO_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

using hubzoo::MatmulArgs;
using hubzoo::PackedMatrix;
using hubzoo::ThreadPool;

struct Shape {
  const char* name;
  int64_t n, k;  // W is [n, k]
};

// SmolLM2-135M: hidden 576, intermediate 1536, 9 heads x 64, 3 kv heads, vocab 49152.
// qkv_proj and gate_up_proj are the fused projections (q|k|v and gate|up in one matmul).
constexpr Shape kShapes[] = {
    {"q_proj/o_proj", 576, 576},      {"k_proj/v_proj", 192, 576}, {"qkv_proj", 960, 576},
    {"gate_proj/up_proj", 1536, 576}, {"gate_up_proj", 3072, 576}, {"down_proj", 576, 1536},
    {"lm_head", 49152, 576},
};

struct Result {
  std::string shape;
  int64_t n, k, m;
  int threads;
  double hubzoo_s, dnnl_s, reference_s;  // median seconds, < 0 when not run
};

// Median seconds of fn(rep) over enough repetitions for a stable number.
double time_median(const std::function<void(int)>& fn, double budget_s) {
  using clock = std::chrono::steady_clock;
  fn(0);  // warm-up
  std::vector<double> times;
  const auto start = clock::now();
  for (int rep = 1; rep <= 200; ++rep) {
    const auto t0 = clock::now();
    fn(rep);
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    const double spent = std::chrono::duration<double>(clock::now() - start).count();
    if (times.size() >= 5 && spent > budget_s) break;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void set_dnnl_threads(int threads) {
  // Debian's oneDNN runs on OpenMP; reach omp_set_num_threads through it.
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) f(threads);
}

std::vector<float> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  bool quick = false;
  bool bf16 = false;  // hubzoo's weights as bf16 (oneDNN stays fp32: its sgemm is the baseline)
  bool bf16_activations = false;
  bool tiles = false;
  bool coded = false;
  bool hot = false;  // M = 1 from one copy of the weights (cache-resident where they fit)
  std::string only_shape;
  int64_t only_m = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else if (!std::strcmp(argv[i], "--bf16")) {
      bf16 = true;
    } else if (!std::strcmp(argv[i], "--bf16-activations")) {
      bf16 = bf16_activations = true;
    } else if (!std::strcmp(argv[i], "--tiles")) {
      bf16 = bf16_activations = tiles = true;
    } else if (!std::strcmp(argv[i], "--hot")) {
      hot = true;
    } else if (!std::strcmp(argv[i], "--coded")) {
      bf16 = bf16_activations = coded = true;
    } else if (!std::strcmp(argv[i], "--no-bf16-dot")) {
      hubzoo::set_matmul_bf16_dot_allowed(false);
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      only_shape = argv[++i];
    } else if (!std::strcmp(argv[i], "--m") && i + 1 < argc) {
      only_m = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--quick] [--bf16] [--bf16-activations "
                   "[--no-bf16-dot] [--tiles | --coded]] [--shape NAME|NxK] [--m M] [--hot]\n",
                   argv[0]);
      return 2;
    }
  }
  const double budget_s = quick ? 0.1 : 0.4;
  const int64_t ms[] = {1, 16, 128, 512};
  const int thread_counts[] = {1, 2};
  const int64_t cold_bytes = 96ll << 20;  // > L3: M = 1 streams weights from memory

  std::printf("hubzoo matmul target: %s\n", hubzoo::matmul_target_name());
#if HUBZOO_HAVE_DNNL
  const dnnl_version_t* dv = dnnl_version();
  std::printf("oneDNN %d.%d.%d (cpu runtime %u)\n", dv->major, dv->minor, dv->patch,
              dv->cpu_runtime);
#else
  std::printf("oneDNN: not built in\n");
#endif
  std::printf("%-18s %6s %6s %4s %3s | %9s %9s %9s | %7s %9s\n", "shape", "N", "K", "M", "thr",
              "hubzoo", "oneDNN", "reference", "ratio", "hubzoo");
  std::printf("%-18s %6s %6s %4s %3s | %9s %9s %9s | %7s %9s\n", "", "", "", "", "", "GFLOP/s",
              "GFLOP/s", "GFLOP/s", "vs dnnl", "wGB/s");

  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  long custom_n = 0, custom_k = 0;
  if (std::sscanf(only_shape.c_str(), "%ldx%ld", &custom_n, &custom_k) == 2 && custom_n > 0 &&
      custom_k > 0) {
    shapes = {{only_shape.c_str(), custom_n, custom_k}};
  }
  std::vector<Result> results;
  for (const Shape& s : shapes) {
    if (!only_shape.empty() && only_shape != s.name) continue;
    const int64_t w_bytes = s.n * s.k * (bf16 ? 2 : 4);
    const int copies = hot ? 1 : static_cast<int>(std::max<int64_t>(1, cold_bytes / w_bytes + 1));
    std::vector<std::vector<float>> w_raw;
    std::vector<PackedMatrix> w_packed;
    for (int c = 0; c < copies; ++c) {
      w_raw.push_back(random_values(s.n * s.k, 7 + c));
      w_packed.push_back(bf16 ? hubzoo::pack_weights_bf16(w_raw.back().data(), s.n, s.k)
                              : hubzoo::pack_weights(w_raw.back().data(), s.n, s.k));
      w_packed.back().bf16_activations = bf16_activations;
      if (tiles) w_packed.back() = hubzoo::to_bf16_tiles(std::move(w_packed.back()));
      if (coded) w_packed.back() = hubzoo::to_bf16_coded(std::move(w_packed.back()));
    }
    for (int64_t m : ms) {
      if (only_m && m != only_m) continue;
      // Cold weights only for decode; prefill reuses one hot copy like a real layer.
      const int use_copies = m == 1 ? copies : 1;
      const auto x = random_values(m * s.k, 3);
      std::vector<float> y(m * s.n);
      for (int threads : thread_counts) {
        Result r{s.name, s.n, s.k, m, threads, -1, -1, -1};
        ThreadPool pool(threads);
        r.hubzoo_s = time_median(
            [&](int rep) {
              const MatmulArgs a{x.data(), m,        s.k, &w_packed[rep % use_copies],
                                 nullptr,  y.data(), s.n};
              hubzoo::matmul(a, pool);
            },
            budget_s);
#if HUBZOO_HAVE_DNNL
        set_dnnl_threads(threads);
        r.dnnl_s = time_median(
            [&](int rep) {
              dnnl_sgemm('N', 'T', m, s.n, s.k, 1.0f, x.data(), s.k, w_raw[rep % use_copies].data(),
                         s.k, 0.0f, y.data(), s.n);
            },
            budget_s);
#endif
        if (threads == 1 && m * s.n * s.k <= (quick ? 2e7 : 6e7)) {
          r.reference_s = time_median(
              [&](int rep) {
                const MatmulArgs a{x.data(), m,        s.k, &w_packed[rep % use_copies],
                                   nullptr,  y.data(), s.n};
                hubzoo::matmul_reference(a);
              },
              budget_s / 4);
        }
        const double flop = 2.0 * m * s.n * s.k;
        auto gflops = [&](double t) { return t > 0 ? flop / t * 1e-9 : 0.0; };
        std::printf("%-18s %6ld %6ld %4ld %3d | %9.1f %9.1f %9.1f | %7.2f %9.1f\n", s.name,
                    static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(m), threads,
                    gflops(r.hubzoo_s), gflops(r.dnnl_s), gflops(r.reference_s),
                    r.dnnl_s > 0 ? r.dnnl_s / r.hubzoo_s : 0.0, w_bytes / r.hubzoo_s * 1e-9);
        std::fflush(stdout);
        results.push_back(r);
      }
    }
  }

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
    out << "{\n  \"benchmark\": \"matmul\",\n  \"hubzoo_target\": \""
        << hubzoo::matmul_target_name() << "\",\n";
#if HUBZOO_HAVE_DNNL
    out << "  \"onednn_version\": \"" << dv->major << "." << dv->minor << "." << dv->patch
        << "\",\n";
#else
    out << "  \"onednn_version\": null,\n";
#endif
    out << "  \"decode_weights\": \"M=1 cycles weight copies totalling > 96 MiB (cold)\",\n";
    out << "  \"results\": [\n";
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      const double flop = 2.0 * r.m * r.n * r.k;
      auto num = [](double t, double scale) {
        return t > 0 ? std::to_string(scale / t) : std::string("null");
      };
      out << "    {\"shape\": \"" << r.shape << "\", \"n\": " << r.n << ", \"k\": " << r.k
          << ", \"m\": " << r.m << ", \"threads\": " << r.threads
          << ", \"hubzoo_gflops\": " << num(r.hubzoo_s, flop * 1e-9)
          << ", \"onednn_gflops\": " << num(r.dnnl_s, flop * 1e-9)
          << ", \"reference_gflops\": " << num(r.reference_s, flop * 1e-9)
          << ", \"hubzoo_weight_gbps\": " << num(r.hubzoo_s, r.n * r.k * (bf16 ? 2e-9 : 4e-9))
          << ", \"onednn_weight_gbps\": " << num(r.dnnl_s, r.n * r.k * 4e-9)
          << ", \"hubzoo_vs_onednn\": "
          << (r.dnnl_s > 0 ? std::to_string(r.dnnl_s / r.hubzoo_s) : std::string("null")) << "}"
          << (i + 1 < results.size() ? ",\n" : "\n");
    }
    out << "  ]\n}\n";
  }
  return 0;
}
