// ops/attend_head.h's fused kernel vs the per-position dot()/axpy() calls it
// replaces (what layers/attention.cc runs today), one thread, SmolLM2 heads
// (d = 64, KV rows of 3 heads), causal prefill of P positions: every query
// row t attends to positions 0..t. Results are bit-identical (ops tests).
//
//   attention_bench [--p 128,512,2048]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/attend_head.h"
#include "ops/elementwise.h"

namespace {

double seconds(const std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string ps = "128,512,2048";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--p") && i + 1 < argc) {
      ps = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--p 128,512,2048]\n", argv[0]);
      return 2;
    }
  }
  const int64_t d = 64, stride = 3 * d;
  std::printf("attend_head target %s; one head, causal prefill, 1 thread\n",
              hubzoo::attend_head_target_name());
  std::printf("%6s | %12s %12s | %7s\n", "P", "calls ms", "fused ms", "speedup");
  size_t pos = 0;
  while (pos < ps.size()) {
    const size_t comma = ps.find(',', pos);
    const int64_t p = std::atoll(ps.substr(pos, comma - pos).c_str());
    pos = comma == std::string::npos ? ps.size() : comma + 1;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> q(p * d), k(p * stride), v(p * stride), scores(p), out(p * d);
    for (auto* vec : {&q, &k, &v}) {
      for (auto& x : *vec) x = dist(rng);
    }
    const float scale = 0.125f;
    double best_calls = 1e9, best_fused = 1e9;
    for (int rep = 0; rep < 5; ++rep) {  // alternating, best of 5
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t t = 0; t < p; ++t) {  // layers/attention.cc's attend_head, fused mode
        const int64_t len = t + 1;
        for (int64_t j = 0; j < len; ++j)
          scores[j] = hubzoo::dot(&q[t * d], &k[j * stride], d) * scale;
        hubzoo::softmax_inplace(scores.data(), len);
        std::fill_n(&out[t * d], d, 0.0f);
        for (int64_t j = 0; j < len; ++j) hubzoo::axpy(scores[j], &v[j * stride], &out[t * d], d);
      }
      best_calls = std::min(best_calls, seconds(t0));
      t0 = std::chrono::steady_clock::now();
      for (int64_t t = 0; t < p; ++t) {
        hubzoo::attend_head_f32(&q[t * d], k.data(), v.data(), stride, t + 1, d, scale,
                                scores.data(), &out[t * d]);
      }
      best_fused = std::min(best_fused, seconds(t0));
    }
    std::printf("%6ld | %12.2f %12.2f | %6.2fx\n", static_cast<long>(p), best_calls * 1e3,
                best_fused * 1e3, best_calls / best_fused);
  }
  return 0;
}
