// OLMo 2 (Olmo2ForCausalLM): Llama's attention and MLP with the norms moved
// after each sublayer (NormPlacement::kPost: x += post_attention_layernorm(
// attn(x)); x += post_feedforward_layernorm(mlp(x)); no input_layernorm), q/k
// RMSNorms over the whole q_proj / k_proj output (QkNormScope::kProjection,
// before the split into heads and RoPE), every RMSNorm scaling in fp32 before
// its one cast (Olmo2RMSNorm: (w * x_normed).to(dtype)), RoPE with fp32
// cos/sin (Olmo2RotaryEmbedding does not cast them), `attention_bias` on
// q/k/v/o, no MLP bias, rms_norm_eps 1e-5 by default.
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {

std::unique_ptr<CausalLM> load_olmo2(const LoadContext& ctx) {
  const JsonObject& c = ctx.config;
  LlamaVariant v;
  v.attention_bias_key = true;
  v.default_vocab_size = 50304;
  DecoderSpec s = llama_spec(c, v);
  s.rms_norm_eps = static_cast<float>(c.get_or<double>("rms_norm_eps", 1e-5));
  s.norm_kind = NormKind::kScaleInFp32;
  s.norm_placement = NormPlacement::kPost;
  s.fuse_residual_add = false;  // no input_layernorm to fuse into
  for (LayerSpec& l : s.layers) {
    l.attn.rms_norm_eps = s.rms_norm_eps;
    l.attn.qk_norm = true;
    l.attn.qk_norm_kind = NormKind::kScaleInFp32;
    l.attn.qk_norm_scope = QkNormScope::kProjection;
    l.attn.rope_fp32 = true;
  }
  return load_decoder(ctx, s);
}

}  // namespace hubzoo
