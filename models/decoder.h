// The one decoder every causal-LM family runs (Llama, Qwen2, Qwen3, Qwen3-MoE,
// Gemma 2, Gemma 3, Gemma 4, OLMo 2, Granite, Qwen2-MoE, Mistral, Phi-3,
// SmolLM3): a family file maps config.json onto a
// DecoderSpec (one LayerSpec per layer, gemma.cpp style) and load_decoder
// builds the model from it. The decoder owns the checkpoint and weight
// loading, the embeddings (tied or untied; base-model checkpoints with bare
// `embed_tokens.weight` names too), the layers, captures, the final norm and
// the logits/softcap tail, and one activation workspace reused from step to
// step. docs/adding-a-model.md walks through adding a family.
//
// One layer, as DecoderSpec and its LayerSpec say:
//
//   normed = input_layernorm(x)                (kPost: none, normed = x)
//   branch = self_attn(normed)                 (post_attention_layernorm(.) if kSandwich/kPost)
//   branch *= residual_multiplier              (Granite)
//   x += branch; normed = pre-MLP norm(x)      (post_attention_layernorm, or
//                                               pre_feedforward_layernorm if kSandwich;
//                                               kPost: none, normed = x)
//   branch = mlp(normed) | moe(normed)         (kBesideMlp: post_feedforward_layernorm_1(mlp)
//                                               + post_feedforward_layernorm_2(moe(x, pre_2(x))))
//                                              (a shared expert: + sigmoid(gate(normed)) *
//                                              shared(normed))
//   (post_feedforward_layernorm(.) if kSandwich/kPost)
//   branch *= residual_multiplier              (Granite)
//   x += branch                                (fuse_residual_add: fused into the next norm)
//   x += post_per_layer_input_norm(proj(gelu(gate(x)) * per_layer_input))   (PLE)
//   x *= layer_scalar                          (layer_scalar)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/attention.h"
#include "layers/mlp.h"
#include "layers/moe.h"
#include "layers/rope.h"
#include "models/causal_lm.h"

namespace hubzoo {

// Which RoPE a layer applies: none, the full-attention layers' or the
// sliding layers' (each with its own parameters: Gemma 3/4).
enum class RopeKind { kNone, kFull, kSliding };

// What a layer's feed-forward block is besides (or instead of) its dense MLP.
enum class MoeKind {
  kNone,
  kReplacesMlp,  // Qwen3-MoE: a sparse MoE under {p}.mlp instead of the dense MLP
  kBesideMlp,    // Gemma 4: a sparse MoE ({p}.router, {p}.experts) added to the dense MLP
};

// Where a layer's RMSNorms sit (the diagram above).
enum class NormPlacement {
  kPre,       // Llama: input_layernorm before attention, post_attention_layernorm before the MLP
  kSandwich,  // Gemma: input_layernorm and post_attention_layernorm around attention,
              // pre_feedforward_layernorm and post_feedforward_layernorm around the MLP
  kPost,      // OLMo 2: no pre-norms; post_attention_layernorm of attention's output,
              // post_feedforward_layernorm of the MLP's, each before its residual add
};

struct LayerSpec {
  // Heads, head_dim, biases, q/k(/v) norms and their kind, k_eq_v, KV sharing,
  // score scale, softcap, sliding window: layers/attention.h.
  AttentionOptions attn;
  RopeKind rope = RopeKind::kFull;
  int64_t kv_producer = -1;       // attn.kv_shared: the earlier layer whose keys/values it reads
  int64_t intermediate_size = 0;  // the dense gated MLP's width (unused with kReplacesMlp)
  bool mlp_bias = false;
  bool fused_gate_up = false;  // Phi-3: one {p}.mlp.gate_up_proj tensor (gate rows, then up)
  Activation activation = Activation::kSilu;
  MoeKind moe = MoeKind::kNone;  // its options: DecoderSpec::moe
  bool per_layer_input = false;  // Gemma 4 PLE (sizes in DecoderSpec)
  bool layer_scalar = false;     // Gemma 4: x *= {p}.layer_scalar at the end of the layer
};

struct DecoderSpec {
  int64_t vocab_size = 0, hidden_size = 0, max_position_embeddings = 0;

  // Every RMSNorm of the model (the q/k norms' kind is attn.qk_norm_kind).
  NormKind norm_kind = NormKind::kWeight;
  float rms_norm_eps = 1e-6f;
  NormPlacement norm_placement = NormPlacement::kPre;
  // The residual add that ends a layer is fused into the next layer's
  // input_layernorm (or the final norm): RMSNorm::add_forward, bit for bit the
  // separate add (Llama). Not with PLE or a layer scalar, which follow the add,
  // nor with kPost (no input_layernorm to fuse into).
  bool fuse_residual_add = false;

  bool tie_word_embeddings = false;
  // Gemma: embeddings times sqrt(hidden_size), that factor rounded to the
  // weights' dtype (PLE: its embeddings by sqrt(hidden_size_per_layer_input)).
  bool scale_embeddings = false;
  float final_logit_softcapping = 0.0f;  // > 0: tanh(logits / cap) * cap
  // Granite, each rounded as transformers' bf16 tensor-times-Python-float (the
  // factor an fp32 float): x = embed * embedding_multiplier after the "embed"
  // capture (transformers multiplies outside embed_tokens); each branch times
  // residual_multiplier after its capture, before its residual add; logits /
  // logits_scaling (before any softcap). 1: none. The score scale is attn.scale.
  float embedding_multiplier = 1.0f, residual_multiplier = 1.0f, logits_scaling = 1.0f;

  RopeParams rope_full, rope_sliding;  // by RopeKind; built for the layers that use them
  MoeOptions moe;                      // layers with MoeKind other than kNone

  // Per-layer embeddings (Gemma 4 PLE): P = hidden_size_per_layer_input per
  // layer; 0: none.
  int64_t hidden_size_per_layer_input = 0, vocab_size_per_layer_input = 0;

  // The cache keeps layers' keys as blocks (ops/attend_online.h) in fp32
  // and fused bf16 when scores have no softcap.
  bool blocked_key_cache = false;

  std::vector<LayerSpec> layers;

  // A multimodal checkpoint's text tower (Gemma 3/4 *ForConditionalGeneration).
  // names: {model prefix, lm_head prefix} spellings tried in order, the first
  // whose {model prefix}embed_tokens.weight exists wins; empty: "model." and
  // "lm_head" (a CausalLM), or bare names (a base model). ignored_prefixes:
  // tensor-name prefix -> why every tensor under it is not run (vision/audio towers).
  // embed_as: token id -> the id whose embeddings (and PLE) it takes (Gemma 4's
  // media placeholders, embedded as pad_token_id in text-only input).
  struct TextTower {
    std::vector<std::pair<std::string, std::string>> names;
    std::map<std::string, std::string> ignored_prefixes;
    std::map<int64_t, int64_t> embed_as;
  };
  TextTower text_tower;
};

// Builds the decoder `spec` describes from the checkpoint in ctx.snapshot.
// Throws TensorMappingError (a tensor missing, misshapen or unused) or
// ConfigError.
std::unique_ptr<CausalLM> load_decoder(const LoadContext& ctx, const DecoderSpec& spec);

}  // namespace hubzoo
