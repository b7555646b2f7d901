// Reading config.json fields every family reads alike, each a ConfigError
// naming the field when it is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/json.h"

namespace hubzoo {

// An integer field that must be positive; `fallback` when absent.
int64_t positive(const JsonObject& c, const char* key, int64_t fallback);

// num_hidden_layers: positive and at most kMaxLayers (`fallback` when absent).
// Checked before anything is built per layer: 10^15 layers used to allocate
// per-layer specs until memory ran out (std::bad_alloc after minutes).
inline constexpr int64_t kMaxLayers = 1024;  // the largest Hub models have ~130
int64_t layer_count(const JsonObject& c, int64_t fallback);

// An integer field that `what` needs: present, not null, and positive.
int64_t required_positive(const JsonObject& c, const char* key, const std::string& what);

// num_attention_heads a multiple of num_key_value_heads; head_dim even and <= 1024.
void check_head_geometry(const JsonObject& c, int64_t num_heads, int64_t num_kv_heads,
                         int64_t head_dim);

// The activation field `key` (hidden_act, hidden_activation) must be `only`.
void require_activation(const JsonObject& c, const char* key, const std::string& only);

// A softcap field: 0 when absent (or null), else it must be > 0.
float softcap_field(const JsonObject& c, const char* key);

enum class LayerType { kSliding, kFull };

// "sliding_attention" or "full_attention", as config.json spells it.
const char* layer_type_name(LayerType t);

// Per layer: "sliding_attention" | "full_attention" from `layer_types`, each
// entry checked; ConfigError naming the field otherwise.
std::vector<LayerType> parse_layer_types(const JsonObject& c, int64_t num_layers);

// A positive sliding_window, or ConfigError naming it.
int64_t parse_sliding_window(const JsonObject& c, int64_t fallback);

}  // namespace hubzoo
