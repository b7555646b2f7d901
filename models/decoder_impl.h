// The decoder's insides, shared by models/decoder_load.cc (building it from a
// checkpoint) and models/decoder.cc (the forward pass). Not for families:
// they see models/decoder.h only.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "layers/attention.h"
#include "layers/linear.h"
#include "layers/mlp.h"
#include "layers/moe.h"
#include "layers/workspace.h"
#include "models/decoder.h"
#include "ops/scratch.h"

namespace hubzoo {

// A layer's capture names, built once at load so a step that captures
// nothing builds no string.
struct LayerNames {
  std::string layer, self_attn, mlp;                             // "layers.{i}", ...
  std::string router_logits, selected_experts, routing_weights;  // MoE layers
};

struct DecoderLayer {
  LayerSpec spec;
  LayerNames names;
  int64_t cache_layer = 0;     // the cache layer it reads (a KV-shared one: its producer's)
  bool has_consumers = false;  // later layers reuse its keys/values
  RMSNorm input_layernorm, post_attention_layernorm;  // input_layernorm: none with kPost
  std::optional<RMSNorm> pre_feedforward_layernorm;   // kSandwich
  std::optional<RMSNorm> post_feedforward_layernorm;  // kSandwich, kPost
  std::optional<Attention> self_attn;
  std::optional<GatedMlp> mlp;
  std::optional<SparseMoe> moe;
  // kBesideMlp: post_feedforward_layernorm_1 (dense branch), pre_/post_feedforward_layernorm_2
  // (MoE branch).
  std::optional<RMSNorm> post_feedforward_layernorm_1, pre_feedforward_layernorm_2,
      post_feedforward_layernorm_2;
  std::optional<Linear> per_layer_input_gate, per_layer_projection;  // PLE: (P, H), (H, P)
  std::optional<RMSNorm> post_per_layer_input_norm;
  float layer_scalar = 1.0f;
};

// The activations of a step, owned by the model and reused from step to
// step: allocated once, grown only when a bigger batch comes, freed with the
// model or after a step of more than kKeepStepRows rows (a prompt), so
// decode steps never allocate and a long prompt's buffers (a 4096-token
// prompt's gate/up output alone is 150 MB on Qwen2.5-0.5B) do not stay
// resident. One forward at a time uses it: Decoder::forward holds forward_mu_
// for the whole step (the Scheduler already serialises a model's steps; the
// lock covers callers that share a model across threads, e.g. Python threads
// with the GIL released, at the cost of one uncontended lock per step).
struct DecoderWorkspace {
  ScratchBuffer x, normed, branch;  // [M, H]: residual stream, normed input, sublayer output
  ScratchBuffer moe_out;            // [M, H]: kBesideMlp's MoE branch
  ScratchBuffer per_layer;          // [M, L, P]: PLE inputs of every layer
  ScratchBuffer ple_gate;           // [M, P]
  std::vector<KvChunk> kept;        // KV sharing: producers' keys/values for their consumers
  LayerWorkspace layers;            // attention, MLP and MoE step buffers

  static constexpr int64_t kKeepStepRows = 64;
  void release() {
    for (ScratchBuffer* b : {&x, &normed, &branch, &moe_out, &per_layer, &ple_gate}) b->release();
    for (KvChunk& c : kept) c = KvChunk{};
    layers.release();
  }
};

class Decoder final : public CausalLM {
 public:
  Decoder(const LoadContext& ctx, const DecoderSpec& spec);  // models/decoder_load.cc

  const ModelInfo& info() const override { return info_; }
  KvCache new_cache(int64_t num_slots) const override {
    KvCache cache(cache_specs_, num_slots);
    // LongRoPE may recompute a slot from its tokens (plan_long_rope_replay).
    if (rope_full_ && rope_full_->long_after() > 0) cache.keep_token_ids();
    return cache;
  }
  std::vector<std::string> capture_names() const override { return capture_names_; }
  void forward(const TokenBatch& batch, KvCache& cache, const ForwardOptions& opt,
               ForwardResult& out) override;

 private:
  struct Step;  // one forward's batch, cache, options and buffers (models/decoder.cc)

  // Loading (models/decoder_load.cc).
  // m: the model's tensor prefix ("model.", ""); head: the lm_head's ("lm_head").
  void load_embeddings(const LoadContext& ctx, WeightLoader& w, const std::string& m,
                       const std::string& head);
  DecoderLayer load_layer(WeightLoader& w, const std::string& m, int64_t i);
  void load_moe_branch(WeightLoader& w, const std::string& p, DecoderLayer& layer);
  void plan_cache();
  void build_capture_names();

  // The forward pass (models/decoder.cc): forward() replays a LongRoPE
  // slot when it must, forward_step runs one batch.
  void forward_step(const TokenBatch& batch, KvCache& cache, const ForwardOptions& opt,
                    ForwardResult& out);
  // The row a token id takes in the embedding tables (DecoderSpec::TextTower::embed_as).
  int64_t embedding_id(int64_t id) const;
  void embed(const TokenBatch& batch, float* x) const;
  void per_layer_inputs(const TokenBatch& batch, const float* x, float* proj) const;
  void layer_forward(const DecoderLayer& layer, const RMSNorm& next_norm, Step& s);
  void attention_block(const DecoderLayer& layer, Step& s);
  void feed_forward_block(const DecoderLayer& layer, Step& s);
  void moe_beside_mlp(const DecoderLayer& layer, Step& s);
  void per_layer_block(const DecoderLayer& layer, Step& s);
  void logits_tail(const float* normed, Step& s);
  void scale_rows(float* x, int64_t n, float factor) const;
  void add_rows(Step& s) const;  // x += branch

  std::shared_ptr<ThreadPool> pool_;
  DecoderSpec spec_;
  Numerics numerics_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  ModelInfo info_;
  float embed_scale_ = 1.0f, ple_embed_scale_ = 1.0f;
  std::unique_ptr<Rope> rope_full_, rope_sliding_;
  FloatWeights embed_tokens_;     // (V, H), untied only
  PackedMatrix embed_quantized_;  // (V, H), untied and block-quantized: instead of embed_tokens_
  Linear lm_head_;                // (V, H)
  bool has_lm_head_ = true;       // false: loaded as an encoder from a base model without one
  FloatWeights embed_tokens_per_layer_;  // PLE: (V_ple, L * P)
  Linear per_layer_model_projection_;    // PLE: (L * P, H)
  RMSNorm per_layer_projection_norm_;    // PLE: (P)
  std::vector<DecoderLayer> layers_;
  RMSNorm norm_;
  std::vector<KvLayerSpec> cache_specs_;  // per cache layer (KV-shared layers have none)
  std::vector<std::string> capture_names_;
  std::set<std::string> capture_known_;
  std::mutex forward_mu_;  // one forward at a time owns ws_
  DecoderWorkspace ws_;
};

}  // namespace hubzoo
