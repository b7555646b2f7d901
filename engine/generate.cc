#include "engine/generate.h"

#include <algorithm>
#include <chrono>

#include "base/error.h"

namespace hubzoo {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerateResult generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& options) {
  validate(options.sampling, model.info().vocab_size);
  if (options.max_new_tokens < 0) throw InvalidArgument("max_new_tokens must be >= 0");
  const ModelInfo& info = model.info();
  const int64_t batch = static_cast<int64_t>(prompts.size());
  std::vector<int64_t> stop = options.stop_token_ids;
  if (options.stop_at_eos)
    stop.insert(stop.end(), info.eos_token_ids.begin(), info.eos_token_ids.end());
  auto is_stop = [&](int64_t id) { return std::find(stop.begin(), stop.end(), id) != stop.end(); };

  GenerateResult result;
  result.tokens.resize(batch);
  result.pad_id = info.pad_token_id >= 0        ? info.pad_token_id
                  : !info.eos_token_ids.empty() ? info.eos_token_ids[0]
                                                : 0;
  if (batch == 0 || options.max_new_tokens == 0) return result;

  KvCache cache = model.new_cache(batch);
  std::vector<Sampler> samplers(batch, Sampler(options.sampling));
  std::vector<bool> running(batch, true);
  std::vector<int64_t> lengths(batch);
  TokenBatch step;
  std::vector<int64_t> rows;  // batch row of each sequence in `step`, in order
  ForwardOptions fwd;
  for (int64_t b = 0; b < batch; ++b) {
    if (prompts[b].empty()) throw InvalidArgument("prompt " + std::to_string(b) + " is empty");
    for (size_t i = 0; i < prompts[b].size(); ++i) {
      step.add(static_cast<int32_t>(prompts[b][i]), static_cast<int32_t>(b),
               static_cast<int32_t>(i));
    }
    lengths[b] = static_cast<int64_t>(prompts[b].size());
    samplers[b].set_prompt(prompts[b]);
    result.prompt_tokens += lengths[b];
    fwd.logits_rows.push_back(step.size() - 1);
    rows.push_back(b);
  }

  // Everything the loop touches is allocated here: a decode step reuses it
  // (result.tokens grows by one per row and step; reserved too).
  ForwardResult out;
  std::vector<int64_t> next(batch), still;
  still.reserve(batch);
  for (auto& t : result.tokens) t.reserve(options.max_new_tokens);
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t n = 0; n < options.max_new_tokens && !rows.empty(); ++n) {
    model.forward(step, cache, fwd, out);
    if (n == 0) {
      result.prefill_seconds = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      // The decode steps' batches are at most `batch` rows.
      step.ids.reserve(batch);
      step.slot.reserve(batch);
      step.pos.reserve(batch);
    } else {
      ++result.decode_steps;
    }
    // Every row gets a token this step: running rows sample, finished ones pad.
    std::fill(next.begin(), next.end(), result.pad_id);
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t b = rows[r];
      float* logits = &out.logits[r * info.vocab_size];
      next[b] = samplers[b].sample(logits, info.vocab_size);
    }
    still.clear();
    for (int64_t b = 0; b < batch; ++b) {
      result.tokens[b].push_back(next[b]);
      if (!running[b]) continue;
      bool keep = !is_stop(next[b]);
      if (options.on_token && !options.on_token(b, next[b])) keep = false;
      if (keep) still.push_back(b);
      running[b] = keep;
    }
    rows.swap(still);
    step.ids.clear();
    step.slot.clear();
    step.pos.clear();
    fwd.logits_rows.clear();
    for (int64_t b : rows) {
      step.add(static_cast<int32_t>(next[b]), static_cast<int32_t>(b),
               static_cast<int32_t>(lengths[b]++));
      fwd.logits_rows.push_back(step.size() - 1);
    }
  }
  result.decode_seconds = seconds_since(t0);
  return result;
}

}  // namespace hubzoo
