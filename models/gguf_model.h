// A GGUF file as a model: the config.json transformers derives from its
// metadata, and its tensors under Hugging Face names (with the transforms
// transformers applies at load: q/k rows un-permuted, Gemma norms).
#pragma once

#include <filesystem>
#include <memory>

#include "io/json.h"
#include "io/safetensors.h"

namespace hubzoo {

struct GgufModel {
  JsonObject config{nlohmann::json::object(), "gguf"};
  std::shared_ptr<const Checkpoint> checkpoint;
};

// Opens and validates the file; ConfigError for an architecture hubzoo does
// not run from GGUF, naming it.
GgufModel open_gguf_model(const std::filesystem::path& path);

}  // namespace hubzoo
