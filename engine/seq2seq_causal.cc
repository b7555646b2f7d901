#include "engine/seq2seq_causal.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "base/error.h"
#include "hub/snapshot.h"
#include "io/json.h"

namespace hubzoo {
namespace {

// One slot's request: its prompt so far, then its decoder state.
struct SlotState {
  std::vector<int64_t> input;
  std::unique_ptr<Seq2SeqState> state;  // null while the prompt is still arriving
};

// What one forward() does with each slot it touches, in row order.
struct SlotWork {
  bool ends_prompt = false;         // the prompt ends in this batch: encode, start
  std::vector<int64_t> tokens;      // decoder tokens (the start token first if ends_prompt)
  std::vector<int64_t> token_rows;  // batch row of each decoder token (-1: none)
};

class Seq2SeqCausalLM final : public CausalLM {
 public:
  explicit Seq2SeqCausalLM(std::unique_ptr<Seq2SeqLM> lm) : lm_(std::move(lm)) {
    const Seq2SeqInfo& s = lm_->info();
    info_.architecture = s.architecture;
    info_.snapshot = s.snapshot;
    const std::filesystem::path config = s.snapshot / "config.json";
    if (std::filesystem::is_regular_file(config)) info_.config_json = read_json_file(config).dump();
    info_.vocab_size = s.vocab_size;
    info_.hidden_size = s.hidden_size;
    info_.num_layers = s.num_decoder_layers;
    info_.max_position_embeddings = s.max_tokens;  // prompt + new tokens, each within it
    info_.eos_token_ids = s.eos_token_ids;
    info_.pad_token_id = s.pad_token_id;
    info_.ignored_tensors = s.ignored_tensors;
    info_.num_parameters = s.num_parameters;
    info_.numerics = s.numerics;
    info_.kv_in_cache = false;  // the decoder states hold K/V: no prefix reuse
  }

  const ModelInfo& info() const override { return info_; }
  std::vector<std::string> capture_names() const override { return {}; }

  // Lengths only (never reserved, so no memory): the decoder states hold the keys and values.
  KvCache new_cache(int64_t num_slots) const override { return KvCache(1, num_slots, 1); }

  void forward(const TokenBatch& batch, KvCache& cache, const ForwardOptions& options,
               ForwardResult& result) override {
    if (!options.capture.empty()) {
      throw InvalidArgument("captures of an encoder-decoder need hubzoo.Seq2SeqLM");
    }
    if (static_cast<int64_t>(slots_.size()) != cache.num_slots()) slots_.resize(cache.num_slots());
    // A slot the engine cleared (its request finished or was cancelled) frees its state now.
    for (int64_t slot = 0; slot < cache.num_slots(); ++slot) {
      if (cache.length(slot) == 0) slots_[slot] = SlotState{};
    }
    std::vector<int64_t> wanted = options.logits_rows;
    if (wanted.empty() && !options.logits_unused) {
      for (int64_t r = 0; r < batch.size(); ++r) wanted.push_back(r);
    }
    std::vector<bool> ends(batch.size(), false);
    if (!options.logits_unused) {
      for (const int64_t r : wanted) {
        if (r < 0 || r >= batch.size()) throw InvalidArgument("logits row out of range");
        ends[r] = true;
      }
    }
    std::map<int64_t, SlotWork> work = plan(batch, cache, ends);
    std::vector<float> row_logits;  // [batch rows, vocab], rows with decoder logits filled
    run(work, row_logits, batch.size());
    const int64_t vocab = info_.vocab_size;
    if (options.logits_unused) wanted = options.logits_rows;
    result.logits.assign(wanted.size() * vocab, 0.0f);
    result.captured.clear();
    for (size_t i = 0; i < wanted.size(); ++i) {
      if (options.logits_unused) break;  // a placeholder row: zeros
      std::copy_n(&row_logits[wanted[i] * vocab], vocab, &result.logits[i * vocab]);
    }
  }

