#include "layers/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/error.h"
#include "ops/attend_head.h"
#include "ops/attend_online.h"
#include "ops/attend_tiles.h"
#include "ops/bf16.h"
#include "ops/elementwise.h"

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
      if (o.bias) s = round_bf16(s + o.bias[j]);
      scores[j] = s;
    }
    softmax_inplace(scores, len);
    round_bf16(scores, len);
  } else {
    for (int64_t j = 0; j < len; ++j) {
      float s = dot(q, key_at(j), d) * o.scale;
      if (o.softcap > 0) s = std::tanh(s / o.softcap) * o.softcap;
      if (o.bias) s += o.bias[j];
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

void attend_head_scored(const float* q, const float* keys, const float* values, int64_t row_stride,
                        int64_t len, int64_t d, const ScoreOptions& o, float* scores, float* out) {
  attend_rows(
      q, [&](int64_t j) { return keys + j * row_stride; },
      [&](int64_t j) { return values + j * row_stride; }, len, d, o, scores, out);
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
    cache.store_value(layer, batch.slot[t], batch.pos[t], &v[t * row]);
  }
}

namespace {

// What attend_chunk's strategies share: the call's arguments and the sizes
// derived from them. q: [M, heads * D]; k, v: [M, kv_heads * D]; out: [M, heads * D].
struct Chunk {
  const TokenBatch& batch;
  const float *q, *k, *v;
  KvCache& cache;
  int64_t layer;
  const ChunkOptions& opt;
  float* out;
  ThreadPool& pool;
  int64_t m, d, nh, nkv, q_size, kv_size, group;
  // Rows differ in length: smaller chunks, claimed by whichever thread is free.
  int chunks;
  // Bidirectional: one past each slot's last position in this batch.
  std::vector<int64_t> seq_end;

  // Rows are taken from both ends of the batch in turn, so that the
  // contiguous halves the threads get hold as many long causal rows as short ones.
  int64_t row_of(int64_t i) const { return i % 2 == 0 ? i / 2 : m - 1 - i / 2; }
  int64_t first_visible(int64_t p) const {
    return opt.window > 0 ? std::max<int64_t>(0, p - opt.window + 1) : 0;
  }
  // One past the last position row t sees: its own (causal), or its
  // sequence's last within the window (bidirectional).
  int64_t visible_end(int64_t t) const {
    const int64_t p = batch.pos[t];
    if (!opt.bidirectional) return p + 1;
    const int64_t end = seq_end[batch.slot[t]];
    return opt.window > 0 ? std::min(end, p + opt.window) : end;
  }
  // fp32 scores without softcap: one pass with an online softmax over keys in
  // blocks of 16 positions (ops/attend_online.h).
  bool online() const { return !opt.score.eager_bf16 && opt.score.softcap <= 0; }
  // The same scores on bf16 tile products (ops/attend_tiles.h).
  bool tiles() const { return online() && opt.score.tiles; }
};

// Full cache, online: each row's query heads of a KV head in one call over
// its visible positions, values read through the slot's page table.
// keys_of(slot, kvh, a) points `a` at the key blocks of the slot from position 0.
template <class KeysOf>
void attend_online_cache(const Chunk& c, LayerWorkspace& ws, const KeysOf& keys_of) {
  const KvCache& stored = c.cache;
  // Rows alone in their slot in this chunk (a decode step's) read pages that
  // no other row brought into the cache: their calls fetch ahead. A prompt's
  // rows read their slot's pages one after another, hot after the first.
  thread_local std::vector<int32_t> kept_rows_of_slot;
  std::vector<int32_t>& rows_of_slot = kept_rows_of_slot;  // workers see the caller's
  rows_of_slot.assign(static_cast<size_t>(stored.num_slots()), 0);
  for (int64_t t = 0; t < c.m; ++t) ++rows_of_slot[c.batch.slot[t]];
  // Row t's query heads [h0, h0 + nq), all of KV head kvh, in one call: the
  // keys and values are read once for them.
  const auto call = [&](int64_t t, int64_t kvh, int64_t h0, int64_t nq) {
    const int64_t slot = c.batch.slot[t], lo = c.first_visible(c.batch.pos[t]);
    const int64_t at = t * c.q_size + h0 * c.d;
    OnlineAttention a{.q = &c.q[at],
                      .q_stride = c.d,
                      .nq = nq,
                      .v_stride = c.kv_size,
                      .lane0 = lo % kKeyBlock,
                      .len = c.visible_end(t) - lo,
                      .d = c.d,
                      .scale = c.opt.score.scale,
                      .out = &c.out[at],
                      .out_stride = c.d,
                      .v_pages = stored.value_pages(c.layer, slot) + lo / kKvPage,
                      .v_offset = kvh * c.d,
                      .v_type = stored.element_type(c.layer),
                      .fetch_ahead = rows_of_slot[slot] == 1};
    keys_of(slot, kvh, lo / kKeyBlock, a);
    return a;
  };
  if (c.m * c.nkv >= 4 * c.pool.num_threads()) {
    c.pool.parallel_for(
        c.m * c.nkv, 1,
        [&](int64_t begin, int64_t stop) {
          for (int64_t pair = begin; pair < stop; ++pair) {
            const int64_t kvh = pair % c.nkv;
            attend_online_f32(call(c.row_of(pair / c.nkv), kvh, kvh * c.group, c.group));
          }
        },
        c.chunks);
    return;
  }
  // Few (row, KV head) pairs for the threads (a decode step). With a pair
  // per thread or more and short ranges of positions, the query heads are
  // the items, each thread taking a contiguous share of them, and a share's
  // heads of one KV head go in one call: a thread reads a KV head's keys and
  // values (the cache, cold after a layer's weights went through) once for
  // its heads of it. Otherwise each pair's call is split, its scores over
  // the threads by blocks of positions, then its values by dims
  // (ops/attend_online.h: the same bits as the whole call): a thread reads
  // its part of a KV head's keys and values rather than all of them for its
  // heads, at the price of a second job.
  // attention_decode_bench, cold, 2 threads, Zen 4: Gemma 3 (4 heads, 1 KV
  // head, d 256) 25 -> 24 us at 144 positions, 50 -> 44 at 272, 109 -> 75
  // at 528; SmolLM2 (9 / 3, d 64) 15.6 -> 16.1, 30 -> 28, 68 -> 56. Decode
  // of 128 tokens with the split at every length: Gemma 3 Q4_K_M (one pair
  // on two threads) 1.00x at this host's ~35 GB/s level and 164-168 ->
  // 181-195 tok/s at its ~60 GB/s level, where each vCPU sits on its own
  // CCD and reads the other's cache slowly; SmolLM2 bf16 (three pairs) 0.91x.
  constexpr int64_t kSplitBlocks = 16;  // 256 positions
  int64_t longest = 0;
  for (int64_t t = 0; t < c.m; ++t) {
    const int64_t lo = c.first_visible(c.batch.pos[t]);
    longest = std::max(longest, key_blocks(lo % kKeyBlock, c.visible_end(t) - lo));
  }
  if (longest < kSplitBlocks && c.m * c.nkv >= c.pool.num_threads()) {
    c.pool.parallel_for_balanced(c.m * c.nh, 1, [&](int64_t begin, int64_t stop) {
      for (int64_t i = begin; i < stop;) {
        const int64_t pair = i / c.group;  // row index * nkv + KV head
        const int64_t run_end = std::min(stop, (pair + 1) * c.group);
        attend_online_f32(call(c.row_of(pair / c.nkv), pair % c.nkv, i % c.nh, run_end - i));
        i = run_end;
      }
    });
    return;
  }
  const int64_t pairs = c.m * c.nkv;
  // Kept from call to call on the calling thread; the workers see them
  // through these references (a thread_local named in the jobs would be
  // each worker's own).
  thread_local std::vector<OnlineAttention> kept_calls;
  thread_local std::vector<int64_t> kept_blocks, kept_scores;
  std::vector<OnlineAttention>& calls = kept_calls;
  std::vector<int64_t>& first_block = kept_blocks;  // per pair, prefix sums
  std::vector<int64_t>& first_score = kept_scores;
  calls.clear();
  first_block.assign(1, 0);
  first_score.assign(1, 0);
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t kvh = pair % c.nkv;
    calls.push_back(call(pair / c.nkv, kvh, kvh * c.group, c.group));
    const int64_t blocks = key_blocks(calls.back().lane0, calls.back().len);
    first_block.push_back(first_block.back() + blocks);
    first_score.push_back(first_score.back() + c.group * blocks * kKeyBlock);
  }
  float* const scores = ws.scores.get(static_cast<size_t>(first_score.back()));
  c.pool.parallel_for_balanced(first_block.back(), 1, [&](int64_t begin, int64_t stop) {
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const int64_t b0 = std::max(begin, first_block[pair]) - first_block[pair];
      const int64_t b1 = std::min(stop, first_block[pair + 1]) - first_block[pair];
      if (b0 < b1) attend_online_scores(calls[pair], b0, b1, scores + first_score[pair]);
    }
  });
  const int64_t units = (c.d + kKeyBlock - 1) / kKeyBlock;  // dims in kKeyBlock parts
  c.pool.parallel_for_balanced(pairs * units, 1, [&](int64_t begin, int64_t stop) {
    for (int64_t i = begin; i < stop;) {
      const int64_t pair = i / units, u0 = i % units;
      const int64_t u1 = std::min(units, u0 + (stop - i));
      attend_online_values(calls[pair], scores + first_score[pair], u0 * kKeyBlock,
                           std::min(c.d, u1 * kKeyBlock));
      i += u1 - u0;
    }
  });
}

