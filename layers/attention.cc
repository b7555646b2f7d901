#include "layers/attention.h"

#include <cmath>
#include <vector>

#include "ops/elementwise.h"

namespace hubzoo {

Attention::Attention(WeightLoader& w, const std::string& prefix, const AttentionOptions& opt,
                     const Rope* rope)
    : opt_(opt), rope_(rope) {
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
  if (q_norm_) {
    q_norm_->forward(q.data(), m * nh, q.data());
    k_norm_->forward(k.data(), m * nkv, k.data());
  }
  for (int64_t t = 0; t < m; ++t) {
    rope_->apply(batch.pos[t], &q[t * q_size], nh, &k[t * kv_size], nkv);
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
      const float* qh = &q[t * q_size + h * d];
      scores.resize(len);
      for (int64_t j = 0; j < len; ++j) {
        scores[j] = dot(qh, cache.key(layer, slot, j) + kvh * d, d) * scale;
      }
      softmax_inplace(scores.data(), len);
      float* o = &attn[t * q_size + h * d];
      std::fill_n(o, d, 0.0f);
      for (int64_t j = 0; j < len; ++j)
        axpy(scores[j], cache.value(layer, slot, j) + kvh * d, o, d);
    }
  });
  o_proj_.forward(attn.data(), m, out, pool);
}

}  // namespace hubzoo
