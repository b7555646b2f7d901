// Gemma 2 / Gemma 3 text config mapping (transformers 5.23
// configuration_gemma2.py, configuration_gemma3.py).
#include <cmath>

#include "base/error.h"
#include "models/gemma.h"
#include "models/model_info.h"
#include "ops/bf16.h"

namespace hubzoo {
namespace {

int64_t positive(const JsonObject& c, const char* key, int64_t fallback) {
  const int64_t x = c.get_or<int64_t>(key, fallback);
  if (x <= 0) throw ConfigError(c.where() + ": field '" + key + "' must be positive");
  return x;
}

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

}  // namespace

std::vector<LayerType> parse_layer_types(const JsonObject& c, int64_t num_layers) {
  const auto names = c.get<std::vector<std::string>>("layer_types");
  if (static_cast<int64_t>(names.size()) != num_layers) {
    throw ConfigError(c.where() + ": layer_types has " + std::to_string(names.size()) +
                      " entries for num_hidden_layers " + std::to_string(num_layers));
  }
  std::vector<LayerType> types;
  for (const auto& t : names) {
    if (t == "sliding_attention") {
      types.push_back(LayerType::kSliding);
    } else if (t == "full_attention") {
      types.push_back(LayerType::kFull);
    } else {
      throw ConfigError(c.where() + ": layer_types entry '" + t +
                        "' is not supported (sliding_attention, full_attention)");
    }
  }
  return types;
}

int64_t parse_sliding_window(const JsonObject& c, int64_t fallback) {
  const int64_t w = c.get_or<int64_t>("sliding_window", fallback);
  if (w <= 0) {
    throw ConfigError(c.where() + ": field 'sliding_window' must be positive, got " +
                      std::to_string(w));
  }
  return w;
}

GemmaConfig parse_gemma_config(const JsonObject& c, int generation) {
  reject_unsupported_common_options(c);
  GemmaConfig cfg;
  cfg.generation = generation;
  const bool g3 = generation == 3;
  cfg.vocab_size = positive(c, "vocab_size", g3 ? 262208 : 256000);
  cfg.hidden_size = positive(c, "hidden_size", 2304);
  cfg.intermediate_size = positive(c, "intermediate_size", 9216);
  cfg.num_layers = positive(c, "num_hidden_layers", 26);
  cfg.max_position_embeddings = positive(c, "max_position_embeddings", g3 ? 131072 : 8192);
  cfg.rms_norm_eps = static_cast<float>(c.get_or<double>("rms_norm_eps", 1e-6));
  cfg.tie_word_embeddings = c.get_or<bool>("tie_word_embeddings", true);
  const std::string act = c.get_or<std::string>("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh") {
    throw ConfigError(c.where() + ": hidden_activation '" + act +
                      "' is not supported (only 'gelu_pytorch_tanh')");
  }
  if (c.has("use_bidirectional_attention") && c.json()["use_bidirectional_attention"] != false) {
    throw ConfigError(c.where() + ": use_bidirectional_attention is not supported (causal only)");
  }

  auto& a = cfg.attn;
  a.hidden_size = cfg.hidden_size;
  a.num_heads = positive(c, "num_attention_heads", 8);
  a.num_kv_heads = positive(c, "num_key_value_heads", 4);
  if (a.num_heads % a.num_kv_heads != 0) {
    throw ConfigError(c.where() + ": num_attention_heads (" + std::to_string(a.num_heads) +
                      ") is not a multiple of num_key_value_heads (" +
                      std::to_string(a.num_kv_heads) + ")");
  }
  a.head_dim = positive(c, "head_dim", 256);
  if (a.head_dim % 2 != 0 || a.head_dim > 1024) {
    throw ConfigError(c.where() + ": head_dim " + std::to_string(a.head_dim) +
                      " is not supported (must be even and <= 1024)");
  }
  a.qkv_bias = a.o_bias = c.get_or<bool>("attention_bias", false);
  a.qk_norm = g3;
  a.qk_norm_kind = QkNormKind::kUnitOffset;
  a.rms_norm_eps = cfg.rms_norm_eps;
  // transformers: scaling = query_pre_attn_scalar ** -0.5, a Python float
  // applied to a float32 tensor.
  const double qpas = c.get_or<double>("query_pre_attn_scalar", 256.0);
  if (!(qpas > 0)) throw ConfigError(c.where() + ": field 'query_pre_attn_scalar' must be > 0");
  a.scale = static_cast<float>(std::pow(qpas, -0.5));
  auto softcap = [&](const char* key) {
    const double x = c.get_or<double>(key, 0.0);
    if (c.has(key) && !(x > 0)) throw ConfigError(c.where() + ": field '" + key + "' must be > 0");
    return static_cast<float>(x);
  };
  // Gemma 3's attention in transformers 5.23 never passes attn_logit_softcapping
  // to its attention functions, so a Gemma 3 config's value changes nothing there
  // and we follow transformers; Gemma 2 applies it.
  a.softcap = g3 ? 0.0f : softcap("attn_logit_softcapping");
  // Absent (not null) fields take Gemma2Config's defaults.
  if (!g3 && !c.json().contains("attn_logit_softcapping")) a.softcap = 50.0f;
  cfg.final_logit_softcapping = softcap("final_logit_softcapping");
  if (!g3 && !c.json().contains("final_logit_softcapping")) cfg.final_logit_softcapping = 30.0f;

  if (c.has("layer_types")) {
    cfg.layer_types = parse_layer_types(c, cfg.num_layers);
  } else {
    // Gemma 2: every other layer slides; Gemma 3: sliding_window_pattern (6).
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

  if (g3) {
    parse_gemma3_rope(c, cfg);
  } else {
    cfg.rope_full = cfg.rope_sliding = parse_rope_params(c);
  }
  return cfg;
}

float gemma_embed_scale(int64_t hidden_size, const Numerics& numerics) {
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(hidden_size)));
  return numerics.round_stored(scale);
}

void softcap_logits(float* logits, int64_t n, float cap, const Numerics& numerics) {
  if (cap <= 0) return;
  for (int64_t i = 0; i < n; ++i) {
    float x = numerics.round_eager(logits[i] / cap);
    x = numerics.round_eager(std::tanh(x));
    logits[i] = numerics.round_eager(x * cap);
  }
}

}  // namespace hubzoo
