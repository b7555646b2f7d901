// Generation with an encoder-decoder (models/seq2seq.h): every request's
// input encoded in one ragged batch, then one decoder step per new token for
// all unfinished requests together, each drawing its token with its own
// Sampler (engine/sampler.h). Rows never see each other, so a request's
// tokens are the same alone or in any batch.
#pragma once

#include <vector>

#include "engine/sampler.h"
#include "models/seq2seq.h"

namespace hubzoo {

struct Seq2SeqRequest {
  std::vector<int64_t> input_ids;  // the encoder's input, >= 1 token
  SamplingParams sampling;
  int64_t max_new_tokens = 32;
  bool stop_at_eos = true;  // stop after a token of info().eos_token_ids (kept in the output)
};

// The new tokens of every request (the decoder start token excluded).
std::vector<std::vector<int64_t>> seq2seq_generate(Seq2SeqLM& lm,
                                                   const std::vector<Seq2SeqRequest>& requests);

}  // namespace hubzoo
