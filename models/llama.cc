// Llama (and, through LlamaVariant, Qwen2, Qwen3 and Qwen3-MoE): config mapping, the
// tensors under their Hugging Face names, and the forward pass.
#include "models/llama.h"

#include <algorithm>
#include <optional>

#include "base/error.h"
#include "layers/attention.h"
#include "layers/mlp.h"
#include "layers/weights.h"
#include "models/decoder_steps.h"
#include "models/families.h"
#include "models/model_info.h"
#include "ops/elementwise.h"
#include "ops/scratch.h"

namespace hubzoo {
namespace {

struct LlamaConfig {
  int64_t vocab_size, hidden_size, intermediate_size, num_layers, max_position_embeddings;
  AttentionOptions attn;
  bool mlp_bias = false;
  bool tie_word_embeddings = false;
  float rms_norm_eps = 1e-6f;
  RopeParams rope;
  SparseLayers moe;  // sparse_moe variants only
};

LlamaConfig parse_config(const JsonObject& c, const LlamaVariant& v) {
  reject_unsupported_common_options(c);
  LlamaConfig cfg;
  auto positive = [&](const char* key, int64_t fallback) {
    const int64_t x = c.get_or<int64_t>(key, fallback);
    if (x <= 0) throw ConfigError(c.where() + ": field '" + key + "' must be positive");
    return x;
  };
  cfg.vocab_size = positive("vocab_size", v.default_vocab_size);
  cfg.hidden_size = positive("hidden_size", 4096);
  cfg.intermediate_size = positive("intermediate_size", 11008);
  cfg.num_layers = positive("num_hidden_layers", 32);
  cfg.max_position_embeddings =
      positive("max_position_embeddings", v.default_max_position_embeddings);
  auto& a = cfg.attn;
  a.hidden_size = cfg.hidden_size;
  a.num_heads = positive("num_attention_heads", 32);
  a.num_kv_heads = positive("num_key_value_heads", a.num_heads);
  if (a.num_heads % a.num_kv_heads != 0) {
    throw ConfigError(c.where() + ": num_attention_heads (" + std::to_string(a.num_heads) +
                      ") is not a multiple of num_key_value_heads (" +
                      std::to_string(a.num_kv_heads) + ")");
  }
  const int64_t derived_head_dim = cfg.hidden_size / a.num_heads;
  a.head_dim = positive("head_dim", v.default_head_dim ? v.default_head_dim : derived_head_dim);
  if (a.head_dim % 2 != 0 || a.head_dim > 1024) {
    throw ConfigError(c.where() + ": head_dim " + std::to_string(a.head_dim) +
                      " is not supported (must be even and <= 1024)");
  }
  cfg.rms_norm_eps = static_cast<float>(c.get_or<double>("rms_norm_eps", 1e-6));
  cfg.tie_word_embeddings = c.get_or<bool>("tie_word_embeddings", false);
  const std::string act = c.get_or<std::string>("hidden_act", "silu");
  if (act != "silu") {
    throw ConfigError(c.where() + ": hidden_act '" + act + "' is not supported (only 'silu')");
  }
  const bool attention_bias = v.attention_bias_key && c.get_or<bool>("attention_bias", false);
  a.qkv_bias = v.qkv_bias_always || attention_bias;
  a.o_bias = attention_bias;
  a.qk_norm = v.qk_norm;
  a.rms_norm_eps = cfg.rms_norm_eps;
  cfg.mlp_bias = v.mlp_bias_key && c.get_or<bool>("mlp_bias", false);
  if (c.get_or<bool>("use_sliding_window", false)) {
    throw ConfigError(c.where() + ": use_sliding_window=true is not supported yet");
  }
  if (c.has("layer_types")) {
    for (const auto& t : c.get<std::vector<std::string>>("layer_types")) {
      if (t != "full_attention") {
        throw ConfigError(c.where() + ": layer_types entry '" + t + "' is not supported yet");
      }
    }
  }
  cfg.rope = parse_rope_params(c);
  if (v.sparse_moe) cfg.moe = parse_qwen3_moe_layers(c, cfg.hidden_size, cfg.num_layers);
  return cfg;
}

struct DecoderLayer {
  RMSNorm input_layernorm, post_attention_layernorm;
  Attention self_attn;
  std::optional<GatedMlp> mlp;   // dense layers
  std::optional<SparseMoe> moe;  // sparse MoE layers
};

bool is_sparse(const LlamaConfig& cfg, int64_t layer) {
  return !cfg.moe.sparse.empty() && cfg.moe.sparse[layer];
}

class LlamaModel final : public CausalLM {
 public:
  LlamaModel(const LoadContext& ctx, const LlamaVariant& variant)
      : pool_(ctx.pool), cfg_(parse_config(ctx.config, variant)) {
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(ctx.snapshot));
    checkpoint_ = ckpt;
    WeightLoader w(ckpt, ctx.numerics);
    numerics_ = ctx.numerics;
    const int64_t h = cfg_.hidden_size, v = cfg_.vocab_size;
    rope_ = std::make_unique<Rope>(cfg_.rope, cfg_.attn.head_dim, cfg_.max_position_embeddings);
    // Base-model checkpoints (LlamaModel, Qwen3Model: what sentence-transformers
    // saves, e.g. Qwen3-Embedding) carry bare names and no lm_head.
    const bool bare = !w.contains("model.embed_tokens.weight") && w.contains("embed_tokens.weight");
    const std::string m = bare ? "" : "model.";
    // (V, H): embed_tokens; lm_head shares it when tied.
    if (cfg_.tie_word_embeddings) {
      lm_head_.weight = w.take_packed(m + "embed_tokens.weight", v, h);
      w.ignore("lm_head.weight",
               "tie_word_embeddings: lm_head shares " + m + "embed_tokens.weight");
    } else {
      embed_tokens_ = w.take(m + "embed_tokens.weight", {v, h});
      has_lm_head_ = ctx.needs_lm_head || w.contains("lm_head.weight");
      if (has_lm_head_) lm_head_ = Linear::load(w, "lm_head", h, v, /*has_bias=*/false);
    }
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const std::string p = m + "layers." + std::to_string(i);
      layers_.push_back(DecoderLayer{
          RMSNorm::load(w, p + ".input_layernorm.weight", h, cfg_.rms_norm_eps),
          RMSNorm::load(w, p + ".post_attention_layernorm.weight", h, cfg_.rms_norm_eps),
          Attention(w, p + ".self_attn", cfg_.attn, rope_.get()),
          {},
          {},
      });
      if (is_sparse(cfg_, i)) {
        layers_.back().moe.emplace(w, p + ".mlp", cfg_.moe.moe);
      } else {
        layers_.back().mlp.emplace(w, p + ".mlp", h, cfg_.intermediate_size, cfg_.mlp_bias);
      }
    }
    norm_ = RMSNorm::load(w, m + "norm.weight", h, cfg_.rms_norm_eps);
    // transformers recomputes rotary inv_freq; old checkpoints may still store it.
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      w.ignore(m + "layers." + std::to_string(i) + ".self_attn.rotary_emb.inv_freq",
               "RoPE frequencies are recomputed from the config");
    }
    w.finish();

