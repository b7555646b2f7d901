// Gemma 4 (text decoder, Gemma4ForCausalLM) on the decoder (models/decoder.h);
// the config mapping is models/gemma4_config.cc. Gemma 3's sandwich-norm
// layers with plain-w RMSNorms in fp32, attention scale 1 with q/k norms and
// an unscaled v norm, head geometry per layer type (global_head_dim), keys
// that double as values on full layers (attention_k_eq_v), the last layers
// reusing earlier layers' keys/values (KV sharing), per-layer embeddings (PLE)
// added after each layer's MLP, a per-layer scalar, and final logit
// softcapping. With enable_moe_block each layer also runs a sparse MoE
// (layers/moe.h, Gemma 4's router) on its residual and adds it to the dense
// MLP's output (MoeKind::kBesideMlp).
#include "models/decoder.h"
#include "models/families.h"
#include "models/gemma.h"

namespace hubzoo {
namespace {

AttentionOptions gemma4_attention(const Gemma4Config& cfg, const Gemma4Layer& layer) {
  AttentionOptions a;
  a.hidden_size = cfg.hidden_size;
  a.num_heads = cfg.num_heads;
  a.num_kv_heads = layer.num_kv_heads;
  a.head_dim = layer.head_dim;
  a.qkv_bias = a.o_bias = cfg.attention_bias;
  a.qk_norm = true;
  a.qk_norm_kind = QkNormKind::kScaleInFp32;
  a.v_norm = true;
  a.k_eq_v = layer.k_eq_v;
  a.kv_shared = layer.kv_producer >= 0;
  a.rms_norm_eps = cfg.rms_norm_eps;
  a.scale = 1.0f;  // transformers: self.scaling = 1.0 (q and k are normed)
  a.window = layer.type == LayerType::kSliding ? cfg.sliding_window : 0;
  return a;
}

}  // namespace

DecoderSpec gemma4_decoder_spec(const Gemma4Config& cfg) {
  DecoderSpec s = gemma_common_spec(cfg, NormKind::kScaleInFp32);  // w in fp32
  s.moe = cfg.moe_options;
  s.hidden_size_per_layer_input = cfg.hidden_size_per_layer_input;
  s.vocab_size_per_layer_input = cfg.vocab_size_per_layer_input;
  for (const Gemma4Layer& layer : cfg.layers) {
    LayerSpec l;
    l.attn = gemma4_attention(cfg, layer);
    l.rope = layer.type == LayerType::kSliding ? RopeKind::kSliding : RopeKind::kFull;
    l.kv_producer = layer.kv_producer;
    l.intermediate_size = layer.intermediate_size;
    l.activation = Activation::kGeluTanh;
    l.moe = cfg.moe ? MoeKind::kBesideMlp : MoeKind::kNone;
    l.per_layer_input = cfg.hidden_size_per_layer_input > 0;
    l.layer_scalar = true;
    s.layers.push_back(l);
  }
  return s;
}

std::unique_ptr<CausalLM> load_gemma4_text(const LoadContext& ctx) {
  return load_decoder(ctx, gemma4_decoder_spec(parse_gemma4_config(ctx.config)));
}

}  // namespace hubzoo
