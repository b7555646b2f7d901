// Llama and the families that differ from it only in options (Qwen2, Qwen3,
// Qwen3-MoE): what differs is declared in LlamaVariant, and llama_spec maps
// config.json onto the decoder's spec (models/decoder.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/moe.h"
#include "models/decoder.h"

namespace hubzoo {

struct LlamaVariant {
  bool qkv_bias_always = false;     // Qwen2: q/k/v projections always carry a bias
  bool attention_bias_key = false;  // config `attention_bias` adds bias to q/k/v/o
  bool mlp_bias_key = false;        // config `mlp_bias` adds bias to gate/up/down
  bool qk_norm = false;             // Qwen3: RMSNorm over head_dim of q and k
  int64_t default_head_dim = 0;     // 0: hidden_size / num_attention_heads
  int64_t default_vocab_size = 32000;
  int64_t default_max_position_embeddings = 2048;
  bool sparse_moe = false;  // Qwen3-MoE: sparse MoE MLPs on the layers the config picks
  // The family maps sliding windows onto the layers itself (Mistral, Phi-3,
  // SmolLM3): llama_spec leaves them full instead of refusing a window.
  bool family_windows = false;
  RopeParseOptions rope;  // partial rotary, longrope (Phi-3)
};

// Which layers are sparse MoE blocks (the rest are dense GatedMlps), and their options.
struct SparseLayers {
  MoeOptions moe;
  std::vector<bool> sparse;  // [num_hidden_layers]
};

// The config classes' defaults of the MoE fields (Qwen3MoeConfig's here).
struct MoeDefaults {
  int64_t num_experts = 128, num_experts_per_tok = 8, moe_intermediate_size = 768;
  bool num_local_experts_alias = true;  // Qwen3MoeConfig.attribute_map; Qwen2MoeConfig has none
};

// Qwen3-MoE's MoE fields of config.json (models/qwen3_moe.cc); Qwen2-MoE reads
// the same fields with its own defaults.
SparseLayers parse_qwen3_moe_layers(const JsonObject& config, int64_t hidden_size,
                                    int64_t num_layers, const MoeDefaults& defaults = {});

// Qwen3's variant (models/llama.cc), which Qwen3-MoE starts from.
LlamaVariant qwen3_variant();

// LlamaConfig (and the variant's) fields as the decoder's spec.
DecoderSpec llama_spec(const JsonObject& config, const LlamaVariant& variant);

}  // namespace hubzoo
