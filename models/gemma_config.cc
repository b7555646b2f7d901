// Gemma 2 / Gemma 3 text config mapping (transformers 5.23
// configuration_gemma2.py, configuration_gemma3.py).
#include <cmath>

#include "base/error.h"
#include "models/config_fields.h"
#include "models/gemma.h"
#include "models/model_info.h"
#include "ops/bf16.h"

namespace hubzoo {
namespace {

// RoPE of one layer type from a rope dict, through the common parser.
RopeParams rope_from(const JsonObject& c, nlohmann::json rope, const std::string& what) {
  nlohmann::json j = c.json();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = std::move(rope);
  return parse_rope_params(JsonObject(j, c.where() + " (" + what + ")"));
}

// Gemma 3: rope_parameters {full_attention: {...}, sliding_attention: {...}}
// (transformers 5), or rope_theta + rope_scaling for full layers and
// rope_local_base_freq for sliding ones (transformers 4). A missing theta is
// 1e6 (full) / 1e4 (sliding), as Gemma3TextConfig.convert_rope_params_to_dict.
void parse_gemma3_rope(const JsonObject& c, GemmaConfig& cfg) {
  nlohmann::json full = {{"rope_type", "default"}}, sliding = {{"rope_type", "default"}};
  if (c.has("rope_parameters")) {
    const JsonObject r = *c.object("rope_parameters");
    for (const auto& [key, value] : r.json().items()) {
      if (key != "full_attention" && key != "sliding_attention") {
        throw ConfigError(c.where() + ": rope_parameters key '" + key +
                          "' is not a layer type (Gemma 3 takes full_attention and "
                          "sliding_attention)");
      }
      if (!value.is_null() && !value.is_object()) {
        throw ConfigError(c.where() + ": rope_parameters." + key + " must be an object");
      }
    }
    if (r.has("full_attention")) full = r.json()["full_attention"];
    if (r.has("sliding_attention")) sliding = r.json()["sliding_attention"];
    if (!full.contains("rope_theta")) full["rope_theta"] = 1e6;
    if (!sliding.contains("rope_theta")) sliding["rope_theta"] = 1e4;
  } else {
    if (auto scaling = c.object("rope_scaling")) full.update(scaling->json());
    full["rope_theta"] = c.get_or<double>("rope_theta", 1e6);
    sliding["rope_theta"] = c.get_or<double>("rope_local_base_freq", 1e4);
  }
  cfg.rope_full = rope_from(c, full, "rope_parameters.full_attention");
  cfg.rope_sliding = rope_from(c, sliding, "rope_parameters.sliding_attention");
}

// Attention of every layer (the window is set per layer type): heads, scale
// query_pre_attn_scalar^-0.5, q/k norms (Gemma 3), logit softcap (Gemma 2).
void parse_gemma_attention(const JsonObject& c, GemmaConfig& cfg, bool g3) {
  auto& a = cfg.attn;
  a.hidden_size = cfg.hidden_size;
  a.num_heads = positive(c, "num_attention_heads", 8);
  a.num_kv_heads = positive(c, "num_key_value_heads", 4);
  a.head_dim = positive(c, "head_dim", 256);
  check_head_geometry(c, a.num_heads, a.num_kv_heads, a.head_dim);
  a.qkv_bias = a.o_bias = c.get_or<bool>("attention_bias", false);
  a.qk_norm = g3;
  a.qk_norm_kind = QkNormKind::kUnitOffset;
  a.rms_norm_eps = cfg.rms_norm_eps;
  // transformers: scaling = query_pre_attn_scalar ** -0.5, a Python float
  // applied to a float32 tensor.
  const double qpas = c.get_or<double>("query_pre_attn_scalar", 256.0);
  if (!(qpas > 0)) throw ConfigError(c.where() + ": field 'query_pre_attn_scalar' must be > 0");
  a.scale = static_cast<float>(std::pow(qpas, -0.5));
  // Gemma 3's attention in transformers 5.23 never passes attn_logit_softcapping
  // to its attention functions, so a Gemma 3 config's value changes nothing there
  // and we follow transformers; Gemma 2 applies it.
  a.softcap = g3 ? 0.0f : softcap_field(c, "attn_logit_softcapping");
  // Absent (not null) fields take Gemma2Config's defaults.
  if (!g3 && !c.json().contains("attn_logit_softcapping")) a.softcap = 50.0f;
  cfg.final_logit_softcapping = softcap_field(c, "final_logit_softcapping");
  if (!g3 && !c.json().contains("final_logit_softcapping")) cfg.final_logit_softcapping = 30.0f;
}

// layer_types, or Gemma 2's every other layer sliding / Gemma 3's
// sliding_window_pattern (6); the window when any layer slides.
void parse_gemma_layer_types(const JsonObject& c, GemmaConfig& cfg, bool g3) {
  if (c.has("layer_types")) {
    cfg.layer_types = parse_layer_types(c, cfg.num_layers);
  } else {
    int64_t pattern = 2;
    if (g3) {
      pattern = c.get_or<int64_t>("sliding_window_pattern",
                                  c.get_or<int64_t>("_sliding_window_pattern", 6));
      if (pattern <= 0) {
        throw ConfigError(c.where() + ": field 'sliding_window_pattern' must be positive");
      }
    }
    for (int64_t i = 0; i < cfg.num_layers; ++i) {
      cfg.layer_types.push_back((i + 1) % pattern ? LayerType::kSliding : LayerType::kFull);
    }
  }
  bool any_sliding = false;
  for (auto t : cfg.layer_types) any_sliding |= t == LayerType::kSliding;
  if (any_sliding) cfg.sliding_window = parse_sliding_window(c, 4096);
}

}  // namespace

GemmaConfig parse_gemma_config(const JsonObject& c, int generation) {
  reject_unsupported_common_options(c);
  GemmaConfig cfg;
  cfg.generation = generation;
  const bool g3 = generation == 3;
  cfg.vocab_size = positive(c, "vocab_size", g3 ? 262208 : 256000);
  cfg.hidden_size = positive(c, "hidden_size", 2304);
  cfg.intermediate_size = positive(c, "intermediate_size", 9216);
  cfg.num_layers = layer_count(c, 26);
  cfg.max_position_embeddings = positive(c, "max_position_embeddings", g3 ? 131072 : 8192);
  cfg.rms_norm_eps = static_cast<float>(c.get_or<double>("rms_norm_eps", 1e-6));
  cfg.tie_word_embeddings = c.get_or<bool>("tie_word_embeddings", true);
  require_activation(c, "hidden_activation", "gelu_pytorch_tanh");
  // Gemma 3's use_bidirectional_attention (EmbeddingGemma): an encoder; the
  // loader refuses it as a causal LM.
  if (c.has("use_bidirectional_attention") && c.json()["use_bidirectional_attention"] != false) {
    if (!g3 || c.json()["use_bidirectional_attention"] != true) {
      throw ConfigError(c.where() + ": use_bidirectional_attention " +
                        json_excerpt(c.json()["use_bidirectional_attention"]) +
                        " is not supported (Gemma 3: true or false)");
    }
    cfg.bidirectional = true;
  }
  parse_gemma_attention(c, cfg, g3);
  parse_gemma_layer_types(c, cfg, g3);
  if (g3) {
    parse_gemma3_rope(c, cfg);
  } else {
    cfg.rope_full = cfg.rope_sliding = parse_rope_params(c);
  }
  return cfg;
}

}  // namespace hubzoo
