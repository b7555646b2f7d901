// Fields of ModelInfo every family fills the same way.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/safetensors.h"
#include "models/causal_lm.h"

namespace hubzoo {

// The fields every decoder fills alike: architecture, snapshot, sizes,
// numerics, the checkpoint's ignored tensors, the parameter count (tensors
// used) and the special token ids.
ModelInfo decoder_model_info(const LoadContext& ctx, const Checkpoint& checkpoint,
                             const std::map<std::string, std::string>& ignored_tensors,
                             int64_t vocab_size, int64_t hidden_size, int64_t num_layers,
                             int64_t max_position_embeddings);

// eos (list or int), bos and pad ids: generation_config.json wins over
// config.json, as transformers' generate() does.
void read_special_token_ids(const LoadContext& ctx, ModelInfo& info);

// Rejects config options that would change the math but that hubzoo does not
// implement, naming the field (e.g. a quantization_config whose method or
// options layers/hub_quant.h does not read).
void reject_unsupported_common_options(const JsonObject& config);

}  // namespace hubzoo
