// A decoder (Llama, Qwen2, Qwen3) used as an encoder, as Qwen3-Embedding is:
// the last hidden state is the CausalLM's final norm output ("norm"), taken
// through the capture interface so the decoder's numerics stay exactly those
// of generation. Each sequence gets its own cache slot, positions 0..n-1.
// Gemma 3 with use_bidirectional_attention (EmbeddingGemma, a Gemma3TextModel)
// attends both ways: each sequence runs whole in one chunk.
#include <algorithm>

#include "base/error.h"
#include "models/decoder_steps.h"
#include "models/encoder.h"

namespace hubzoo {
namespace {

class DecoderEncoder final : public Encoder {
 public:
  explicit DecoderEncoder(std::unique_ptr<CausalLM> lm) : lm_(std::move(lm)) {
    const ModelInfo& i = lm_->info();
    info_.architecture = i.architecture;
    info_.snapshot = i.snapshot;
    info_.vocab_size = i.vocab_size;
    info_.hidden_size = i.hidden_size;
    info_.num_layers = i.num_layers;
    info_.max_position_embeddings = i.max_position_embeddings;
    info_.max_tokens = i.max_position_embeddings;
    info_.pad_token_id = i.pad_token_id;
    info_.causal = i.causal;  // false: bidirectional (EmbeddingGemma)
    info_.ignored_tensors = i.ignored_tensors;
    info_.num_parameters = i.num_parameters;
    info_.numerics = i.numerics;
  }

  const EncoderInfo& info() const override { return info_; }

  std::vector<std::string> capture_names() const override {
    auto names = lm_->capture_names();
    names.erase(std::remove(names.begin(), names.end(), "logits"), names.end());
    return names;
  }

  void forward(const EncoderBatch& batch, const EncoderOptions& opt, EncoderResult& out) override {
    if (!opt.capture.empty()) {
      const auto known = capture_names();
      check_capture_names(opt.capture, {known.begin(), known.end()});
    }
    TokenBatch tokens;
    int64_t row = 0;
    for (size_t s = 0; s < batch.lengths.size(); ++s) {
      const int64_t len = batch.lengths[s];
      if (len <= 0) throw InvalidArgument("a sequence of the batch is empty");
      if (len > info_.max_tokens) {
        throw InvalidArgument("a sequence of " + std::to_string(len) +
                              " tokens exceeds the model's limit of " +
                              std::to_string(info_.max_tokens));
      }
      if (row + len > batch.size()) break;  // reported below
      for (int64_t j = 0; j < len; ++j, ++row) {
        tokens.add(batch.ids[row], static_cast<int32_t>(s), static_cast<int32_t>(j));
      }
    }
    if (row != batch.size()) {
      throw InvalidArgument("batch lengths do not add up to its " + std::to_string(batch.size()) +
                            " tokens");
    }
    KvCache cache = lm_->new_cache(static_cast<int64_t>(batch.lengths.size()));
    ForwardOptions fo;
    fo.capture = opt.capture;
    fo.capture.insert("norm");
    fo.logits_rows = {0};  // logits are not needed; one row keeps the lm_head cheap
    ForwardResult r;
    lm_->forward(tokens, cache, fo, r);
    out.hidden = opt.capture.count("norm") ? r.captured["norm"] : std::move(r.captured["norm"]);
    for (auto& [name, values] : r.captured) {
      if (opt.capture.count(name)) out.captured[name] = std::move(values);
    }
  }

 private:
  std::unique_ptr<CausalLM> lm_;
  EncoderInfo info_;
};

}  // namespace

std::unique_ptr<Encoder> decoder_as_encoder(std::unique_ptr<CausalLM> lm) {
  return std::make_unique<DecoderEncoder>(std::move(lm));
}

}  // namespace hubzoo
