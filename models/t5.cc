// T5ForConditionalGeneration (v1.0, v1.1, FLAN-T5, mT5): tensors under their
// Hugging Face names, the encoder stack (bidirectional relative position
// bias), the decoder stack (causal bias, self-attention KV cache per request,
// cross-attention K/V computed once in start()) and the LM head (tied to
// `shared` and scaled by d_model^-0.5, or an untied lm_head without scale).
// Only block 0 of each stack holds relative_attention_bias; every layer of
// that stack adds the same bias, as transformers passes it down.
#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>

#include "base/error.h"
#include "models/seq2seq.h"
#include "models/t5.h"

namespace hubzoo {
namespace {

constexpr int64_t kMaxTokens = 1 << 16;  // encoder input and decoder sequence, each

class T5State final : public Seq2SeqState {
 public:
  int64_t decoded() const override { return pos; }
  int64_t encoder_length() const override { return enc_len; }
  int64_t enc_len = 0, pos = 0;
  std::vector<std::vector<float>> cross_kv;  // per layer [enc_len, 2 * inner]: k | v
  std::vector<std::vector<float>> self_kv;   // per layer [pos, 2 * inner]: k | v
};

struct Captures {
  const std::set<std::string>& names;
  std::map<std::string, std::vector<float>>& out;
  void operator()(const std::string& name, const float* x, int64_t n) const {
    if (names.count(name)) out[name].assign(x, x + n);
  }
};

// The rows of one forward pass and, per row, where its attention reads.
struct Rows {
  int64_t m = 0;
  std::vector<int64_t> ids;
  std::function<T5Keys(int64_t)> self_keys;
};

class T5Model final : public Seq2SeqLM {
 public:
  explicit T5Model(const LoadContext& ctx, bool encoder_only = false)
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

  const Seq2SeqInfo& info() const override { return info_; }

  std::vector<std::string> capture_names() const override {
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

  void encode(const EncoderBatch& batch, const std::set<std::string>& capture,
              EncoderResult& out) override {
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
    std::vector<float> x = run_stack(encoder_, enc_norm_, rows, kv, cap, "encoder.");
    out.hidden = std::move(x);
  }

  std::unique_ptr<Seq2SeqState> start(const float* enc, int64_t len) override {
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

  void decode(const std::vector<Seq2SeqState*>& states,
              const std::vector<std::vector<int64_t>>& tokens, const std::set<std::string>& capture,
              Seq2SeqDecodeResult& out) override;

 private:
  void check_capture(const std::set<std::string>& capture) const {
    const auto known = capture_names();
    for (const auto& name : capture) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        throw InvalidArgument("unknown capture name '" + name + "'");
      }
    }
  }

  FloatWeights take_bias_table(WeightLoader& w, const std::string& stack) {
    const std::string name =
        stack + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    if (!w.contains(name)) {
      throw TensorMappingError("missing tensor '" + name + "': the first " + stack +
                               " block holds the relative_attention_bias every layer shares");
    }
    return w.take(name, {cfg_.num_buckets, cfg_.num_heads});
  }

  void load_decoder(WeightLoader& w) {
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
      lm_head_.weight = numerics_.bf16 ? pack_weights_bf16(shared_.data(), cfg_.vocab_size, d)
                                       : pack_weights(shared_.data(), cfg_.vocab_size, d);
    }
  }

  void fill_info(const LoadContext& ctx, const WeightLoader& w, const Checkpoint& ckpt) {
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

  // Embeds rows.ids, runs `blocks` and the final norm. kv: [m, 2 * inner],
  // the self-attention keys/values of every row (store_kv copies them into
  // the caches before the rows attend). Decoder blocks also cross-attend.
  std::vector<float> run_stack(const std::vector<T5Block>& blocks, const RMSNorm& final_norm,
                               Rows& rows, std::vector<float>& kv, const Captures& cap,
                               const std::string& stack,
                               const std::function<void(int64_t)>& store_kv = {},
                               const std::function<T5Keys(int64_t, int64_t)>& cross_keys = {});

  void check_tokens(const std::vector<int64_t>& ids) const {
    for (const int64_t id : ids) {
      if (id < 0 || id >= cfg_.vocab_size) {
        throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(cfg_.vocab_size) + ")");
      }
    }
  }

