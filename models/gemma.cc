// Gemma 2 and Gemma 3 (text): the decoder. What differs from Llama: (1 + w)
// RMSNorms in fp32, sandwich norms around attention and MLP, the embedding
// scaled by sqrt(hidden_size), GELU-tanh, query_pre_attn_scalar, softcapping
// (attention logits: Gemma 2; final logits: either, when the config says so),
// and interleaved sliding-window / global layers, each type with its own RoPE;
// a sliding layer's KV cache holds only its window.
#include <algorithm>

#include "base/error.h"
#include "layers/attention.h"
#include "layers/mlp.h"
#include "layers/weights.h"
#include "models/decoder_steps.h"
#include "models/families.h"
#include "models/gemma.h"
#include "models/model_info.h"
#include "ops/elementwise.h"

namespace hubzoo {
namespace {

struct GemmaLayer {
  RMSNorm input_layernorm, post_attention_layernorm;
  RMSNorm pre_feedforward_layernorm, post_feedforward_layernorm;
  Attention self_attn;
  GatedMlp mlp;
};

class GemmaModel final : public CausalLM {
 public:
  GemmaModel(const LoadContext& ctx, int generation)
      : pool_(ctx.pool), cfg_(parse_gemma_config(ctx.config, generation)) {
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(ctx.snapshot));
    checkpoint_ = ckpt;
    WeightLoader w(ckpt, ctx.numerics);
    numerics_ = ctx.numerics;
    const int64_t h = cfg_.hidden_size, v = cfg_.vocab_size, eps_n = h;
    const float eps = cfg_.rms_norm_eps;
    embed_scale_ = gemma_embed_scale(h, numerics_);
    rope_full_ =
        std::make_unique<Rope>(cfg_.rope_full, cfg_.attn.head_dim, cfg_.max_position_embeddings);
    rope_sliding_ =
        std::make_unique<Rope>(cfg_.rope_sliding, cfg_.attn.head_dim, cfg_.max_position_embeddings);
    // (V, H): embed_tokens; lm_head shares it when tied.
    if (cfg_.tie_word_embeddings) {
      lm_head_.weight = w.take_packed("model.embed_tokens.weight", v, h);
      w.ignore("lm_head.weight", "tie_word_embeddings: lm_head shares model.embed_tokens.weight");
    } else {
      embed_tokens_ = w.take("model.embed_tokens.weight", {v, h});
      lm_head_ = Linear::load(w, "lm_head", h, v, /*has_bias=*/false);
    }
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i);
      const bool sliding = cfg_.layer_types[i] == LayerType::kSliding;
      AttentionOptions attn = cfg_.attn;
      attn.window = sliding ? cfg_.sliding_window : 0;
      const Rope* rope = sliding ? rope_sliding_.get() : rope_full_.get();
      layers_.push_back(GemmaLayer{
          RMSNorm::load_unit_offset(w, p + ".input_layernorm.weight", eps_n, eps),
          RMSNorm::load_unit_offset(w, p + ".post_attention_layernorm.weight", eps_n, eps),
          RMSNorm::load_unit_offset(w, p + ".pre_feedforward_layernorm.weight", eps_n, eps),
          RMSNorm::load_unit_offset(w, p + ".post_feedforward_layernorm.weight", eps_n, eps),
          Attention(w, p + ".self_attn", attn, rope),
          GatedMlp(w, p + ".mlp", h, cfg_.intermediate_size, /*bias=*/false, Activation::kGeluTanh),
      });
    }
    norm_ = RMSNorm::load_unit_offset(w, "model.norm.weight", h, eps);
    w.finish();

