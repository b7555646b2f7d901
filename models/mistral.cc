// Mistral: Llama's layers (no biases) with a sliding window on every layer.
// config `sliding_window` is the window (absent: MistralConfig's 4096; null:
// full attention); each layer's keys then live in a ring buffer of that many
// positions (layers/kv_cache.h). transformers' MistralModel ignores
// `layer_types` (it warns and points to Ministral), and so does this.
#include "base/error.h"
#include "models/config_fields.h"
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {

std::unique_ptr<CausalLM> load_mistral(const LoadContext& ctx) {
  const JsonObject& c = ctx.config;
  LlamaVariant v;
  v.family_windows = true;
  v.default_max_position_embeddings = 4096 * 32;
  DecoderSpec s = llama_spec(c, v);
  if (!c.json().contains("sliding_window") || c.has("sliding_window")) {  // null: no window
    const int64_t window = parse_sliding_window(c, 4096);
    for (LayerSpec& l : s.layers) l.attn.window = window;
  }
  return load_decoder(ctx, s);
}

}  // namespace hubzoo
