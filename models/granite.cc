// Granite (GraniteForCausalLM): Llama with four multipliers from config.json,
// each applied where transformers applies it (models/decoder.h):
//   embedding_multiplier: inputs_embeds * m, after embed_tokens;
//   residual_multiplier:  x = residual + branch * m, for attention and the MLP;
//   attention_multiplier: the attention score scale, in place of head_dim^-0.5;
//   logits_scaling:       logits / s.
// Each must be a finite number > 0 (1 when absent, as GraniteConfig's defaults).
#include <cmath>
#include <string>

#include "base/error.h"
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {
namespace {

float multiplier(const JsonObject& c, const char* key) {
  const double x = c.get_or<double>(key, 1.0);
  const auto f = static_cast<float>(x);
  if (!(x > 0) || !std::isfinite(f) || f == 0.0f) {
    throw ConfigError(c.where() + ": field '" + key +
                      "' must be a finite number > 0 (as a float32), got " + std::to_string(x));
  }
  return f;
}

}  // namespace

std::unique_ptr<CausalLM> load_granite(const LoadContext& ctx) {
  const JsonObject& c = ctx.config;
  LlamaVariant v;
  v.attention_bias_key = true;
  v.mlp_bias_key = true;
  DecoderSpec s = llama_spec(c, v);
  s.embedding_multiplier = multiplier(c, "embedding_multiplier");
  s.residual_multiplier = multiplier(c, "residual_multiplier");
  s.logits_scaling = multiplier(c, "logits_scaling");
  const float attention_multiplier = multiplier(c, "attention_multiplier");
  for (LayerSpec& l : s.layers) l.attn.scale = attention_multiplier;
  return load_decoder(ctx, s);
}

}  // namespace hubzoo
