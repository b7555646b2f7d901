// The attention layer: q/k/v projections, q/k norms, RoPE, the cache and
// attend_chunk (layers/attention.cc), the output projection.
#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "layers/attention.h"

namespace hubzoo {
namespace {

// longrope: per slot, whether its rows take the long factors: every row of a
// slot whose rows reach past long_after() positions does (transformers' seq_len
// = max(position_ids) + 1 of the forward). Empty: the rope has one set.
std::vector<char> long_rope_slots(const TokenBatch& batch, const Rope* rope, int64_t num_slots) {
  std::vector<char> long_slot;
  if (!rope || rope->long_after() <= 0) return long_slot;
  long_slot.assign(num_slots, 0);
  for (int64_t t = 0; t < batch.size(); ++t) {
    long_slot[batch.slot[t]] |= batch.pos[t] >= rope->long_after() ? 1 : 0;
  }
  return long_slot;
}

constexpr int64_t kFetchKvRows = 16;
// A decode step's keys and values cached in this layer before the step (the
// pages of the positions its rows see, each slot once), named for the pool's
// workers to fetch once their part of the q/k/v product is done: attention
// then finds them in cache, fetched while the caller did the serial work
// between the two. At most kFetchKvRows rows (a prompt's attention computes).
void fetch_cached_kv(const TokenBatch& batch, const KvCache& cache, int64_t layer, int64_t window,
                     ThreadPool& pool) {
  thread_local std::vector<ThreadPool::Region> regions;
  regions.clear();
  const int64_t m = batch.size();
  int64_t budget = ThreadPool::kMaxLaterBytes;  // what a worker fetches at most
  for (int64_t t = 0; t < m && budget > 0; ++t) {
    const int32_t slot = batch.slot[t];
    int64_t first = batch.pos[t];  // the slot's first position in the batch
    bool seen = false;
    for (int64_t u = 0; u < m && !seen; ++u) {
      if (batch.slot[u] != slot) continue;
      seen = u < t;
      first = std::min<int64_t>(first, batch.pos[u]);
    }
    if (seen) continue;
    const int64_t lo = window > 0 ? std::max<int64_t>(0, first - window + 1) : 0;
    budget -= cache.page_regions(layer, slot, lo, first, budget, regions);
  }
  pool.prefetch_after_next_job(regions.data(), static_cast<int64_t>(regions.size()));
}

}  // namespace

Attention::Attention(WeightLoader& w, const std::string& prefix, const AttentionOptions& opt,
                     const Rope* rope)
    : opt_(opt), numerics_(w.numerics()), tiles_(w.tiles_wanted()), rope_(rope) {
  const int64_t q_size = opt.num_heads * opt.head_dim;
  const int64_t kv_size = opt.num_kv_heads * opt.head_dim;
  // q/k/v as one matrix: [q_size | kv_size | kv_size] outputs (k_eq_v: no
  // v_proj; kv_shared: q_proj alone).
  std::vector<std::string> parts = {prefix + ".q_proj"};
  std::vector<int64_t> outs = {q_size};
  if (!opt.kv_shared) {
    parts.push_back(prefix + ".k_proj");
    outs.push_back(kv_size);
    if (!opt.k_eq_v) {
      parts.push_back(prefix + ".v_proj");
      outs.push_back(kv_size);
    }
  }
  if (opt.fused_qkv) {  // Phi-3: the checkpoint stores them as one [q | k | v] matrix
    qkv_proj_ =
        Linear::load(w, prefix + ".qkv_proj", opt.hidden_size, q_size + 2 * kv_size, opt.qkv_bias);
  } else {
    qkv_proj_ = Linear::load_concat(w, parts, opt.hidden_size, outs, opt.qkv_bias);
  }
  o_proj_ = Linear::load(w, prefix + ".o_proj", q_size, opt.hidden_size, opt.o_bias);
  if (opt.v_norm) v_norm_ = RMSNorm::unscaled(opt.head_dim, opt.rms_norm_eps, w.numerics());
  const bool whole = opt.qk_norm_scope == QkNormScope::kProjection;
  if (opt.qk_norm) {
    q_norm_ = RMSNorm::load_kind(opt.qk_norm_kind, w, prefix + ".q_norm.weight",
                                 whole ? q_size : opt.head_dim, opt.rms_norm_eps);
  }
  if (opt.qk_norm && !opt.kv_shared) {
    k_norm_ = RMSNorm::load_kind(opt.qk_norm_kind, w, prefix + ".k_norm.weight",
                                 whole ? kv_size : opt.head_dim, opt.rms_norm_eps);
  }
}

void Attention::forward(const TokenBatch& batch, const float* x, float* out, KvCache& cache,
                        int64_t layer, ThreadPool& pool, LayerWorkspace& ws,
                        const KvSharing& sharing) const {
  const int64_t m = batch.size();
  const int64_t d = opt_.head_dim, nh = opt_.num_heads, nkv = opt_.num_kv_heads;
  const int64_t q_size = nh * d, kv_size = nkv * d;
  const Numerics& num = numerics_;
  // One matmul for q, k and v: [M, q_size | kv_size | kv_size], split below.
  const int64_t fused = qkv_proj_.out_features();
  // In the layer workspace: qkv, q, the attention output, and (unless a
  // KV-sharing producer keeps them for its consumers) the keys and values.
  float* const qkv = ws.step.get(m * (fused + 2 * q_size + 2 * kv_size));
  float* const q = qkv + m * fused;    // [M, heads*D]
  float* const attn = q + m * q_size;  // [M, heads*D]
  if (!opt_.kv_shared && m <= kFetchKvRows && pool.num_threads() > 1) {
    fetch_cached_kv(batch, cache, layer, opt_.window, pool);
  }
  qkv_proj_.forward(x, m, qkv, pool);
  num.round_eager(qkv, m * fused);
  const auto take = [&](int64_t offset, int64_t size, float* dst) {
    pool.parallel_rows(m, min_parallel_rows(size), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) std::copy_n(&qkv[t * fused + offset], size, &dst[t * size]);
    });
  };
  take(0, q_size, q);
  // Over [M * heads, D] (kHead) or [M, heads * D] (kProjection): rows of norm.size().
  auto norm_heads = [&](const RMSNorm& norm, float* data, int64_t size) {
    const int64_t rows = m * size / norm.size();
    if (num.eager_bf16()) {
      norm.forward(data, rows, data);
    } else {
      norm.forward_fp32(data, rows, data);
    }
  };
  if (q_norm_) norm_heads(*q_norm_, q, q_size);
  // eager bf16 rotation of transformers' bf16 cos/sin, or fp32 (rope_fp32, then rounded)
  const bool rope_bf16 = num.eager_bf16() && !opt_.rope_fp32;
  const std::vector<char> long_slot = long_rope_slots(batch, rope_, cache.num_slots());
  const auto long_row = [&](int64_t t) { return !long_slot.empty() && long_slot[batch.slot[t]]; };

  // [M, kv_heads*D] keys and values, as stored: a producer's straight into the
  // chunk its consumers read, a consumer's its producer's.
  const float *keys = nullptr, *values = nullptr;
  if (opt_.kv_shared) {
    if (!sharing.reuse)
      throw InvalidArgument("attention: a KV-shared layer needs its producer's keys");
    for (int64_t t = 0; t < m && rope_; ++t) {
      rope_->apply(batch.pos[t], &q[t * q_size], nh, nullptr, 0, rope_bf16, long_row(t));
    }
    if (rope_ && opt_.rope_fp32) num.round_eager(q, m * q_size);
    keys = sharing.reuse->k.data();
    values = sharing.reuse->v.data();
  } else {
    float *k = attn + m * q_size, *v = k + m * kv_size;
    if (sharing.keep) {
      sharing.keep->k.resize(m * kv_size);
      sharing.keep->v.resize(m * kv_size);
      k = sharing.keep->k.data();
      v = sharing.keep->v.data();
    }
    take(q_size, kv_size, k);
    // k_eq_v: transformers' value_states = the k_proj output, before k_norm.
    take(opt_.k_eq_v ? q_size : q_size + kv_size, kv_size, v);
    if (k_norm_) norm_heads(*k_norm_, k, kv_size);
    if (v_norm_) v_norm_->forward(v, m * nkv, v);
    // Keys and values are stored: bf16 in the bf16 modes, half in int8 (Numerics::round_kv).
    pool.parallel_rows(m, min_parallel_rows(q_size + 2 * kv_size), [&](int64_t t0, int64_t t1) {
      num.round_kv(&v[t0 * kv_size], (t1 - t0) * kv_size);
      for (int64_t t = t0; t < t1; ++t) {
        if (rope_) {
          rope_->apply(batch.pos[t], &q[t * q_size], nh, &k[t * kv_size], nkv, rope_bf16,
                       long_row(t));
        }
        num.round_kv(&k[t * kv_size], kv_size);
      }
    });
    if (rope_ && opt_.rope_fp32) num.round_eager(q, m * q_size);
    keys = k;
    values = v;
  }
  ChunkOptions chunk;
  chunk.num_heads = nh;
  chunk.num_kv_heads = nkv;
  chunk.head_dim = d;
  chunk.window = opt_.window;
  chunk.bidirectional = opt_.bidirectional;
  chunk.score.scale =
      opt_.scale > 0 ? opt_.scale : static_cast<float>(std::pow(static_cast<double>(d), -0.5));
  chunk.score.softcap = opt_.softcap;
  chunk.score.eager_bf16 = num.eager_bf16();
  chunk.score.tiles = tiles_;
  const bool store = !opt_.kv_shared && !sharing.defer_store;
  attend_chunk(batch, q, keys, values, cache, layer, chunk, attn, pool, ws, store);
  o_proj_.forward(attn, m, out, pool);
  num.round_eager(out, m * opt_.hidden_size);
}

}  // namespace hubzoo
