// Attention kernels, one thread, SmolLM2 heads (d = 64, a KV head shared by
// 3 query heads, KV rows of 3 heads), causal prefill of P positions: every
// query row t attends to positions 0..t.
//   calls:  per-position dot()/axpy() calls (the first fused-mode code)
//   head:   ops/attend_head.h, one SIMD call per (row, head), two-pass softmax
//   online: ops/attend_online.h as layers/attention.cc runs it: keys
//           transposed into blocks once per sequence (timed), then one call
//           per (row, KV head) for its 3 query heads
// calls and head give the same bits; online is its own arithmetic (ops tests).
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
#include "ops/attend_online.h"
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
  constexpr int64_t kGroup = 3;  // query heads per KV head
  std::printf(
      "attend_head target %s, attend_online target %s; 3 query heads of one KV head,\n"
      "causal prefill, 1 thread, best of 5 alternating runs\n",
      hubzoo::attend_head_target_name(), hubzoo::attend_online_target_name());
  std::printf("%6s | %10s %10s %10s | %8s %8s | %s\n", "P", "calls ms", "head ms", "online ms",
              "online/", "online/", "online GFLOP/s");
  std::printf("%6s | %10s %10s %10s | %8s %8s |\n", "", "", "", "", "calls", "head");
  size_t pos = 0;
  while (pos < ps.size()) {
    const size_t comma = ps.find(',', pos);
    const int64_t p = std::atoll(ps.substr(pos, comma - pos).c_str());
    pos = comma == std::string::npos ? ps.size() : comma + 1;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> q(p * kGroup * d), k(p * stride), v(p * stride), scores(p),
        out(p * kGroup * d), blocks(hubzoo::key_blocks(0, p) * d * hubzoo::kKeyBlock);
    for (auto* vec : {&q, &k, &v}) {
      for (auto& x : *vec) x = dist(rng);
    }
    const float scale = 0.125f;
    double best_calls = 1e9, best_head = 1e9, best_online = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t t = 0; t < p; ++t) {
        for (int64_t h = 0; h < kGroup; ++h) {
          const float* qh = &q[(t * kGroup + h) * d];
          float* oh = &out[(t * kGroup + h) * d];
          const int64_t len = t + 1;
          for (int64_t j = 0; j < len; ++j) scores[j] = hubzoo::dot(qh, &k[j * stride], d) * scale;
          hubzoo::softmax_inplace(scores.data(), len);
          std::fill_n(oh, d, 0.0f);
          for (int64_t j = 0; j < len; ++j) hubzoo::axpy(scores[j], &v[j * stride], oh, d);
        }
      }
      best_calls = std::min(best_calls, seconds(t0));
      t0 = std::chrono::steady_clock::now();
      for (int64_t t = 0; t < p; ++t) {
        for (int64_t h = 0; h < kGroup; ++h) {
          hubzoo::attend_head_f32(&q[(t * kGroup + h) * d], k.data(), v.data(), stride, t + 1, d,
                                  scale, scores.data(), &out[(t * kGroup + h) * d]);
        }
      }
      best_head = std::min(best_head, seconds(t0));
      t0 = std::chrono::steady_clock::now();
      hubzoo::transpose_key_blocks(k.data(), stride, 0, p, d, blocks.data());
      for (int64_t t = 0; t < p; ++t) {
        hubzoo::attend_online_f32({.q = &q[t * kGroup * d],
                                   .q_stride = d,
                                   .nq = kGroup,
                                   .kt = blocks.data(),
                                   .kt_stride = d * hubzoo::kKeyBlock,
                                   .values = v.data(),
                                   .v_stride = stride,
                                   .lane0 = 0,
                                   .len = t + 1,
                                   .d = d,
                                   .scale = scale,
                                   .out = &out[t * kGroup * d],
                                   .out_stride = d});
      }
      best_online = std::min(best_online, seconds(t0));
    }
    const double flops = 4.0 * d * kGroup * (static_cast<double>(p) * (p + 1) / 2);
    std::printf("%6ld | %10.2f %10.2f %10.2f | %7.2fx %7.2fx | %.1f\n", static_cast<long>(p),
                best_calls * 1e3, best_head * 1e3, best_online * 1e3, best_calls / best_online,
                best_head / best_online, flops / best_online * 1e-9);
  }
  return 0;
}
