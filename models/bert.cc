// BERT, RoBERTa and XLM-RoBERTa: the encoder over the pieces of models/bert.h:
// tensors under their Hugging Face names, embeddings (word + token type +
// position, then LayerNorm) and the stack of post-LayerNorm layers, each
// sequence attending bidirectionally over its own tokens.
#include <algorithm>
#include <climits>
#include <memory>

#include "base/error.h"
#include "models/bert.h"
#include "models/encoder.h"
#include "models/model_info.h"

namespace hubzoo {
namespace {

class BertEncoder final : public Encoder {
 public:
  BertEncoder(const LoadContext& ctx, bool roberta)
      : pool_(ctx.pool), cfg_(parse_bert_config(ctx.config, roberta)), numerics_(ctx.numerics) {
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(ctx.snapshot));
    checkpoint_ = ckpt;
    WeightLoader w(ckpt, ctx.numerics);
    // BertModel saves bare names; BertForMaskedLM & co. nest them under the
    // base model prefix ("bert." / "roberta.").
    const std::string p = find_prefix(w, roberta ? "roberta." : "bert.");
    const int64_t h = cfg_.hidden_size;
    word_embeddings_ = w.take(p + "embeddings.word_embeddings.weight", {cfg_.vocab_size, h});
    position_embeddings_ =
        w.take(p + "embeddings.position_embeddings.weight", {cfg_.max_position_embeddings, h});
    token_type_embeddings_ =
        w.take(p + "embeddings.token_type_embeddings.weight", {cfg_.type_vocab_size, h});
    embedding_norm_ = load_bert_layer_norm(w, p + "embeddings.LayerNorm", h, cfg_.layer_norm_eps);
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string prefix = p + "encoder.layer." + std::to_string(i) + ".";
      layers_.push_back(BertLayer::load(w, *ckpt, prefix, cfg_));
    }
    ignore_unused(w, *ckpt, p);
    w.finish();

    info_.architecture = architecture_of(ctx.config);
    info_.snapshot = ctx.snapshot;
    info_.vocab_size = cfg_.vocab_size;
    info_.hidden_size = h;
    info_.num_layers = cfg_.num_layers;
    info_.max_position_embeddings = cfg_.max_position_embeddings;
    info_.max_tokens = roberta ? cfg_.max_position_embeddings - cfg_.pad_token_id - 1
                               : cfg_.max_position_embeddings;
    info_.pad_token_id = cfg_.pad_token_id;
    info_.uses_token_type_ids = !roberta;
    info_.ignored_tensors = w.ignored();
    info_.numerics = ctx.numerics;
    for (const auto& name : ckpt->names()) {
      if (!info_.ignored_tensors.count(name)) {
        info_.num_parameters += num_elements(ckpt->info(name).shape);
      }
    }
  }

  const EncoderInfo& info() const override { return info_; }