// Strategy 1: the cache keeps the keys as blocks already, one per page.
void attend_blocked_cache(const Chunk& c, LayerWorkspace& ws) {
  const KvCache& stored = c.cache;
  attend_online_cache(c, ws, [&](int64_t slot, int64_t kvh, int64_t block0, OnlineAttention& a) {
    a.kt_pages = stored.key_pages(c.layer, slot) + block0;
    a.kt_offset = kvh * c.d * kKeyBlock;
    a.kt_type = stored.element_type(c.layer);
  });
}

// Strategy 2: key rows, transposed into the blocks of each (slot, KV head)
// over positions [0, end) once for all the batch's rows of that slot, a page
// at a time, in the workspace (kept from call to call: no page faults per
// layer; workers see only the pointer).
void attend_transposed_cache(const Chunk& c, LayerWorkspace& ws) {
  const KvCache& stored = c.cache;
  const int64_t n_all = c.cache.num_slots(), block = c.d * kKeyBlock;
  std::vector<int64_t> end(n_all, 0), offset(n_all, 0), slots;
  for (int64_t t = 0; t < c.m; ++t) {
    end[c.batch.slot[t]] = std::max<int64_t>(end[c.batch.slot[t]], c.batch.pos[t] + 1);
  }
  int64_t floats = 0;
  for (int64_t s = 0; s < n_all; ++s) {
    if (end[s] == 0) continue;
    slots.push_back(s);
    offset[s] = floats;
    floats += c.nkv * key_blocks(0, end[s]) * block;
  }
  float* const block_base = ws.key_blocks.get(floats);
  const auto head_blocks = [&](int64_t slot, int64_t kvh) {
    return block_base + offset[slot] + kvh * key_blocks(0, end[slot]) * block;
  };
  const int64_t n_slots = static_cast<int64_t>(slots.size());
  c.pool.parallel_for(
      n_slots * c.nkv, 1,
      [&](int64_t begin, int64_t stop) {
        std::vector<float> rows(kKvPage * c.kv_size);  // a bf16 page's key rows as floats
        for (int64_t item = begin; item < stop; ++item) {
          const int64_t slot = slots[item / c.nkv], kvh = item % c.nkv;
          for (int64_t p0 = 0; p0 < end[slot]; p0 += kKvPage) {
            const int64_t n = std::min(kKvPage, end[slot] - p0);
            const float* keys = stored.read_key_rows(c.layer, slot, p0, n, rows.data());
            transpose_key_blocks(keys + kvh * c.d, c.kv_size, 0, n, c.d,
                                 head_blocks(slot, kvh) + p0 / kKeyBlock * block);
          }
        }
      },
      c.chunks);
  attend_online_cache(c, ws, [&](int64_t slot, int64_t kvh, int64_t block0, OnlineAttention& a) {
    a.kt = head_blocks(slot, kvh) + block0 * block;
    a.kt_stride = block;
  });
}

