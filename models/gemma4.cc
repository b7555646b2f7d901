// Gemma 4 (text decoder, Gemma4ForCausalLM): Gemma 3's sandwich-norm layers
// with plain-w RMSNorms in fp32, attention scale 1 with q/k norms and an
// unscaled v norm, head geometry per layer type (global_head_dim), keys that
// double as values on full layers (attention_k_eq_v), the last layers reusing
// earlier layers' keys/values (KV sharing), per-layer embeddings (PLE) added
// after each layer's MLP, a per-layer scalar, and final logit softcapping.
// With enable_moe_block each layer also runs a sparse MoE (layers/moe.h,
// Gemma 4's router) on its residual and adds it to the dense MLP's output.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "base/error.h"
#include "layers/attention.h"
#include "layers/mlp.h"
#include "layers/moe.h"
#include "layers/weights.h"
#include "models/decoder_steps.h"
#include "models/families.h"
#include "models/gemma.h"
#include "models/model_info.h"
#include "ops/elementwise.h"

namespace hubzoo {
namespace {

struct DecoderLayer {
  RMSNorm input_layernorm, post_attention_layernorm;
  RMSNorm pre_feedforward_layernorm, post_feedforward_layernorm;
  Attention self_attn;
  GatedMlp mlp;
  // enable_moe_block: post_feedforward_layernorm_1 (dense branch),
  // pre_feedforward_layernorm_2 and post_feedforward_layernorm_2 (MoE branch).
  std::optional<SparseMoe> moe;
  std::optional<RMSNorm> post_feedforward_layernorm_1, pre_feedforward_layernorm_2,
      post_feedforward_layernorm_2;
  std::optional<Linear> per_layer_input_gate, per_layer_projection;  // (P, H), (H, P)
  std::optional<RMSNorm> post_per_layer_input_norm;
  float layer_scalar = 1.0f;
};

class Gemma4Model final : public CausalLM {
 public:
  explicit Gemma4Model(const LoadContext& ctx)
      : pool_(ctx.pool), cfg_(parse_gemma4_config(ctx.config)) {
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(ctx.snapshot));
    checkpoint_ = ckpt;
    WeightLoader w(ckpt, ctx.numerics);
    numerics_ = ctx.numerics;
    const int64_t h = cfg_.hidden_size, v = cfg_.vocab_size, nl = cfg_.num_layers;
    const int64_t ple = cfg_.hidden_size_per_layer_input;
    const float eps = cfg_.rms_norm_eps;
    embed_scale_ = gemma_embed_scale(h, numerics_);
    if (cfg_.head_dim_full) {
      rope_full_ =
          std::make_unique<Rope>(cfg_.rope_full, cfg_.head_dim_full, cfg_.max_position_embeddings);
    }
    if (cfg_.head_dim_sliding) {
      rope_sliding_ = std::make_unique<Rope>(cfg_.rope_sliding, cfg_.head_dim_sliding,
                                             cfg_.max_position_embeddings);
    }
    if (cfg_.tie_word_embeddings) {
      lm_head_.weight = w.take_packed("model.embed_tokens.weight", v, h);
      w.ignore("lm_head.weight", "tie_word_embeddings: lm_head shares model.embed_tokens.weight");
    } else {
      embed_tokens_ = w.take("model.embed_tokens.weight", {v, h});
      lm_head_ = Linear::load(w, "lm_head", h, v, /*has_bias=*/false);
    }
    if (ple) {
      // (V_ple, L * P), scaled by sqrt(P); (L * P, H) context projection.
      embed_tokens_per_layer_ = w.take("model.embed_tokens_per_layer.weight",
                                       {cfg_.vocab_size_per_layer_input, nl * ple});
      ple_embed_scale_ = gemma_embed_scale(ple, numerics_);
      per_layer_model_projection_ =
          Linear::load(w, "model.per_layer_model_projection", h, nl * ple, false);
      per_layer_projection_norm_ =
          RMSNorm::load_scale_in_fp32(w, "model.per_layer_projection_norm.weight", ple, eps);
    }
    for (int64_t i = 0; i < nl; ++i) {
      const Gemma4Layer& spec = cfg_.layers[i];
      const std::string p = "model.layers." + std::to_string(i);
      const bool sliding = spec.type == LayerType::kSliding;
      AttentionOptions a;
      a.hidden_size = h;
      a.num_heads = cfg_.num_heads;
      a.num_kv_heads = spec.num_kv_heads;
      a.head_dim = spec.head_dim;
      a.qkv_bias = a.o_bias = cfg_.attention_bias;
      a.qk_norm = true;
      a.qk_norm_kind = QkNormKind::kScaleInFp32;
      a.v_norm = true;
      a.k_eq_v = spec.k_eq_v;
      a.kv_shared = spec.kv_producer >= 0;
      a.rms_norm_eps = eps;
      a.scale = 1.0f;  // transformers: self.scaling = 1.0 (q and k are normed)
      a.window = sliding ? cfg_.sliding_window : 0;
      if (a.kv_shared) {
        for (const char* t : {"k_proj", "v_proj", "k_norm", "v_norm"}) {
          w.ignore(p + ".self_attn." + t + ".weight",
                   "KV-shared layer: reuses layer " + std::to_string(spec.kv_producer) + "'s keys");
        }
      }
      DecoderLayer layer{
          RMSNorm::load_scale_in_fp32(w, p + ".input_layernorm.weight", h, eps),
          RMSNorm::load_scale_in_fp32(w, p + ".post_attention_layernorm.weight", h, eps),
          RMSNorm::load_scale_in_fp32(w, p + ".pre_feedforward_layernorm.weight", h, eps),
          RMSNorm::load_scale_in_fp32(w, p + ".post_feedforward_layernorm.weight", h, eps),
          Attention(w, p + ".self_attn", a, sliding ? rope_sliding_.get() : rope_full_.get()),
          GatedMlp(w, p + ".mlp", h, spec.intermediate_size, /*bias=*/false, Activation::kGeluTanh),
          std::nullopt,
          std::nullopt,
          std::nullopt,
          std::nullopt,
          std::nullopt,
          std::nullopt,
          std::nullopt,
          1.0f,
      };
      if (cfg_.moe) {
        // Router under {p}.router, experts under {p}.experts (fused as saved, or per expert).
        layer.moe.emplace(w, p, cfg_.moe_options);
        layer.post_feedforward_layernorm_1 =
            RMSNorm::load_scale_in_fp32(w, p + ".post_feedforward_layernorm_1.weight", h, eps);
        layer.pre_feedforward_layernorm_2 =
            RMSNorm::load_scale_in_fp32(w, p + ".pre_feedforward_layernorm_2.weight", h, eps);
        layer.post_feedforward_layernorm_2 =
            RMSNorm::load_scale_in_fp32(w, p + ".post_feedforward_layernorm_2.weight", h, eps);
      }
      if (ple) {
        layer.per_layer_input_gate = Linear::load(w, p + ".per_layer_input_gate", h, ple, false);
        layer.per_layer_projection = Linear::load(w, p + ".per_layer_projection", ple, h, false);
        layer.post_per_layer_input_norm =
            RMSNorm::load_scale_in_fp32(w, p + ".post_per_layer_input_norm.weight", h, eps);
      }
      layer.layer_scalar = w.take(p + ".layer_scalar", {1}).data()[0];  // bf16 in bf16 modes
      layers_.push_back(std::move(layer));
      // Cache layers: every layer that computes keys; consumers read their producer's.
      cache_layer_.push_back(a.kv_shared ? cache_layer_[spec.kv_producer]
                                         : static_cast<int64_t>(cache_specs_.size()));
      if (!a.kv_shared) {
        cache_specs_.push_back({spec.num_kv_heads * spec.head_dim, a.window});
      } else {
        has_consumers_.insert(spec.kv_producer);
      }
    }
    norm_ = RMSNorm::load_scale_in_fp32(w, "model.norm.weight", h, eps);
    w.finish();

