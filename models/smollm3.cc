// SmolLM3: Llama's layers, but layer i applies no RoPE where
// no_rope_layers[i] == 0 (by default every no_rope_layer_interval-th layer,
// 4), attention_bias and mlp_bias as Llama, tied embeddings by default.
// Layers that layer_types calls sliding_attention attend within
// `sliding_window` (transformers derives them, when use_sliding_window, as the
// layers without RoPE).
#include "base/error.h"
#include "models/config_fields.h"
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {
namespace {

// no_rope_layers: one 0/1 per layer (1: RoPE), or every interval-th layer 0.
std::vector<bool> parse_rope_layers(const JsonObject& c, int64_t num_layers) {
  std::vector<bool> rope;
  if (c.has("no_rope_layers")) {
    const auto flags = c.get<std::vector<int64_t>>("no_rope_layers");
    if (static_cast<int64_t>(flags.size()) != num_layers) {
      throw ConfigError(c.where() + ": no_rope_layers has " + std::to_string(flags.size()) +
                        " entries for num_hidden_layers " + std::to_string(num_layers));
    }
    for (int64_t f : flags) {
      if (f != 0 && f != 1)
        throw ConfigError(c.where() + ": no_rope_layers entries must be 0 or 1");
      rope.push_back(f == 1);
    }
    return rope;
  }
  const int64_t interval = positive(c, "no_rope_layer_interval", 4);
  for (int64_t i = 0; i < num_layers; ++i) rope.push_back((i + 1) % interval != 0);
  return rope;
}

// Per layer: the window, or 0 (full attention).
std::vector<int64_t> parse_windows(const JsonObject& c, const std::vector<bool>& rope) {
  const auto n = static_cast<int64_t>(rope.size());
  std::vector<LayerType> types;
  if (c.has("layer_types")) {
    types = parse_layer_types(c, n);
  } else {
    const bool sliding = c.get_or<bool>("use_sliding_window", false) && c.has("sliding_window");
    for (int64_t i = 0; i < n; ++i) {
      types.push_back(sliding && !rope[i] ? LayerType::kSliding : LayerType::kFull);
    }
  }
  std::vector<int64_t> windows;
  for (LayerType t : types) {
    // transformers masks a sliding layer with config.sliding_window.
    windows.push_back(t == LayerType::kSliding
                          ? required_positive(c, "sliding_window", "a sliding_attention layer")
                          : 0);
  }
  return windows;
}

}  // namespace

std::unique_ptr<CausalLM> load_smollm3(const LoadContext& ctx) {
  const JsonObject& c = ctx.config;
  LlamaVariant v;
  v.attention_bias_key = true;
  v.mlp_bias_key = true;
  v.family_windows = true;
  v.default_vocab_size = 128256;
  v.default_max_position_embeddings = 32768;
  DecoderSpec s = llama_spec(c, v);
  s.tie_word_embeddings = c.get_or<bool>("tie_word_embeddings", true);
  const auto rope_params = c.object("rope_parameters");
  if (!c.has("rope_theta") && !(rope_params && rope_params->has("rope_theta"))) {
    s.rope_full.theta = 2000000.0;  // SmolLM3Config.default_theta
  }
  const auto n = static_cast<int64_t>(s.layers.size());
  const std::vector<bool> rope = parse_rope_layers(c, n);
  const std::vector<int64_t> windows = parse_windows(c, rope);
  for (int64_t i = 0; i < n; ++i) {
    s.layers[i].rope = rope[i] ? RopeKind::kFull : RopeKind::kNone;
    s.layers[i].attn.window = windows[i];
  }
  return load_decoder(ctx, s);
}

}  // namespace hubzoo
