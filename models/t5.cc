// T5ForConditionalGeneration (v1.0, v1.1, FLAN-T5, mT5): tensors under their
// Hugging Face names, the encoder stack (bidirectional relative position
// bias), the decoder stack (causal bias, self-attention KV cache per request,
// cross-attention K/V computed once in start()) and the LM head (tied to
// `shared` and scaled by d_model^-0.5, or an untied lm_head without scale).
// Only block 0 of each stack holds relative_attention_bias; every layer of
// that stack adds the same bias, as transformers passes it down.
// Loading, encode() and start() are here; the decoder step and the stack
// both run are in models/t5_decode.cc.
#include <algorithm>
#include <memory>

#include "base/error.h"
#include "models/t5_model.h"

namespace hubzoo {
namespace t5 {

T5Model::T5Model(const LoadContext& ctx, bool encoder_only)
    : pool_(ctx.pool), cfg_(parse_t5_config(ctx.config)), numerics_(ctx.numerics) {
  auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(ctx.snapshot));
  checkpoint_ = ckpt;
  WeightLoader w(ckpt, ctx.numerics);
  const int64_t d = cfg_.d_model;
  shared_ = w.take("shared.weight", {cfg_.vocab_size, d});
  enc_bias_ = take_bias_table(w, "encoder");
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    encoder_.push_back(T5Block::load(w, "encoder.block." + std::to_string(i) + ".", cfg_, false));
  }
  enc_norm_ = RMSNorm::load(w, "encoder.final_layer_norm.weight", d, cfg_.eps);
  const std::string tied = "tied to shared.weight (transformers ties the embeddings)";
  w.ignore("encoder.embed_tokens.weight", tied);
  w.ignore("decoder.embed_tokens.weight", tied);
  if (encoder_only) {
    for (const auto& name : ckpt->names()) {
      if (name.starts_with("decoder.") || name == "lm_head.weight") {
        w.ignore(name, "T5EncoderModel: the decoder is not part of the encoder's output");
      }
    }
  } else {
    load_decoder(w);
  }
  w.finish();
  fill_info(ctx, w, *ckpt);
}

std::vector<std::string> T5Model::capture_names() const {
  std::vector<std::string> names = {"encoder.embed"};
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    const std::string l = "encoder.layers." + std::to_string(i);
    names.insert(names.end(), {l + ".self_attn", l + ".mlp", l});
  }
  names.insert(names.end(), {"encoder.norm", "decoder.embed"});
  for (int64_t i = 0; i < cfg_.num_decoder_layers; ++i) {
    const std::string l = "decoder.layers." + std::to_string(i);
    names.insert(names.end(), {l + ".self_attn", l + ".cross_attn", l + ".mlp", l});
  }
  names.insert(names.end(), {"decoder.norm", "logits"});
  return names;
}

void T5Model::encode(const EncoderBatch& batch, const std::set<std::string>& capture,
                     EncoderResult& out) {
  check_capture(capture);
  Rows rows;
  rows.m = batch.size();
  std::vector<int64_t> start, length, seq_of(rows.m);
  int64_t at = 0;
  for (const int64_t len : batch.lengths) {
    if (len <= 0) throw InvalidArgument("a sequence of the batch is empty");
    if (len > kMaxTokens || at + len > rows.m) {
      throw InvalidArgument("a sequence of " + std::to_string(len) +
                            " tokens exceeds the batch or the limit of " +
                            std::to_string(kMaxTokens));
    }
    std::fill_n(&seq_of[at], len, static_cast<int64_t>(start.size()));
    start.push_back(at);
    length.push_back(len);
    at += len;
  }
  if (at != rows.m) throw InvalidArgument("batch lengths do not sum to its token count");
  rows.ids.assign(batch.ids.begin(), batch.ids.end());
  // Per sequence of length L, per head: the bias of relative positions -(L-1) .. L-1.
  std::vector<std::vector<float>> bias;
  for (const int64_t len : length) {
    bias.push_back(t5_position_bias(cfg_, enc_bias_, -(len - 1), 2 * len - 1, true));
  }
  std::vector<float> kv(rows.m * 2 * cfg_.inner());
  const int64_t inner = cfg_.inner();
  rows.self_keys = [&](int64_t t) {
    const int64_t s = seq_of[t], len = length[s], i = t - start[s];
    const float* k = &kv[start[s] * 2 * inner];
    return T5Keys{k, k + inner, 2 * inner, len, bias[s].data() + (len - 1 - i), 2 * len - 1};
  };
  Captures cap{capture, out.captured};
  out.hidden = run_stack({encoder_, enc_norm_, "encoder."}, rows, kv, cap);
}

std::unique_ptr<Seq2SeqState> T5Model::start(const float* enc, int64_t len) {
  if (len <= 0 || len > kMaxTokens) {
    throw InvalidArgument("encoder states of " + std::to_string(len) + " positions");
  }
  auto s = std::make_unique<T5State>();
  s->enc_len = len;
  const T5Context c{cfg_, numerics_, *pool_};
  for (const auto& block : decoder_) {
    std::vector<float> kv(len * 2 * cfg_.inner());
    block.cross_attn->kv.forward(enc, len, kv.data(), c.pool);
    numerics_.round_stored(kv.data(), static_cast<int64_t>(kv.size()));
    s->cross_kv.push_back(std::move(kv));
    s->self_kv.emplace_back();
  }
  return s;
}

