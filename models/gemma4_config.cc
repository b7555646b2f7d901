// Gemma 4 text config mapping (transformers 5.23 configuration_gemma4.py,
// Gemma4TextConfig; modeling_gemma4.py for what each field changes).
#include <string>

#include "base/error.h"
#include "models/config_fields.h"
#include "models/gemma.h"
#include "models/model_info.h"

namespace hubzoo {
namespace {

RopeParams rope_of(const JsonObject& c, LayerType t) {
  nlohmann::json rope;
  if (!c.has("rope_parameters")) {  // Gemma4TextConfig's defaults
    rope = t == LayerType::kSliding
               ? nlohmann::json{{"rope_type", "default"}, {"rope_theta", 10000.0}}
               : nlohmann::json{{"rope_type", "proportional"},
                                {"partial_rotary_factor", 0.25},
                                {"rope_theta", 1000000.0}};
  } else {
    const JsonObject r = *c.object("rope_parameters");
    for (const auto& [key, value] : r.json().items()) {
      if (key != "full_attention" && key != "sliding_attention") {
        throw ConfigError(c.where() + ": rope_parameters key '" + key +
                          "' is not a layer type (full_attention, sliding_attention)");
      }
    }
    if (!r.has(layer_type_name(t))) {
      throw ConfigError(c.where() + ": rope_parameters has no entry for " + layer_type_name(t));
    }
    rope = r.json()[layer_type_name(t)];
  }
  nlohmann::json j = c.json();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("partial_rotary_factor");
  j["rope_parameters"] = std::move(rope);
  return parse_rope_params(
      JsonObject(j, c.where() + " (rope_parameters." + layer_type_name(t) + ")"));
}

// enable_moe_block: num_experts, top_k_experts and moe_intermediate_size
// (Gemma4TextConfig has no defaults for them: every field must be set).
void parse_moe_block(const JsonObject& c, Gemma4Config& cfg) {
  if (!c.get_or<bool>("enable_moe_block", false)) return;
  auto moe_field = [&](const char* key) { return required_positive(c, key, "enable_moe_block"); };
  cfg.moe = true;
  MoeOptions& o = cfg.moe_options;
  o.hidden_size = cfg.hidden_size;
  o.num_experts = moe_field("num_experts");
  o.num_experts_per_tok = moe_field("top_k_experts");
  o.moe_intermediate_size = moe_field("moe_intermediate_size");
  if (o.num_experts_per_tok > o.num_experts) {
    throw ConfigError(c.where() + ": field 'top_k_experts' (" +
                      std::to_string(o.num_experts_per_tok) + ") exceeds num_experts (" +
                      std::to_string(o.num_experts) + ")");
  }
  o.norm_topk_prob = true;
  o.router = MoeRouter::kGemma4;
  o.activation = Activation::kGeluTanh;
  o.rms_norm_eps = cfg.rms_norm_eps;
}

// Per-layer embeddings: hidden_size_per_layer_input (0: none) and their vocabulary.
void parse_per_layer_inputs(const JsonObject& c, Gemma4Config& cfg) {
  cfg.hidden_size_per_layer_input = c.get_or<int64_t>("hidden_size_per_layer_input", 256);
  if (cfg.hidden_size_per_layer_input < 0) {
    throw ConfigError(c.where() + ": field 'hidden_size_per_layer_input' must be >= 0");
  }
  if (cfg.hidden_size_per_layer_input > 0) {
    cfg.vocab_size_per_layer_input = positive(c, "vocab_size_per_layer_input", 262144);
  }
}

// Layer types: the config's, or 5 sliding : 1 full; the last is forced to
// full_attention, as Gemma4TextConfig.__post_init__ does. The window when any slides.
std::vector<LayerType> parse_gemma4_layer_types(const JsonObject& c, Gemma4Config& cfg) {
  std::vector<LayerType> types;
  if (c.has("layer_types")) {
    types = parse_layer_types(c, cfg.num_layers);
  } else {
    for (int64_t i = 0; i < cfg.num_layers; ++i) {
      types.push_back((i + 1) % 6 ? LayerType::kSliding : LayerType::kFull);
    }
  }
  types.back() = LayerType::kFull;
  bool any_sliding = false;
  for (auto t : types) any_sliding |= t == LayerType::kSliding;
  if (any_sliding) cfg.sliding_window = parse_sliding_window(c, 512);
  return types;
}

// per_layer_config {index: {head_dim, num_key_value_heads}} as transformers 5 saves it.
void parse_per_layer_config(const JsonObject& c, Gemma4Config& cfg) {
  const JsonObject plc = *c.object("per_layer_config");
  for (const auto& [key, value] : plc.json().items()) {
    int64_t index = -1;
    try {
      index = std::stoll(key);
    } catch (const std::exception&) {
    }
    if (index < 0 || index >= cfg.num_layers || std::to_string(index) != key) {
      throw ConfigError(c.where() + ": per_layer_config key '" + key + "' is not a layer index");
    }
    const JsonObject entry(value, c.where() + " per_layer_config." + key);
    for (const auto& [field, _] : value.items()) {
      if (field != "head_dim" && field != "num_key_value_heads") {
        throw ConfigError(c.where() + ": per_layer_config." + key + " field '" + field +
                          "' is not supported (head_dim, num_key_value_heads)");
      }
    }
    Gemma4Layer& l = cfg.layers[index];
    l.head_dim = positive(entry, "head_dim", l.head_dim);
    l.num_kv_heads = positive(entry, "num_key_value_heads", l.num_kv_heads);
  }
}

// Per-layer head geometry: per_layer_config, else global_head_dim (512) on
// full layers and num_global_key_value_heads there when attention_k_eq_v.
void parse_head_geometry(const JsonObject& c, Gemma4Config& cfg, bool k_eq_v) {
  if (c.has("per_layer_config")) {
    parse_per_layer_config(c, cfg);
    return;
  }
  const int64_t global_head_dim = positive(c, "global_head_dim", 512);
  const auto global_kv = c.maybe<int64_t>("num_global_key_value_heads");
  for (auto& l : cfg.layers) {
    if (l.type != LayerType::kFull) continue;
    l.head_dim = global_head_dim;
    if (k_eq_v && global_kv) {
      if (*global_kv <= 0) {
        throw ConfigError(c.where() + ": field 'num_global_key_value_heads' must be positive");
      }
      l.num_kv_heads = *global_kv;
    }
  }
}

// Every layer's head_dim even and <= 1024, its KV heads dividing the query
// heads, and one head_dim per layer type (RoPE is per layer type).
void check_layer_geometry(const JsonObject& c, Gemma4Config& cfg) {
  for (auto& l : cfg.layers) {
    if (l.head_dim % 2 != 0 || l.head_dim > 1024) {
      throw ConfigError(c.where() + ": head_dim " + std::to_string(l.head_dim) +
                        " is not supported (must be even and <= 1024)");
    }
    if (cfg.num_heads % l.num_kv_heads != 0) {
      throw ConfigError(c.where() + ": num_attention_heads (" + std::to_string(cfg.num_heads) +
                        ") is not a multiple of a layer's num_key_value_heads (" +
                        std::to_string(l.num_kv_heads) + ")");
    }
    int64_t& type_dim = l.type == LayerType::kFull ? cfg.head_dim_full : cfg.head_dim_sliding;
    if (type_dim != 0 && type_dim != l.head_dim) {
      throw ConfigError(c.where() +
                        ": layers of one type with different head_dim (RoPE is per "
                        "layer type) are not supported");
    }
    type_dim = l.head_dim;
  }
}

// KV sharing: the last num_kv_shared_layers layers reuse the keys/values of
// the last earlier layer of their type (Gemma4TextConfig.kv_sharing_modes),
// with double-wide MLPs when use_double_wide_mlp.
void parse_kv_sharing(const JsonObject& c, Gemma4Config& cfg) {
  const int64_t shared = c.get_or<int64_t>("num_kv_shared_layers", 0);
  if (shared < 0 || shared >= cfg.num_layers) {
    throw ConfigError(c.where() + ": field 'num_kv_shared_layers' must be in [0, " +
                      std::to_string(cfg.num_layers) + ")");
  }
  const bool double_wide = c.get_or<bool>("use_double_wide_mlp", false);
  const int64_t first_shared = cfg.num_layers - shared;
  for (int64_t i = first_shared; i < cfg.num_layers; ++i) {
    auto& l = cfg.layers[i];
    for (int64_t j = first_shared - 1; j >= 0; --j) {
      if (cfg.layers[j].type == l.type) {
        l.kv_producer = j;
        break;
      }
    }
    if (l.kv_producer < 0) {
      throw ConfigError(c.where() + ": num_kv_shared_layers: no earlier " +
                        layer_type_name(l.type) + " layer produces the keys/values layer " +
                        std::to_string(i) + " reuses");
    }
    const auto& p = cfg.layers[l.kv_producer];
    l.head_dim = p.head_dim;
    l.num_kv_heads = p.num_kv_heads;
    if (double_wide) l.intermediate_size *= 2;
  }
}

// use_bidirectional_attention "vision": image tokens attend to each other
// both ways (Gemma4Model's mask); text-only input stays causal, as
// Gemma4ForCausalLM always is. "all" makes every layer bidirectional with a
// halved window: not a causal LM.
void reject_bidirectional(const JsonObject& c) {
  if (!c.has("use_bidirectional_attention") || c.json()["use_bidirectional_attention"].is_null()) {
    return;
  }
  const auto bidir = c.get<std::string>("use_bidirectional_attention");
  if (bidir != "vision") {
    throw ConfigError(c.where() + ": use_bidirectional_attention '" + bidir +
                      "' is not supported (only null or 'vision', causal for text)");
  }
}

}  // namespace

Gemma4Config parse_gemma4_config(const JsonObject& c) {
  reject_unsupported_common_options(c);
  Gemma4Config cfg;
  cfg.vocab_size = positive(c, "vocab_size", 262144);
  cfg.hidden_size = positive(c, "hidden_size", 2304);
  const int64_t intermediate = positive(c, "intermediate_size", 9216);
  cfg.num_layers = layer_count(c, 30);
  cfg.max_position_embeddings = positive(c, "max_position_embeddings", 131072);
  cfg.num_heads = positive(c, "num_attention_heads", 8);
  const int64_t kv_heads = positive(c, "num_key_value_heads", 4);
  const int64_t head_dim = positive(c, "head_dim", 256);
  cfg.rms_norm_eps = static_cast<float>(c.get_or<double>("rms_norm_eps", 1e-6));
  cfg.tie_word_embeddings = c.get_or<bool>("tie_word_embeddings", true);
  cfg.attention_bias = c.get_or<bool>("attention_bias", false);
  require_activation(c, "hidden_activation", "gelu_pytorch_tanh");
  reject_bidirectional(c);
  parse_moe_block(c, cfg);
  cfg.final_logit_softcapping = softcap_field(c, "final_logit_softcapping");
  parse_per_layer_inputs(c, cfg);

  const std::vector<LayerType> types = parse_gemma4_layer_types(c, cfg);
  const bool k_eq_v = c.get_or<bool>("attention_k_eq_v", false);
  cfg.layers.resize(cfg.num_layers);
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    auto& l = cfg.layers[i];
    l.type = types[i];
    l.head_dim = head_dim;
    l.num_kv_heads = kv_heads;
    l.intermediate_size = intermediate;
    l.k_eq_v = k_eq_v && l.type == LayerType::kFull;
  }
  parse_head_geometry(c, cfg, k_eq_v);
  check_layer_geometry(c, cfg);
  parse_kv_sharing(c, cfg);
  if (cfg.head_dim_full) cfg.rope_full = rope_of(c, LayerType::kFull);
  if (cfg.head_dim_sliding) cfg.rope_sliding = rope_of(c, LayerType::kSliding);
  return cfg;
}

}  // namespace hubzoo
