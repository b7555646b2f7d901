#include "models/config_fields.h"

#include "base/error.h"

namespace hubzoo {

int64_t positive(const JsonObject& c, const char* key, int64_t fallback) {
  const int64_t x = c.get_or<int64_t>(key, fallback);
  if (x <= 0) throw ConfigError(c.where() + ": field '" + key + "' must be positive");
  return x;
}

int64_t layer_count(const JsonObject& c, int64_t fallback) {
  const int64_t n = positive(c, "num_hidden_layers", fallback);
  if (n > kMaxLayers) {
    throw ConfigError(c.where() + ": field 'num_hidden_layers' " + std::to_string(n) +
                      " is over the supported maximum of " + std::to_string(kMaxLayers));
  }
  return n;
}

int64_t required_positive(const JsonObject& c, const char* key, const std::string& what) {
  if (!c.has(key) || c.json()[key].is_null()) {
    throw ConfigError(c.where() + ": " + what + " needs field '" + key + "'");
  }
  const int64_t x = c.get<int64_t>(key);
  if (x <= 0) {
    throw ConfigError(c.where() + ": field '" + key + "' must be positive, got " +
                      std::to_string(x));
  }
  return x;
}

void check_head_geometry(const JsonObject& c, int64_t num_heads, int64_t num_kv_heads,
                         int64_t head_dim) {
  if (num_heads % num_kv_heads != 0) {
    throw ConfigError(c.where() + ": num_attention_heads (" + std::to_string(num_heads) +
                      ") is not a multiple of num_key_value_heads (" +
                      std::to_string(num_kv_heads) + ")");
  }
  if (head_dim % 2 != 0 || head_dim > 1024) {
    throw ConfigError(c.where() + ": head_dim " + std::to_string(head_dim) +
                      " is not supported (must be even and <= 1024)");
  }
}

void require_activation(const JsonObject& c, const char* key, const std::string& only) {
  const std::string act = c.get_or<std::string>(key, only);
  if (act != only) {
    throw ConfigError(c.where() + ": " + key + " '" + act + "' is not supported (only '" + only +
                      "')");
  }
}

float softcap_field(const JsonObject& c, const char* key) {
  const double x = c.get_or<double>(key, 0.0);
  if (c.has(key) && !(x > 0)) throw ConfigError(c.where() + ": field '" + key + "' must be > 0");
  return static_cast<float>(x);
}

const char* layer_type_name(LayerType t) {
  return t == LayerType::kSliding ? "sliding_attention" : "full_attention";
}

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

}  // namespace hubzoo
