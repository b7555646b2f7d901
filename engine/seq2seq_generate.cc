#include "engine/seq2seq_generate.h"

#include <algorithm>

#include "base/error.h"

namespace hubzoo {

std::vector<std::vector<int64_t>> seq2seq_generate(Seq2SeqLM& lm,
                                                   const std::vector<Seq2SeqRequest>& requests) {
  const Seq2SeqInfo& info = lm.info();
  const int64_t vocab = info.vocab_size;
  EncoderBatch batch;
  for (const auto& r : requests) {
    if (r.input_ids.empty()) throw InvalidArgument("a request has no input tokens");
    if (r.max_new_tokens < 0 || r.max_new_tokens > info.max_tokens) {
      throw InvalidArgument("max_new_tokens must be in [0, " + std::to_string(info.max_tokens) +
                            "]");
    }
    validate(r.sampling, vocab);
    batch.add(r.input_ids);
  }
  EncoderResult enc;
  lm.encode(batch, {}, enc);
  const size_t n = requests.size();
  std::vector<std::unique_ptr<Seq2SeqState>> states;
  std::vector<Sampler> samplers;
  int64_t row = 0;
  for (size_t i = 0; i < n; ++i) {
    states.push_back(lm.start(&enc.hidden[row * info.hidden_size], batch.lengths[i]));
    row += batch.lengths[i];
    samplers.emplace_back(requests[i].sampling);
  }
  std::vector<std::vector<int64_t>> out(n);
  std::vector<int64_t> next(n, info.decoder_start_token_id);
  std::vector<bool> done(n);
  for (size_t i = 0; i < n; ++i) done[i] = requests[i].max_new_tokens == 0;
  for (;;) {
    std::vector<Seq2SeqState*> active;
    std::vector<std::vector<int64_t>> tokens;
    std::vector<size_t> which;
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      active.push_back(states[i].get());
      tokens.push_back({next[i]});
      which.push_back(i);
    }
    if (active.empty()) break;
    Seq2SeqDecodeResult step;
    lm.decode(active, tokens, {}, step);
    for (size_t a = 0; a < which.size(); ++a) {
      const size_t i = which[a];
      const int64_t id = samplers[i].sample(&step.logits[a * vocab], vocab);
      out[i].push_back(id);
      next[i] = id;
      const auto& eos = info.eos_token_ids;
      const bool is_eos = std::find(eos.begin(), eos.end(), id) != eos.end();
      if ((requests[i].stop_at_eos && is_eos) ||
          static_cast<int64_t>(out[i].size()) >= requests[i].max_new_tokens) {
        done[i] = true;
      }
    }
  }
  return out;
}

}  // namespace hubzoo
