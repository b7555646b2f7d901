// Phi-3 (Phi3ForCausalLM: Phi-3, Phi-3.5-mini, Phi-4-mini): Llama's layers
// with the checkpoint's fused tensors loaded as stored, q/k/v in
// self_attn.qkv_proj [q | k | v] and gate/up in mlp.gate_up_proj [gate | up];
// no biases; RMSNorm eps 1e-5 by default. RoPE may be longrope (short_factor /
// long_factor, spelled su or yarn by older configs, with its attention
// factor) and may rotate only partial_rotary_factor of each head. A longrope
// sequence that grows past original_max_position_embeddings switches every
// position to the long factors, as transformers' generate does
// (models/decoder_steps.h). `sliding_window` (null: none) bounds every layer.
#include "base/error.h"
#include "models/config_fields.h"
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {

std::unique_ptr<CausalLM> load_phi3(const LoadContext& ctx) {
  const JsonObject& c = ctx.config;
  LlamaVariant v;
  v.family_windows = true;
  v.default_vocab_size = 32064;
  v.default_max_position_embeddings = 4096;
  v.rope.partial_rotary = true;
  v.rope.longrope = true;
  DecoderSpec s = llama_spec(c, v);
  s.rms_norm_eps = static_cast<float>(c.get_or<double>("rms_norm_eps", 1e-5));
  const int64_t window = c.has("sliding_window") ? parse_sliding_window(c, 0) : 0;
  for (LayerSpec& l : s.layers) {
    l.attn.fused_qkv = true;
    l.attn.rms_norm_eps = s.rms_norm_eps;
    l.fused_gate_up = true;
    l.attn.window = window;
  }
  return load_decoder(ctx, s);
}

}  // namespace hubzoo
