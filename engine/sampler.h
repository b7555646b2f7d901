// Token selection from one row of logits, in transformers' logits-processor
// order: logit_bias (SequenceBias) -> repetition penalty -> presence/frequency
// penalties (OpenAI's; transformers has none) -> temperature -> top-k -> top-p
// -> min-p, then a draw from the softmax of what is left. Greedy (temperature
// 0) is the argmax after the bias and penalties, as transformers' greedy search
// applies its processors but no warpers.
//
// Each sequence has its own seeded generator and token history, so it samples
// the same tokens whatever else is in the batch.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hubzoo {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // transformers': prompt and generated tokens; 1: off
  float presence_penalty = 0.0f;    // OpenAI's: generated tokens only; 0: off
  float frequency_penalty = 0.0f;   // OpenAI's: generated tokens only; 0: off
  // (token id, value added to its logit), as OpenAI's logit_bias.
  std::vector<std::pair<int64_t, float>> logit_bias = {};
};

// Validates ranges; throws InvalidArgument naming the parameter. With a
// vocabulary size, logit_bias ids are checked too.
void validate(const SamplingParams& p, int64_t vocab = 0);

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

  // Tokens before the first generated one; the repetition penalty counts
  // them, as transformers penalises the prompt too.
  void set_prompt(const std::vector<int64_t>& ids);
  // Records a generated token (sample() does it for the token it returns).
  void accept(int64_t id);

  // Applies every processor to `logits` [vocab] in place: removed tokens get
  // -inf, so softmax(logits) is the distribution sample() draws from (for
  // greedy: bias and penalties only). What transformers' processors return.
  void process(float* logits, int64_t vocab) const;

  // process() then a draw (greedy: the argmax); records the token.
  int64_t sample(float* logits, int64_t vocab);

 private:
  // Bias and penalties, in place.
  void adjust(float* logits, int64_t vocab) const;
  // Temperature and the filters; the surviving ids in descending logit
  // order (ties by id). `logits` holds the scaled values afterwards.
  std::vector<int64_t> candidates(float* logits, int64_t vocab) const;

  SamplingParams p_;
  Rng rng_;
  std::unordered_map<int64_t, int64_t> seen_;       // prompt + generated: any count
  std::unordered_map<int64_t, int64_t> generated_;  // generated only: counts
};

// log_softmax of raw logits for one chosen token and the `top_n` most likely.
struct TokenLogprob {
  int64_t id = 0;
  float logprob = 0.0f;
};
struct Logprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // descending, ties by id
};
Logprobs compute_logprobs(const float* logits, int64_t vocab, int64_t chosen, int64_t top_n);

}  // namespace hubzoo
