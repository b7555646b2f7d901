// Batched generation with a KV cache: one prefill of every prompt, then one
// decode step per new token for the sequences still running.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "models/causal_lm.h"

namespace hubzoo {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  SamplingParams sampling;
  // Extra stop ids on top of the model's EOS ids.
  std::vector<int64_t> stop_token_ids;
  bool stop_at_eos = true;
  // Called for every generated token (row, token); return false to stop that row.
  std::function<bool(int64_t, int64_t)> on_token;
};

struct GenerateResult {
  // [batch][steps]: rows that finished early are padded with pad_id, as
  // transformers' generate() pads them.
  std::vector<std::vector<int64_t>> tokens;
  int64_t pad_id = 0;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;
};

// Each prompt is its own sequence (no padding reaches the model).
GenerateResult generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& options);

}  // namespace hubzoo
