// Text-tower name resolution for the decoder's loader (models/text_tower.h).
#include "models/text_tower.h"

#include "base/error.h"

namespace hubzoo {

std::pair<std::string, std::string> tower_names(const DecoderSpec& spec, const WeightLoader& w) {
  const auto& names = spec.text_tower.names;
  for (const auto& [model, head] : names) {
    if (w.contains(model + "embed_tokens.weight")) return {model, head};
  }
  if (!names.empty()) {
    std::string tried;
    for (const auto& n : names)
      tried += (tried.empty() ? "" : ", ") + n.first + "embed_tokens.weight";
    throw TensorMappingError("the checkpoint has no text tower: none of " + tried);
  }
  const bool bare = !w.contains("model.embed_tokens.weight") && w.contains("embed_tokens.weight");
  return {bare ? "" : "model.", "lm_head"};
}

std::map<std::string, std::string> ignore_modules(const DecoderSpec& spec, const Checkpoint& ckpt,
                                                  WeightLoader& w) {
  std::map<std::string, std::string> found;
  if (spec.text_tower.ignored_prefixes.empty()) return found;
  for (const auto& name : ckpt.names()) {
    for (const auto& [prefix, reason] : spec.text_tower.ignored_prefixes) {
      if (!name.starts_with(prefix)) continue;
      w.ignore(name, reason);
      found[prefix] = reason;
    }
  }
  return found;
}

void check_embed_as(const DecoderSpec& spec) {
  for (const auto& [from, to] : spec.text_tower.embed_as) {
    const bool ple = spec.hidden_size_per_layer_input > 0;
    if (to < 0 || to >= spec.vocab_size || (ple && to >= spec.vocab_size_per_layer_input)) {
      throw ConfigError("pad_token_id " + std::to_string(to) + ", which token " +
                        std::to_string(from) +
                        " (a media placeholder) is embedded as, is "
                        "outside the vocabulary");
    }
  }
}

}  // namespace hubzoo
