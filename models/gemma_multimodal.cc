// The text towers of multimodal Gemma checkpoints (Gemma3ForConditionalGeneration,
// Gemma4ForConditionalGeneration) on the decoder, run as the text-only families
// run them (models/gemma.cc, models/gemma4.cc). config.json's text_config is the
// text model's config. The tower's tensors are where transformers 5.23 saves
// them: Gemma 3 under language_model.model.* (lm_head: language_model.lm_head),
// Gemma 4 under model.language_model.* (lm_head); either spelling is accepted,
// as transformers loads both. The vision and audio towers and their projectors
// are ignored with a reason (hubzoo takes text), and reported by
// ModelInfo::ignored_modules.
#include <string>

#include "base/error.h"
#include "models/decoder.h"
#include "models/families.h"
#include "models/gemma.h"

namespace hubzoo {
namespace {

const std::vector<std::pair<std::string, std::string>> kTowerNames = {
    {"language_model.model.", "language_model.lm_head"},  // as saved (the Hub's Gemma 3)
    {"model.language_model.", "lm_head"},                 // transformers' module names
};

// text_config as the text model's config.json: the multimodal model's
// architectures and tie_word_embeddings (transformers ties lm_head by the
// top-level flag), its special token ids and quantization_config where it
// sets them (they win, as generation reads the top-level config).
LoadContext text_tower_context(const LoadContext& ctx) {
  const JsonObject& c = ctx.config;
  const auto text = c.object("text_config");
  if (!text) {
    throw ConfigError(c.where() +
                      ": field 'text_config' is missing (a multimodal config holds the text "
                      "model's config there)");
  }
  nlohmann::json j = text->json();
  j["architectures"] = c.json()["architectures"];
  j["tie_word_embeddings"] = c.get_or<bool>("tie_word_embeddings", true);
  for (const char* key : {"eos_token_id", "bos_token_id", "pad_token_id", "quantization_config"}) {
    if (c.has(key)) j[key] = c.json()[key];
  }
  LoadContext t = ctx;
  t.config = JsonObject(std::move(j), c.where() + " text_config");
  return t;
}

// The towers hubzoo does not run, under both spellings.
std::map<std::string, std::string> ignored_towers(
    const std::vector<std::pair<std::string, std::string>>& towers, const std::string& arch) {
  std::map<std::string, std::string> out;
  for (const auto& [name, what] : towers) {
    const std::string reason =
        what + ": " + arch + " runs here as a text model (text in, text out)";
    out[name + "."] = reason;
    out["model." + name + "."] = reason;
  }
  return out;
}

// An id field: `fallback` when absent (the config class's default), -1 when null.
int64_t token_id(const JsonObject& c, const char* key, int64_t fallback) {
  if (!c.json().contains(key)) return fallback;
  return c.json()[key].is_null() ? -1 : c.get<int64_t>(key);
}

}  // namespace

std::unique_ptr<CausalLM> load_gemma3_conditional(const LoadContext& ctx) {
  const LoadContext text = text_tower_context(ctx);
  GemmaConfig cfg = parse_gemma_config(text.config, 3);
  if (cfg.bidirectional) {
    throw ConfigError(text.config.where() +
                      ": use_bidirectional_attention true is not supported in a multimodal model");
  }
  // Gemma3ForConditionalGeneration's forward applies no final_logit_softcapping
  // (Gemma3ForCausalLM's does): follow transformers.
  cfg.final_logit_softcapping = 0.0f;
  DecoderSpec s = gemma_decoder_spec(cfg);
  s.text_tower.names = kTowerNames;
  s.text_tower.ignored_prefixes = ignored_towers({{"vision_tower", "the vision tower (SigLIP)"},
                                                  {"multi_modal_projector", "the image projector"}},
                                                 "Gemma3ForConditionalGeneration");
  return load_decoder(text, s);
}

std::unique_ptr<CausalLM> load_gemma4_conditional(const LoadContext& ctx) {
  const LoadContext text = text_tower_context(ctx);
  DecoderSpec s = gemma4_decoder_spec(parse_gemma4_config(text.config));
  s.text_tower.names = kTowerNames;
  s.text_tower.ignored_prefixes = ignored_towers({{"vision_tower", "the vision tower"},
                                                  {"audio_tower", "the audio tower"},
                                                  {"embed_vision", "the image embedder"},
                                                  {"embed_audio", "the audio embedder"}},
                                                 "Gemma4ForConditionalGeneration");
  // Gemma4Model embeds image, video and audio placeholder ids as pad_token_id
  // (main and per-layer embeddings) when no media fill them: text-only input.
  // Gemma4Config's defaults: image 258880, audio 258881, video 258884; pad 0.
  const int64_t pad = token_id(text.config, "pad_token_id", 0);
  for (const auto& [key, fallback] : {std::pair<const char*, int64_t>{"image_token_id", 258880},
                                      {"audio_token_id", 258881},
                                      {"video_token_id", 258884}}) {
    const int64_t id = token_id(ctx.config, key, fallback);
    if (id >= 0 && pad >= 0) s.text_tower.embed_as[id] = pad;
  }
  return load_decoder(text, s);
}

}  // namespace hubzoo