// Strategy 5, tile attention (ops/attend_tiles.h): per (slot, KV head) the
// positions [base, top) the slot's rows see, packed into tiles once by
// put(kv, slot, kvh, pos) (TileKv::put or put_bits); then the slot's
// (row, head) pairs of each KV head in groups of 16, a group per call. The
// groups' loads differ (causal rows grow), so they are taken from both
// ends in turn. The packed tiles live in ws.key_blocks. rows[slot]: the
// batch rows of each slot to attend (none: the slot is left out).
template <class Put>
void attend_tiles_rows(const Chunk& c, LayerWorkspace& ws,
                       const std::vector<std::vector<int64_t>>& rows,
                       const std::vector<int64_t>& base, const std::vector<int64_t>& top,
                       const Put& put) {
  const int64_t n_all = c.cache.num_slots(), d = c.d;
  // Packed blocks: one TileKv per (slot, KV head) with rows, 64-byte aligned
  // (every TileKv's keys and values are whole KiBs).
  std::vector<TileKv> kvs(n_all * c.nkv);
  std::vector<int64_t> packs;
  int64_t elements = 0;
  for (int64_t slot = 0; slot < n_all; ++slot) {
    for (int64_t kvh = 0; kvh < c.nkv && !rows[slot].empty(); ++kvh) {
      TileKv& kv = kvs[slot * c.nkv + kvh];
      kv.d = d;
      kv.block0 = base[slot] / kTileBlock;
      kv.blocks = std::max<int64_t>(1, (top[slot] + kTileBlock - 1) / kTileBlock - kv.block0);
      elements += kv.key_elements() + kv.value_elements();
      packs.push_back(slot * c.nkv + kvh);
    }
  }
  float* const buffer = ws.key_blocks.get(static_cast<size_t>(elements / 2 + 16));
  auto* at =
      reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(buffer) + 63) & ~uintptr_t{63});
  for (int64_t i : packs) {
    kvs[i].keys = at;
    kvs[i].values = at + kvs[i].key_elements();
    at += kvs[i].key_elements() + kvs[i].value_elements();
  }
  c.pool.parallel_for(
      static_cast<int64_t>(packs.size()), 1,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t slot = packs[i] / c.nkv, kvh = packs[i] % c.nkv;
          const TileKv& kv = kvs[packs[i]];
          kv.clear();
          for (int64_t pj = base[slot]; pj < top[slot]; ++pj) put(kv, slot, kvh, pj);
        }
      },
      c.chunks);
  // Groups: (slot, KV head, first pair), pair i of a slot's KV head being
  // row rows[slot][i / group], head kvh * group + i % group.
  struct Group {
    int64_t slot, kvh, first;
  };
  std::vector<Group> groups;
  for (int64_t i : packs) {
    const int64_t slot = i / c.nkv, pairs = static_cast<int64_t>(rows[slot].size()) * c.group;
    for (int64_t first = 0; first < pairs; first += kTileRows)
      groups.push_back({slot, i % c.nkv, first});
  }
  const int64_t n_groups = static_cast<int64_t>(groups.size());
  c.pool.parallel_for(
      n_groups, 1,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const Group& g = groups[i % 2 == 0 ? i / 2 : n_groups - 1 - i / 2];
          const std::vector<int64_t>& slot_rows = rows[g.slot];
          const int64_t pairs = static_cast<int64_t>(slot_rows.size()) * c.group;
          TileRows r;
          r.rows = std::min(kTileRows, pairs - g.first);
          r.scale = c.opt.score.scale;
          for (int64_t k = 0; k < r.rows; ++k) {
            const int64_t t = slot_rows[(g.first + k) / c.group];
            const int64_t h = g.kvh * c.group + (g.first + k) % c.group;
            r.q[k] = &c.q[t * c.q_size + h * d];
            r.out[k] = &c.out[t * c.q_size + h * d];
            r.lo[k] = c.first_visible(c.batch.pos[t]);
            r.end[k] = c.visible_end(t);
          }
          attend_tiles(kvs[g.slot * c.nkv + g.kvh], r);
        }
      },
      c.chunks);
}