    info_ = decoder_model_info(ctx, *ckpt, w.ignored(), v, h, nl, cfg_.max_position_embeddings);
  }

  const ModelInfo& info() const override { return info_; }

  // One cache layer per layer that computes keys (KV-shared layers have none);
  // sliding ones are ring buffers of sliding_window rows.
  KvCache new_cache(int64_t num_slots) const override { return KvCache(cache_specs_, num_slots); }

  std::vector<std::string> capture_names() const override {
    return decoder_capture_names(cfg_.num_layers, [this](int64_t) { return cfg_.moe; });
  }

  void forward(const TokenBatch& batch, KvCache& cache, const ForwardOptions& opt,
               ForwardResult& out) override {
    const int64_t m = batch.size(), h = cfg_.hidden_size, v = cfg_.vocab_size;
    const int64_t nl = cfg_.num_layers, ple = cfg_.hidden_size_per_layer_input;
    const auto new_lengths = check_token_batch(batch, cache, v);
    if (ple) {
      for (int64_t t = 0; t < m; ++t) {
        if (batch.ids[t] >= cfg_.vocab_size_per_layer_input) {
          throw InvalidArgument("token id " + std::to_string(batch.ids[t]) +
                                " is outside vocab_size_per_layer_input");
        }
      }
    }
    for (const auto& [slot, len] : new_lengths) cache.reserve(slot, len);
    const auto names = capture_names();
    for (const auto& name : opt.capture) {
      if (std::find(names.begin(), names.end(), name) == names.end())
        throw InvalidArgument("unknown capture name '" + name + "'");
    }
    auto capture = [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
      if (opt.capture.count(name)) out.captured[name].assign(data, data + rows * cols);
    };
    const Numerics& num = numerics_;

    std::vector<float> x(m * h), normed(m * h), branch(m * h);  // [M, H]
    std::vector<float> moe_out(cfg_.moe ? m * h : 0);           // [M, H]
    for (int64_t t = 0; t < m; ++t) {
      float* row = &x[t * h];
      if (cfg_.tie_word_embeddings) {
        lm_head_.weight.copy_row(batch.ids[t], row);
      } else {
        std::copy_n(embed_tokens_.data() + batch.ids[t] * h, h, row);
      }
      for (int64_t i = 0; i < h; ++i) row[i] = num.round_eager(row[i] * embed_scale_);
    }
    capture("embed", x.data(), m, h);
    const std::vector<float> per_layer = per_layer_inputs(batch, x);  // [M, L, P]

    std::vector<KvChunk> kept(nl);
    std::vector<float> gate(m * std::max<int64_t>(ple, 1));  // [M, P]
    for (int64_t i = 0; i < nl; ++i) {
      const DecoderLayer& layer = layers_[i];
      const Gemma4Layer& spec = cfg_.layers[i];
      const std::string p = "layers." + std::to_string(i);
      KvSharing sharing;
      if (spec.kv_producer >= 0) {
        sharing.reuse = &kept[spec.kv_producer];
      } else if (has_consumers_.count(i)) {
        // A ring buffer must keep the rows its consumers still read this pass.
        sharing.keep = &kept[i];
        sharing.defer_store = true;
      }
      layer.input_layernorm.forward(x.data(), m, normed.data());
      layer.self_attn.forward(batch, normed.data(), branch.data(), cache, cache_layer_[i], *pool_,
                              sharing);
      layer.post_attention_layernorm.forward(branch.data(), m, branch.data());
      capture(p + ".self_attn", branch.data(), m, h);
      add_inplace(x.data(), branch.data(), m * h);
      num.round_eager(x.data(), m * h);
      layer.pre_feedforward_layernorm.forward(x.data(), m, normed.data());
      layer.mlp.forward(normed.data(), m, branch.data(), *pool_);
      if (layer.moe) {
        // norm_1(mlp(norm(x))) + norm_2(moe(route on x, experts on norm_2'(x))).
        layer.post_feedforward_layernorm_1->forward(branch.data(), m, branch.data());
        layer.pre_feedforward_layernorm_2->forward(x.data(), m, normed.data());
        MoeRouting routing;
        layer.moe->forward(x.data(), normed.data(), m, moe_out.data(), *pool_, &routing);
        layer.post_feedforward_layernorm_2->forward(moe_out.data(), m, moe_out.data());
        add_inplace(branch.data(), moe_out.data(), m * h);
        num.round_eager(branch.data(), m * h);
        const int64_t e = cfg_.moe_options.num_experts, k = cfg_.moe_options.num_experts_per_tok;
        capture(p + ".mlp.router_logits", routing.router_logits.data(), m, e);
        capture(p + ".mlp.routing_weights", routing.weights.data(), m, k);
        if (opt.capture.count(p + ".mlp.selected_experts")) {
          const std::vector<float> ids(routing.experts.begin(), routing.experts.end());
          capture(p + ".mlp.selected_experts", ids.data(), m, k);
        }
      }
      layer.post_feedforward_layernorm.forward(branch.data(), m, branch.data());
      capture(p + ".mlp", branch.data(), m, h);
      add_inplace(x.data(), branch.data(), m * h);
      num.round_eager(x.data(), m * h);
      if (ple) {
        // x + norm(projection(gelu(gate(x)) * per_layer_input[i])), rounded as transformers.
        layer.per_layer_input_gate->forward(x.data(), m, gate.data(), *pool_);
        num.round_eager(gate.data(), m * ple);
        for (int64_t t = 0; t < m; ++t) {
          const float* in = &per_layer[(t * nl + i) * ple];
          for (int64_t j = 0; j < ple; ++j) {
            float& g = gate[t * ple + j];
            g = num.round_eager(num.round_eager(gelu_tanh(g)) * in[j]);
          }
        }
        layer.per_layer_projection->forward(gate.data(), m, branch.data(), *pool_);
        num.round_eager(branch.data(), m * h);
        layer.post_per_layer_input_norm->forward(branch.data(), m, branch.data());
        add_inplace(x.data(), branch.data(), m * h);
        num.round_eager(x.data(), m * h);
      }
      for (auto& value : x) value = num.round_eager(value * layer.layer_scalar);
      capture(p, x.data(), m, h);
    }
    for (int64_t i : has_consumers_) {
      store_chunk(batch, kept[i].k.data(), kept[i].v.data(), cache, cache_layer_[i]);
    }
    norm_.forward(x.data(), m, normed.data());
    capture("norm", normed.data(), m, h);

    // (rows, V) logits, only for the rows asked for.
    compute_logits(normed.data(), m, h, opt.logits_rows, lm_head_, num, *pool_, out.logits);
    const int64_t rows = static_cast<int64_t>(out.logits.size()) / v;
    softcap_logits(out.logits.data(), rows * v, cfg_.final_logit_softcapping, num);
    capture("logits", out.logits.data(), rows, v);
    for (const auto& [slot, len] : new_lengths) cache.set_length(slot, len);
  }

