#include "models/decoder_steps.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "base/error.h"

namespace hubzoo {

std::map<int64_t, int64_t> check_token_batch(const TokenBatch& batch, const KvCache& cache,
                                             int64_t vocab_size) {
  if (batch.slot.size() != batch.ids.size() || batch.pos.size() != batch.ids.size()) {
    throw InvalidArgument("batch ids/slot/pos sizes differ");
  }
  std::map<int64_t, int64_t> next;
  for (int64_t t = 0; t < batch.size(); ++t) {
    const int64_t id = batch.ids[t], slot = batch.slot[t];
    if (id < 0 || id >= vocab_size) {
      throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab_size) + ")");
    }
    if (slot < 0 || slot >= cache.num_slots()) {
      throw InvalidArgument("cache slot " + std::to_string(slot) + " out of range");
    }
    auto [it, fresh] = next.try_emplace(slot, cache.length(slot));
    if (batch.pos[t] != it->second) {
      throw InvalidArgument("position " + std::to_string(batch.pos[t]) + " of slot " +
                            std::to_string(slot) + " does not continue its cache (expected " +
                            std::to_string(it->second) + ")");
    }
    ++it->second;
  }
  return next;
}

void compute_logits(const float* normed, int64_t m, int64_t hidden,
                    const std::vector<int64_t>& rows, const Linear& lm_head,
                    const Numerics& numerics, ThreadPool& pool, std::vector<float>& logits) {
  const float* in = normed;
  const int64_t n = rows.empty() ? m : static_cast<int64_t>(rows.size());
  std::vector<float> gathered;
  if (!rows.empty()) {
    gathered.resize(n * hidden);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = rows[r];
      if (t < 0 || t >= m)
        throw InvalidArgument("logits row " + std::to_string(t) + " out of range");
      std::copy_n(&normed[t * hidden], hidden, &gathered[r * hidden]);
    }
    in = gathered.data();
  }
  logits.resize(n * lm_head.out_features());
  lm_head.forward(in, n, logits.data(), pool);
  numerics.round_eager(logits.data(), static_cast<int64_t>(logits.size()));
}

std::vector<std::string> decoder_capture_names(int64_t num_layers,
                                               const std::function<bool(int64_t)>& sparse) {
  std::vector<std::string> names = {"embed"};
  for (int64_t i = 0; i < num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i);
    names.insert(names.end(), {p + ".self_attn", p + ".mlp", p});
    if (sparse(i)) {
      names.insert(names.end(), {p + ".mlp.router_logits", p + ".mlp.selected_experts",
                                 p + ".mlp.routing_weights"});
    }
  }
  names.insert(names.end(), {"norm", "logits"});
  return names;
}

void check_capture_names(const std::set<std::string>& asked, const std::set<std::string>& known) {
  for (const auto& name : asked) {
    if (!known.count(name)) throw InvalidArgument("unknown capture name '" + name + "'");
  }
}

float embedding_scale(int64_t hidden_size, const Numerics& numerics) {
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(hidden_size)));
  return numerics.round_stored(scale);
}

void softcap_logits(float* logits, int64_t n, float cap, const Numerics& numerics) {
  if (cap <= 0) return;
  for (int64_t i = 0; i < n; ++i) {
    float x = numerics.round_eager(logits[i] / cap);
    x = numerics.round_eager(std::tanh(x));
    logits[i] = numerics.round_eager(x * cap);
  }
}

bool plan_long_rope_replay(const TokenBatch& batch, KvCache& cache, int64_t long_after,
                           const ForwardOptions& options, LongRopeReplay& replay) {
  if (long_after <= 0 || !cache.keeps_token_ids()) return false;
  std::map<int64_t, int64_t> end;  // slot -> its length after the step
  for (int64_t t = 0; t < batch.size(); ++t) {
    auto [it, fresh] = end.try_emplace(batch.slot[t], cache.length(batch.slot[t]));
    ++it->second;
  }
  std::set<int64_t> crossing;
  for (const auto& [slot, n] : end) {
    const int64_t held = cache.length(slot);
    if (held > 0 && held <= long_after && n > long_after &&
        static_cast<int64_t>(cache.token_ids(slot).size()) >= held) {
      crossing.insert(slot);
    }
  }
  if (crossing.empty()) return false;
  replay = LongRopeReplay{};
  for (int64_t t = 0; t < batch.size(); ++t) {
    const int32_t slot = batch.slot[t];
    if (crossing.count(slot) && batch.pos[t] == cache.length(slot)) {  // the slot's first row
      const auto& ids = cache.token_ids(slot);
      for (int32_t p = 0; p < batch.pos[t]; ++p) replay.batch.add(ids[p], slot, p);
    }
    replay.rows.push_back(replay.batch.size());
    replay.batch.add(batch.ids[t], slot, batch.pos[t]);
  }
  replay.options.capture = options.capture;
  if (options.logits_rows.empty()) {
    replay.options.logits_rows = replay.rows;
  } else {
    for (int64_t r : options.logits_rows) {
      if (r < 0 || r >= batch.size()) {
        throw InvalidArgument("logits row " + std::to_string(r) + " out of range");
      }
      replay.options.logits_rows.push_back(replay.rows[r]);
    }
  }
  for (int64_t slot : crossing) cache.set_length(slot, 0);  // last: nothing above throws after
  return true;
}

void drop_replayed_rows(const LongRopeReplay& replay, ForwardResult& result) {
  const auto m = static_cast<int64_t>(replay.batch.size());
  for (auto& [name, data] : result.captured) {
    if (name == "logits") continue;
    const int64_t cols = static_cast<int64_t>(data.size()) / m;
    std::vector<float> kept;
    kept.reserve(replay.rows.size() * cols);
    for (int64_t r : replay.rows) {
      kept.insert(kept.end(), data.data() + r * cols, data.data() + (r + 1) * cols);
    }
    data = std::move(kept);
  }
}

}  // namespace hubzoo
