// One BERT encoder layer: loading (q/k/v packed) and the two blocks of its
// forward pass, bidirectional attention per sequence and the GELU MLP.
#include <algorithm>
#include <cmath>

#include "models/bert.h"
#include "ops/elementwise.h"
#include "ops/vector_math.h"

namespace hubzoo {
namespace {

// attention.self.{query,key,value} packed as one [3H, H] matrix: one pass
// over x instead of three. Each output element is reduced over K exactly as
// in three separate matmuls (ops/matmul.h), so the result is the same.
Linear load_qkv(WeightLoader& w, const Checkpoint& ckpt, const std::string& prefix, int64_t h) {
  std::vector<float> weight, bias;
  weight.reserve(3 * h * h);
  bias.reserve(3 * h);
  for (const char* part : {"query", "key", "value"}) {
    const std::string name = prefix + part;
    const FloatWeights wt = w.take(name + ".weight", {h, h});  // rounded to bf16 in bf16 modes
    const FloatWeights b = w.take(name + ".bias", {h});
    weight.insert(weight.end(), wt.data(), wt.data() + h * h);
    bias.insert(bias.end(), b.data(), b.data() + h);
    ckpt.release(name + ".weight");  // the packed copy is the only one kept resident
  }
  Linear qkv;
  qkv.weight = w.mark_activations(w.numerics().bf16 ? pack_weights_bf16(weight.data(), 3 * h, h)
                                                    : pack_weights(weight.data(), 3 * h, h));
  qkv.bias = FloatWeights(std::move(bias));
  return qkv;
}

struct Product {
  const float* x;
  int64_t m, ldx;
  const PackedMatrix* w;
  float* y;
  int64_t ldy;
};

// y = x W^T through the batch-invariant matmul (the caller already splits the
// work over (sequence, head) pairs).
void multiply(const Product& p, ThreadPool& pool) {
  MatmulArgs a;
  a.x = p.x;
  a.m = p.m;
  a.ldx = p.ldx;
  a.w = p.w;
  a.y = p.y;
  a.ldy = p.ldy;
  matmul(a, pool);
}

// One head over one sequence of len tokens starting at row s0, as two
// matmuls: scores [len, len] = Q K^T, then ctx [len, D] = softmax(scores * scale) V.
// Bidirectional: every token sees the whole sequence and nothing else, so
// the result does not depend on the batch. Eager bf16 rounds as
// transformers' eager attention: bf16(q k^T), bf16(* scale), softmax in fp32
// cast to bf16, bf16(p v).
struct Head {
  int64_t s0, len, head;
};
void attend_sequence(const BertContext& c, const float* qkv, const Head& at, float* ctx) {
  const int64_t h = c.cfg.hidden_size, d = c.cfg.head_dim, len = at.len;
  const float* q = qkv + at.s0 * 3 * h + at.head * d;  // rows of stride 3H
  const float* k = q + h;
  const float* v = q + 2 * h;
  std::vector<float> rows(len * d);  // K, then V^T, gathered row-major for packing
  for (int64_t j = 0; j < len; ++j) std::copy_n(k + j * 3 * h, d, &rows[j * d]);
  const PackedMatrix keys = pack_weights(rows.data(), len, d);
  for (int64_t j = 0; j < len; ++j) {
    for (int64_t col = 0; col < d; ++col) rows[col * len + j] = v[j * 3 * h + col];
  }
  const PackedMatrix values_t = pack_weights(rows.data(), d, len);

  std::vector<float> scores(len * len);
  multiply({q, len, 3 * h, &keys, scores.data(), len}, c.pool);
  const float scale = static_cast<float>(std::pow(static_cast<double>(d), -0.5));
  for (int64_t i = 0; i < len; ++i) {
    float* row = &scores[i * len];
    for (int64_t j = 0; j < len; ++j) {
      row[j] = c.numerics.round_eager(c.numerics.round_eager(row[j]) * scale);
    }
    softmax_row(row, len);
    c.numerics.round_eager(row, len);
  }
  float* out = ctx + at.s0 * h + at.head * d;
  multiply({scores.data(), len, len, &values_t, out, h}, c.pool);
  for (int64_t i = 0; i < len; ++i) c.numerics.round_eager(out + i * h, d);
}

// y = LayerNorm(y + residual), with transformers' bf16 roundings of y and the sum in eager.
void residual_norm(const BertContext& c, const LayerNorm& norm, const float* residual, int64_t m,
                   float* y) {
  const int64_t n = m * c.cfg.hidden_size;
  c.numerics.round_eager(y, n);
  add_inplace(y, residual, n);
  c.numerics.round_eager(y, n);
  norm.forward(y, m, y);
}

}  // namespace

LayerNorm load_bert_layer_norm(WeightLoader& w, const std::string& prefix, int64_t n, float eps) {
  if (w.contains(prefix + ".weight") || !w.contains(prefix + ".gamma")) {
    return LayerNorm::load(w, prefix, n, eps);
  }
  LayerNorm norm;
  norm.weight = w.take(prefix + ".gamma", {n});
  norm.bias = w.take(prefix + ".beta", {n});
  norm.eps = eps;
  norm.numerics = w.numerics();
  return norm;
}

BertScratch::BertScratch(int64_t m, const BertConfig& cfg)
    : qkv(std::make_unique_for_overwrite<float[]>(m * 3 * cfg.hidden_size)),
      ctx(std::make_unique_for_overwrite<float[]>(m * cfg.hidden_size)),
      hidden(std::make_unique_for_overwrite<float[]>(m * cfg.intermediate_size)) {}

BertLayer BertLayer::load(WeightLoader& w, const Checkpoint& ckpt, const std::string& l,
                          const BertConfig& cfg) {
  const int64_t h = cfg.hidden_size, inter = cfg.intermediate_size;
  const float eps = cfg.layer_norm_eps;
  return BertLayer{
      load_qkv(w, ckpt, l + "attention.self.", h),
      Linear::load(w, l + "attention.output.dense", h, h, true),
      load_bert_layer_norm(w, l + "attention.output.LayerNorm", h, eps),
      Linear::load(w, l + "intermediate.dense", h, inter, true),
      Linear::load(w, l + "output.dense", inter, h, true),
      load_bert_layer_norm(w, l + "output.LayerNorm", h, eps),
  };
}

void BertLayer::attention_block(const BertContext& c, const SequenceSpans& spans, const float* x,
                                int64_t m, float* a, BertScratch& scratch) const {
  const int64_t nh = c.cfg.num_heads;
  float* qkv_rows = scratch.qkv.get();  // [M, (q | k | v)]
  qkv.forward(x, m, qkv_rows, c.pool);
  c.numerics.round_eager(qkv_rows, m * 3 * c.cfg.hidden_size);
  const int64_t num_seqs = static_cast<int64_t>(spans.start.size());
  c.pool.parallel_for(num_seqs * nh, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item / nh, head = item % nh;
      attend_sequence(c, qkv_rows, {spans.start[s], spans.length[s], head}, scratch.ctx.get());
    }
  });
  attention_dense.forward(scratch.ctx.get(), m, a, c.pool);
  residual_norm(c, attention_norm, x, m, a);
}

void BertLayer::mlp_block(const BertContext& c, const float* a, int64_t m, float* x,
                          BertScratch& scratch) const {
  const int64_t inter = c.cfg.intermediate_size;
  float* hidden = scratch.hidden.get();  // [M, intermediate]
  intermediate.forward(a, m, hidden, c.pool);
  c.pool.parallel_for(m, 16, [&](int64_t begin, int64_t end) {
    float* rows = hidden + begin * inter;
    const int64_t n = (end - begin) * inter;
    c.numerics.round_eager(rows, n);
    gelu_erf(rows, n);
    c.numerics.round_eager(rows, n);
  });
  output.forward(hidden, m, x, c.pool);
  residual_norm(c, output_norm, a, m, x);
}

}  // namespace hubzoo