  std::vector<std::string> capture_names() const override {
    std::vector<std::string> names = {"embed"};
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string l = "layers." + std::to_string(i);
      names.insert(names.end(), {l + ".attention", l});
    }
    return names;
  }

  void forward(const EncoderBatch& batch, const EncoderOptions& opt, EncoderResult& out) override {
    const auto known = capture_names();
    for (const auto& name : opt.capture) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        throw InvalidArgument("unknown capture name '" + name + "'");
      }
    }
    auto capture = [&](const std::string& name, const std::vector<float>& x) {
      if (opt.capture.count(name)) out.captured[name] = x;
    };
    const SequenceSpans spans = check_batch(batch);
    const int64_t m = batch.size(), h = cfg_.hidden_size;
    std::vector<float> x(m * h), a(m * h);  // [M, H]: layer input, attention block output
    BertScratch scratch(m, cfg_);
    const BertContext context{cfg_, numerics_, *pool_};
    embed(batch, x.data());
    capture("embed", x);
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string l = "layers." + std::to_string(i);
      layers_[i].attention_block(context, spans, x.data(), m, a.data(), scratch);
      capture(l + ".attention", a);
      layers_[i].mlp_block(context, a.data(), m, x.data(), scratch);
      capture(l, x);
    }
    out.hidden = std::move(x);
  }

 private:
  static std::string find_prefix(const WeightLoader& w, const std::string& base) {
    for (const std::string& p : {std::string(), base}) {
      if (w.contains(p + "embeddings.word_embeddings.weight")) return p;
    }
    throw TensorMappingError("checkpoint has neither 'embeddings.word_embeddings.weight' nor '" +
                             base + "embeddings.word_embeddings.weight'");
  }

  static std::string architecture_of(const JsonObject& c) {
    const auto archs = c.maybe<std::vector<std::string>>("architectures");
    if (archs && !archs->empty()) return (*archs)[0];
    return c.get_or<std::string>("model_type", "bert");
  }

  // Task heads and buffers a checkpoint may carry besides the encoder.
  static void ignore_unused(WeightLoader& w, const Checkpoint& ckpt, const std::string& p) {
    const std::string buffer = "a non-persistent buffer (transformers recomputes it)";
    w.ignore(p + "embeddings.position_ids", buffer);
    w.ignore(p + "embeddings.token_type_ids", buffer);
    const std::string pooler =
        "BertPooler (tanh over the first token) is not part of the last hidden state that "
        "sentence-transformers pools";
    w.ignore(p + "pooler.dense.weight", pooler);
    w.ignore(p + "pooler.dense.bias", pooler);
    for (const auto& name : ckpt.names()) {
      if (name.starts_with("cls.") || name.starts_with("lm_head.")) {
        w.ignore(name, "masked-LM / next-sentence head: encoding stops at the last hidden state");
      }
      if (name.starts_with("classifier.")) {
        w.ignore(name, "sequence-classification head: read by the reranker (engine/reranker.cc)");
      }
    }
  }

  SequenceSpans check_batch(const EncoderBatch& b) const {
    const int64_t m = b.size();
    if (!b.type_ids.empty() && static_cast<int64_t>(b.type_ids.size()) != m) {
      throw InvalidArgument("batch has " + std::to_string(b.type_ids.size()) + " type ids for " +
                            std::to_string(m) + " tokens");
    }
    SequenceSpans s;
    int64_t at = 0;
    for (const int64_t len : b.lengths) {
      if (len <= 0) throw InvalidArgument("a sequence of the batch is empty");
      if (len > info_.max_tokens) {
        throw InvalidArgument("a sequence of " + std::to_string(len) +
                              " tokens exceeds the model's limit of " +
                              std::to_string(info_.max_tokens));
      }
      s.start.push_back(at);
      s.length.push_back(len);
      at += len;
    }
    if (at != m) {
      throw InvalidArgument("batch lengths sum to " + std::to_string(at) + ", not " +
                            std::to_string(m) + " tokens");
    }
    for (int64_t t = 0; t < m; ++t) {
      if (b.ids[t] < 0 || b.ids[t] >= cfg_.vocab_size) {
        throw InvalidArgument("token id " + std::to_string(b.ids[t]) +
                              " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) +
                              ")");
      }
      if (!b.type_ids.empty() && (b.type_ids[t] < 0 || b.type_ids[t] >= cfg_.type_vocab_size)) {
        throw InvalidArgument("token type id " + std::to_string(b.type_ids[t]) +
                              " is outside [0, " + std::to_string(cfg_.type_vocab_size) + ")");
      }
    }
    return s;
  }

  // x = LayerNorm(word + token_type + position), each sum rounded in eager bf16.
  void embed(const EncoderBatch& b, float* x) const {
    const int64_t m = b.size(), h = cfg_.hidden_size;
    int64_t row = 0;
    for (const int64_t len : b.lengths) {
      int64_t counted = 0;  // RoBERTa: non-pad tokens so far
      for (int64_t j = 0; j < len; ++j, ++row) {
        const int64_t id = b.ids[row], type = b.type_ids.empty() ? 0 : b.type_ids[row];
        int64_t pos = j;
        if (cfg_.roberta_positions) {
          pos = cfg_.pad_token_id + (id == cfg_.pad_token_id ? 0 : ++counted);
        }
        const float* word = word_embeddings_.data() + id * h;
        const float* tt = token_type_embeddings_.data() + type * h;
        const float* pe = position_embeddings_.data() + pos * h;
        float* e = x + row * h;
        for (int64_t i = 0; i < h; ++i) {
          e[i] = numerics_.round_eager(numerics_.round_eager(word[i] + tt[i]) + pe[i]);
        }
      }
    }
    embedding_norm_.forward(x, m, x);
  }

  std::shared_ptr<ThreadPool> pool_;
  BertConfig cfg_;
  Numerics numerics_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  EncoderInfo info_;
  FloatWeights word_embeddings_, position_embeddings_, token_type_embeddings_;  // (rows, H)
  LayerNorm embedding_norm_;
  std::vector<BertLayer> layers_;
};

}  // namespace

void EncoderBatch::add(const std::vector<int64_t>& sequence, const std::vector<int64_t>& types) {
  if (!types.empty() && types.size() != sequence.size()) {
    throw InvalidArgument("a sequence has " + std::to_string(types.size()) + " type ids for " +
                          std::to_string(sequence.size()) + " tokens");
  }
  if (!types.empty() && type_ids.empty()) type_ids.assign(ids.size(), 0);
  for (size_t i = 0; i < sequence.size(); ++i) {
    if (sequence[i] < 0 || sequence[i] > INT32_MAX) {
      throw InvalidArgument("token id " + std::to_string(sequence[i]) + " is out of range");
    }
    ids.push_back(static_cast<int32_t>(sequence[i]));
    if (!types.empty()) {
      type_ids.push_back(static_cast<int32_t>(types[i]));
    } else if (!type_ids.empty()) {
      type_ids.push_back(0);
    }
  }
  lengths.push_back(static_cast<int64_t>(sequence.size()));
}

std::unique_ptr<Encoder> load_bert_encoder(const LoadContext& ctx) {
  return std::make_unique<BertEncoder>(ctx, /*roberta=*/false);
}

std::unique_ptr<Encoder> load_roberta_encoder(const LoadContext& ctx) {
  return std::make_unique<BertEncoder>(ctx, /*roberta=*/true);
}

}  // namespace hubzoo
