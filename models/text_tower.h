// The text tower of a checkpoint that holds more than a decoder (a multimodal
// model's vision/audio towers, a base model without lm_head): which tensor names
// the decoder loads, which it ignores and why (DecoderSpec::text_tower).
#pragma once

#include <map>
#include <string>
#include <utility>

#include "io/safetensors.h"
#include "layers/weights.h"
#include "models/decoder.h"

namespace hubzoo {

// {model prefix, lm_head prefix} of the text tower. Base-model checkpoints
// (LlamaModel, Qwen3Model, Gemma3TextModel: what sentence-transformers saves, e.g.
// Qwen3-Embedding) carry bare names and no lm_head. TensorMappingError when the
// spec names towers and the checkpoint has none of them.
std::pair<std::string, std::string> tower_names(const DecoderSpec& spec, const WeightLoader& w);

// Ignores every tensor under an ignored prefix (a tower not run) with its reason;
// returns the prefixes that held tensors.
std::map<std::string, std::string> ignore_modules(const DecoderSpec& spec, const Checkpoint& ckpt,
                                                  WeightLoader& w);

// ConfigError unless every id placeholders are embedded as has an embedding.
void check_embed_as(const DecoderSpec& spec);

}  // namespace hubzoo