    info_ = decoder_model_info(ctx, *ckpt, w.ignored(), v, h, cfg_.num_layers,
                               cfg_.max_position_embeddings);
  }

  const ModelInfo& info() const override { return info_; }

  // Sliding layers keep a ring buffer of sliding_window rows; global layers every position.
  KvCache new_cache(int64_t num_slots) const override {
    std::vector<KvLayerSpec> specs;
    for (auto t : cfg_.layer_types) {
      specs.push_back({cfg_.attn.num_kv_heads * cfg_.attn.head_dim,
                       t == LayerType::kSliding ? cfg_.sliding_window : 0});
    }
    return KvCache(std::move(specs), num_slots);
  }

  std::vector<std::string> capture_names() const override {
    return decoder_capture_names(cfg_.num_layers, [](int64_t) { return false; });
  }

  void forward(const TokenBatch& batch, KvCache& cache, const ForwardOptions& opt,
               ForwardResult& out) override {
    const int64_t m = batch.size(), h = cfg_.hidden_size, v = cfg_.vocab_size;
    const auto new_lengths = check_token_batch(batch, cache, v);
    for (const auto& [slot, len] : new_lengths) cache.reserve(slot, len);
    const auto names = capture_names();
    for (const auto& name : opt.capture) {
      if (std::find(names.begin(), names.end(), name) == names.end())
        throw InvalidArgument("unknown capture name '" + name + "'");
    }
    auto capture = [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
      if (opt.capture.count(name)) out.captured[name].assign(data, data + rows * cols);
    };

    // The branch each sublayer adds to the residual is its output after the
    // post-norm; that is what "layers.{i}.self_attn" / ".mlp" capture.
    std::vector<float> x(m * h), normed(m * h), branch(m * h);  // [M, H]
    for (int64_t t = 0; t < m; ++t) {
      float* row = &x[t * h];
      if (cfg_.tie_word_embeddings) {
        lm_head_.weight.copy_row(batch.ids[t], row);
      } else {
        std::copy_n(embed_tokens_.data() + batch.ids[t] * h, h, row);
      }
      for (int64_t i = 0; i < h; ++i) row[i] = numerics_.round_eager(row[i] * embed_scale_);
    }
    capture("embed", x.data(), m, h);
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const GemmaLayer& layer = layers_[i];
      const std::string p = "layers." + std::to_string(i);
      layer.input_layernorm.forward(x.data(), m, normed.data());
      layer.self_attn.forward(batch, normed.data(), branch.data(), cache, i, *pool_);
      layer.post_attention_layernorm.forward(branch.data(), m, branch.data());
      capture(p + ".self_attn", branch.data(), m, h);
      add_inplace(x.data(), branch.data(), m * h);
      numerics_.round_eager(x.data(), m * h);  // a bf16 residual add in eager
      layer.pre_feedforward_layernorm.forward(x.data(), m, normed.data());
      layer.mlp.forward(normed.data(), m, branch.data(), *pool_);
      layer.post_feedforward_layernorm.forward(branch.data(), m, branch.data());
      capture(p + ".mlp", branch.data(), m, h);
      add_inplace(x.data(), branch.data(), m * h);
      numerics_.round_eager(x.data(), m * h);
      capture(p, x.data(), m, h);
    }
    norm_.forward(x.data(), m, normed.data());
    capture("norm", normed.data(), m, h);

    // (rows, V) logits, only for the rows asked for.
    compute_logits(normed.data(), m, h, opt.logits_rows, lm_head_, numerics_, *pool_, out.logits);
    const int64_t rows = static_cast<int64_t>(out.logits.size()) / v;
    softcap_logits(out.logits.data(), rows * v, cfg_.final_logit_softcapping, numerics_);
    capture("logits", out.logits.data(), rows, v);
    for (const auto& [slot, len] : new_lengths) cache.set_length(slot, len);
  }

 private:
  std::shared_ptr<ThreadPool> pool_;
  GemmaConfig cfg_;
  Numerics numerics_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  ModelInfo info_;
  float embed_scale_ = 1.0f;
  std::unique_ptr<Rope> rope_full_, rope_sliding_;
  FloatWeights embed_tokens_;  // (V, H), untied only
  Linear lm_head_;             // (V, H)
  std::vector<GemmaLayer> layers_;
  RMSNorm norm_;
};

}  // namespace

std::unique_ptr<CausalLM> load_gemma2(const LoadContext& ctx) {
  return std::make_unique<GemmaModel>(ctx, 2);
}

std::unique_ptr<CausalLM> load_gemma3_text(const LoadContext& ctx) {
  return std::make_unique<GemmaModel>(ctx, 3);
}

}  // namespace hubzoo