// Tile attention over a cache that holds every position its rows see. A
// slot with at most one group of (row, head) pairs per KV head (a decode
// step's) is attended straight from its pages (attend_tiles_pages, blocked
// keys): packing its whole sequence into tiles for one row would cost more
// than the row. The bits are the same either way.
void attend_tiles_cache(const Chunk& c, LayerWorkspace& ws) {
  const KvCache& stored = c.cache;
  const int64_t n_all = stored.num_slots();
  std::vector<int64_t> base(n_all, std::numeric_limits<int64_t>::max()), top(n_all, 0);
  std::vector<std::vector<int64_t>> rows(n_all);
  for (int64_t t = 0; t < c.m; ++t) {
    const int64_t slot = c.batch.slot[t];
    base[slot] = std::min(base[slot], c.first_visible(c.batch.pos[t]));
    top[slot] = std::max(top[slot], c.visible_end(t));
    rows[slot].push_back(t);
  }
  // The paged slots' rows move to paged_rows; the others stay for packing.
  std::vector<std::vector<int64_t>> paged_rows(n_all);
  std::vector<int64_t> items;  // slot * nkv + kvh of the paged slots
  for (int64_t slot = 0; slot < n_all && stored.blocked_keys(c.layer); ++slot) {
    const auto n = static_cast<int64_t>(rows[slot].size());
    if (n == 0 || n * c.group > kTileRows) continue;
    paged_rows[slot].swap(rows[slot]);
    for (int64_t kvh = 0; kvh < c.nkv; ++kvh) items.push_back(slot * c.nkv + kvh);
  }
  c.pool.parallel_for(
      static_cast<int64_t>(items.size()), 1,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t slot = items[i] / c.nkv, kvh = items[i] % c.nkv;
          const TilePages kv{.d = c.d,
                             .key_pages = stored.key_pages(c.layer, slot),
                             .key_offset = kvh * c.d * kKvPage,
                             .value_pages = stored.value_pages(c.layer, slot),
                             .value_offset = kvh * c.d,
                             .value_stride = c.kv_size};
          TileRows r;
          r.scale = c.opt.score.scale;
          for (int64_t t : paged_rows[slot]) {
            for (int64_t h = kvh * c.group; h < (kvh + 1) * c.group; ++h, ++r.rows) {
              r.q[r.rows] = &c.q[t * c.q_size + h * c.d];
              r.out[r.rows] = &c.out[t * c.q_size + h * c.d];
              r.lo[r.rows] = c.first_visible(c.batch.pos[t]);
              r.end[r.rows] = c.visible_end(t);
            }
          }
          attend_tiles_pages(kv, r);
        }
      },
      c.chunks);
  // The bf16 pages' bits as they are: keys [16][row] or, blocked, [row][16];
  // values [16][row].
  const bool blocked = stored.blocked_keys(c.layer);
  attend_tiles_rows(
      c, ws, rows, base, top, [&](const TileKv& kv, int64_t slot, int64_t kvh, int64_t pj) {
        const auto* keys =
            static_cast<const uint16_t*>(stored.key_pages(c.layer, slot)[pj / kKvPage]);
        const auto* values =
            static_cast<const uint16_t*>(stored.value_pages(c.layer, slot)[pj / kKvPage]);
        const int64_t lane = pj % kKvPage, row = lane * c.kv_size + kvh * c.d;
        if (blocked) {
          kv.put_bits(pj, keys + kvh * c.d * kKvPage + lane, kKvPage, values + row);
        } else {
          kv.put_bits(pj, keys + row, 1, values + row);
        }
      });
}

