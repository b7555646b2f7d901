// Building the decoder from a checkpoint: every tensor under its Hugging Face
// name with the shape the spec implies, taken once or ignored with a reason.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "layers/weights.h"
#include "models/decoder_impl.h"
#include "models/decoder_steps.h"
#include "models/model_info.h"
#include "models/text_tower.h"

namespace hubzoo {
namespace {

// The RoPE of the layers of one kind, or null when no layer uses it; its
// layers must share head_dim.
std::unique_ptr<Rope> rope_for(const DecoderSpec& spec, RopeKind kind) {
  int64_t head_dim = 0;
  for (const LayerSpec& l : spec.layers) {
    if (l.rope != kind) continue;
    if (head_dim != 0 && head_dim != l.attn.head_dim) {
      throw ConfigError("layers of one RoPE type with different head_dim are not supported");
    }
    head_dim = l.attn.head_dim;
  }
  if (head_dim == 0) return nullptr;
  const RopeParams& params = kind == RopeKind::kSliding ? spec.rope_sliding : spec.rope_full;
  return std::make_unique<Rope>(params, head_dim, spec.max_position_embeddings);
}

}  // namespace

Decoder::Decoder(const LoadContext& ctx, const DecoderSpec& spec)
    : pool_(ctx.pool), spec_(spec), numerics_(ctx.numerics) {
  auto ckpt = ctx.checkpoint ? ctx.checkpoint
                             : std::make_shared<const Checkpoint>(Checkpoint::open(ctx.snapshot));
  checkpoint_ = ckpt;
  WeightLoader w(ckpt, ctx.numerics);
  w.set_hub_quant(HubQuant::from_config(ctx.config));
  if (spec_.norm_placement == NormPlacement::kPost && spec_.fuse_residual_add) {
    throw ConfigError("post-norm layers have no input_layernorm to fuse the residual add into");
  }
  rope_full_ = rope_for(spec_, RopeKind::kFull);
  rope_sliding_ = rope_for(spec_, RopeKind::kSliding);
  check_embed_as(spec_);
  const auto [m, head] = tower_names(spec_, w);
  const auto ignored_modules = ignore_modules(spec_, *ckpt, w);
  load_embeddings(ctx, w, m, head);
  const int64_t nl = static_cast<int64_t>(spec_.layers.size());
  for (int64_t i = 0; i < nl; ++i) layers_.push_back(load_layer(w, m, i));
  norm_ = RMSNorm::load_kind(spec_.norm_kind, w, m + "norm.weight", spec_.hidden_size,
                             spec_.rms_norm_eps);
  // transformers recomputes rotary inv_freq; old checkpoints may still store it.
  for (int64_t i = 0; i < nl; ++i) {
    w.ignore(m + "layers." + std::to_string(i) + ".self_attn.rotary_emb.inv_freq",
             "RoPE frequencies are recomputed from the config");
  }
  w.finish();
  w.request_huge_pages();
  plan_cache();
  build_capture_names();
  info_ = decoder_model_info(ctx, *ckpt, w.ignored(), spec_.vocab_size, spec_.hidden_size, nl,
                             spec_.max_position_embeddings);
  info_.ignored_modules = ignored_modules;
  for (const LayerSpec& l : spec_.layers) info_.causal = info_.causal && !l.attn.bidirectional;
  info_.quantized_matrices = w.quantized_matrices();
  info_.panel_matrices = w.panel_matrices();
  info_.quant_cache_hits = w.quant_cache_hits();
  info_.quant_cache_stores = w.quant_cache_stores();
  info_.weight_bytes = w.bytes();
  if (ctx.numerics.int8 && info_.quantized_matrices == 0) {
    throw ConfigError(
        "mode 'int8' (int8 activations) needs quantized weights: a GGUF file, a "
        "GPTQ/AWQ/compressed-tensors checkpoint, or --quantize");
  }
}

void Decoder::load_embeddings(const LoadContext& ctx, WeightLoader& w, const std::string& m,
                              const std::string& head) {
  const int64_t h = spec_.hidden_size, v = spec_.vocab_size;
  if (spec_.scale_embeddings) embed_scale_ = embedding_scale(h, numerics_);
  // (V, H): embed_tokens; lm_head shares it when tied.
  if (spec_.tie_word_embeddings) {
    lm_head_.weight = w.take_packed(m + "embed_tokens.weight", v, h);
    w.ignore(head + ".weight", "tie_word_embeddings: lm_head shares " + m + "embed_tokens.weight");
  } else {
    if (w.quantized(m + "embed_tokens.weight")) {  // rows dequantized at lookup
      embed_quantized_ = w.take_lookup_table(m + "embed_tokens.weight", v, h);
    } else {
      embed_tokens_ = w.take(m + "embed_tokens.weight", {v, h});
    }
    has_lm_head_ = ctx.needs_lm_head || w.contains(head + ".weight");
    if (has_lm_head_) lm_head_ = Linear::load(w, head, h, v, /*has_bias=*/false);
  }
  const int64_t ple = spec_.hidden_size_per_layer_input;
  if (ple == 0) return;
  // PLE: (V_ple, L * P), scaled by sqrt(P); (L * P, H) context projection.
  const int64_t width = static_cast<int64_t>(spec_.layers.size()) * ple;
  embed_tokens_per_layer_ =
      w.take(m + "embed_tokens_per_layer.weight", {spec_.vocab_size_per_layer_input, width});
  ple_embed_scale_ = embedding_scale(ple, numerics_);
  per_layer_model_projection_ =
      Linear::load(w, m + "per_layer_model_projection", h, width, /*has_bias=*/false);
  per_layer_projection_norm_ = RMSNorm::load_kind(
      spec_.norm_kind, w, m + "per_layer_projection_norm.weight", ple, spec_.rms_norm_eps);
}

DecoderLayer Decoder::load_layer(WeightLoader& w, const std::string& m, int64_t i) {
  const LayerSpec& s = spec_.layers[i];
  const int64_t h = spec_.hidden_size, ple = spec_.hidden_size_per_layer_input;
  const std::string p = m + "layers." + std::to_string(i);
  const auto norm = [&](const std::string& name, int64_t n) {
    return RMSNorm::load_kind(spec_.norm_kind, w, p + "." + name + ".weight", n,
                              spec_.rms_norm_eps);
  };
  DecoderLayer layer;
  layer.spec = s;
  const NormPlacement placement = spec_.norm_placement;
  if (placement != NormPlacement::kPost) layer.input_layernorm = norm("input_layernorm", h);
  layer.post_attention_layernorm = norm("post_attention_layernorm", h);
  if (placement == NormPlacement::kSandwich) {
    layer.pre_feedforward_layernorm = norm("pre_feedforward_layernorm", h);
  }
  if (placement != NormPlacement::kPre) {
    layer.post_feedforward_layernorm = norm("post_feedforward_layernorm", h);
  }
  if (s.attn.kv_shared) {
    for (const char* t : {"k_proj", "v_proj", "k_norm", "v_norm"}) {
      w.ignore(p + ".self_attn." + t + ".weight",
               "KV-shared layer: reuses layer " + std::to_string(s.kv_producer) + "'s keys");
    }
  }
  const Rope* rope = s.rope == RopeKind::kFull      ? rope_full_.get()
                     : s.rope == RopeKind::kSliding ? rope_sliding_.get()
                                                    : nullptr;
  layer.self_attn.emplace(w, p + ".self_attn", s.attn, rope);
  if (s.moe == MoeKind::kReplacesMlp) {
    layer.moe.emplace(w, p + ".mlp", spec_.moe);
  } else if (s.fused_gate_up) {
    layer.mlp =
        GatedMlp::load_fused(w, p + ".mlp", h, s.intermediate_size, s.mlp_bias, s.activation);
  } else {
    layer.mlp.emplace(w, p + ".mlp", h, s.intermediate_size, s.mlp_bias, s.activation);
  }
  if (s.moe == MoeKind::kBesideMlp) load_moe_branch(w, p, layer);
  if (s.per_layer_input) {
    layer.per_layer_input_gate = Linear::load(w, p + ".per_layer_input_gate", h, ple, false);
    layer.per_layer_projection = Linear::load(w, p + ".per_layer_projection", ple, h, false);
    layer.post_per_layer_input_norm = norm("post_per_layer_input_norm", h);
  }
  if (s.layer_scalar) {
    layer.layer_scalar = w.take(p + ".layer_scalar", {1}).data()[0];  // bf16 in bf16 modes
  }
  return layer;
}

// Gemma 4's MoE branch: router under {p}.router, experts under {p}.experts
// (fused as saved, or per expert), and its three extra norms.
void Decoder::load_moe_branch(WeightLoader& w, const std::string& p, DecoderLayer& layer) {
  const int64_t h = spec_.hidden_size;
  const auto norm = [&](const std::string& name) {
    return RMSNorm::load_kind(spec_.norm_kind, w, p + "." + name + ".weight", h,
                              spec_.rms_norm_eps);
  };
  layer.moe.emplace(w, p, spec_.moe);
  layer.post_feedforward_layernorm_1 = norm("post_feedforward_layernorm_1");
  layer.pre_feedforward_layernorm_2 = norm("pre_feedforward_layernorm_2");
  layer.post_feedforward_layernorm_2 = norm("post_feedforward_layernorm_2");
}

// Cache layers: one per layer that computes keys; a KV-shared layer reads its
// producer's. Sliding layers keep a ring buffer of their window.
void Decoder::plan_cache() {
  const int64_t nl = static_cast<int64_t>(layers_.size());
  for (int64_t i = 0; i < nl; ++i) {
    DecoderLayer& layer = layers_[i];
    const LayerSpec& s = layer.spec;
    if (s.attn.kv_shared) {
      if (s.kv_producer < 0 || s.kv_producer >= i) {
        throw ConfigError("layer " + std::to_string(i) + " shares the keys of no earlier layer");
      }
      layer.cache_layer = layers_[s.kv_producer].cache_layer;
      layers_[s.kv_producer].has_consumers = true;
      continue;
    }
    layer.cache_layer = static_cast<int64_t>(cache_specs_.size());
    // bf16 modes (bf16) and int8 (half): keys and values are values of that type
    // (Numerics::round_kv), kept in 2 bytes.
    cache_specs_.push_back(
        {s.attn.num_kv_heads * s.attn.head_dim, s.attn.window, false, numerics_.kv_element()});
  }
  for (const DecoderLayer& layer : layers_) {
    const LayerSpec& s = layer.spec;
    // fp32 and fused bf16 attention read keys as blocks (ops/attend_online.h):
    // the cache keeps them so, in windowed layers too. Eager bf16 reads rows.
    if (spec_.blocked_key_cache && !s.attn.kv_shared && !layer.has_consumers) {
      cache_specs_[layer.cache_layer].blocked_keys = !numerics_.eager_bf16() && s.attn.softcap <= 0;
    }
  }
  ws_.kept.resize(layers_.size());
}

void Decoder::build_capture_names() {
  const int64_t nl = static_cast<int64_t>(layers_.size());
  for (int64_t i = 0; i < nl; ++i) {
    LayerNames& n = layers_[i].names;
    n.layer = "layers." + std::to_string(i);
    n.self_attn = n.layer + ".self_attn";
    n.mlp = n.layer + ".mlp";
    n.router_logits = n.mlp + ".router_logits";
    n.selected_experts = n.mlp + ".selected_experts";
    n.routing_weights = n.mlp + ".routing_weights";
  }
  capture_names_ = decoder_capture_names(
      nl, [this](int64_t i) { return layers_[i].spec.moe != MoeKind::kNone; });
  capture_known_.insert(capture_names_.begin(), capture_names_.end());
}

std::unique_ptr<CausalLM> load_decoder(const LoadContext& ctx, const DecoderSpec& spec) {
  return std::make_unique<Decoder>(ctx, spec);
}

}  // namespace hubzoo
