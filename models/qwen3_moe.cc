// Qwen3-MoE: Qwen3's attention (q/k norm) with sparse mixture-of-experts MLPs
// (layers/moe.h, MoeKind::kReplacesMlp) on the layers the config picks; the
// others keep a dense gated MLP of intermediate_size. head_dim defaults to hidden / heads here
// (Qwen3MoeConfig has no head_dim field of its own).
#include <algorithm>
#include <string>

#include "base/error.h"
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {

SparseLayers parse_qwen3_moe_layers(const JsonObject& c, int64_t hidden_size, int64_t num_layers,
                                    const MoeDefaults& defaults) {
  auto field = [&](const std::string& key, int64_t fallback, int64_t lowest) {
    const int64_t x = c.get_or<int64_t>(key, fallback);
    if (x < lowest) {
      throw ConfigError(c.where() + ": field '" + key + "' must be >= " + std::to_string(lowest) +
                        ", got " + std::to_string(x));
    }
    return x;
  };
  // transformers writes num_experts as num_local_experts (Qwen3MoeConfig.attribute_map);
  // Hub configs carry num_experts.
  int64_t num_experts = field("num_experts", defaults.num_experts, 0);
  if (defaults.num_local_experts_alias && c.has("num_local_experts")) {
    const int64_t local = field("num_local_experts", defaults.num_experts, 0);
    if (c.has("num_experts") && local != num_experts) {
      throw ConfigError(c.where() + ": fields 'num_experts' (" + std::to_string(num_experts) +
                        ") and 'num_local_experts' (" + std::to_string(local) + ") differ");
    }
    num_experts = local;
  }
  const int64_t sparse_step = field("decoder_sparse_step", 1, 1);
  const auto mlp_only = c.get_or<std::vector<int64_t>>("mlp_only_layers", {});

  SparseLayers out;
  out.sparse.assign(num_layers, false);
  for (int64_t i = 0; i < num_layers; ++i) {
    // transformers: sparse unless listed in mlp_only_layers, when num_experts > 0
    // and (i + 1) % decoder_sparse_step == 0.
    const bool listed = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    out.sparse[i] = !listed && num_experts > 0 && (i + 1) % sparse_step == 0;
  }
  if (std::find(out.sparse.begin(), out.sparse.end(), true) == out.sparse.end()) return out;

  MoeOptions& o = out.moe;
  o.hidden_size = hidden_size;
  o.num_experts = num_experts;
  o.num_experts_per_tok = field("num_experts_per_tok", defaults.num_experts_per_tok, 1);
  if (o.num_experts_per_tok > num_experts) {
    throw ConfigError(c.where() + ": field 'num_experts_per_tok' (" +
                      std::to_string(o.num_experts_per_tok) + ") exceeds num_experts (" +
                      std::to_string(num_experts) + ")");
  }
  o.moe_intermediate_size = field("moe_intermediate_size", defaults.moe_intermediate_size, 1);
  o.norm_topk_prob = c.get_or<bool>("norm_topk_prob", false);
  // router_aux_loss_coef and output_router_logits only shape the training loss.
  return out;
}

std::unique_ptr<CausalLM> load_qwen3_moe(const LoadContext& ctx) {
  LlamaVariant v = qwen3_variant();
  v.default_head_dim = 0;  // Qwen3MoeConfig: hidden_size / num_attention_heads
  v.sparse_moe = true;
  return load_decoder(ctx, llama_spec(ctx.config, v));
}

}  // namespace hubzoo