// Strategy 3 (eager bf16 or softcap): each (row, head) reduces over its own
// sequence's cached positions in position order, whatever else is in the batch.
void attend_cache_rows(const Chunk& c) {
  const KvCache& stored = c.cache;
  c.pool.parallel_for(
      c.m * c.nh, 1,
      [&](int64_t begin, int64_t end) {
        std::vector<float> scores, key(c.d), value(c.d);  // bf16 rows as floats
        for (int64_t item = begin; item < end; ++item) {
          const int64_t t = c.row_of(item / c.nh), h = item % c.nh, kvh = h / c.group;
          const int64_t slot = c.batch.slot[t], lo = c.first_visible(c.batch.pos[t]);
          const int64_t len = c.visible_end(t) - lo;
          scores.resize(len);
          attend_rows(
              &c.q[t * c.q_size + h * c.d],
              [&](int64_t j) {
                return stored.read_key(c.layer, slot, lo + j, kvh * c.d, c.d, key.data());
              },
              [&](int64_t j) {
                return stored.read_value(c.layer, slot, lo + j, kvh * c.d, c.d, value.data());
              },
              len, c.d, c.opt.score, scores.data(), &c.out[t * c.q_size + h * c.d]);
        }
      },
      c.chunks);
}

// Strategy 4, a ring buffer (or no store): a slot's rows in this batch, in
// position order from where its cache ends (the batch's rows of a slot
// continue it, one position each); earlier positions come from the cache,
// these from k, v. Online (fp32 scores): the positions any of a slot's rows
// sees are gathered (from the ring and from this chunk) into contiguous
// values and key blocks once per (slot, KV head), aligned to the sequence as
// every row's own would be, so each row reads its window out of them.
// Otherwise each (row, head) gathers its own rows.
void attend_ring(const Chunk& c, LayerWorkspace& ws) {
  const KvCache& stored = c.cache;
  const int64_t n_all = c.cache.num_slots(), d = c.d, kv_size = c.kv_size;
  std::vector<std::vector<int64_t>> rows(n_all);
  std::vector<int64_t> base(n_all, std::numeric_limits<int64_t>::max()), top(n_all, 0);
  for (int64_t t = 0; t < c.m; ++t) {
    const int64_t slot = c.batch.slot[t];
    auto& r = rows[slot];
    if (c.batch.pos[t] != c.cache.length(slot) + static_cast<int64_t>(r.size())) {
      throw InvalidArgument("attention: positions of slot " + std::to_string(slot) +
                            " do not continue its cache in order");
    }
    r.push_back(t);
    base[slot] = std::min(base[slot], c.first_visible(c.batch.pos[t]));
    top[slot] = std::max(top[slot], c.visible_end(t));
  }
  // Key and value row of position pj of a slot (pj past the cache: this chunk's).
  const auto key_at = [&](int64_t slot, int64_t kvh, int64_t pj, float* buf) {
    const int64_t cached = stored.length(slot);
    return pj < cached ? stored.read_key(c.layer, slot, pj, kvh * d, d, buf)
                       : &c.k[rows[slot][pj - cached] * kv_size + kvh * d];
  };
  const auto value_at = [&](int64_t slot, int64_t kvh, int64_t pj, float* buf) {
    const int64_t cached = stored.length(slot);
    return pj < cached ? stored.read_value(c.layer, slot, pj, kvh * d, d, buf)
                       : &c.v[rows[slot][pj - cached] * kv_size + kvh * d];
  };
  if (c.tiles()) {
    return attend_tiles_rows(
        c, ws, rows, base, top, [&](const TileKv& kv, int64_t slot, int64_t kvh, int64_t pj) {
          thread_local std::vector<float> key, value;
          key.resize(d), value.resize(d);
          kv.put(pj, key_at(slot, kvh, pj, key.data()), value_at(slot, kvh, pj, value.data()));
        });
  }
  if (!c.online()) {
    c.pool.parallel_for(
        c.m * c.nh, 1,
        [&](int64_t begin, int64_t end) {
          std::vector<float> scores, key_row(d), value_row(d);
          for (int64_t item = begin; item < end; ++item) {
            const int64_t t = c.row_of(item / c.nh), h = item % c.nh, kvh = h / c.group;
            const int64_t slot = c.batch.slot[t], lo = c.first_visible(c.batch.pos[t]);
            const int64_t len = c.visible_end(t) - lo;
            scores.resize(len);
            // Each pointer is read before the next call (bf16 rows convert into one buffer).
            attend_rows(
                &c.q[t * c.q_size + h * d],
                [&](int64_t j) { return key_at(slot, kvh, lo + j, key_row.data()); },
                [&](int64_t j) { return value_at(slot, kvh, lo + j, value_row.data()); }, len, d,
                c.opt.score, scores.data(), &c.out[t * c.q_size + h * d]);
          }
        },
        c.chunks);
    return;
  }
  // Per (slot, KV head) with rows: values [top - base][d] and key blocks from
  // position base at lane base % 16.
  std::vector<int64_t> items;
  for (int64_t slot = 0; slot < n_all; ++slot) {
    for (int64_t kvh = 0; kvh < c.nkv && !rows[slot].empty(); ++kvh)
      items.push_back(slot * c.nkv + kvh);
  }
  std::vector<std::vector<float>> values(n_all * c.nkv), blocks(n_all * c.nkv);
  c.pool.parallel_for(
      static_cast<int64_t>(items.size()), 1,
      [&](int64_t begin, int64_t end) {
        std::vector<float> keys, key_row(d), value_row(d);
        for (int64_t i = begin; i < end; ++i) {
          const int64_t slot = items[i] / c.nkv, kvh = items[i] % c.nkv, n = top[slot] - base[slot];
          std::vector<float>& v = values[items[i]];
          keys.resize(n * d);
          v.resize(n * d);
          for (int64_t j = 0; j < n; ++j) {
            std::copy_n(key_at(slot, kvh, base[slot] + j, key_row.data()), d, &keys[j * d]);
            std::copy_n(value_at(slot, kvh, base[slot] + j, value_row.data()), d, &v[j * d]);
          }
          const int64_t lane0 = base[slot] % kKeyBlock;
          blocks[items[i]].resize(key_blocks(lane0, n) * d * kKeyBlock);
          transpose_key_blocks(keys.data(), d, lane0, n, d, blocks[items[i]].data());
        }
      },
      c.chunks);
  c.pool.parallel_for(
      c.m * c.nkv, 1,
      [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          const int64_t t = c.row_of(item / c.nkv), kvh = item % c.nkv, h = kvh * c.group;
          const int64_t slot = c.batch.slot[t], lo = c.first_visible(c.batch.pos[t]);
          const int64_t from = lo - base[slot],
                        block0 = (base[slot] % kKeyBlock + from) / kKeyBlock;
          attend_online_f32({.q = &c.q[t * c.q_size + h * d],
                             .q_stride = d,
                             .nq = c.group,
                             .kt = blocks[slot * c.nkv + kvh].data() + block0 * d * kKeyBlock,
                             .kt_stride = d * kKeyBlock,
                             .values = values[slot * c.nkv + kvh].data() + from * d,
                             .v_stride = d,
                             .lane0 = lo % kKeyBlock,
                             .len = c.visible_end(t) - lo,
                             .d = d,
                             .scale = c.opt.score.scale,
                             .out = &c.out[t * c.q_size + h * d],
                             .out_stride = d});
        }
      },
      c.chunks);
}

