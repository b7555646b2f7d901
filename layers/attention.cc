#include "layers/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "ops/attend_head.h"
#include "ops/attend_online.h"
#include "ops/bf16.h"
#include "ops/elementwise.h"
#include "ops/scratch.h"

namespace hubzoo {
namespace {

// softmax(softcap(q k^T * scale)) v over rows key_at(j), value_at(j), j in [0, len).
template <class KeyAt, class ValueAt>
void attend_rows(const float* q, const KeyAt& key_at, const ValueAt& value_at, int64_t len,
                 int64_t d, const ScoreOptions& o, float* scores, float* out) {
  if (o.eager_bf16) {  // bf16(bf16(q k^T) * scale), softcap op by op, softmax fp32 -> bf16
    for (int64_t j = 0; j < len; ++j) {
      float s = round_bf16(round_bf16(dot(q, key_at(j), d)) * o.scale);
      if (o.softcap > 0) {
        s = round_bf16(s / o.softcap);
        s = round_bf16(std::tanh(s));
        s = round_bf16(s * o.softcap);
      }
      scores[j] = s;
    }
    softmax_inplace(scores, len);
    round_bf16(scores, len);
  } else {
    for (int64_t j = 0; j < len; ++j) {
      float s = dot(q, key_at(j), d) * o.scale;
      if (o.softcap > 0) s = std::tanh(s / o.softcap) * o.softcap;
      scores[j] = s;
    }
    softmax_inplace(scores, len);
  }
  std::fill_n(out, d, 0.0f);
  for (int64_t j = 0; j < len; ++j) axpy(scores[j], value_at(j), out, d);
  if (o.eager_bf16) round_bf16(out, d);  // bf16(p v)
}

}  // namespace

void attend_head(const float* q, const float* keys, const float* values, int64_t row_stride,
                 int64_t len, int64_t d, float scale, bool eager_bf16, float* scores, float* out) {
  if (!eager_bf16) {
    attend_head_f32(q, keys, values, row_stride, len, d, scale, scores, out);
    return;
  }
  attend_rows(
      q, [&](int64_t j) { return keys + j * row_stride; },
      [&](int64_t j) { return values + j * row_stride; }, len, d,
      ScoreOptions{scale, 0.0f, eager_bf16}, scores, out);
}

void store_chunk(const TokenBatch& batch, const float* k, const float* v, KvCache& cache,
                 int64_t layer) {
  const int64_t m = batch.size(), row = cache.row_size(layer), ring = cache.window(layer);
  std::vector<int64_t> end(cache.num_slots(), 0);  // one past each slot's last position
  for (int64_t t = 0; t < m; ++t) {
    end[batch.slot[t]] = std::max<int64_t>(end[batch.slot[t]], batch.pos[t] + 1);
  }
  for (int64_t t = 0; t < m; ++t) {
    if (ring > 0 && batch.pos[t] < end[batch.slot[t]] - ring) continue;  // overwritten anyway
    cache.store_key(layer, batch.slot[t], batch.pos[t], &k[t * row]);
    std::copy_n(&v[t * row], row, cache.value(layer, batch.slot[t], batch.pos[t]));
  }
}

void attend_chunk(const TokenBatch& batch, const float* q, const float* k, const float* v,
                  KvCache& cache, int64_t layer, const ChunkOptions& opt, float* out,
                  ThreadPool& pool, bool store) {
  const int64_t m = batch.size(), d = opt.head_dim, nh = opt.num_heads, nkv = opt.num_kv_heads;
  const int64_t q_size = nh * d, kv_size = nkv * d, group = nh / nkv;
  const int64_t ring = cache.window(layer), window = opt.window;
  if (cache.row_size(layer) != kv_size) {
    throw InvalidArgument("attention: cache layer " + std::to_string(layer) + " holds rows of " +
                          std::to_string(cache.row_size(layer)) + " floats, not " +
                          std::to_string(kv_size));
  }
  if (ring > 0 && (window <= 0 || window > ring)) {
    throw InvalidArgument("attention: cache layer " + std::to_string(layer) +
                          " keeps a window of " + std::to_string(ring) +
                          " positions, which does not cover the attention window");
  }
  const KvCache& stored = cache;
  auto first_visible = [&](int64_t p) {
    return window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
  };

  // fp32 scores without softcap: one pass with an online softmax over keys
  // transposed into blocks of 16 positions (ops/attend_online.h), every query
  // head of a key/value head in one call. Rows are taken from both ends of
  // the batch in turn, so that the contiguous halves the threads get hold
  // as many long causal rows as short ones.
  const bool online = !opt.score.eager_bf16 && opt.score.softcap <= 0;
  const auto row_of = [m](int64_t i) { return i % 2 == 0 ? i / 2 : m - 1 - i / 2; };
  // Rows differ in length: smaller chunks, claimed by whichever thread is free.
  const int chunks = 8 * pool.num_threads();

  if (ring == 0 && store) {  // every position stays: write first, then read the cache alone
    store_chunk(batch, k, v, cache, layer);
    if (online) {
      // Each row's query heads of a KV head in one call over its visible
      // positions; blocks_of(slot, kvh): the key blocks of the slot from
      // position 0, `stride` floats from block to block.
      const auto attend_all = [&](const auto& blocks_of, int64_t stride) {
        pool.parallel_for(
            m * nkv, 1,
            [&](int64_t begin, int64_t stop) {
              for (int64_t item = begin; item < stop; ++item) {
                const int64_t t = row_of(item / nkv), kvh = item % nkv;
                const int64_t slot = batch.slot[t], lo = first_visible(batch.pos[t]);
                const int64_t at = t * q_size + kvh * group * d;
                attend_online_f32(&q[at], d, group, blocks_of(slot, kvh) + lo / kKeyBlock * stride,
                                  stride, stored.value(layer, slot, lo) + kvh * d, kv_size,
                                  lo % kKeyBlock, batch.pos[t] + 1 - lo, d, opt.score.scale,
                                  &out[at], d);
              }
            },
            chunks);
      };
      if (cache.blocked_keys(layer)) {  // the cache keeps the keys as blocks already
        attend_all(
            [&](int64_t slot, int64_t kvh) {
              return stored.key_blocks(layer, slot) + kvh * d * kKeyBlock;
            },
            kv_size * kKeyBlock);
        return;
      }
      // Key rows: the blocks of each (slot, KV head) over positions [0, end),
      // built once for all the batch's rows of that slot. Kept from call to
      // call (no page faults per layer); workers see only the pointer (a
      // thread_local named inside the jobs would be their own).
      std::vector<int64_t> end(cache.num_slots(), 0), offset(cache.num_slots(), 0), slots;
      for (int64_t t = 0; t < m; ++t) {
        end[batch.slot[t]] = std::max<int64_t>(end[batch.slot[t]], batch.pos[t] + 1);
      }
      int64_t floats = 0;
      for (int64_t s = 0; s < cache.num_slots(); ++s) {
        if (end[s] == 0) continue;
        slots.push_back(s);
        offset[s] = floats;
        floats += nkv * key_blocks(0, end[s]) * d * kKeyBlock;
      }
      thread_local std::vector<float> blocks;
      if (static_cast<int64_t>(blocks.size()) < floats) blocks.resize(floats);
      float* const block_base = blocks.data();
      const auto head_blocks = [&](int64_t slot, int64_t kvh) {
        return block_base + offset[slot] + kvh * key_blocks(0, end[slot]) * d * kKeyBlock;
      };
      const int64_t n_slots = static_cast<int64_t>(slots.size());
      pool.parallel_for(
          n_slots * nkv, 1,
          [&](int64_t begin, int64_t stop) {
            for (int64_t item = begin; item < stop; ++item) {
              const int64_t slot = slots[item / nkv], kvh = item % nkv;
              transpose_key_blocks(stored.key(layer, slot, 0) + kvh * d, kv_size, 0, end[slot], d,
                                   head_blocks(slot, kvh));
            }
          },
          chunks);
      attend_all(head_blocks, d * kKeyBlock);
      return;
    }
    if (cache.blocked_keys(layer)) {
      throw InvalidArgument("attention: cache layer " + std::to_string(layer) +
                            " keeps blocked keys, which only fp32 scores without softcap read");
    }
    // Each (row, head) reduces over its own sequence's positions in position
    // order, whatever else is in the batch.
    pool.parallel_for(
        m * nh, 1,
        [&](int64_t begin, int64_t end) {
          std::vector<float> scores;
          for (int64_t item = begin; item < end; ++item) {
            const int64_t t = row_of(item / nh), h = item % nh, kvh = h / group;
            const int64_t slot = batch.slot[t], lo = first_visible(batch.pos[t]);
            const int64_t len = batch.pos[t] + 1 - lo;
            const float* keys = stored.key(layer, slot, lo) + kvh * d;
            const float* values = stored.value(layer, slot, lo) + kvh * d;
            scores.resize(len);
            attend_rows(
                &q[t * q_size + h * d], [&](int64_t j) { return keys + j * kv_size; },
                [&](int64_t j) { return values + j * kv_size; }, len, d, opt.score, scores.data(),
                &out[t * q_size + h * d]);
          }
        },
        chunks);
    return;
  }

  if (cache.blocked_keys(layer)) {
    throw InvalidArgument("attention: cache layer " + std::to_string(layer) +
                          " keeps blocked keys, which the deferred-store path does not read");
  }
  // Ring buffer (or no store): a slot's rows in this batch, in position order
  // from where its cache ends (the batch's rows of a slot continue it, one
  // position each); earlier positions come from the cache, these from k, v.
  std::vector<std::vector<int64_t>> rows(cache.num_slots());
  for (int64_t t = 0; t < m; ++t) {
    auto& r = rows[batch.slot[t]];
    if (batch.pos[t] != cache.length(batch.slot[t]) + static_cast<int64_t>(r.size())) {
      throw InvalidArgument("attention: positions of slot " + std::to_string(batch.slot[t]) +
                            " do not continue its cache in order");
    }
    r.push_back(t);
  }
  // A row's keys and values are gathered (from the ring and from this chunk)
  // into contiguous rows first.
  const int64_t heads_per_item = online ? group : 1;
  pool.parallel_for(
      m * nh / heads_per_item, 1,
      [&](int64_t begin, int64_t end) {
        std::vector<float> scores, keys, values, key_blocks_buf;
        for (int64_t item = begin; item < end; ++item) {
          const int64_t per_row = nh / heads_per_item;
          const int64_t t = row_of(item / per_row), h = item % per_row * heads_per_item,
                        kvh = h / group;
          const int64_t slot = batch.slot[t], p = batch.pos[t], lo = first_visible(p);
          const int64_t cached = stored.length(slot), len = p + 1 - lo;
          const std::vector<int64_t>& chunk = rows[slot];
          auto key_at = [&](int64_t j) {
            const int64_t pj = lo + j;
            return (pj < cached ? stored.key(layer, slot, pj) : &k[chunk[pj - cached] * kv_size]) +
                   kvh * d;
          };
          auto value_at = [&](int64_t j) {
            const int64_t pj = lo + j;
            return (pj < cached ? stored.value(layer, slot, pj)
                                : &v[chunk[pj - cached] * kv_size]) +
                   kvh * d;
          };
          if (online) {
            keys.resize(len * d);
            values.resize(len * d);
            for (int64_t j = 0; j < len; ++j) {
              std::copy_n(key_at(j), d, &keys[j * d]);
              std::copy_n(value_at(j), d, &values[j * d]);
            }
            key_blocks_buf.resize(key_blocks(lo % kKeyBlock, len) * d * kKeyBlock);
            transpose_key_blocks(keys.data(), d, lo % kKeyBlock, len, d, key_blocks_buf.data());
            attend_online_f32(&q[t * q_size + h * d], d, group, key_blocks_buf.data(),
                              d * kKeyBlock, values.data(), d, lo % kKeyBlock, len, d,
                              opt.score.scale, &out[t * q_size + h * d], d);
            continue;
          }
          scores.resize(len);
          attend_rows(&q[t * q_size + h * d], key_at, value_at, len, d, opt.score, scores.data(),
                      &out[t * q_size + h * d]);
        }
      },
      chunks);
  if (store) store_chunk(batch, k, v, cache, layer);
}

Attention::Attention(WeightLoader& w, const std::string& prefix, const AttentionOptions& opt,
                     const Rope* rope)
    : opt_(opt), numerics_(w.numerics()), rope_(rope) {
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
  qkv_proj_ = Linear::load_concat(w, parts, opt.hidden_size, outs, opt.qkv_bias);
  o_proj_ = Linear::load(w, prefix + ".o_proj", q_size, opt.hidden_size, opt.o_bias);
  if (opt.v_norm) v_norm_ = RMSNorm::unscaled(opt.head_dim, opt.rms_norm_eps, w.numerics());
  if (opt.qk_norm && opt.kv_shared) {
    auto load = opt.qk_norm_kind == QkNormKind::kUnitOffset    ? &RMSNorm::load_unit_offset
                : opt.qk_norm_kind == QkNormKind::kScaleInFp32 ? &RMSNorm::load_scale_in_fp32
                                                               : &RMSNorm::load;
    q_norm_ = load(w, prefix + ".q_norm.weight", opt.head_dim, opt.rms_norm_eps);
  } else if (opt.qk_norm) {
    auto load = opt.qk_norm_kind == QkNormKind::kUnitOffset    ? &RMSNorm::load_unit_offset
                : opt.qk_norm_kind == QkNormKind::kScaleInFp32 ? &RMSNorm::load_scale_in_fp32
                                                               : &RMSNorm::load;
    q_norm_ = load(w, prefix + ".q_norm.weight", opt.head_dim, opt.rms_norm_eps);
    k_norm_ = load(w, prefix + ".k_norm.weight", opt.head_dim, opt.rms_norm_eps);
  }
}

void Attention::forward(const TokenBatch& batch, const float* x, float* out, KvCache& cache,
                        int64_t layer, ThreadPool& pool, const KvSharing& sharing) const {
  const int64_t m = batch.size();
  const int64_t d = opt_.head_dim, nh = opt_.num_heads, nkv = opt_.num_kv_heads;
  const int64_t q_size = nh * d, kv_size = nkv * d;
  const Numerics& num = numerics_;
  // One matmul for q, k and v: [M, q_size | kv_size | kv_size], split below.
  const int64_t fused = qkv_proj_.out_features();
  // qkv, q and the attention output in the layer workspace (ops/scratch.h).
  float* const qkv = layer_scratch().get(m * (fused + 2 * q_size));
  qkv_proj_.forward(x, m, qkv, pool);
  num.round_eager(qkv, m * fused);
  const auto take = [&](int64_t offset, int64_t size, std::vector<float>& dst) {
    dst.resize(m * size);
    for (int64_t t = 0; t < m; ++t) {
      std::copy_n(&qkv[t * fused + offset], size, &dst[t * size]);
    }
  };
  float* const q = qkv + m * fused;  // [M, heads*D]
  for (int64_t t = 0; t < m; ++t) std::copy_n(&qkv[t * fused], q_size, &q[t * q_size]);
  auto norm_heads = [&](const RMSNorm& norm, float* data, int64_t rows) {
    if (num.eager_bf16()) {
      norm.forward(data, rows, data);
    } else {
      norm.forward_fp32(data, rows, data);
    }
  };
  if (q_norm_) norm_heads(*q_norm_, q, m * nh);

  KvChunk own;  // [M, kv_heads*D] keys and values, as stored
  if (opt_.kv_shared) {
    if (!sharing.reuse)
      throw InvalidArgument("attention: a KV-shared layer needs its producer's keys");
    for (int64_t t = 0; t < m; ++t) {
      rope_->apply(batch.pos[t], &q[t * q_size], nh, nullptr, 0, num.eager_bf16());
    }
  } else {
    auto& k = own.k;
    auto& v = own.v;
    take(q_size, kv_size, k);
    if (opt_.k_eq_v) {
      v = k;  // transformers: value_states = the k_proj output, before k_norm
    } else {
      take(q_size + kv_size, kv_size, v);
    }
    if (k_norm_) norm_heads(*k_norm_, k.data(), m * nkv);
    if (v_norm_) v_norm_->forward(v.data(), m * nkv, v.data());
    // Keys and values are stored: bf16 in both bf16 modes.
    num.round_stored(v.data(), m * kv_size);
    for (int64_t t = 0; t < m; ++t) {
      rope_->apply(batch.pos[t], &q[t * q_size], nh, &k[t * kv_size], nkv, num.eager_bf16());
      num.round_stored(&k[t * kv_size], kv_size);
    }
  }
  const KvChunk& kv = opt_.kv_shared ? *sharing.reuse : own;
  ChunkOptions chunk;
  chunk.num_heads = nh;
  chunk.num_kv_heads = nkv;
  chunk.head_dim = d;
  chunk.window = opt_.window;
  chunk.score.scale =
      opt_.scale > 0 ? opt_.scale : static_cast<float>(std::pow(static_cast<double>(d), -0.5));
  chunk.score.softcap = opt_.softcap;
  chunk.score.eager_bf16 = num.eager_bf16();
  float* const attn = q + m * q_size;
  const bool store = !opt_.kv_shared && !sharing.defer_store;
  attend_chunk(batch, q, kv.k.data(), kv.v.data(), cache, layer, chunk, attn, pool, store);
  if (sharing.keep && !opt_.kv_shared) *sharing.keep = std::move(own);
  o_proj_.forward(attn, m, out, pool);
  num.round_eager(out, m * opt_.hidden_size);
}

}  // namespace hubzoo
