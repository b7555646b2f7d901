// BERT, RoBERTa and XLM-RoBERTa: config mapping, the tensors under their
// Hugging Face names, and the forward pass (post-LayerNorm blocks, exact GELU,
// bidirectional attention over each sequence's own tokens).
#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>

#include "base/error.h"
#include "layers/linear.h"
#include "models/encoder.h"
#include "models/model_info.h"
#include "ops/elementwise.h"
#include "ops/vector_math.h"

namespace hubzoo {
namespace {

struct BertConfig {
  int64_t vocab_size, hidden_size, num_layers, num_heads, head_dim, intermediate_size;
  int64_t max_position_embeddings, type_vocab_size, pad_token_id;
  float layer_norm_eps;
  // RoBERTa numbers positions from pad_token_id + 1, counting non-pad tokens
  // (transformers' create_position_ids_from_input_ids); BERT from 0.
  bool roberta_positions;
};

BertConfig parse_config(const JsonObject& c, bool roberta) {
  reject_unsupported_common_options(c);
  auto positive = [&](const char* key, int64_t fallback) {
    const int64_t x = c.get_or<int64_t>(key, fallback);
    if (x <= 0) throw ConfigError(c.where() + ": field '" + key + "' must be positive");
    return x;
  };
  BertConfig cfg;  // defaults: transformers' BertConfig / RobertaConfig
  cfg.vocab_size = positive("vocab_size", roberta ? 50265 : 30522);
  cfg.hidden_size = positive("hidden_size", 768);
  cfg.num_layers = positive("num_hidden_layers", 12);
  cfg.num_heads = positive("num_attention_heads", 12);
  cfg.intermediate_size = positive("intermediate_size", 3072);
  cfg.max_position_embeddings = positive("max_position_embeddings", 512);
  cfg.type_vocab_size = positive("type_vocab_size", 2);
  cfg.pad_token_id = c.get_or<int64_t>("pad_token_id", roberta ? 1 : 0);
  cfg.layer_norm_eps = static_cast<float>(c.get_or<double>("layer_norm_eps", 1e-12));
  cfg.roberta_positions = roberta;
  if (cfg.hidden_size % cfg.num_heads != 0) {
    throw ConfigError(c.where() + ": hidden_size " + std::to_string(cfg.hidden_size) +
                      " is not a multiple of num_attention_heads " + std::to_string(cfg.num_heads));
  }
  cfg.head_dim = cfg.hidden_size / cfg.num_heads;
  if (roberta && (cfg.pad_token_id < 0 || cfg.pad_token_id + 1 >= cfg.max_position_embeddings)) {
    throw ConfigError(c.where() + ": pad_token_id " + std::to_string(cfg.pad_token_id) +
                      " leaves no positions below max_position_embeddings");
  }
  const std::string act = c.get_or<std::string>("hidden_act", "gelu");
  if (act != "gelu") {
    throw ConfigError(c.where() + ": hidden_act '" + act + "' is not supported (only 'gelu')");
  }
  const std::string pos = c.get_or<std::string>("position_embedding_type", "absolute");
  if (pos != "absolute") {
    throw ConfigError(c.where() + ": position_embedding_type '" + pos +
                      "' is not supported (only 'absolute')");
  }
  if (c.get_or<bool>("is_decoder", false) || c.get_or<bool>("add_cross_attention", false)) {
    throw ConfigError(c.where() + ": is_decoder / add_cross_attention are not supported");
  }
  return cfg;
}

// torch.nn.LayerNorm under {prefix}.weight/.bias, or the .gamma/.beta of old
// checkpoints (which transformers renames on load).
LayerNorm load_layer_norm(WeightLoader& w, const std::string& prefix, int64_t n, float eps) {
  if (w.contains(prefix + ".weight") || !w.contains(prefix + ".gamma")) {
    return LayerNorm::load(w, prefix, n, eps);
  }
  LayerNorm norm;
  norm.weight = w.take(prefix + ".gamma", {n});
  norm.bias = w.take(prefix + ".beta", {n});
  norm.eps = eps;
  norm.numerics = w.numerics();
  return norm;
}

// attention.self.{query,key,value} packed as one [3H, H] matrix: one pass
// over x instead of three. Each output element is reduced over K exactly as
// in three separate matmuls (ops/matmul.h), so the result is the same.
Linear load_qkv(WeightLoader& w, const Checkpoint& ckpt, const std::string& prefix, int64_t h) {
  std::vector<float> weight, bias;
  weight.reserve(3 * h * h);
  bias.reserve(3 * h);
  for (const char* part : {"query", "key", "value"}) {
    const std::string name = prefix + part;
    const FloatWeights wt = w.take(name + ".weight", {h, h});  // rounded to bf16 in bf16 modes
    const FloatWeights b = w.take(name + ".bias", {h});
    weight.insert(weight.end(), wt.data(), wt.data() + h * h);
    bias.insert(bias.end(), b.data(), b.data() + h);
    ckpt.release(name + ".weight");  // the packed copy is the only one kept resident
  }
  Linear qkv;
  qkv.weight = w.numerics().bf16 ? pack_weights_bf16(weight.data(), 3 * h, h)
                                 : pack_weights(weight.data(), 3 * h, h);
  qkv.bias = FloatWeights(std::move(bias));
  return qkv;
}

struct BertLayer {
  Linear qkv;                   // attention.self.{query,key,value}: [3H, H]
  Linear attention_dense;       // attention.output.dense
  LayerNorm attention_norm;     // attention.output.LayerNorm
  Linear intermediate, output;  // intermediate.dense, output.dense
  LayerNorm output_norm;        // output.LayerNorm
};

// Sequence s of the batch holds rows [start[s], start[s] + length[s]).
struct Spans {
  std::vector<int64_t> start, length;  // one per sequence
};

// Buffers of one forward pass, reused by every layer (uninitialised: every
// element is written before it is read).
struct Scratch {
  std::unique_ptr<float[]> qkv, ctx, hidden;  // [M, 3H], [M, H], [M, intermediate]
};

class BertEncoder final : public Encoder {
 public:
  BertEncoder(const LoadContext& ctx, bool roberta)
      : pool_(ctx.pool), cfg_(parse_config(ctx.config, roberta)), numerics_(ctx.numerics) {
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(ctx.snapshot));
    checkpoint_ = ckpt;
    WeightLoader w(ckpt, ctx.numerics);
    // BertModel saves bare names; BertForMaskedLM & co. nest them under the
    // base model prefix ("bert." / "roberta.").
    const std::string p = find_prefix(w, roberta ? "roberta." : "bert.");
    const int64_t h = cfg_.hidden_size, inter = cfg_.intermediate_size;
    word_embeddings_ = w.take(p + "embeddings.word_embeddings.weight", {cfg_.vocab_size, h});
    position_embeddings_ =
        w.take(p + "embeddings.position_embeddings.weight", {cfg_.max_position_embeddings, h});
    token_type_embeddings_ =
        w.take(p + "embeddings.token_type_embeddings.weight", {cfg_.type_vocab_size, h});
    embedding_norm_ = load_layer_norm(w, p + "embeddings.LayerNorm", h, cfg_.layer_norm_eps);
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string l = p + "encoder.layer." + std::to_string(i) + ".";
      layers_.push_back(BertLayer{
          load_qkv(w, *ckpt, l + "attention.self.", h),
          Linear::load(w, l + "attention.output.dense", h, h, true),
          load_layer_norm(w, l + "attention.output.LayerNorm", h, cfg_.layer_norm_eps),
          Linear::load(w, l + "intermediate.dense", h, inter, true),
          Linear::load(w, l + "output.dense", inter, h, true),
          load_layer_norm(w, l + "output.LayerNorm", h, cfg_.layer_norm_eps),
      });
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
    const Spans spans = check_batch(batch);
    const int64_t m = batch.size(), h = cfg_.hidden_size;
    std::vector<float> x(m * h), a(m * h);  // [M, H]: layer input, attention block output
    Scratch scratch{std::make_unique_for_overwrite<float[]>(m * 3 * h),
                    std::make_unique_for_overwrite<float[]>(m * h),
                    std::make_unique_for_overwrite<float[]>(m * cfg_.intermediate_size)};
    embed(batch, x.data());
    capture("embed", x);
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string l = "layers." + std::to_string(i);
      attention_block(layers_[i], spans, x.data(), m, a.data(), scratch);
      capture(l + ".attention", a);
      mlp_block(layers_[i], a.data(), m, x.data(), scratch);
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
    }
  }

