// Gemma 2 and Gemma 3 (text) on the decoder (models/decoder.h); the config
// mapping is models/gemma_config.cc. What differs from Llama: (1 + w) RMSNorms
// in fp32, sandwich norms around attention and MLP, the embedding scaled by
// sqrt(hidden_size), GELU-tanh, query_pre_attn_scalar, softcapping (attention
// logits: Gemma 2; final logits: either, when the config says so), q/k norms
// (Gemma 3), and interleaved sliding-window / global layers, each type with
// its own RoPE; a sliding layer's KV cache holds only its window.
#include "models/gemma.h"
#include "base/error.h"
#include "models/decoder.h"
#include "models/families.h"

namespace hubzoo {

DecoderSpec gemma_decoder_spec(const GemmaConfig& cfg) {
  DecoderSpec s = gemma_common_spec(cfg, NormKind::kUnitOffset);  // (1 + w) in fp32
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const bool sliding = cfg.layer_types[i] == LayerType::kSliding;
    LayerSpec l;
    l.attn = cfg.attn;
    l.attn.window = sliding ? cfg.sliding_window : 0;
    // Bidirectional: |q - k| < sliding_window // 2 + 1 (Gemma3TextConfig.__post_init__).
    l.attn.bidirectional = cfg.bidirectional;
    if (sliding && cfg.bidirectional) l.attn.window = cfg.sliding_window / 2 + 1;
    l.rope = sliding ? RopeKind::kSliding : RopeKind::kFull;
    l.intermediate_size = cfg.intermediate_size;
    l.activation = Activation::kGeluTanh;
    s.layers.push_back(l);
  }
  return s;
}

DecoderSpec gemma_common_spec(const GemmaCommonConfig& cfg, NormKind norm_kind) {
  DecoderSpec s;
  s.vocab_size = cfg.vocab_size;
  s.hidden_size = cfg.hidden_size;
  s.max_position_embeddings = cfg.max_position_embeddings;
  s.norm_kind = norm_kind;
  s.rms_norm_eps = cfg.rms_norm_eps;
  s.norm_placement = NormPlacement::kSandwich;
  s.tie_word_embeddings = cfg.tie_word_embeddings;
  s.scale_embeddings = true;
  s.final_logit_softcapping = cfg.final_logit_softcapping;
  s.rope_full = cfg.rope_full;
  s.rope_sliding = cfg.rope_sliding;
  s.blocked_key_cache = true;  // where scores have no softcap (Gemma 3, 4)
  return s;
}

std::unique_ptr<CausalLM> load_gemma2(const LoadContext& ctx) {
  return load_decoder(ctx, gemma_decoder_spec(parse_gemma_config(ctx.config, 2)));
}

std::unique_ptr<CausalLM> load_gemma3_text(const LoadContext& ctx) {
  const GemmaConfig cfg = parse_gemma_config(ctx.config, 3);
  if (cfg.bidirectional && ctx.needs_lm_head) {
    throw ConfigError(ctx.config.where() +
                      ": use_bidirectional_attention true makes an encoder (EmbeddingGemma), "
                      "not a causal LM; load it as an encoder (hubzoo embed, hubzoo.Embedder)");
  }
  return load_decoder(ctx, gemma_decoder_spec(cfg));
}

}  // namespace hubzoo
