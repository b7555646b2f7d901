// BERT, RoBERTa and XLM-RoBERTa, in pieces: the config mapping
// (models/bert_config.cc), one post-LayerNorm encoder layer
// (models/bert_layer.cc) and the encoder that stacks them (models/bert.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/json.h"
#include "io/safetensors.h"
#include "layers/linear.h"
#include "layers/numerics.h"
#include "layers/weights.h"
#include "ops/thread_pool.h"

namespace hubzoo {

struct BertConfig {
  int64_t vocab_size, hidden_size, num_layers, num_heads, head_dim, intermediate_size;
  int64_t max_position_embeddings, type_vocab_size, pad_token_id;
  float layer_norm_eps;
  // RoBERTa numbers positions from pad_token_id + 1, counting non-pad tokens
  // (transformers' create_position_ids_from_input_ids); BERT from 0.
  bool roberta_positions;
};

// BertConfig / RobertaConfig as transformers reads them (its defaults when a
// field is missing). Options that would change the math and are not
// implemented (another hidden_act or position_embedding_type, a decoder) are
// a ConfigError naming the field.
BertConfig parse_bert_config(const JsonObject& config, bool roberta);

// torch.nn.LayerNorm under {prefix}.weight/.bias, or the .gamma/.beta of old
// checkpoints (which transformers renames on load).
LayerNorm load_bert_layer_norm(WeightLoader& w, const std::string& prefix, int64_t n, float eps);

// Sequence s of the batch holds rows [start[s], start[s] + length[s]).
struct SequenceSpans {
  std::vector<int64_t> start, length;  // one per sequence
};

// Buffers of one forward pass over M rows, reused by every layer
// (uninitialised: every element is written before it is read).
struct BertScratch {
  BertScratch(int64_t m, const BertConfig& cfg);
  std::unique_ptr<float[]> qkv, ctx, hidden;  // [M, 3H], [M, H], [M, intermediate]
};

// What a layer's forward uses besides its weights.
struct BertContext {
  const BertConfig& cfg;
  const Numerics& numerics;
  ThreadPool& pool;
};

// transformers' BertLayer: attention block, then MLP block, each closed by a
// residual add and a LayerNorm. Eager bf16 rounds where transformers' eager
// bf16 code does.
struct BertLayer {
  Linear qkv;                   // attention.self.{query,key,value}: [3H, H]
  Linear attention_dense;       // attention.output.dense
  LayerNorm attention_norm;     // attention.output.LayerNorm
  Linear intermediate, output;  // intermediate.dense, output.dense
  LayerNorm output_norm;        // output.LayerNorm

  // The tensors under prefix ("bert.encoder.layer.3."); q/k/v packed into one matrix.
  static BertLayer load(WeightLoader& w, const Checkpoint& ckpt, const std::string& prefix,
                        const BertConfig& cfg);

  // a = LayerNorm(dense(softmax(q k^T / sqrt(d)) v) + x); x, a: [M, H].
  // Each sequence attends over its own tokens, in both directions.
  void attention_block(const BertContext& c, const SequenceSpans& spans, const float* x, int64_t m,
                       float* a, BertScratch& scratch) const;
  // x = LayerNorm(output(gelu(intermediate(a))) + a); a, x: [M, H].
  void mlp_block(const BertContext& c, const float* a, int64_t m, float* x,
                 BertScratch& scratch) const;
};

}  // namespace hubzoo
