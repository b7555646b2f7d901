#include "models/model_info.h"

#include "base/error.h"
#include "layers/hub_quant.h"
#include "tensor/tensor.h"

namespace hubzoo {
namespace {

std::vector<int64_t> id_list(const nlohmann::json& j, const std::string& where) {
  std::vector<int64_t> ids;
  if (j.is_null()) return ids;
  if (j.is_number_integer()) return {j.get<int64_t>()};
  if (j.is_array()) {
    for (const auto& x : j) {
      if (!x.is_number_integer()) throw ConfigError(where + ": eos_token_id must hold integers");
      ids.push_back(x.get<int64_t>());
    }
    return ids;
  }
  throw ConfigError(where + ": eos_token_id must be an integer or a list of integers");
}

}  // namespace

ModelInfo decoder_model_info(const LoadContext& ctx, const Checkpoint& checkpoint,
                             const std::map<std::string, std::string>& ignored_tensors,
                             int64_t vocab_size, int64_t hidden_size, int64_t num_layers,
                             int64_t max_position_embeddings) {
  ModelInfo info;
  info.architecture = ctx.config.get<std::vector<std::string>>("architectures")[0];
  info.snapshot = ctx.snapshot;
  info.gguf_file = ctx.gguf_file;
  info.config_json = ctx.config.json().dump();
  info.vocab_size = vocab_size;
  info.hidden_size = hidden_size;
  info.num_layers = num_layers;
  info.max_position_embeddings = max_position_embeddings;
  info.ignored_tensors = ignored_tensors;
  info.numerics = ctx.numerics;
  for (const auto& name : checkpoint.names()) {
    if (!ignored_tensors.count(name))
      info.num_parameters += num_elements(checkpoint.info(name).shape);
  }
  read_special_token_ids(ctx, info);
  return info;
}

void read_special_token_ids(const LoadContext& ctx, ModelInfo& info) {
  const auto& c = ctx.config;
  auto get_id = [](const JsonObject& o, const char* key, int64_t fallback) {
    return o.has(key) ? o.get<int64_t>(key) : fallback;
  };
  info.eos_token_ids =
      c.has("eos_token_id") ? id_list(c.json()["eos_token_id"], c.where()) : std::vector<int64_t>{};
  info.bos_token_id = get_id(c, "bos_token_id", -1);
  info.pad_token_id = get_id(c, "pad_token_id", -1);
  const auto gen_path = ctx.snapshot / "generation_config.json";
  // A GGUF file carries its own ids (in the config made from its metadata);
  // a generation_config.json beside it may belong to another model.
  if (ctx.gguf_file.empty() && std::filesystem::exists(gen_path)) {
    JsonObject g(read_json_file(gen_path), gen_path.string());
    if (g.has("eos_token_id")) info.eos_token_ids = id_list(g.json()["eos_token_id"], g.where());
    info.bos_token_id = get_id(g, "bos_token_id", info.bos_token_id);
    info.pad_token_id = get_id(g, "pad_token_id", info.pad_token_id);
  }
}

void reject_unsupported_common_options(const JsonObject& config) {
  // A quantization_config hubzoo reads (layers/hub_quant.h) passes; any other
  // is a ConfigError naming the option.
  (void)HubQuant::from_config(config);
}

}  // namespace hubzoo
