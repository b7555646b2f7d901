// The decoder's forward pass: embeddings, the layers as their LayerSpec says
// (models/decoder.h shows one layer), the final norm and the logits tail.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/heap.h"
#include "models/decoder_impl.h"
#include "models/decoder_step.h"
#include "models/decoder_steps.h"
#include "ops/elementwise.h"

namespace hubzoo {

void Decoder::forward(const TokenBatch& batch, KvCache& cache, const ForwardOptions& opt,
                      ForwardResult& out) {
  const std::lock_guard lock(forward_mu_);  // ws_ serves one step at a time
  const int64_t long_after = rope_full_ ? rope_full_->long_after() : 0;
  LongRopeReplay replay;
  if (long_after > 0) {  // what forward_step checks, before a replay resets a slot
    check_token_batch(batch, cache, spec_.vocab_size);
    if (!opt.capture.empty()) check_capture_names(opt.capture, capture_known_);
  }
  if (plan_long_rope_replay(batch, cache, long_after, opt, replay)) {
    forward_step(replay.batch, cache, replay.options, out);
    drop_replayed_rows(replay, out);
  } else {
    forward_step(batch, cache, opt, out);
  }
  if (batch.size() > DecoderWorkspace::kKeepStepRows) {
    ws_.release();
    release_free_heap();
  }
  if (!cache.keeps_token_ids()) return;
  for (int64_t t = 0; t < batch.size(); ++t) {
    cache.set_token_id(batch.slot[t], batch.pos[t], batch.ids[t]);
  }
}

void Decoder::forward_step(const TokenBatch& batch, KvCache& cache, const ForwardOptions& opt,
                           ForwardResult& out) {
  const int64_t m = batch.size(), h = spec_.hidden_size;
  const int64_t nl = static_cast<int64_t>(layers_.size());
  const auto new_lengths = check_token_batch(batch, cache, spec_.vocab_size);
  if (spec_.hidden_size_per_layer_input) {
    for (int64_t t = 0; t < m; ++t) {
      if (batch.ids[t] >= spec_.vocab_size_per_layer_input) {
        throw InvalidArgument("token id " + std::to_string(batch.ids[t]) +
                              " is outside vocab_size_per_layer_input");
      }
    }
  }
  for (const auto& [slot, len] : new_lengths) cache.reserve(slot, len);
  if (!opt.capture.empty()) check_capture_names(opt.capture, capture_known_);

  Step s{
      batch, cache, opt, out, m, h, ws_.x.get(m * h), ws_.normed.get(m * h), ws_.branch.get(m * h)};
  embed(batch, s.x);
  s.capture("embed", s.x, m, h);
  scale_rows(s.x, m * h, spec_.embedding_multiplier);  // Granite, after embed_tokens
  if (spec_.hidden_size_per_layer_input) {
    const int64_t width = nl * spec_.hidden_size_per_layer_input;
    per_layer_inputs(batch, s.x, ws_.per_layer.get(m * width));
  }
  // Fused residual adds: each layer's last add computes the next norm too.
  if (spec_.fuse_residual_add)
    (nl > 0 ? layers_[0].input_layernorm : norm_).forward(s.x, m, s.normed);
  for (int64_t i = 0; i < nl; ++i) {
    layer_forward(layers_[i], i + 1 < nl ? layers_[i + 1].input_layernorm : norm_, s);
  }
  for (const DecoderLayer& layer : layers_) {  // deferred stores of KV producers
    if (!layer.has_consumers) continue;
    const KvChunk& kept = ws_.kept[&layer - layers_.data()];
    store_chunk(batch, kept.k.data(), kept.v.data(), cache, layer.cache_layer);
  }
  if (!spec_.fuse_residual_add) norm_.forward(s.x, m, s.normed);
  s.capture("norm", s.normed, m, h);
  logits_tail(s.normed, s);
  for (const auto& [slot, len] : new_lengths) cache.set_length(slot, len);
}

// x [M, H]: the token embeddings, times embed_scale_ (rounded as transformers) when scaled.
int64_t Decoder::embedding_id(int64_t id) const {
  const auto& remap = spec_.text_tower.embed_as;
  if (remap.empty()) return id;
  const auto it = remap.find(id);
  return it == remap.end() ? id : it->second;
}

void Decoder::embed(const TokenBatch& batch, float* x) const {
  const int64_t m = batch.size(), h = spec_.hidden_size;
  for (int64_t t = 0; t < m; ++t) {
    float* row = x + t * h;
    const int64_t id = embedding_id(batch.ids[t]);
    if (spec_.tie_word_embeddings) {
      lm_head_.weight.copy_row(id, row);
    } else if (embed_quantized_.is_quantized()) {
      embed_quantized_.copy_row(id, row);
    } else {
      std::copy_n(embed_tokens_.data() + id * h, h, row);
    }
    if (!spec_.scale_embeddings) continue;
    for (int64_t i = 0; i < h; ++i) row[i] = numerics_.round_eager(row[i] * embed_scale_);
  }
}

// One decoder layer (models/decoder.h draws it). next_norm: the following
// layer's input_layernorm or the final norm, which a fused residual add computes.
void Decoder::layer_forward(const DecoderLayer& layer, const RMSNorm& next_norm, Step& s) {
  attention_block(layer, s);
  feed_forward_block(layer, s);
  if (spec_.fuse_residual_add) {
    next_norm.add_forward(s.x, s.branch, s.m, s.normed, numerics_);  // a bf16 residual add in eager
  } else {
    add_rows(s);
    numerics_.round_eager(s.x, s.m * s.h);  // a bf16 residual add in eager
  }
  if (layer.spec.per_layer_input) per_layer_block(layer, s);
  if (layer.spec.layer_scalar) {
    for (int64_t j = 0; j < s.m * s.h; ++j) {
      s.x[j] = numerics_.round_eager(s.x[j] * layer.layer_scalar);
    }
  }
  s.capture(layer.names.layer, s.x, s.m, s.h);
}

// x += branch, rows split over the threads.
void Decoder::add_rows(Step& s) const {
  pool_->parallel_rows(s.m, min_parallel_rows(s.h), [&](int64_t r0, int64_t r1) {
    add_inplace(s.x + r0 * s.h, s.branch + r0 * s.h, (r1 - r0) * s.h);
  });
}

// x *= factor (unless 1), rounded as a bf16 tensor times a Python float in eager mode.
void Decoder::scale_rows(float* x, int64_t n, float factor) const {
  if (factor == 1.0f) return;
  for (int64_t j = 0; j < n; ++j) x[j] = numerics_.round_eager(x[j] * factor);
}

// normed = input_layernorm(x) (unless a fused add computed it, or kPost: none);
// branch = attention (post-normed with kSandwich/kPost norms); x += branch
// (times residual_multiplier); normed = the pre-MLP norm of x (kPost: none).
// The branch before the multiplier is what "layers.{i}.self_attn" captures.
void Decoder::attention_block(const DecoderLayer& layer, Step& s) {
  const NormPlacement placement = spec_.norm_placement;
  const float* in = placement == NormPlacement::kPost ? s.x : s.normed;
  if (!spec_.fuse_residual_add && placement != NormPlacement::kPost) {
    layer.input_layernorm.forward(s.x, s.m, s.normed);
  }
  const int64_t i = &layer - layers_.data();
  KvSharing sharing;
  if (layer.spec.attn.kv_shared) {
    sharing.reuse = &ws_.kept[layer.spec.kv_producer];
  } else if (layer.has_consumers) {
    // A ring buffer must keep the rows its consumers still read this pass.
    sharing.keep = &ws_.kept[i];
    sharing.defer_store = true;
  }
  layer.self_attn->forward(s.batch, in, s.branch, s.cache, layer.cache_layer, *pool_, ws_.layers,
                           sharing);
  const RMSNorm* pre_mlp = &layer.post_attention_layernorm;
  if (placement != NormPlacement::kPre) {
    layer.post_attention_layernorm.forward(s.branch, s.m, s.branch);
    pre_mlp = layer.pre_feedforward_layernorm ? &*layer.pre_feedforward_layernorm : nullptr;
  }
  s.capture(layer.names.self_attn, s.branch, s.m, s.h);
  scale_rows(s.branch, s.m * s.h, spec_.residual_multiplier);
  if (pre_mlp) {
    pre_mlp->add_forward(s.x, s.branch, s.m, s.normed, numerics_);
  } else {  // kPost: the MLP reads x itself
    add_rows(s);
    numerics_.round_eager(s.x, s.m * s.h);  // a bf16 residual add in eager
  }
}

// branch = the MLP (or MoE) of normed (kPost: of x), post-normed with
// kSandwich/kPost norms; what "layers.{i}.mlp" captures; then times
// residual_multiplier.
void Decoder::feed_forward_block(const DecoderLayer& layer, Step& s) {
  const float* in = spec_.norm_placement == NormPlacement::kPost ? s.x : s.normed;
  if (layer.spec.moe == MoeKind::kReplacesMlp) {
    MoeRouting routing;
    layer.moe->forward(in, s.m, s.branch, *pool_, ws_.layers, &routing);
    s.capture_routing(layer.names, routing, spec_.moe);
  } else {
    layer.mlp->forward(in, s.m, s.branch, *pool_, ws_.layers);
  }
  if (layer.spec.moe == MoeKind::kBesideMlp) moe_beside_mlp(layer, s);
  if (layer.post_feedforward_layernorm) {
    layer.post_feedforward_layernorm->forward(s.branch, s.m, s.branch);
  }
  s.capture(layer.names.mlp, s.branch, s.m, s.h);
  scale_rows(s.branch, s.m * s.h, spec_.residual_multiplier);
}

// (rows, V) logits of the rows asked for, softcapped when the spec says so.
void Decoder::logits_tail(const float* normed, Step& s) {
  const int64_t v = spec_.vocab_size;
  if (!has_lm_head_) {  // an encoder-only base model: hidden states, no logits
    s.out.logits.clear();
    return;
  }
  compute_logits(normed, s.m, s.h, s.opt.logits_rows, lm_head_, numerics_, *pool_, s.out.logits);
  const int64_t rows = static_cast<int64_t>(s.out.logits.size()) / v;
  if (spec_.logits_scaling != 1.0f) {  // Granite: logits / logits_scaling
    for (float& l : s.out.logits) l = numerics_.round_eager(l / spec_.logits_scaling);
  }
  softcap_logits(s.out.logits.data(), rows * v, spec_.final_logit_softcapping, numerics_);
  s.capture("logits", s.out.logits.data(), rows, v);
}

}  // namespace hubzoo