// Whether no slot has more rows in the batch than `ring` positions.
bool rows_fit_window(const TokenBatch& batch, const KvCache& cache, int64_t ring) {
  if (batch.size() <= ring) return true;  // a decode step: no count needed
  std::vector<int64_t> rows(cache.num_slots(), 0);
  for (int64_t t = 0; t < batch.size(); ++t) {
    if (++rows[batch.slot[t]] > ring) return false;
  }
  return true;
}

// One past each slot's last position; every slot's rows must be its whole
// sequence (an empty cache), since a row sees the positions after its own.
std::vector<int64_t> bidirectional_ends(const TokenBatch& batch, const KvCache& cache) {
  std::vector<int64_t> end(cache.num_slots(), 0);
  for (int64_t t = 0; t < batch.size(); ++t) {
    if (cache.length(batch.slot[t]) != 0) {
      throw InvalidArgument(
          "attention: bidirectional attention needs each sequence whole in one chunk (slot " +
          std::to_string(batch.slot[t]) + " continues a cached sequence)");
    }
    end[batch.slot[t]] = std::max<int64_t>(end[batch.slot[t]], batch.pos[t] + 1);
  }
  return end;
}

void throw_if_blocked(const KvCache& cache, int64_t layer, const char* why) {
  if (cache.blocked_keys(layer)) {
    throw InvalidArgument("attention: cache layer " + std::to_string(layer) +
                          " keeps blocked keys, " + why);
  }
}

}  // namespace