  std::shared_ptr<ThreadPool> pool_;
  T5Config cfg_;
  Numerics numerics_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  Seq2SeqInfo info_;
  FloatWeights shared_, enc_bias_, dec_bias_;  // [vocab, d], [buckets, heads] x 2
  std::vector<T5Block> encoder_, decoder_;
  RMSNorm enc_norm_, dec_norm_;
  Linear lm_head_;
};

std::vector<float> T5Model::run_stack(const std::vector<T5Block>& blocks, const RMSNorm& final_norm,
                                      Rows& rows, std::vector<float>& kv, const Captures& cap,
                                      const std::string& stack,
                                      const std::function<void(int64_t)>& store_kv,
                                      const std::function<T5Keys(int64_t, int64_t)>& cross_keys) {
  check_tokens(rows.ids);
  const T5Context c{cfg_, numerics_, *pool_};
  const int64_t m = rows.m, d = cfg_.d_model, inner = cfg_.inner();
  std::vector<float> x(m * d), n(m * d), q(m * inner), ctx(m * inner), branch(m * d);
  for (int64_t t = 0; t < m; ++t) std::copy_n(shared_.data() + rows.ids[t] * d, d, &x[t * d]);
  cap(stack + "embed", x.data(), m * d);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const T5Block& b = blocks[i];
    const std::string l = stack + "layers." + std::to_string(i);
    const bool first = i == 0;  // transformers' bf16 residual stream is bf16 until wo's fp32
    b.self_norm.forward(x.data(), m, n.data());
    b.self_attn.q.forward(n.data(), m, q.data(), c.pool);
    b.self_attn.kv.forward(n.data(), m, kv.data(), c.pool);
    numerics_.round_eager(q.data(), m * inner);
    numerics_.round_eager(kv.data(), m * 2 * inner);
    if (store_kv) store_kv(static_cast<int64_t>(i));
    b.self_attn.attend(c, q.data(), m, rows.self_keys, ctx.data());
    b.self_attn.o.forward(ctx.data(), m, branch.data(), c.pool);
    numerics_.round_eager(branch.data(), m * d);
    cap(l + ".self_attn", branch.data(), m * d);
    t5_residual_add(c, x.data(), branch.data(), m * d, first);
    if (b.cross_attn) {
      b.cross_norm->forward(x.data(), m, n.data());
      b.cross_attn->q.forward(n.data(), m, q.data(), c.pool);
      numerics_.round_eager(q.data(), m * inner);
      b.cross_attn->attend(
          c, q.data(), m, [&](int64_t t) { return cross_keys(static_cast<int64_t>(i), t); },
          ctx.data());
      b.cross_attn->o.forward(ctx.data(), m, branch.data(), c.pool);
      numerics_.round_eager(branch.data(), m * d);
      cap(l + ".cross_attn", branch.data(), m * d);
      t5_residual_add(c, x.data(), branch.data(), m * d, first);
    }
    b.ff_norm.forward(x.data(), m, n.data());
    b.ff.forward(c, n.data(), m, branch.data());
    cap(l + ".mlp", branch.data(), m * d);
    t5_residual_add(c, x.data(), branch.data(), m * d, false);
    cap(l, x.data(), m * d);
  }
  final_norm.forward(x.data(), m, x.data());
  cap(stack + "norm", x.data(), m * d);
  return x;
}

