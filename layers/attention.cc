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
void attend_online_cache(const Chunk& c, const KeysOf& keys_of) {
  const KvCache& stored = c.cache;
  // Row t's query heads [h0, h0 + nq), all of KV head kvh, in one call: the
  // keys and values are read once for them.
  const auto attend = [&](int64_t t, int64_t kvh, int64_t h0, int64_t nq) {
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
                      .v_bf16 = stored.bf16(c.layer)};
    keys_of(slot, kvh, lo / kKeyBlock, a);
    attend_online_f32(a);
  };
  if (c.m * c.nkv >= 4 * c.pool.num_threads()) {
    c.pool.parallel_for(
        c.m * c.nkv, 1,
        [&](int64_t begin, int64_t stop) {
          for (int64_t pair = begin; pair < stop; ++pair) {
            const int64_t kvh = pair % c.nkv;
            attend(c.row_of(pair / c.nkv), kvh, kvh * c.group, c.group);
          }
        },
        c.chunks);
    return;
  }
  // Few (row, KV head) pairs for the threads (a decode step: 3 KV heads on 2
  // threads would split 2:1): the query heads are the items instead, each
  // thread taking a contiguous share of them, and a share's heads of one KV
  // head go in one call. A thread then reads a KV head's keys and values
  // (the cache, cold after a layer's weights went through) once for its
  // heads of it, where claiming heads one by one read each KV head on both
  // threads. A head's result does not depend on which heads share its call.
  c.pool.parallel_for_balanced(c.m * c.nh, 1, [&](int64_t begin, int64_t stop) {
    for (int64_t i = begin; i < stop;) {
      const int64_t pair = i / c.group;  // row index * nkv + KV head
      const int64_t run_end = std::min(stop, (pair + 1) * c.group);
      attend(c.row_of(pair / c.nkv), pair % c.nkv, i % c.nh, run_end - i);
      i = run_end;
    }
  });
}

// Strategy 1: the cache keeps the keys as blocks already, one per page.
void attend_blocked_cache(const Chunk& c) {
  const KvCache& stored = c.cache;
  attend_online_cache(c, [&](int64_t slot, int64_t kvh, int64_t block0, OnlineAttention& a) {
    a.kt_pages = stored.key_pages(c.layer, slot) + block0;
    a.kt_offset = kvh * c.d * kKeyBlock;
    a.kt_bf16 = stored.bf16(c.layer);
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
  attend_online_cache(c, [&](int64_t slot, int64_t kvh, int64_t block0, OnlineAttention& a) {
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
  if (c.tiles() && !cache.bf16(layer)) {
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
      attend_blocked_cache(c);
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
    // Keys and values are stored: bf16 in both bf16 modes.
    pool.parallel_rows(m, min_parallel_rows(q_size + 2 * kv_size), [&](int64_t t0, int64_t t1) {
      num.round_stored(&v[t0 * kv_size], (t1 - t0) * kv_size);
      for (int64_t t = t0; t < t1; ++t) {
        if (rope_) {
          rope_->apply(batch.pos[t], &q[t * q_size], nh, &k[t * kv_size], nkv, rope_bf16,
                       long_row(t));
        }
        num.round_stored(&k[t * kv_size], kv_size);
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