    info_ = decoder_model_info(ctx, *ckpt, w.ignored(), v, h, cfg_.num_layers,
                               cfg_.max_position_embeddings);
  }

  const ModelInfo& info() const override { return info_; }

  KvCache new_cache(int64_t num_slots) const override {
    // fp32 and fused bf16 attention read keys as blocks (ops/attend_online.h):
    // the cache keeps them so. Eager bf16 reads rows.
    KvLayerSpec spec{cfg_.attn.num_kv_heads * cfg_.attn.head_dim, 0};
    spec.blocked_keys = !numerics_.eager_bf16() && cfg_.attn.softcap <= 0;
    return KvCache(std::vector<KvLayerSpec>(cfg_.num_layers, spec), num_slots);
  }

  std::vector<std::string> capture_names() const override {
    return decoder_capture_names(cfg_.num_layers, [this](int64_t i) { return is_sparse(cfg_, i); });
  }

  void forward(const TokenBatch& batch, KvCache& cache, const ForwardOptions& opt,
               ForwardResult& out) override {
    const int64_t m = batch.size(), h = cfg_.hidden_size, v = cfg_.vocab_size;
    const auto new_lengths = check_token_batch(batch, cache, cfg_.vocab_size);
    for (const auto& [slot, len] : new_lengths) cache.reserve(slot, len);
    for (const auto& name : opt.capture) {
      if (!capture_known(name)) throw InvalidArgument("unknown capture name '" + name + "'");
    }
    auto capture = [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
      if (opt.capture.count(name)) out.captured[name].assign(data, data + rows * cols);
    };

    // [M, H] activations, kept per thread between steps (ops/scratch.h).
    thread_local ScratchBuffer x_buf, normed_buf, branch_buf;
    float* const x = x_buf.get(m * h);
    float* const normed = normed_buf.get(m * h);
    float* const branch = branch_buf.get(m * h);
    for (int64_t t = 0; t < m; ++t) {
      if (cfg_.tie_word_embeddings) {
        lm_head_.weight.copy_row(batch.ids[t], x + t * h);
      } else {
        std::copy_n(embed_tokens_.data() + batch.ids[t] * h, h, x + t * h);
      }
    }
    capture("embed", x, m, h);
    // Residual adds are fused into the norm that follows them (RMSNorm::add_forward).
    if (cfg_.num_layers > 0) {
      layers_[0].input_layernorm.forward(x, m, normed);
    } else {
      norm_.forward(x, m, normed);
    }
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const DecoderLayer& layer = layers_[i];
      const std::string p = "layers." + std::to_string(i);
      layer.self_attn.forward(batch, normed, branch, cache, i, *pool_);
      capture(p + ".self_attn", branch, m, h);
      layer.post_attention_layernorm.add_forward(x, branch, m, normed, numerics_);
      if (layer.moe) {
        MoeRouting routing;
        layer.moe->forward(normed, m, branch, *pool_, &routing);
        const int64_t e = cfg_.moe.moe.num_experts, k = cfg_.moe.moe.num_experts_per_tok;
        capture(p + ".mlp.router_logits", routing.router_logits.data(), m, e);
        capture(p + ".mlp.routing_weights", routing.weights.data(), m, k);
        if (opt.capture.count(p + ".mlp.selected_experts")) {
          const std::vector<float> ids(routing.experts.begin(), routing.experts.end());
          capture(p + ".mlp.selected_experts", ids.data(), m, k);
        }
      } else {
        layer.mlp->forward(normed, m, branch, *pool_);
      }
      capture(p + ".mlp", branch, m, h);
      const RMSNorm& next = i + 1 < cfg_.num_layers ? layers_[i + 1].input_layernorm : norm_;
      next.add_forward(x, branch, m, normed, numerics_);  // a bf16 residual add in eager
      capture(p, x, m, h);
    }
    capture("norm", normed, m, h);

    if (!has_lm_head_) {  // an encoder-only base model: hidden states, no logits
      out.logits.clear();
      for (const auto& [slot, len] : new_lengths) cache.set_length(slot, len);
      return;
    }
    // (rows, V) logits, only for the rows asked for.
    compute_logits(normed, m, h, opt.logits_rows, lm_head_, numerics_, *pool_, out.logits);
    const int64_t rows = static_cast<int64_t>(out.logits.size()) / v;
    capture("logits", out.logits.data(), rows, v);
    for (const auto& [slot, len] : new_lengths) cache.set_length(slot, len);
  }

 private:
  bool capture_known(const std::string& name) const {
    const auto names = capture_names();
    return std::find(names.begin(), names.end(), name) != names.end();
  }

  std::shared_ptr<ThreadPool> pool_;
  LlamaConfig cfg_;
  Numerics numerics_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  ModelInfo info_;
  std::unique_ptr<Rope> rope_;
  FloatWeights embed_tokens_;  // (V, H), untied only
  Linear lm_head_;             // (V, H)
  bool has_lm_head_ = true;    // false: loaded as an encoder from a base model without one
  std::vector<DecoderLayer> layers_;
  RMSNorm norm_;
};

}  // namespace

std::unique_ptr<CausalLM> load_llama_variant(const LoadContext& ctx, const LlamaVariant& variant) {
  return std::make_unique<LlamaModel>(ctx, variant);
}

std::unique_ptr<CausalLM> load_llama(const LoadContext& ctx) {
  LlamaVariant v;
  v.attention_bias_key = true;
  v.mlp_bias_key = true;
  return load_llama_variant(ctx, v);
}

}  // namespace hubzoo