void T5Model::decode(const std::vector<Seq2SeqState*>& states,
                     const std::vector<std::vector<int64_t>>& tokens,
                     const std::set<std::string>& capture, Seq2SeqDecodeResult& out) {
  check_capture(capture);
  if (states.size() != tokens.size()) {
    throw InvalidArgument("decode: " + std::to_string(states.size()) + " states for " +
                          std::to_string(tokens.size()) + " token lists");
  }
  std::vector<T5State*> st;
  for (Seq2SeqState* s : states) {
    auto* t = dynamic_cast<T5State*>(s);
    if (!t || t->cross_kv.size() != decoder_.size()) {
      throw InvalidArgument("decode: a state this model did not start");
    }
    if (std::find(st.begin(), st.end(), t) != st.end()) {
      throw InvalidArgument("decode: the same state twice in one call");
    }
    st.push_back(t);
  }
  Rows rows;
  std::vector<int64_t> state_of, pos;
  int64_t max_pos = 0;
  for (size_t s = 0; s < st.size(); ++s) {
    const int64_t count = static_cast<int64_t>(tokens[s].size());
    if (st[s]->pos + count > kMaxTokens) {
      throw InvalidArgument("decoder sequence over the limit of " + std::to_string(kMaxTokens));
    }
    for (int64_t j = 0; j < count; ++j) {
      rows.ids.push_back(tokens[s][j]);
      state_of.push_back(static_cast<int64_t>(s));
      pos.push_back(st[s]->pos + j);
      max_pos = std::max(max_pos, st[s]->pos + j);
    }
  }
  rows.m = static_cast<int64_t>(rows.ids.size());
  check_tokens(rows.ids);
  const int64_t inner = cfg_.inner(), width = 2 * inner, vocab = cfg_.vocab_size;
  out.logits.clear();
  if (rows.m == 0) return;
  // Relative positions -max_pos .. 0, per head; a row at p reads from max_pos - p.
  const std::vector<float> bias = t5_position_bias(cfg_, dec_bias_, -max_pos, max_pos + 1, false);
  std::vector<float> kv(rows.m * width);
  int64_t layer = 0;
  auto store = [&](int64_t l) {
    layer = l;
    numerics_.round_stored(kv.data(), static_cast<int64_t>(kv.size()));
    for (size_t s = 0; s < st.size(); ++s)
      st[s]->self_kv[l].resize((st[s]->pos + tokens[s].size()) * width);
    for (int64_t t = 0; t < rows.m; ++t) {
      std::copy_n(&kv[t * width], width, &st[state_of[t]]->self_kv[l][pos[t] * width]);
    }
  };
  rows.self_keys = [&](int64_t t) {
    const float* k = st[state_of[t]]->self_kv[layer].data();
    return T5Keys{k, k + inner, width, pos[t] + 1, bias.data() + (max_pos - pos[t]), max_pos + 1};
  };
  auto cross = [&](int64_t l, int64_t t) {
    const T5State& s = *st[state_of[t]];
    const float* k = s.cross_kv[l].data();
    return T5Keys{k, k + inner, width, s.enc_len, nullptr, 0};
  };
  Captures cap{capture, out.captured};
  std::vector<float> x = run_stack(decoder_, dec_norm_, rows, kv, cap, "decoder.", store, cross);
  for (size_t s = 0; s < st.size(); ++s) st[s]->pos += static_cast<int64_t>(tokens[s].size());
  if (cfg_.scale_decoder_outputs) {
    const float scale = static_cast<float>(std::pow(static_cast<double>(cfg_.d_model), -0.5));
    for (float& v : x) v = numerics_.round_eager(v * scale);
  }
  out.logits.resize(rows.m * vocab);
  lm_head_.forward(x.data(), rows.m, out.logits.data(), *pool_);
  numerics_.round_eager(out.logits.data(), rows.m * vocab);
  cap("logits", out.logits.data(), rows.m * vocab);
}

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
  T5Model model_;
  EncoderInfo info_;
};

}  // namespace

std::unique_ptr<Encoder> load_t5_encoder(const LoadContext& ctx) {
  return std::make_unique<T5Encoder>(ctx);
}

std::unique_ptr<Seq2SeqLM> load_t5(const LoadContext& ctx) {
  return std::make_unique<T5Model>(ctx);
}

}  // namespace hubzoo
