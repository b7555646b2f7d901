#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "ops/elementwise.h"

namespace hubzoo {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    throw InvalidArgument("temperature must be a finite number >= 0, got " +
                          std::to_string(p.temperature));
  }
  if (p.top_k < 0) throw InvalidArgument("top_k must be >= 0, got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    throw InvalidArgument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
  }
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

int64_t Sampler::sample(float* logits, int64_t vocab) {
  if (p_.temperature == 0.0f) return argmax(logits, vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[i] /= p_.temperature;
  // Candidates sorted by logit (ties by id), as a stable descending sort does.
  std::vector<int64_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  int64_t keep = vocab;
  if (p_.top_k > 0) keep = std::min(keep, p_.top_k);
  // Softmax over the kept candidates.
  std::vector<float> probs(keep);
  for (int64_t i = 0; i < keep; ++i) probs[i] = logits[order[i]];
  softmax_inplace(probs.data(), keep);
  if (p_.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    float mass = 0.0f;
    int64_t n = 0;
    while (n < keep) {
      mass += probs[n++];
      if (mass >= p_.top_p) break;
    }
    keep = n;
    probs.resize(keep);
    for (int64_t i = 0; i < keep; ++i) probs[i] = logits[order[i]];
    softmax_inplace(probs.data(), keep);
  }
  const double u = rng_.uniform();
  double cumulative = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (u < cumulative) return order[i];
  }
  return order[keep - 1];
}

}  // namespace hubzoo
