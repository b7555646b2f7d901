// Gemma 2 and Gemma 3 (text): what their config.json declares, as the
// decoder in models/gemma.cc needs it, and helpers Gemma 4 shares.
#pragma once

#include <string>
#include <vector>

#include "io/json.h"
#include "layers/attention.h"
#include "layers/moe.h"
#include "layers/numerics.h"
#include "layers/rope.h"

namespace hubzoo {

enum class LayerType { kSliding, kFull };

struct GemmaConfig {
  int generation = 2;  // 2 or 3
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = true;
  float final_logit_softcapping = 0.0f;  // 0: none
  int64_t sliding_window = 0;
  std::vector<LayerType> layer_types;  // one per layer
  AttentionOptions attn;               // window is set per layer from layer_types
  RopeParams rope_full, rope_sliding;
};

// Gemma2Config / Gemma3TextConfig as transformers 5.23 reads them (defaults,
// layer_types or the sliding-window pattern, per-layer-type RoPE in either
// spelling). Options that would change the math and are not implemented are
// a ConfigError naming the field.
GemmaConfig parse_gemma_config(const JsonObject& c, int generation);

// Per layer: "sliding_attention" | "full_attention" from `layer_types`, each
// entry checked; ConfigError naming the field otherwise.
std::vector<LayerType> parse_layer_types(const JsonObject& c, int64_t num_layers);

// A positive sliding_window, or ConfigError naming it.
int64_t parse_sliding_window(const JsonObject& c, int64_t fallback);

// sqrt(hidden_size) as transformers multiplies the embedding by it: a float32
// tensor cast to the weights' dtype (bf16 in both bf16 modes: 55.4256 -> 55.5).
float gemma_embed_scale(int64_t hidden_size, const Numerics& numerics);

// logits -> tanh(logits / cap) * cap in place (cap > 0), rounding each op as
// transformers' bf16 eager code does.
void softcap_logits(float* logits, int64_t n, float cap, const Numerics& numerics);

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

struct Gemma4Config {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, max_position_embeddings = 0;
  int64_t num_heads = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = true;
  bool attention_bias = false;
  float final_logit_softcapping = 0.0f;
  int64_t sliding_window = 0;
  std::vector<Gemma4Layer> layers;
  // Per-layer embeddings (PLE); hidden_size_per_layer_input 0: none.
  int64_t hidden_size_per_layer_input = 0, vocab_size_per_layer_input = 0;
  RopeParams rope_full, rope_sliding;
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

}  // namespace hubzoo