 private:
  // Sorts the batch's rows into each slot's work; checks positions.
  std::map<int64_t, SlotWork> plan(const TokenBatch& batch, KvCache& cache,
                                   const std::vector<bool>& ends) {
    std::map<int64_t, SlotWork> work;
    for (int64_t r = 0; r < batch.size(); ++r) {
      const int64_t slot = batch.slot[r], pos = batch.pos[r], id = batch.ids[r];
      if (slot < 0 || slot >= cache.num_slots()) throw InvalidArgument("slot out of range");
      if (pos != cache.length(slot)) {
        throw InvalidArgument("position " + std::to_string(pos) + " does not continue slot " +
                              std::to_string(slot) + " at " + std::to_string(cache.length(slot)));
      }
      if (id < 0 || id >= info_.vocab_size) {
        throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary");
      }
      if (pos >= info_.max_position_embeddings) {
        throw InvalidArgument("a sequence over the limit of " +
                              std::to_string(info_.max_position_embeddings) + " positions");
      }
      SlotState& s = slots_[slot];
      SlotWork& w = work[slot];
      if (!s.state && !w.ends_prompt) {
        s.input.push_back(id);
        if (ends[r]) {
          w.ends_prompt = true;
          w.tokens.push_back(lm_->info().decoder_start_token_id);
          w.token_rows.push_back(r);
        }
      } else {
        w.tokens.push_back(id);
        w.token_rows.push_back(r);
      }
      cache.set_length(slot, pos + 1);
    }
    return work;
  }

  // Encodes the prompts that ended, starts their states and runs every
  // slot's decoder tokens in one decode(); row_logits gets each token's logits.
  void run(std::map<int64_t, SlotWork>& work, std::vector<float>& row_logits, int64_t rows) {
    EncoderBatch enc_batch;
    std::vector<int64_t> starting;
    for (auto& [slot, w] : work) {
      if (w.ends_prompt) {
        enc_batch.add(slots_[slot].input);
        starting.push_back(slot);
      }
    }
    if (!starting.empty()) {
      EncoderResult enc;
      lm_->encode(enc_batch, {}, enc);
      int64_t at = 0;
      for (size_t i = 0; i < starting.size(); ++i) {
        const int64_t len = enc_batch.lengths[i];
        SlotState& s = slots_[starting[i]];
        s.state = lm_->start(&enc.hidden[at * info_.hidden_size], len);
        std::vector<int64_t>().swap(s.input);
        at += len;
      }
    }
    std::vector<Seq2SeqState*> states;
    std::vector<std::vector<int64_t>> tokens;
    std::vector<const SlotWork*> order;
    for (auto& [slot, w] : work) {
      if (w.tokens.empty()) continue;
      states.push_back(slots_[slot].state.get());
      tokens.push_back(w.tokens);
      order.push_back(&w);
    }
    const int64_t vocab = info_.vocab_size;
    row_logits.assign(rows * vocab, 0.0f);
    if (states.empty()) return;
    Seq2SeqDecodeResult out;
    lm_->decode(states, tokens, {}, out);
    int64_t at = 0;
    for (const SlotWork* w : order) {
      for (const int64_t r : w->token_rows) {
        std::copy_n(&out.logits[at * vocab], vocab, &row_logits[r * vocab]);
        ++at;
      }
    }
  }

  std::unique_ptr<Seq2SeqLM> lm_;
  ModelInfo info_;
  std::vector<SlotState> slots_;
};

}  // namespace

std::unique_ptr<CausalLM> seq2seq_as_causal_lm(std::unique_ptr<Seq2SeqLM> lm) {
  return std::make_unique<Seq2SeqCausalLM>(std::move(lm));
}

bool is_seq2seq_model(const std::string& model, const std::string& gguf_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!gguf_file.empty() || fs::path(model).extension() == ".gguf") return false;
  const fs::path config = resolve_snapshot(model) / "config.json";
  if (!fs::is_regular_file(config, ec)) return false;
  return is_seq2seq_config(JsonObject(read_json_file(config), config.string()));
}

std::unique_ptr<CausalLM> load_generation_lm(const std::string& model, const LoadOptions& options) {
  if (!is_seq2seq_model(model, options.gguf_file)) return load_causal_lm(model, options);
  return seq2seq_as_causal_lm(load_seq2seq_lm(model, options));
}

}  // namespace hubzoo
