// BERT / RoBERTa config mapping (transformers' BertConfig, RobertaConfig).
#include <string>

#include "base/error.h"
#include "models/bert.h"
#include "models/config_fields.h"
#include "models/model_info.h"

namespace hubzoo {
namespace {

// Fields that select code paths hubzoo does not have.
void reject_unsupported(const JsonObject& c) {
  const std::string act = c.get_or<std::string>("hidden_act", "gelu");
  if (act != "gelu") {
    throw ConfigError(c.where() + ": hidden_act '" + act + "' is not supported (only 'gelu')");
  }
  const std::string pos = c.get_or<std::string>("position_embedding_type", "absolute");
  if (pos != "absolute") {
    throw ConfigError(c.where() + ": position_embedding_type '" + pos +
                      "' is not supported (only 'absolute')");
  }
  if (c.get_or<bool>("is_decoder", false) || c.get_or<bool>("add_cross_attention", false)) {
    throw ConfigError(c.where() + ": is_decoder / add_cross_attention are not supported");
  }
}

}  // namespace

BertConfig parse_bert_config(const JsonObject& c, bool roberta) {
  reject_unsupported_common_options(c);
  auto positive = [&](const char* key, int64_t fallback) {
    const int64_t x = c.get_or<int64_t>(key, fallback);
    if (x <= 0) throw ConfigError(c.where() + ": field '" + key + "' must be positive");
    return x;
  };
  BertConfig cfg;  // defaults: transformers' BertConfig / RobertaConfig
  cfg.vocab_size = positive("vocab_size", roberta ? 50265 : 30522);
  cfg.hidden_size = positive("hidden_size", 768);
  cfg.num_layers = layer_count(c, 12);
  cfg.num_heads = positive("num_attention_heads", 12);
  cfg.intermediate_size = positive("intermediate_size", 3072);
  cfg.max_position_embeddings = positive("max_position_embeddings", 512);
  cfg.type_vocab_size = positive("type_vocab_size", 2);
  cfg.pad_token_id = c.get_or<int64_t>("pad_token_id", roberta ? 1 : 0);
  cfg.layer_norm_eps = static_cast<float>(c.get_or<double>("layer_norm_eps", 1e-12));
  cfg.roberta_positions = roberta;
  if (cfg.hidden_size % cfg.num_heads != 0) {
    throw ConfigError(c.where() + ": hidden_size " + std::to_string(cfg.hidden_size) +
                      " is not a multiple of num_attention_heads " + std::to_string(cfg.num_heads));
  }
  cfg.head_dim = cfg.hidden_size / cfg.num_heads;
  if (roberta && (cfg.pad_token_id < 0 || cfg.pad_token_id >= cfg.max_position_embeddings - 1)) {
    throw ConfigError(c.where() + ": pad_token_id " + std::to_string(cfg.pad_token_id) +
                      " leaves no positions below max_position_embeddings");
  }
  reject_unsupported(c);
  return cfg;
}

}  // namespace hubzoo
