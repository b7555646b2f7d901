// Steps every decoder's forward() shares: validating the TokenBatch before it
// runs, the logits of the rows asked for after the final norm (and their
// softcap), the embedding scale, and the names of the intermediates a
// forward can capture.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "layers/batch.h"
#include "layers/kv_cache.h"
#include "layers/linear.h"
#include "layers/numerics.h"
#include "models/causal_lm.h"
#include "ops/thread_pool.h"

namespace hubzoo {

// Checks ids against the vocabulary, slots against the cache, and that each
// slot's positions continue its cache in order; returns each touched slot's
// new length. Throws InvalidArgument naming what is wrong.
std::map<int64_t, int64_t> check_token_batch(const TokenBatch& batch, const KvCache& cache,
                                             int64_t vocab_size);

// logits [rows, vocab] = lm_head(normed rows), for `rows` of the batch's m
// rows (every row when empty), rounded as transformers' bf16 logits in eager
// mode. Throws InvalidArgument for a row out of range.
void compute_logits(const float* normed, int64_t m, int64_t hidden,
                    const std::vector<int64_t>& rows, const Linear& lm_head,
                    const Numerics& numerics, ThreadPool& pool, std::vector<float>& logits);

// "embed", then per layer i "layers.i.self_attn", "layers.i.mlp", "layers.i"
// (and, where sparse(i), "layers.i.mlp.router_logits" [M, E] fp32,
// ".selected_experts" [M, k] ids, ".routing_weights" [M, k]), then "norm", "logits".
std::vector<std::string> decoder_capture_names(int64_t num_layers,
                                               const std::function<bool(int64_t)>& sparse);

// Throws InvalidArgument naming the first of `asked` not in `known`.
void check_capture_names(const std::set<std::string>& asked, const std::set<std::string>& known);

// sqrt(hidden_size) as transformers multiplies the embedding by it: a float32
// tensor cast to the weights' dtype (bf16 in both bf16 modes: 55.4256 -> 55.5).
float embedding_scale(int64_t hidden_size, const Numerics& numerics);

// logits -> tanh(logits / cap) * cap in place (cap > 0), rounding each op as
// transformers' bf16 eager code does.
void softcap_logits(float* logits, int64_t n, float cap, const Numerics& numerics);

// LongRoPE (Phi-3) as transformers generates: a step in which a sequence first
// grows past `long_after` positions while its cache holds 1..long_after of
// them recomputes those too, so that every position takes the long factors
// (Phi3ForCausalLM.prepare_inputs_for_generation drops the cache then; a step
// that starts from an empty cache needs nothing). The replay batch holds such
// a slot's kept token ids at positions 0..L-1 just before the step's rows of
// that slot, and the slot's cache length is reset to 0 (the cache must keep
// token ids: KvCache::keep_token_ids). false: nothing to replay.
struct LongRopeReplay {
  TokenBatch batch;
  ForwardOptions options;     // logits_rows: the original rows' (or all of them), in order
  std::vector<int64_t> rows;  // [M]: each original row's index in `batch`
};
bool plan_long_rope_replay(const TokenBatch& batch, KvCache& cache, int64_t long_after,
                           const ForwardOptions& options, LongRopeReplay& replay);

// Keeps only the original rows of each capture of a replayed step (the
// logits were already asked for by row).
void drop_replayed_rows(const LongRopeReplay& replay, ForwardResult& result);

}  // namespace hubzoo
