// T5's blocks: loading, the attention with relative position bias and no
// score scale (layers/attention.h's attend_head_scored with a bias), the
// ReLU / gated-GELU feed-forward and the residual adds.
#include <algorithm>
#include <cmath>

#include "layers/attention.h"
#include "models/t5.h"
#include "ops/bf16.h"
#include "ops/elementwise.h"

namespace hubzoo {
namespace {

// transformers' NewGELUActivation (gelu_new), op by op as PyTorch evaluates
// it: 0.5 x * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))); eager bf16 rounds
// every op's result.
float gelu_new(float x, const Numerics& n) {
  const float c = static_cast<float>(std::sqrt(2.0 / M_PI));
  const float cube = n.round_eager(x * x * x);
  const float inner = n.round_eager(x + n.round_eager(0.044715f * cube));
  const float t = n.round_eager(std::tanh(n.round_eager(c * inner)));
  return n.round_eager(n.round_eager(0.5f * x) * n.round_eager(1.0f + t));
}

float activate(T5Activation act, float x, const Numerics& n) {
  return act == T5Activation::kRelu ? std::max(x, 0.0f) : gelu_new(x, n);
}

}  // namespace

std::vector<float> t5_position_bias(const T5Config& cfg, const FloatWeights& table, int64_t lo,
                                    int64_t count, bool bidirectional) {
  const int64_t heads = cfg.num_heads;
  std::vector<float> bias(heads * count);
  for (int64_t j = 0; j < count; ++j) {
    const int64_t b = t5_relative_bucket(lo + j, bidirectional, cfg.num_buckets, cfg.max_distance);
    for (int64_t h = 0; h < heads; ++h) bias[h * count + j] = table[b * heads + h];
  }
  return bias;
}

T5Attention T5Attention::load(WeightLoader& w, const std::string& p, const T5Config& cfg) {
  const int64_t d = cfg.d_model, inner = cfg.inner();
  T5Attention a;
  a.q = Linear::load(w, p + "q", d, inner, false);
  a.kv = Linear::load_concat(w, {p + "k", p + "v"}, d, {inner, inner}, false);
  a.o = Linear::load(w, p + "o", inner, d, false);
  return a;
}

void T5Attention::attend(const T5Context& c, const float* q_rows, int64_t m,
                         const std::function<T5Keys(int64_t)>& keys_of, float* out) const {
  const int64_t heads = c.cfg.num_heads, dk = c.cfg.d_kv, inner = c.cfg.inner();
  c.pool.parallel_for(m, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t t = begin; t < end; ++t) {
      const T5Keys k = keys_of(t);
      scores.resize(k.len);
      for (int64_t h = 0; h < heads; ++h) {
        ScoreOptions o;
        o.scale = 1.0f;  // T5 folds the scale into its initialisation
        o.eager_bf16 = c.numerics.eager_bf16();
        o.bias = k.bias ? k.bias + h * k.bias_stride : nullptr;
        attend_head_scored(q_rows + t * inner + h * dk, k.keys + h * dk, k.values + h * dk,
                           k.stride, k.len, dk, o, scores.data(), out + t * inner + h * dk);
      }
    }
  });
}

T5FeedForward T5FeedForward::load(WeightLoader& w, const std::string& p, const T5Config& cfg) {
  const int64_t d = cfg.d_model, ff = cfg.d_ff;
  T5FeedForward f;
  f.wi = cfg.gated ? Linear::load_concat(w, {p + "wi_0", p + "wi_1"}, d, {ff, ff}, false)
                   : Linear::load(w, p + "wi", d, ff, false);
  // transformers keeps wo in fp32 when it loads a model in bf16 (_keep_in_fp32_modules).
  f.wo.weight = w.numerics().bf16 ? w.take_packed_fp32(p + "wo.weight", d, ff)
                                  : w.take_packed(p + "wo.weight", d, ff);
  return f;
}

void T5FeedForward::forward(const T5Context& c, const float* x, int64_t m, float* out) const {
  const int64_t ff = c.cfg.d_ff, width = c.cfg.gated ? 2 * ff : ff;
  std::vector<float> h(m * width), act(m * ff);
  wi.forward(x, m, h.data(), c.pool);
  c.numerics.round_eager(h.data(), m * width);
  const Numerics& n = c.numerics;
  c.pool.parallel_for(m, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = &h[r * width];
      float* a = &act[r * ff];
      for (int64_t i = 0; i < ff; ++i) {
        const float g = activate(c.cfg.act, row[i], n);
        a[i] = c.cfg.gated ? n.round_eager(g * row[ff + i]) : g;
      }
    }
  });
  wo.forward(act.data(), m, out, c.pool);  // fp32 weights, fp32 output (see load)
}

T5Block T5Block::load(WeightLoader& w, const std::string& p, const T5Config& cfg, bool decoder) {
  const int64_t d = cfg.d_model;
  T5Block b;
  b.self_norm = RMSNorm::load(w, p + "layer.0.layer_norm.weight", d, cfg.eps);
  b.self_attn = T5Attention::load(w, p + "layer.0.SelfAttention.", cfg);
  const std::string ff = p + (decoder ? "layer.2." : "layer.1.");
  if (decoder) {
    b.cross_norm = RMSNorm::load(w, p + "layer.1.layer_norm.weight", d, cfg.eps);
    b.cross_attn = T5Attention::load(w, p + "layer.1.EncDecAttention.", cfg);
  }
  b.ff_norm = RMSNorm::load(w, ff + "layer_norm.weight", d, cfg.eps);
  b.ff = T5FeedForward::load(w, ff + "DenseReluDense.", cfg);
  return b;
}

void t5_residual_add(const T5Context& c, float* x, const float* branch, int64_t n, bool bf16_sum) {
  add_inplace(x, branch, n);
  if (bf16_sum) c.numerics.round_eager(x, n);
}

}  // namespace hubzoo
