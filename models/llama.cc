// Llama, Qwen2 and Qwen3: config.json mapped onto the decoder (models/decoder.h).
// Pre-norm layers (input_layernorm before attention, post_attention_layernorm
// before the MLP) of plain-w RMSNorms, each residual add fused into the norm
// that follows it, SiLU gated MLPs, one RoPE for every layer, untied or tied
// embeddings. What the variants change:
//   Qwen2: biases on q/k/v (none on o_proj);
//   Qwen3: RMSNorm on each query and key head (before RoPE), an explicit
//          head_dim (default 128, independent of hidden_size), optional
//          attention biases;
//   Qwen3-MoE (models/qwen3_moe.cc): Qwen3 with sparse MoE MLPs.
#include "models/llama.h"

#include "base/error.h"
#include "models/config_fields.h"
#include "models/families.h"
#include "models/model_info.h"

namespace hubzoo {
namespace {

// Sliding-window attention is refused by name: no Llama-family checkpoint
// hubzoo verifies uses it.
void reject_sliding_window(const JsonObject& c) {
  if (c.get_or<bool>("use_sliding_window", false)) {
    throw ConfigError(c.where() + ": use_sliding_window=true is not supported yet");
  }
  if (!c.has("layer_types")) return;
  for (const auto& t : c.get<std::vector<std::string>>("layer_types")) {
    if (t != "full_attention") {
      throw ConfigError(c.where() + ": layer_types entry '" + t + "' is not supported yet");
    }
  }
}

AttentionOptions llama_attention(const JsonObject& c, const LlamaVariant& v, int64_t hidden,
                                 float eps) {
  AttentionOptions a;
  a.hidden_size = hidden;
  a.num_heads = positive(c, "num_attention_heads", 32);
  a.num_kv_heads = positive(c, "num_key_value_heads", a.num_heads);
  const int64_t derived_head_dim = hidden / a.num_heads;
  a.head_dim = positive(c, "head_dim", v.default_head_dim ? v.default_head_dim : derived_head_dim);
  check_head_geometry(c, a.num_heads, a.num_kv_heads, a.head_dim);
  const bool attention_bias = v.attention_bias_key && c.get_or<bool>("attention_bias", false);
  a.qkv_bias = v.qkv_bias_always || attention_bias;
  a.o_bias = attention_bias;
  a.qk_norm = v.qk_norm;
  a.rms_norm_eps = eps;
  return a;
}

}  // namespace

DecoderSpec llama_spec(const JsonObject& c, const LlamaVariant& v) {
  reject_unsupported_common_options(c);
  DecoderSpec s;
  s.vocab_size = positive(c, "vocab_size", v.default_vocab_size);
  s.hidden_size = positive(c, "hidden_size", 4096);
  const int64_t intermediate = positive(c, "intermediate_size", 11008);
  const int64_t num_layers = layer_count(c, 32);
  s.max_position_embeddings =
      positive(c, "max_position_embeddings", v.default_max_position_embeddings);
  s.rms_norm_eps = static_cast<float>(c.get_or<double>("rms_norm_eps", 1e-6));
  const AttentionOptions attn = llama_attention(c, v, s.hidden_size, s.rms_norm_eps);
  s.tie_word_embeddings = c.get_or<bool>("tie_word_embeddings", false);
  require_activation(c, "hidden_act", "silu");
  const bool mlp_bias = v.mlp_bias_key && c.get_or<bool>("mlp_bias", false);
  if (!v.family_windows) reject_sliding_window(c);
  s.rope_full = parse_rope_params(c, v.rope);
  SparseLayers moe;
  if (v.sparse_moe) moe = parse_qwen3_moe_layers(c, s.hidden_size, num_layers);
  s.moe = moe.moe;
  s.norm_kind = NormKind::kWeight;
  s.fuse_residual_add = true;
  s.blocked_key_cache = true;
  for (int64_t i = 0; i < num_layers; ++i) {
    LayerSpec l;
    l.attn = attn;
    l.rope = RopeKind::kFull;
    l.intermediate_size = intermediate;
    l.mlp_bias = mlp_bias;
    l.activation = Activation::kSilu;
    if (!moe.sparse.empty() && moe.sparse[i]) l.moe = MoeKind::kReplacesMlp;
    s.layers.push_back(l);
  }
  return s;
}

std::unique_ptr<CausalLM> load_llama(const LoadContext& ctx) {
  LlamaVariant v;
  v.attention_bias_key = true;
  v.mlp_bias_key = true;
  return load_decoder(ctx, llama_spec(ctx.config, v));
}

std::unique_ptr<CausalLM> load_qwen2(const LoadContext& ctx) {
  LlamaVariant v;
  v.qkv_bias_always = true;
  v.default_vocab_size = 151936;
  v.default_max_position_embeddings = 32768;
  return load_decoder(ctx, llama_spec(ctx.config, v));
}

LlamaVariant qwen3_variant() {
  LlamaVariant v;
  v.attention_bias_key = true;
  v.qk_norm = true;
  v.default_head_dim = 128;
  v.default_vocab_size = 151936;
  v.default_max_position_embeddings = 32768;
  return v;
}

std::unique_ptr<CausalLM> load_qwen3(const LoadContext& ctx) {
  return load_decoder(ctx, llama_spec(ctx.config, qwen3_variant()));
}

}  // namespace hubzoo
