// T5Config as transformers 5 reads config.json (configuration_t5.py).
#include <cmath>

#include "base/error.h"
#include "models/config_fields.h"
#include "models/t5.h"

namespace hubzoo {
namespace {

int64_t bounded(const JsonObject& c, const char* key, int64_t fallback, int64_t max) {
  const int64_t x = positive(c, key, fallback);
  if (x > max) {
    throw ConfigError(c.where() + ": field '" + key + "' " + std::to_string(x) +
                      " is over the supported maximum of " + std::to_string(max));
  }
  return x;
}

// feed_forward_proj: "{act}" or "gated-{act}"; transformers maps
// "gated-gelu" to gelu_new. Only the activations T5 checkpoints use.
void parse_feed_forward(const JsonObject& c, T5Config& cfg) {
  const std::string proj = c.get_or<std::string>("feed_forward_proj", "relu");
  const auto dash = proj.find('-');
  cfg.gated = dash != std::string::npos && proj.substr(0, dash) == "gated";
  std::string act = cfg.gated ? proj.substr(dash + 1) : proj;
  if (proj == "gated-gelu") act = "gelu_new";
  if (act == "relu") {
    cfg.act = T5Activation::kRelu;
  } else if (act == "gelu_new") {
    cfg.act = T5Activation::kGeluNew;
  } else {
    throw ConfigError(c.where() + ": field 'feed_forward_proj' '" + proj +
                      "' is not supported (supported: relu, gated-relu, gated-gelu, gelu_new, "
                      "gated-gelu_new)");
  }
}

std::vector<int64_t> eos_ids(const JsonObject& c) {
  if (!c.has("eos_token_id")) return {1};
  if (c.json()["eos_token_id"].is_array()) return c.get<std::vector<int64_t>>("eos_token_id");
  return {c.get<int64_t>("eos_token_id")};
}

}  // namespace

T5Config parse_t5_config(const JsonObject& c) {
  T5Config cfg{};
  constexpr int64_t kMaxSize = 1 << 20;
  cfg.vocab_size = bounded(c, "vocab_size", 32128, 1 << 24);
  cfg.d_model = bounded(c, "d_model", 512, kMaxSize);
  cfg.d_kv = bounded(c, "d_kv", 64, 1024);
  cfg.d_ff = bounded(c, "d_ff", 2048, kMaxSize);
  cfg.num_layers = bounded(c, "num_layers", 6, kMaxLayers);
  cfg.num_decoder_layers = bounded(c, "num_decoder_layers", cfg.num_layers, kMaxLayers);
  cfg.num_heads = bounded(c, "num_heads", 8, 1024);
  cfg.num_buckets = bounded(c, "relative_attention_num_buckets", 32, 4096);
  cfg.max_distance = bounded(c, "relative_attention_max_distance", 128, 1 << 20);
  if (cfg.num_buckets < 4) {
    throw ConfigError(c.where() + ": field 'relative_attention_num_buckets' must be at least 4");
  }
  if (cfg.max_distance <= cfg.num_buckets / 4) {
    throw ConfigError(c.where() +
                      ": field 'relative_attention_max_distance' must exceed a quarter of "
                      "relative_attention_num_buckets");
  }
  cfg.eps = c.get_or<float>("layer_norm_epsilon", 1e-6f);
  if (!(cfg.eps > 0)) throw ConfigError(c.where() + ": field 'layer_norm_epsilon' must be > 0");
  parse_feed_forward(c, cfg);
  // transformers 5: scale_decoder_outputs as saved, else tie_word_embeddings != false.
  const bool tied = c.get_or<bool>("tie_word_embeddings", true);
  cfg.scale_decoder_outputs = c.get_or<bool>("scale_decoder_outputs", tied);
  cfg.pad_token_id = c.get_or<int64_t>("pad_token_id", 0);
  cfg.decoder_start_token_id = c.get_or<int64_t>("decoder_start_token_id", cfg.pad_token_id);
  if (cfg.decoder_start_token_id < 0 || cfg.decoder_start_token_id >= cfg.vocab_size) {
    throw ConfigError(c.where() + ": field 'decoder_start_token_id' is outside the vocabulary");
  }
  cfg.eos_token_ids = eos_ids(c);
  if (c.get_or<bool>("is_decoder", false)) {
    throw ConfigError(c.where() + ": field 'is_decoder' true (a decoder-only T5) is not supported");
  }
  return cfg;
}

int64_t t5_relative_bucket(int64_t relative, bool bidirectional, int64_t num_buckets,
                           int64_t max_distance) {
  int64_t bucket = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (relative > 0) bucket += num_buckets;
    relative = relative < 0 ? -relative : relative;
  } else {
    relative = relative < 0 ? -relative : 0;
  }
  const int64_t max_exact = num_buckets / 2;
  if (relative < max_exact) return bucket + relative;
  // float32 as torch computes it: log(rel / max_exact) / log(max_distance / max_exact)
  // * (num_buckets - max_exact), truncated.
  const float ratio = static_cast<float>(relative) / static_cast<float>(max_exact);
  const float denom = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / denom * static_cast<float>(num_buckets - max_exact);
  int64_t large = max_exact + static_cast<int64_t>(scaled);
  if (large > num_buckets - 1) large = num_buckets - 1;
  return bucket + large;
}

}  // namespace hubzoo