void attend_chunk(const TokenBatch& batch, const float* q, const float* k, const float* v,
                  KvCache& cache, int64_t layer, const ChunkOptions& opt, float* out,
                  ThreadPool& pool, LayerWorkspace& ws, bool store) {
  const int64_t d = opt.head_dim, nh = opt.num_heads, nkv = opt.num_kv_heads;
  Chunk c{batch,
          q,
          k,
          v,
          cache,
          layer,
          opt,
          out,
          pool,
          batch.size(),
          d,
          nh,
          nkv,
          nh * d,
          nkv * d,
          nh / nkv,
          8 * pool.num_threads(),
          {}};
  if (opt.bidirectional) c.seq_end = bidirectional_ends(batch, cache);
  if (c.tiles() && cache.element_type(layer) != KvElement::kBF16) {
    throw InvalidArgument("attention: tile attention on cache layer " + std::to_string(layer) +
                          ", which does not keep bf16 keys and values");
  }
  const int64_t ring = cache.window(layer);
  if (cache.row_size(layer) != c.kv_size) {
    throw InvalidArgument("attention: cache layer " + std::to_string(layer) + " holds rows of " +
                          std::to_string(cache.row_size(layer)) + " floats, not " +
                          std::to_string(c.kv_size));
  }
  if (ring > 0 && (opt.window <= 0 || opt.window > ring)) {
    throw InvalidArgument("attention: cache layer " + std::to_string(layer) +
                          " keeps a window of " + std::to_string(ring) +
                          " positions, which does not cover the attention window");
  }
  // A windowed layer's pages hold every position its rows see once the chunk
  // is stored, when no slot's rows outnumber the window: the last chunk left
  // positions [length - ring, length) and reserve() paged the chunk's own.
  const bool paged_window = ring > 0 && store && c.online() && cache.blocked_keys(layer) &&
                            rows_fit_window(batch, cache, ring);
  if ((ring == 0 || paged_window) && store) {  // write first, then read the cache alone
    store_chunk(batch, k, v, cache, layer);
    if (c.tiles()) {
      attend_tiles_cache(c, ws);
    } else if (c.online() && cache.blocked_keys(layer)) {
      attend_blocked_cache(c, ws);
    } else if (c.online()) {
      attend_transposed_cache(c, ws);
    } else {
      throw_if_blocked(cache, layer, "which only fp32 scores without softcap read");
      attend_cache_rows(c);
    }
    return;
  }
  attend_ring(c, ws);
  if (store) store_chunk(batch, k, v, cache, layer);
}

}  // namespace hubzoo
