// The Llama decoder, which Qwen2 and Qwen3 extend: what differs between the
// three is declared in LlamaVariant, so one forward pass serves all of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/moe.h"
#include "models/causal_lm.h"

namespace hubzoo {

struct LlamaVariant {
  bool qkv_bias_always = false;      // Qwen2: q/k/v projections always carry a bias
  bool attention_bias_key = false;   // config `attention_bias` adds bias to q/k/v/o
  bool mlp_bias_key = false;         // config `mlp_bias` adds bias to gate/up/down
  bool qk_norm = false;              // Qwen3: RMSNorm over head_dim of q and k
  bool sliding_window_keys = false;  // config has use_sliding_window / layer_types
  int64_t default_head_dim = 0;      // 0: hidden_size / num_attention_heads
  int64_t default_vocab_size = 32000;
  int64_t default_max_position_embeddings = 2048;
  bool sparse_moe = false;  // Qwen3-MoE: sparse MoE MLPs on the layers the config picks
};

// Which layers are sparse MoE blocks (the rest are dense GatedMlps), and their options.
struct SparseLayers {
  MoeOptions moe;
  std::vector<bool> sparse;  // [num_hidden_layers]
};

// Qwen3-MoE's MoE fields of config.json (models/qwen3_moe.cc).
SparseLayers parse_qwen3_moe_layers(const JsonObject& config, int64_t hidden_size,
                                    int64_t num_layers);

std::unique_ptr<CausalLM> load_llama_variant(const LoadContext& ctx, const LlamaVariant& variant);

}  // namespace hubzoo
