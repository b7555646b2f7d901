#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "base/error.h"
#include "ops/elementwise.h"

namespace hubzoo {

void validate(const SamplingParams& p, int64_t vocab) {
  auto bad = [](const std::string& name, const std::string& rule, double got) {
    throw InvalidArgument(name + " must be " + rule + ", got " + std::to_string(got));
  };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    bad("temperature", "a finite number >= 0", p.temperature);
  }
  if (p.top_k < 0) bad("top_k", ">= 0", static_cast<double>(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    bad("repetition_penalty", "a finite number > 0", p.repetition_penalty);
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    bad("presence_penalty", "in [-2, 2]", p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    bad("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || (vocab > 0 && id >= vocab)) {
      throw InvalidArgument("logit_bias token id " + std::to_string(id) +
                            " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) bad("logit_bias values", "in [-100, 100]", bias);
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

constexpr float kRemoved = -std::numeric_limits<float>::infinity();

// Descending by logit, ties by id: a total order, so partial sorts agree.
struct ByLogitDesc {
  const float* logits;
  bool operator()(int64_t a, int64_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};
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

void Sampler::set_prompt(const std::vector<int64_t>& ids) {
  for (int64_t id : ids) seen_[id] = 1;
}

void Sampler::accept(int64_t id) {
  seen_[id] = 1;
  ++generated_[id];
}

void Sampler::adjust(float* logits, int64_t vocab) const {
  for (const auto& [id, bias] : p_.logit_bias) {
    if (id >= 0 && id < vocab) logits[id] += bias;
  }
  if (p_.repetition_penalty != 1.0f) {
    const float penalty = p_.repetition_penalty;
    for (const auto& entry : seen_) {
      if (entry.first < 0 || entry.first >= vocab) continue;
      float& l = logits[entry.first];
      l = l < 0.0f ? l * penalty : l / penalty;
    }
  }
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    for (const auto& [id, count] : generated_) {
      if (id < 0 || id >= vocab) continue;
      logits[id] -= p_.frequency_penalty * static_cast<float>(count) + p_.presence_penalty;
    }
  }
}

std::vector<int64_t> Sampler::candidates(float* logits, int64_t vocab) const {
  if (p_.temperature != 1.0f) {
    for (int64_t i = 0; i < vocab; ++i) logits[i] /= p_.temperature;
  }
  std::vector<int64_t> ids;
  if (p_.top_k > 0 && p_.top_k < vocab) {
    // transformers keeps every token whose logit reaches the k-th largest (ties included).
    std::vector<float> values(logits, logits + vocab);
    std::nth_element(values.begin(), values.begin() + (p_.top_k - 1), values.end(),
                     std::greater<float>());
    const float threshold = values[p_.top_k - 1];
    for (int64_t i = 0; i < vocab; ++i) {
      if (logits[i] >= threshold) ids.push_back(i);
    }
  } else {
    ids.resize(vocab);
    std::iota(ids.begin(), ids.end(), 0);
  }
  auto max_logit = [&] {
    float m = kRemoved;
    for (int64_t i : ids) m = std::max(m, logits[i]);
    return m;
  };
  if (p_.top_p < 1.0f) {
    // Keep a token while the mass of the more likely ones is below top_p
    // (transformers: drop where the ascending cumulative mass <= 1 - top_p).
    // Sorted lazily: a growing prefix, until the mass is reached.
    const double m = max_logit();
    double total = 0.0;
    for (int64_t i : ids) total += std::exp(static_cast<double>(logits[i]) - m);
    const size_t n = ids.size();
    size_t sorted = 0, keep = n;
    double mass = 0.0;
    for (size_t k = std::min<size_t>(n, 64); keep == n; k = std::min(n, k * 8)) {
      std::partial_sort(ids.begin() + sorted, ids.begin() + k, ids.end(), ByLogitDesc{logits});
      for (; sorted < k; ++sorted) {
        if (mass >= p_.top_p) {
          keep = sorted;
          break;
        }
        mass += std::exp(static_cast<double>(logits[ids[sorted]]) - m) / total;
      }
      if (k == n) break;
    }
    ids.resize(keep);
  }
  if (p_.min_p > 0.0f) {
    // probs < min_p * max(probs) is dropped; the most likely token always stays.
    const double m = max_logit();
    std::erase_if(ids, [&](int64_t i) {
      return std::exp(static_cast<double>(logits[i]) - m) < static_cast<double>(p_.min_p);
    });
  }
  return ids;
}

void Sampler::process(float* logits, int64_t vocab) const {
  adjust(logits, vocab);
  if (p_.temperature == 0.0f) return;
  const std::vector<int64_t> kept = candidates(logits, vocab);
  std::vector<bool> keep(vocab, false);
  for (int64_t i : kept) keep[i] = true;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!keep[i]) logits[i] = kRemoved;
  }
}

int64_t Sampler::sample(float* logits, int64_t vocab) {
  adjust(logits, vocab);
  int64_t token;
  if (p_.temperature == 0.0f) {
    token = argmax(logits, vocab);
  } else {
    const std::vector<int64_t> ids = candidates(logits, vocab);
    double m = kRemoved;
    for (int64_t i : ids) m = std::max(m, static_cast<double>(logits[i]));
    double total = 0.0;
    for (int64_t i : ids) total += std::exp(logits[i] - m);
    const double target = rng_.uniform() * total;
    double cumulative = 0.0;
    token = ids.back();
    for (int64_t i : ids) {
      cumulative += std::exp(logits[i] - m);
      if (target < cumulative) {
        token = i;
        break;
      }
    }
  }
  accept(token);
  return token;
}

Logprobs compute_logprobs(const float* logits, int64_t vocab, int64_t chosen, int64_t top_n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += std::exp(logits[i] - m);
  const double lse = m + std::log(total);
  auto lp = [&](int64_t i) { return static_cast<float>(logits[i] - lse); };
  Logprobs out;
  out.chosen = {chosen, lp(chosen)};
  top_n = std::clamp<int64_t>(top_n, 0, vocab);
  if (top_n > 0) {
    std::vector<int64_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top_n, ids.end(), ByLogitDesc{logits});
    for (int64_t k = 0; k < top_n; ++k) out.top.push_back({ids[k], lp(ids[k])});
  }
  return out;
}

}  // namespace hubzoo