void T5Model::check_capture(const std::set<std::string>& capture) const {
  const auto known = capture_names();
  for (const auto& name : capture) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw InvalidArgument("unknown capture name '" + name + "'");
    }
  }
}

void T5Model::check_tokens(const std::vector<int64_t>& ids) const {
  for (const int64_t id : ids) {
    if (id < 0 || id >= cfg_.vocab_size) {
      throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(cfg_.vocab_size) + ")");
    }
  }
}

FloatWeights T5Model::take_bias_table(WeightLoader& w, const std::string& stack) {
  const std::string name = stack + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight";
  if (!w.contains(name)) {
    throw TensorMappingError("missing tensor '" + name + "': the first " + stack +
                             " block holds the relative_attention_bias every layer shares");
  }
  return w.take(name, {cfg_.num_buckets, cfg_.num_heads});
}

void T5Model::load_decoder(WeightLoader& w) {
  const int64_t d = cfg_.d_model;
  dec_bias_ = take_bias_table(w, "decoder");
  for (int64_t i = 0; i < cfg_.num_decoder_layers; ++i) {
    decoder_.push_back(T5Block::load(w, "decoder.block." + std::to_string(i) + ".", cfg_, true));
  }
  dec_norm_ = RMSNorm::load(w, "decoder.final_layer_norm.weight", d, cfg_.eps);
  w.ignore("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",
           "cross-attention has no position bias (transformers ignores it on load)");
  if (w.contains("lm_head.weight")) {
    lm_head_.weight = w.take_packed("lm_head.weight", cfg_.vocab_size, d);
  } else {  // tied: the embedding table is the head
    lm_head_.weight =
        w.mark_activations(numerics_.bf16 ? pack_weights_bf16(shared_.data(), cfg_.vocab_size, d)
                                          : pack_weights(shared_.data(), cfg_.vocab_size, d));
  }
}

void T5Model::fill_info(const LoadContext& ctx, const WeightLoader& w, const Checkpoint& ckpt) {
  const auto archs = ctx.config.maybe<std::vector<std::string>>("architectures");
  info_.architecture = archs && !archs->empty() ? (*archs)[0] : "T5ForConditionalGeneration";
  info_.snapshot = ctx.snapshot;
  info_.vocab_size = cfg_.vocab_size;
  info_.hidden_size = cfg_.d_model;
  info_.num_layers = cfg_.num_layers;
  info_.num_decoder_layers = cfg_.num_decoder_layers;
  info_.max_tokens = kMaxTokens;
  info_.decoder_start_token_id = cfg_.decoder_start_token_id;
  info_.pad_token_id = cfg_.pad_token_id;
  info_.eos_token_ids = cfg_.eos_token_ids;
  info_.ignored_tensors = w.ignored();
  info_.numerics = numerics_;
  for (const auto& name : ckpt.names()) {
    if (!info_.ignored_tensors.count(name)) {
      info_.num_parameters += num_elements(ckpt.info(name).shape);
    }
  }
}

}  // namespace t5

namespace {

// T5EncoderModel: the encoder of a T5Model loaded without its decoder.
class T5Encoder final : public Encoder {
 public:
  explicit T5Encoder(const LoadContext& ctx) : model_(ctx, /*encoder_only=*/true) {
    const Seq2SeqInfo& s = model_.info();
    info_.architecture = s.architecture;
    info_.snapshot = s.snapshot;
    info_.vocab_size = s.vocab_size;
    info_.hidden_size = s.hidden_size;
    info_.num_layers = s.num_layers;
    info_.max_position_embeddings = s.max_tokens;  // relative positions: no table
    info_.max_tokens = s.max_tokens;
    info_.pad_token_id = s.pad_token_id;
    info_.ignored_tensors = s.ignored_tensors;
    info_.num_parameters = s.num_parameters;
    info_.numerics = s.numerics;
  }
  const EncoderInfo& info() const override { return info_; }
  void forward(const EncoderBatch& batch, const EncoderOptions& options,
               EncoderResult& result) override {
    model_.encode(batch, options.capture, result);
  }
  std::vector<std::string> capture_names() const override {
    std::vector<std::string> names;
    for (const auto& n : model_.capture_names()) {
      if (n.starts_with("encoder.")) names.push_back(n);
    }
    return names;
  }

 private:
  t5::T5Model model_;
  EncoderInfo info_;
};

}  // namespace

std::unique_ptr<Encoder> load_t5_encoder(const LoadContext& ctx) {
  return std::make_unique<T5Encoder>(ctx);
}

std::unique_ptr<Seq2SeqLM> load_t5(const LoadContext& ctx) {
  return std::make_unique<t5::T5Model>(ctx);
}

}  // namespace hubzoo
