// Fields of ModelInfo every family fills the same way.
#pragma once

#include "models/causal_lm.h"

namespace hubzoo {

// eos (list or int), bos and pad ids: generation_config.json wins over
// config.json, as transformers' generate() does.
void read_special_token_ids(const LoadContext& ctx, ModelInfo& info);

// Rejects config options that would change the math but that hubzoo does not
// implement, naming the field (e.g. quantization_config).
void reject_unsupported_common_options(const JsonObject& config);

}  // namespace hubzoo