 private:
  // PLE: (norm(per_layer_model_projection(embeds) * H^-0.5) + embed_per_layer(ids)
  // * sqrt(P)) * 2^-0.5, per layer: [M, L, P]; empty without PLE.
  std::vector<float> per_layer_inputs(const TokenBatch& batch, const std::vector<float>& x) const {
    const int64_t m = batch.size(), h = cfg_.hidden_size, nl = cfg_.num_layers;
    const int64_t ple = cfg_.hidden_size_per_layer_input, width = nl * ple;
    if (!ple) return {};
    const Numerics& num = numerics_;
    std::vector<float> proj(m * width);
    per_layer_model_projection_.forward(x.data(), m, proj.data(), *pool_);
    num.round_eager(proj.data(), m * width);
    const auto proj_scale = static_cast<float>(std::pow(static_cast<double>(h), -0.5));
    for (auto& value : proj) value = num.round_eager(value * proj_scale);
    per_layer_projection_norm_.forward(proj.data(), m * nl, proj.data());
    const auto input_scale = static_cast<float>(std::pow(2.0, -0.5));
    for (int64_t t = 0; t < m; ++t) {
      const float* token = embed_tokens_per_layer_.data() + batch.ids[t] * width;
      for (int64_t j = 0; j < width; ++j) {
        const float tok = num.round_eager(token[j] * ple_embed_scale_);
        float& value = proj[t * width + j];
        value = num.round_eager(num.round_eager(value + tok) * input_scale);
      }
    }
    return proj;
  }

  std::shared_ptr<ThreadPool> pool_;
  Gemma4Config cfg_;
  Numerics numerics_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  ModelInfo info_;
  float embed_scale_ = 1.0f, ple_embed_scale_ = 1.0f;
  std::unique_ptr<Rope> rope_full_, rope_sliding_;
  FloatWeights embed_tokens_;            // (V, H), untied only
  FloatWeights embed_tokens_per_layer_;  // (V_ple, L * P)
  Linear per_layer_model_projection_;    // (L * P, H)
  RMSNorm per_layer_projection_norm_;    // (P)
  Linear lm_head_;                       // (V, H)
  std::vector<DecoderLayer> layers_;
  RMSNorm norm_;
  std::vector<KvLayerSpec> cache_specs_;  // per cache layer
  std::vector<int64_t> cache_layer_;      // decoder layer -> cache layer it reads
  std::set<int64_t> has_consumers_;       // layers whose keys later layers reuse
};

}  // namespace

std::unique_ptr<CausalLM> load_gemma4_text(const LoadContext& ctx) {
  return std::make_unique<Gemma4Model>(ctx);
}

}  // namespace hubzoo
