// Qwen2-MoE (Qwen2MoeForCausalLM): Qwen2's attention (q/k/v biases unless
// `qkv_bias` is false, none on o_proj) with sparse MoE blocks
// (MoeKind::kReplacesMlp) on the layers decoder_sparse_step and
// mlp_only_layers pick, as Qwen3-MoE's, each with a shared expert of
// shared_expert_intermediate_size weighted by its sigmoid shared_expert_gate
// (layers/moe.h); the other layers keep a dense MLP of intermediate_size.
// Qwen2MoeConfig's defaults: 60 experts, top 4, width 1408, shared width 5632;
// `num_local_experts` is no alias of num_experts here (no attribute_map).
#include <string>

#include "base/error.h"
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {

std::unique_ptr<CausalLM> load_qwen2_moe(const LoadContext& ctx) {
  const JsonObject& c = ctx.config;
  LlamaVariant v;
  v.default_vocab_size = 151936;
  v.default_max_position_embeddings = 32768;
  v.default_head_dim = 0;  // hidden_size / num_attention_heads
  DecoderSpec s = llama_spec(c, v);
  const bool qkv_bias = c.get_or<bool>("qkv_bias", true);

  MoeDefaults defaults;
  defaults.num_experts = 60;
  defaults.num_experts_per_tok = 4;
  defaults.moe_intermediate_size = 1408;
  defaults.num_local_experts_alias = false;
  const int64_t num_layers = static_cast<int64_t>(s.layers.size());
  const SparseLayers moe = parse_qwen3_moe_layers(c, s.hidden_size, num_layers, defaults);
  s.moe = moe.moe;
  const bool any_sparse = s.moe.num_experts > 0;
  if (any_sparse) {
    // Qwen2MoeSparseMoeBlock always builds its shared expert.
    const int64_t shared = c.get_or<int64_t>("shared_expert_intermediate_size", 5632);
    if (shared < 1) {
      throw ConfigError(c.where() + ": field 'shared_expert_intermediate_size' must be >= 1, got " +
                        std::to_string(shared));
    }
    s.moe.shared_expert_intermediate_size = shared;
  }
  for (int64_t i = 0; i < num_layers; ++i) {
    LayerSpec& l = s.layers[i];
    l.attn.qkv_bias = qkv_bias;
    l.attn.o_bias = false;
    if (moe.sparse[i]) l.moe = MoeKind::kReplacesMlp;
  }
  return load_decoder(ctx, s);
}

}  // namespace hubzoo
