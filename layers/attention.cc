#include "layers/attention.h"

#include <cmath>
#include <vector>

#include "ops/bf16.h"
#include "ops/elementwise.h"

namespace hubzoo {

void attend_head(const float* q, const float* keys, const float* values, int64_t row_stride,
                 int64_t len, int64_t d, float scale, bool eager_bf16, float* scores, float* out) {
  if (eager_bf16) {  // bf16(bf16(q k^T) * scale), softmax in fp32 cast to bf16
    for (int64_t j = 0; j < len; ++j) {
      scores[j] = round_bf16(round_bf16(dot(q, keys + j * row_stride, d)) * scale);
    }
    softmax_inplace(scores, len);
    round_bf16(scores, len);
  } else {
    for (int64_t j = 0; j < len; ++j) scores[j] = dot(q, keys + j * row_stride, d) * scale;
    softmax_inplace(scores, len);
  }
  std::fill_n(out, d, 0.0f);
  for (int64_t j = 0; j < len; ++j) axpy(scores[j], values + j * row_stride, out, d);
  if (eager_bf16) round_bf16(out, d);  // bf16(p v)
}

Attention::Attention(WeightLoader& w, const std::string& prefix, const AttentionOptions& opt,
                     const Rope* rope)
    : opt_(opt), numerics_(w.numerics()), rope_(rope) {
  const int64_t q_size = opt.num_heads * opt.head_dim;
  const int64_t kv_size = opt.num_kv_heads * opt.head_dim;
  q_proj_ = Linear::load(w, prefix + ".q_proj", opt.hidden_size, q_size, opt.qkv_bias);
  k_proj_ = Linear::load(w, prefix + ".k_proj", opt.hidden_size, kv_size, opt.qkv_bias);
  v_proj_ = Linear::load(w, prefix + ".v_proj", opt.hidden_size, kv_size, opt.qkv_bias);
  o_proj_ = Linear::load(w, prefix + ".o_proj", q_size, opt.hidden_size, opt.o_bias);
  if (opt.qk_norm) {
    q_norm_ = RMSNorm::load(w, prefix + ".q_norm.weight", opt.head_dim, opt.rms_norm_eps);
    k_norm_ = RMSNorm::load(w, prefix + ".k_norm.weight", opt.head_dim, opt.rms_norm_eps);
  }
}

void Attention::forward(const TokenBatch& batch, const float* x, float* out, KvCache& cache,
                        int64_t layer, ThreadPool& pool) const {
  const int64_t m = batch.size();
  const int64_t d = opt_.head_dim, nh = opt_.num_heads, nkv = opt_.num_kv_heads;
  const int64_t q_size = nh * d, kv_size = nkv * d;
  std::vector<float> q(m * q_size), k(m * kv_size), v(m * kv_size);  // [M, heads*D]
  q_proj_.forward(x, m, q.data(), pool);
  k_proj_.forward(x, m, k.data(), pool);
  v_proj_.forward(x, m, v.data(), pool);
  const Numerics& num = numerics_;
  num.round_eager(q.data(), m * q_size);
  num.round_eager(k.data(), m * kv_size);
  num.round_eager(v.data(), m * kv_size);
  if (q_norm_ && num.eager_bf16()) {
    q_norm_->forward(q.data(), m * nh, q.data());
    k_norm_->forward(k.data(), m * nkv, k.data());
  } else if (q_norm_) {
    q_norm_->forward_fp32(q.data(), m * nh, q.data());
    k_norm_->forward_fp32(k.data(), m * nkv, k.data());
  }
  // Keys and values are stored: bf16 in both bf16 modes.
  num.round_stored(v.data(), m * kv_size);
  for (int64_t t = 0; t < m; ++t) {
    rope_->apply(batch.pos[t], &q[t * q_size], nh, &k[t * kv_size], nkv, num.eager_bf16());
    num.round_stored(&k[t * kv_size], kv_size);
    std::copy_n(&k[t * kv_size], kv_size, cache.key(layer, batch.slot[t], batch.pos[t]));
    std::copy_n(&v[t * kv_size], kv_size, cache.value(layer, batch.slot[t], batch.pos[t]));
  }

  // softmax(q k^T * scale) v for each (row, head); each reduces over its own
  // sequence's positions in position order, whatever else is in the batch.
  const float scale = static_cast<float>(std::pow(static_cast<double>(d), -0.5));
  const int64_t group = nh / nkv;
  std::vector<float> attn(m * q_size);
  pool.parallel_for(m * nh, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / nh, h = item % nh, kvh = h / group;
      const int64_t slot = batch.slot[t], len = batch.pos[t] + 1;
      scores.resize(len);
      attend_head(&q[t * q_size + h * d], cache.key(layer, slot, 0) + kvh * d,
                  cache.value(layer, slot, 0) + kvh * d, cache.row_size(), len, d, scale,
                  num.eager_bf16(), scores.data(), &attn[t * q_size + h * d]);
    }
  });
  o_proj_.forward(attn.data(), m, out, pool);
  num.round_eager(out, m * opt_.hidden_size);
}

}  // namespace hubzoo
