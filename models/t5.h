// T5 (v1.0, v1.1, FLAN-T5, mT5) in pieces: the config mapping
// (models/t5_config.cc), the blocks and their attention with T5's relative
// position bias (models/t5_layer.cc) and the encoder-decoder model over them
// (models/t5.cc), as transformers' modeling_t5.py computes them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/json.h"
#include "layers/linear.h"
#include "layers/numerics.h"
#include "layers/weights.h"
#include "ops/thread_pool.h"

namespace hubzoo {

enum class T5Activation { kRelu, kGeluNew };

struct T5Config {
  int64_t vocab_size, d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads;
  int64_t num_buckets, max_distance;  // relative_attention_num_buckets / _max_distance
  float eps;                          // layer_norm_epsilon
  T5Activation act;
  bool gated;  // feed_forward_proj "gated-*": act(wi_0 x) * wi_1 x
  // v1.0 (tied embeddings): decoder output * d_model^-0.5 before lm_head.
  bool scale_decoder_outputs;
  int64_t decoder_start_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;
  int64_t inner() const { return num_heads * d_kv; }
};

// T5Config as transformers reads it (its defaults when a field is missing);
// an unknown feed_forward_proj or a bad size is a ConfigError naming the field.
T5Config parse_t5_config(const JsonObject& config);

// transformers' T5Attention._relative_position_bucket for one relative
// position (memory position - query position).
int64_t t5_relative_bucket(int64_t relative, bool bidirectional, int64_t num_buckets,
                           int64_t max_distance);

// What a block's forward uses besides its weights.
struct T5Context {
  const T5Config& cfg;
  const Numerics& numerics;
  ThreadPool& pool;
};

// Per head, the bias of every relative position in [lo, lo + count):
// table[bucket(lo + j)][head] at [head * count + j] (the stack's
// relative_attention_bias, [num_buckets, heads]).
std::vector<float> t5_position_bias(const T5Config& cfg, const FloatWeights& table, int64_t lo,
                                    int64_t count, bool bidirectional);

// Where a row's attention reads: positions [0, len) of keys/values with rows
// `stride` floats apart (head h at + h * d_kv), and per head the bias of
// position j at bias[h * bias_stride + j] (null: none).
struct T5Keys {
  const float* keys;
  const float* values;
  int64_t stride, len;
  const float* bias;
  int64_t bias_stride;
};

// One attention sublayer: q/k/v/o without biases, no score scale.
struct T5Attention {
  Linear q, kv, o;  // kv: k and v packed ([2 * inner, d_model])
  static T5Attention load(WeightLoader& w, const std::string& prefix, const T5Config& cfg);
  // out[row] = concat over heads of softmax(q k^T + bias) v over keys_of(row).
  // q_rows: [m, inner] (q's output) -> out: [m, inner], before o.
  void attend(const T5Context& c, const float* q_rows, int64_t m,
              const std::function<T5Keys(int64_t)>& keys_of, float* out) const;
};

// T5LayerFF's DenseReluDense: wo(act(wi x)) or wo(act(wi_0 x) * wi_1 x).
struct T5FeedForward {
  Linear wi;  // [d_ff, d_model], or wi_0 | wi_1 packed: [2 * d_ff, d_model]
  Linear wo;  // kept in fp32 under bf16, as transformers' _keep_in_fp32_modules
  static T5FeedForward load(WeightLoader& w, const std::string& prefix, const T5Config& cfg);
  // x: [m, d_model] (normed) -> out: [m, d_model].
  void forward(const T5Context& c, const float* x, int64_t m, float* out) const;
};

// The pieces of one T5Block (encoder: no cross-attention).
struct T5Block {
  RMSNorm self_norm;
  T5Attention self_attn;
  std::optional<RMSNorm> cross_norm;
  std::optional<T5Attention> cross_attn;
  RMSNorm ff_norm;
  T5FeedForward ff;
  static T5Block load(WeightLoader& w, const std::string& prefix, const T5Config& cfg,
                      bool decoder);
};

// x += branch, rounded to bf16 in eager mode only where transformers' bf16
// model adds two bf16 tensors (before the first feed-forward; wo's fp32
// output makes the residual stream fp32 from then on).
void t5_residual_add(const T5Context& c, float* x, const float* branch, int64_t n, bool bf16_sum);

}  // namespace hubzoo
