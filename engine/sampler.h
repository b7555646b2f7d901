// Token selection from one row of logits: greedy, or temperature -> top-k ->
// top-p sampling in transformers' order, with a per-sequence seeded generator
// so a sequence samples the same tokens whatever else is in the batch.
#pragma once

#include <cstdint>

namespace hubzoo {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
};

// Validates ranges; throws InvalidArgument naming the parameter.
void validate(const SamplingParams& p);

// xoshiro256** seeded by splitmix64: the same stream on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1), 53 bits

 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  // logits: [vocab]; may be modified in place.
  int64_t sample(float* logits, int64_t vocab);

 private:
  SamplingParams p_;
  Rng rng_;
};

}  // namespace hubzoo
