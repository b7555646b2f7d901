// Decode-step attention as a decoder runs it, cold: a KvCache of L layers
// (SmolLM2's geometry by default: 9 query heads, 3 KV heads, d = 64, keys
// blocked) holding `ctx` positions of one sequence; per layer, a stand-in for
// that layer's weights (--evict-mb of a buffer larger than the last-level
// cache, read once) goes through the caches first, then attend_chunk adds one
// position. Only attend_chunk is timed: what a decode step spends in
// attention beyond the weights it reads.
//
//   cold:   per layer, after its stand-in weights were read
//   hot:    the same call repeated at once (the layer's KV cache in cache)
//   GB/s:   the layer's keys and values (ctx positions) over the cold time
//   --bf16: the cache keeps bf16 keys and values (the bf16 modes')
//   --f16:  the cache keeps half keys and values (the int8 mode's)
//
//   attention_decode_bench [--ctx 64,256,1024] [--threads 2] [--layers 30]
//                          [--evict-mb 3] [--steps 16] [--heads 9 --kv-heads 3 --d 64]
//                          [--bf16 | --f16]
//   (Gemma 3 270M: --heads 4 --kv-heads 1 --d 256 --layers 18)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "layers/attention.h"
#include "layers/kv_cache.h"
#include "layers/workspace.h"
#include "ops/thread_pool.h"

namespace {

using hubzoo::ChunkOptions;
using hubzoo::KvCache;
using hubzoo::KvLayerSpec;
using hubzoo::LayerWorkspace;
using hubzoo::ThreadPool;
using hubzoo::TokenBatch;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::atoll(s.substr(pos, comma - pos).c_str()));
    pos = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ctxs = "64,256,1024";
  int threads = 2, layers = 30, steps = 16;
  int64_t heads = 9, kv_heads = 3, d = 64;
  double evict_mb = 3.0;
  hubzoo::KvElement element = hubzoo::KvElement::kF32;
  for (int i = 1; i < argc; ++i) {
    const auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (!std::strcmp(argv[i], "--bf16")) {
      element = hubzoo::KvElement::kBF16;
    } else if (!std::strcmp(argv[i], "--f16")) {
      element = hubzoo::KvElement::kF16;
    } else if (arg("--ctx")) {
      ctxs = argv[++i];
    } else if (arg("--threads")) {
      threads = std::atoi(argv[++i]);
    } else if (arg("--layers")) {
      layers = std::atoi(argv[++i]);
    } else if (arg("--evict-mb")) {
      evict_mb = std::atof(argv[++i]);
    } else if (arg("--steps")) {
      steps = std::atoi(argv[++i]);
    } else if (arg("--heads")) {
      heads = std::atoll(argv[++i]);
    } else if (arg("--kv-heads")) {
      kv_heads = std::atoll(argv[++i]);
    } else if (arg("--d")) {
      d = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--ctx 64,256,1024] [--threads 2] [--layers 30] [--evict-mb 3] "
                   "[--steps 16] [--heads 9 --kv-heads 3 --d 64] [--bf16 | --f16]\n",
                   argv[0]);
      return 2;
    }
  }
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || d < 1 || d % 16 != 0) {
    std::fprintf(stderr, "--heads must be a multiple of --kv-heads, --d of 16\n");
    return 2;
  }
  const int64_t row = kv_heads * d;  // a KV cache row: every KV head's d floats
  ThreadPool pool(threads);
  // The stand-in weights: each layer reads its own part, so that after a
  // step the whole buffer (larger than any last-level cache) went through.
  const int64_t evict_floats = static_cast<int64_t>(evict_mb * (1 << 20) / sizeof(float));
  std::vector<float> weights(std::max<int64_t>(1, evict_floats * layers), 1.0f);
  volatile float sink = 0.0f;
  const auto read_weights = [&](int64_t layer) {
    const float* w = weights.data() + layer * evict_floats;
    std::vector<float> part(threads, 0.0f);
    pool.parallel_for(evict_floats, 1024, [&](int64_t b, int64_t e) {
      float s = 0.0f;
      for (int64_t j = b; j < e; j += 16) s += w[j];  // one float per cache line
      part[b * threads / std::max<int64_t>(1, evict_floats)] += s;
    });
    for (float s : part) sink = sink + s;
  };

  std::printf(
      "attention per decode step and layer: %ld heads, %ld KV heads, d %ld, %d layers, "
      "%d threads, %s cache, %.1f MB read between layers; medians of %d steps\n",
      static_cast<long>(heads), static_cast<long>(kv_heads), static_cast<long>(d), layers, threads,
      hubzoo::kv_element_name(element), evict_mb, steps);
  std::printf("%6s | %9s %9s | %8s | %s\n", "ctx", "cold us", "hot us", "cold/hot", "cold GB/s");
  for (const int64_t ctx : parse_list(ctxs)) {
    KvLayerSpec spec{row, 0};
    spec.blocked_keys = true;
    spec.element = element;
    KvCache cache(std::vector<KvLayerSpec>(layers, spec), 1);
    cache.reserve(0, ctx + steps);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> k(row), v(row), q(heads * d), out(heads * d);
    for (int64_t layer = 0; layer < layers; ++layer) {
      for (int64_t p = 0; p < ctx; ++p) {
        for (auto& x : k) x = dist(rng);
        for (auto& x : v) x = dist(rng);
        cache.store_key(layer, 0, p, k.data());
        cache.store_value(layer, 0, p, v.data());
      }
    }
    cache.set_length(0, ctx);
    for (auto& x : q) x = dist(rng);
    ChunkOptions opt{.num_heads = heads, .num_kv_heads = kv_heads, .head_dim = d, .score = {}};
    opt.score.scale = 1.0f / std::sqrt(static_cast<float>(d));
    LayerWorkspace ws;
    std::vector<double> cold, hot;
    for (int s = 0; s < steps; ++s) {
      TokenBatch batch;
      batch.add(0, 0, static_cast<int32_t>(ctx + s));
      for (int64_t layer = 0; layer < layers; ++layer) {
        read_weights(layer);
        auto t0 = std::chrono::steady_clock::now();
        hubzoo::attend_chunk(batch, q.data(), k.data(), v.data(), cache, layer, opt, out.data(),
                             pool, ws);
        cold.push_back(seconds_since(t0));
        t0 = std::chrono::steady_clock::now();
        hubzoo::attend_chunk(batch, q.data(), k.data(), v.data(), cache, layer, opt, out.data(),
                             pool, ws);
        hot.push_back(seconds_since(t0));
      }
      cache.set_length(0, ctx + s + 1);
    }
    const double c = median(cold), h = median(hot);
    const double bytes =
        2.0 * static_cast<double>(ctx) * row * (element == hubzoo::KvElement::kF32 ? 4 : 2);
    std::printf("%6ld | %9.2f %9.2f | %7.2fx | %.1f\n", static_cast<long>(ctx), c * 1e6, h * 1e6,
                c / h, bytes / c * 1e-9);
  }
  return sink == 12345.0f ? 1 : 0;
}
