// Gemma 2, Gemma 3 and Gemma 4 (text): what their config.json declares, as
// models/gemma.cc and models/gemma4.cc map it onto the decoder.
#pragma once

#include <string>
#include <vector>

#include "io/json.h"
#include "layers/attention.h"
#include "layers/moe.h"
#include "layers/numerics.h"
#include "layers/rope.h"
#include "models/config_fields.h"
#include "models/decoder.h"

namespace hubzoo {

// What Gemma 2, 3 and 4 configs share.
struct GemmaCommonConfig {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = true;
  float final_logit_softcapping = 0.0f;  // 0: none
  int64_t sliding_window = 0;
  RopeParams rope_full, rope_sliding;
};

// The decoder spec every Gemma shares: sandwich norms of `norm_kind`,
// embeddings scaled by sqrt(hidden_size), final softcap, RoPE per layer type
// (models/gemma.cc). The family adds its layers.
DecoderSpec gemma_common_spec(const GemmaCommonConfig& cfg, NormKind norm_kind);

struct GemmaConfig : GemmaCommonConfig {
  int generation = 2;  // 2 or 3
  int64_t intermediate_size = 0;
  std::vector<LayerType> layer_types;  // one per layer
  AttentionOptions attn;               // window is set per layer from layer_types
  // use_bidirectional_attention (Gemma 3, EmbeddingGemma): every layer attends
  // both ways, a sliding one within sliding_window // 2 + 1 (exclusive) of the
  // row, as Gemma3TextConfig converts it; an encoder only.
  bool bidirectional = false;
};

// The decoder spec of a Gemma 2 / Gemma 3 text config (models/gemma.cc).
DecoderSpec gemma_decoder_spec(const GemmaConfig& cfg);

// Gemma2Config / Gemma3TextConfig as transformers 5.23 reads them (defaults,
// layer_types or the sliding-window pattern, per-layer-type RoPE in either
// spelling). Options that would change the math and are not implemented are
// a ConfigError naming the field.
GemmaConfig parse_gemma_config(const JsonObject& c, int generation);

}  // namespace hubzoo

namespace hubzoo {

// Gemma 4 text (Gemma4TextConfig): one entry per decoder layer.
struct Gemma4Layer {
  LayerType type = LayerType::kFull;
  int64_t head_dim = 0, num_kv_heads = 0;
  int64_t intermediate_size = 0;  // doubled on KV-shared layers with use_double_wide_mlp
  bool k_eq_v = false;            // attention_k_eq_v on a full layer: no v_proj
  int64_t kv_producer = -1;       // >= 0: a KV-shared layer reusing that layer's keys/values
};

struct Gemma4Config : GemmaCommonConfig {
  int64_t num_heads = 0;
  bool attention_bias = false;
  std::vector<Gemma4Layer> layers;
  // Per-layer embeddings (PLE); hidden_size_per_layer_input 0: none.
  int64_t hidden_size_per_layer_input = 0, vocab_size_per_layer_input = 0;
  int64_t head_dim_full = 0, head_dim_sliding = 0;
  // enable_moe_block: every layer adds a sparse MoE branch to its dense MLP.
  bool moe = false;
  MoeOptions moe_options;
};

// Gemma4TextConfig as transformers 5.23 reads it: per_layer_config or
// global_head_dim / num_global_key_value_heads, kv_sharing from
// num_kv_shared_layers, per-layer-type RoPE (default, proportional, ...).
// enable_moe_block (num_experts, top_k_experts, moe_intermediate_size);
// use_bidirectional_attention "vision" is causal for text and accepted,
// "all" (bidirectional everywhere) is a ConfigError.
Gemma4Config parse_gemma4_config(const JsonObject& c);

// The decoder spec of a Gemma 4 text config (models/gemma4.cc).
DecoderSpec gemma4_decoder_spec(const Gemma4Config& cfg);

}  // namespace hubzoo