  Spans check_batch(const EncoderBatch& b) const {
    const int64_t m = b.size();
    if (!b.type_ids.empty() && static_cast<int64_t>(b.type_ids.size()) != m) {
      throw InvalidArgument("batch has " + std::to_string(b.type_ids.size()) + " type ids for " +
                            std::to_string(m) + " tokens");
    }
    Spans s;
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

  // a = LayerNorm(dense(softmax(q k^T / sqrt(d)) v) + x)
  void attention_block(const BertLayer& layer, const Spans& spans, const float* x, int64_t m,
                       float* a, Scratch& scratch) const {
    const int64_t h = cfg_.hidden_size, nh = cfg_.num_heads;
    float* qkv = scratch.qkv.get();  // [M, (q | k | v)]
    layer.qkv.forward(x, m, qkv, *pool_);
    numerics_.round_eager(qkv, m * 3 * h);
    const int64_t num_seqs = static_cast<int64_t>(spans.start.size());
    pool_->parallel_for(num_seqs * nh, 1, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t s = item / nh, head = item % nh;
        attend_sequence(qkv, spans.start[s], spans.length[s], head, scratch.ctx.get());
      }
    });
    layer.attention_dense.forward(scratch.ctx.get(), m, a, *pool_);
    residual_norm(layer.attention_norm, x, m, a);
  }

  // One head over one sequence of len tokens starting at row s0, as two
  // matmuls: scores [len, len] = Q K^T, then ctx [len, D] = softmax(scores * scale) V.
  // Bidirectional: every token sees the whole sequence and nothing else, so
  // the result does not depend on the batch. Eager bf16 rounds as
  // transformers' eager attention: bf16(q k^T), bf16(* scale), softmax in fp32
  // cast to bf16, bf16(p v).
  void attend_sequence(const float* qkv, int64_t s0, int64_t len, int64_t head, float* ctx) const {
    const int64_t h = cfg_.hidden_size, d = cfg_.head_dim;
    const float* q = qkv + s0 * 3 * h + head * d;  // rows of stride 3H
    const float* k = q + h;
    const float* v = q + 2 * h;
    std::vector<float> rows(len * d);  // K, then V^T, gathered row-major for packing
    for (int64_t j = 0; j < len; ++j) std::copy_n(k + j * 3 * h, d, &rows[j * d]);
    const PackedMatrix keys = pack_weights(rows.data(), len, d);
    for (int64_t j = 0; j < len; ++j) {
      for (int64_t c = 0; c < d; ++c) rows[c * len + j] = v[j * 3 * h + c];
    }
    const PackedMatrix values_t = pack_weights(rows.data(), d, len);

    std::vector<float> scores(len * len);
    multiply({q, len, 3 * h, &keys, scores.data(), len});
    const float scale = static_cast<float>(std::pow(static_cast<double>(d), -0.5));
    for (int64_t i = 0; i < len; ++i) {
      float* row = &scores[i * len];
      for (int64_t j = 0; j < len; ++j) {
        row[j] = numerics_.round_eager(numerics_.round_eager(row[j]) * scale);
      }
      softmax_row(row, len);
      numerics_.round_eager(row, len);
    }
    float* out = ctx + s0 * h + head * d;
    multiply({scores.data(), len, len, &values_t, out, h});
    for (int64_t i = 0; i < len; ++i) numerics_.round_eager(out + i * h, d);
  }

  struct Product {
    const float* x;
    int64_t m, ldx;
    const PackedMatrix* w;
    float* y;
    int64_t ldy;
  };
  // y = x W^T through the batch-invariant matmul, on the calling thread (the
  // caller already splits the work over (sequence, head) pairs).
  void multiply(const Product& p) const {
    MatmulArgs a;
    a.x = p.x;
    a.m = p.m;
    a.ldx = p.ldx;
    a.w = p.w;
    a.y = p.y;
    a.ldy = p.ldy;
    matmul(a, *pool_);
  }

  // x = LayerNorm(output(gelu(intermediate(a))) + a)
  void mlp_block(const BertLayer& layer, const float* a, int64_t m, float* x,
                 Scratch& scratch) const {
    const int64_t inter = cfg_.intermediate_size;
    float* hidden = scratch.hidden.get();  // [M, intermediate]
    layer.intermediate.forward(a, m, hidden, *pool_);
    pool_->parallel_for(m, 16, [&](int64_t begin, int64_t end) {
      float* rows = hidden + begin * inter;
      const int64_t n = (end - begin) * inter;
      numerics_.round_eager(rows, n);
      gelu_erf(rows, n);
      numerics_.round_eager(rows, n);
    });
    layer.output.forward(hidden, m, x, *pool_);
    residual_norm(layer.output_norm, a, m, x);
  }

  // y = LayerNorm(y + residual), with transformers' bf16 roundings of y and the sum in eager.
  void residual_norm(const LayerNorm& norm, const float* residual, int64_t m, float* y) const {
    const int64_t n = m * cfg_.hidden_size;
    numerics_.round_eager(y, n);
    add_inplace(y, residual, n);
    numerics_.round_eager(y, n);
    norm.forward(y, m, y);
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
