// The ring-buffer KV cache of a sliding-window layer against a full cache
// with the window as a mask: same bits for every row, whatever the chunking;
// bidirectional (encoder) attention against explicit attention over its window.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "layers/attention.h"
#include "ops/attend_online.h"
#include "ops/bf16.h"
#include "ops/f16.h"
#include "ops/thread_pool.h"

namespace hubzoo {
namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2, kDim = 8, kWindow = 7;
constexpr int64_t kQ = kHeads * kDim, kKv = kKvHeads * kDim;

struct Rows {
  std::vector<float> q, k, v;  // one sequence: [len, kQ], [len, kKv], [len, kKv]
};

Rows random_rows(int64_t len, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Rows r{std::vector<float>(len * kQ), std::vector<float>(len * kKv),
         std::vector<float>(len * kKv)};
  for (auto* x : {&r.q, &r.k, &r.v})
    for (auto& f : *x) f = dist(gen);
  return r;
}

// Step `step` of two slots' chunks: slot s adds rows done[s] .. done[s] +
// chunks[s][step] - 1 of its sequence.
struct Step {
  TokenBatch batch;
  std::vector<float> q, k, v;
};
Step step_rows(const std::vector<Rows>& seqs, const std::vector<std::vector<int64_t>>& chunks,
               size_t step, const std::vector<int64_t>& done) {
  Step st;
  for (int s = 0; s < 2; ++s) {
    for (int64_t i = 0; i < chunks[s][step]; ++i) {
      const int64_t p = done[s] + i;
      EXPECT_LT(p * kQ, static_cast<int64_t>(seqs[s].q.size())) << "chunks exceed the rows";
      st.batch.add(0, s, static_cast<int32_t>(p));
      st.q.insert(st.q.end(), &seqs[s].q[p * kQ], &seqs[s].q[(p + 1) * kQ]);
      st.k.insert(st.k.end(), &seqs[s].k[p * kKv], &seqs[s].k[(p + 1) * kKv]);
      st.v.insert(st.v.end(), &seqs[s].v[p * kKv], &seqs[s].v[(p + 1) * kKv]);
    }
  }
  return st;
}

// Runs two slots through `cache` in chunks (slot 0 takes chunks0, slot 1 chunks1,
// chunk i of both in one batch); returns each slot's outputs [len, kQ].
std::vector<std::vector<float>> run(KvCache& cache, const std::vector<Rows>& seqs,
                                    const std::vector<std::vector<int64_t>>& chunks,
                                    const ChunkOptions& opt, ThreadPool& pool) {
  std::vector<std::vector<float>> outs(2);
  std::vector<int64_t> done(2, 0);
  LayerWorkspace ws;
  for (size_t step = 0; step < chunks[0].size(); ++step) {
    const Step st = step_rows(seqs, chunks, step, done);
    const TokenBatch& batch = st.batch;
    for (int s = 0; s < 2; ++s) cache.reserve(s, done[s] + chunks[s][step]);
    std::vector<float> out(batch.size() * kQ);
    attend_chunk(batch, st.q.data(), st.k.data(), st.v.data(), cache, 0, opt, out.data(), pool, ws);
    for (int64_t t = 0; t < batch.size(); ++t) {
      auto& o = outs[batch.slot[t]];
      o.insert(o.end(), &out[t * kQ], &out[(t + 1) * kQ]);
    }
    for (int s = 0; s < 2; ++s) {
      done[s] += chunks[s][step];
      cache.set_length(s, done[s]);
    }
  }
  return outs;
}

ChunkOptions options(bool eager_bf16, float softcap) {
  ChunkOptions opt;
  opt.num_heads = kHeads;
  opt.num_kv_heads = kKvHeads;
  opt.head_dim = kDim;
  opt.window = kWindow;
  opt.score = {0.3f, softcap, eager_bf16};
  return opt;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      ADD_FAILURE() << "first difference at " << i << " (position " << i / kQ << ", head "
                    << (i % kQ) / kDim << "): " << a[i] << " vs " << b[i];
      return;
    }
  }
}

// Both caches run the same chunks of two slots to the same bits.
void expect_same_runs(KvCache& a, KvCache& b, const std::vector<Rows>& seqs,
                      const std::vector<std::vector<int64_t>>& chunks, const ChunkOptions& opt,
                      ThreadPool& pool) {
  const auto x = run(a, seqs, chunks, opt, pool);
  const auto y = run(b, seqs, chunks, opt, pool);
  expect_same_bits(x[0], y[0]);
  expect_same_bits(x[1], y[1]);
}

TEST(RingKvCache, MatchesFullCacheWithWindowMask) {
  ThreadPool pool(2);
  const std::vector<Rows> seqs = {random_rows(48, 1), random_rows(48, 2)};
  // Prefill chunks shorter than, equal to and longer than the window, then decode.
  const std::vector<std::vector<int64_t>> chunks = {{1, 5, 9, 1, 1, 13, 7, 1, 1, 1, 1, 1, 1, 2, 3},
                                                    {12, 1, 1, 7, 3, 1, 1, 1, 1, 1, 8, 6, 2, 1, 1}};
  for (bool eager : {false, true}) {
    for (float softcap : {0.0f, 1.5f}) {
      KvCache ring({KvLayerSpec{kKv, kWindow}}, 2);
      KvCache full(1, 2, kKv);
      const auto opt = options(eager, softcap);
      const auto a = run(ring, seqs, chunks, opt, pool);
      const auto b = run(full, seqs, chunks, opt, pool);
      expect_same_bits(a[0], b[0]);
      expect_same_bits(a[1], b[1]);
    }
  }
}

TEST(BlockedKeyCache, SameBitsAsRowCacheWithAndWithoutWindow) {
  ThreadPool pool(2);
  const std::vector<Rows> seqs = {random_rows(48, 7), random_rows(48, 8)};
  // Prefill chunks across block edges, then decode (one row per slot).
  const std::vector<std::vector<int64_t>> chunks = {{1, 5, 20, 1, 1, 13, 1, 1, 1, 1, 1, 1, 1},
                                                    {17, 1, 3, 1, 9, 1, 1, 1, 6, 1, 1, 5, 1}};
  for (int64_t window : {0, 5, 16, 21}) {
    ChunkOptions opt = options(false, 0.0f);
    opt.window = window;
    KvLayerSpec spec{kKv, 0};
    spec.blocked_keys = true;
    KvCache blocked({spec}, 2);
    KvCache rows(1, 2, kKv);
    const auto a = run(blocked, seqs, chunks, opt, pool);
    const auto b = run(rows, seqs, chunks, opt, pool);
    expect_same_bits(a[0], b[0]);
    expect_same_bits(a[1], b[1]);
  }
  // Pages are whole: 3 positions take one page, a block of keys and 16 value rows.
  KvLayerSpec spec{kKv, 0};
  spec.blocked_keys = true;
  KvCache blocked({spec}, 1);
  EXPECT_EQ(blocked.slot_bytes_at(3), 2 * kKeyBlock * kKv * static_cast<int64_t>(sizeof(float)));
  // Eager or softcapped scores read key rows, which a blocked cache does not have.
  KvCache other({spec}, 2);
  EXPECT_THROW(run(other, seqs, chunks, options(true, 0.0f), pool), InvalidArgument);
}

// A windowed layer keeping blocked keys: chunks no longer than the window are
// stored first and read from the pages (a decode step), longer ones go the
// ring path, which gathers key rows from the blocks' lanes. Both give the
// bits of a windowed cache of key rows, for a cache window equal to the
// attention window and larger, in float32 and bf16.
TEST(BlockedKeyCache, WindowedLayerSameBitsAsRowCache) {
  ThreadPool pool(2);
  std::vector<Rows> seqs = {random_rows(61, 11), random_rows(60, 12)};
  for (auto& r : seqs) {
    for (auto* x : {&r.k, &r.v}) round_bf16(x->data(), static_cast<int64_t>(x->size()));
  }
  // Chunks longer than the window (20, 13, 9), as long (7), shorter, decode.
  const std::vector<std::vector<int64_t>> chunks = {{1, 5, 20, 1, 1, 13, 1, 1, 7, 1, 1, 1, 6, 1, 1},
                                                    {17, 1, 3, 1, 9, 1, 1, 1, 6, 1, 1, 5, 1, 7, 5}};
  ChunkOptions opt = options(false, 0.0f);
  opt.window = kWindow;
  for (int64_t ring : {kWindow, int64_t{20}}) {
    for (KvElement type : {KvElement::kF32, KvElement::kBF16, KvElement::kF16}) {
      SCOPED_TRACE("ring " + std::to_string(ring) + " " + kv_element_name(type));
      KvLayerSpec spec{kKv, ring, true, type};
      KvCache blocked({spec}, 2);
      spec.blocked_keys = false;
      KvCache rows({spec}, 2);
      expect_same_runs(blocked, rows, seqs, chunks, opt, pool);
      // The window's pages only: slot 0 at length 61 keeps positions 54 .. 60
      // (ring 7: page 3) or 41 .. 60 (ring 20: pages 2 and 3).
      EXPECT_EQ(blocked.bytes(), rows.bytes());
      EXPECT_EQ(blocked.bytes(0, 0), (ring == kWindow ? 1 : 2) * blocked.page_bytes(0));
    }
  }
}

// 16-bit storage: keys and values that are values of the cache's type (bf16
// as the bf16 modes store them, half as int8 does) give the same bits from a
// 16-bit cache as from a float32 one, on every read path: blocked keys, key
// rows (eager, softcap), a windowed layer's pages.
TEST(SixteenBitKvCache, SameBitsAsFloat32Cache) {
  ThreadPool pool(2);
  for (KvElement type : {KvElement::kBF16, KvElement::kF16}) {
    SCOPED_TRACE(kv_element_name(type));
    std::vector<Rows> seqs = {random_rows(45, 31), random_rows(45, 32)};
    for (auto& r : seqs) {
      for (auto* x : {&r.k, &r.v}) {
        const auto n = static_cast<int64_t>(x->size());
        type == KvElement::kF16 ? round_f16_saturated(x->data(), n) : round_bf16(x->data(), n);
      }
    }
    const std::vector<std::vector<int64_t>> chunks = {{1, 17, 3, 1, 1, 20, 1, 1},
                                                      {9, 1, 16, 1, 5, 1, 1, 11}};
    struct Case {
      bool eager;
      float softcap;
      int64_t window, ring;
      bool blocked;
    };
    for (const Case& k :
         {Case{false, 0.0f, 0, 0, true}, Case{false, 0.0f, 0, 0, false},
          Case{false, 0.0f, kWindow, 0, true}, Case{true, 0.0f, 0, 0, false},
          Case{false, 5.0f, kWindow, 0, false}, Case{false, 0.0f, kWindow, 20, false},
          Case{true, 0.0f, kWindow, kWindow, false}}) {
      SCOPED_TRACE("eager " + std::to_string(k.eager) + " window " + std::to_string(k.window) +
                   " ring " + std::to_string(k.ring) + " blocked " + std::to_string(k.blocked));
      ChunkOptions opt = options(k.eager, k.softcap);
      opt.window = k.window;
      KvLayerSpec spec{kKv, k.ring, k.blocked};
      KvCache wide({spec}, 2);
      spec.element = type;
      KvCache narrow({spec}, 2);
      expect_same_runs(wide, narrow, seqs, chunks, opt, pool);
      EXPECT_EQ(narrow.bytes() * 2, wide.bytes());
    }
  }
}

TEST(RingKvCache, WindowMaskMatchesExplicitAttention) {
  // The full-cache path with a window attends exactly positions (p - window, p].
  ThreadPool pool(1);
  const std::vector<Rows> seqs = {random_rows(20, 3), random_rows(20, 4)};
  KvCache full(1, 2, kKv);
  const auto opt = options(false, 0.0f);
  const auto out = run(full, seqs, {{20}, {20}}, opt, pool);
  std::vector<float> blocks, expect(kDim);
  for (int64_t p = 0; p < 20; ++p) {
    const int64_t lo = std::max<int64_t>(0, p - kWindow + 1), len = p - lo + 1;
    const int64_t lane0 = lo % kKeyBlock;  // blocks are aligned to the sequence
    for (int64_t h = 0; h < kHeads; ++h) {
      const int64_t kvh = h / (kHeads / kKvHeads);
      // fp32 without softcap is ops/attend_online.h's arithmetic over the window alone.
      blocks.assign(key_blocks(lane0, len) * kDim * kKeyBlock, 0.0f);
      transpose_key_blocks_reference(&seqs[0].k[lo * kKv + kvh * kDim], kKv, lane0, len, kDim,
                                     blocks.data());
      attend_online_f32_reference({.q = &seqs[0].q[p * kQ + h * kDim],
                                   .q_stride = kDim,
                                   .nq = 1,
                                   .kt = blocks.data(),
                                   .kt_stride = kDim * kKeyBlock,
                                   .values = &seqs[0].v[lo * kKv + kvh * kDim],
                                   .v_stride = kKv,
                                   .lane0 = lane0,
                                   .len = len,
                                   .d = kDim,
                                   .scale = 0.3f,
                                   .out = expect.data(),
                                   .out_stride = kDim});
      for (int64_t i = 0; i < kDim; ++i) EXPECT_EQ(out[0][p * kQ + h * kDim + i], expect[i]);
    }
  }
}

// A decode step has few (row, KV head) pairs for the threads: the query
// heads are split over them instead, and a share's heads of one KV head go
// in one call. Every head must still be exactly attention over its own KV
// head, wherever the shares cut a KV head's group: 9 heads of 3 KV heads
// (SmolLM2's grouping) on 2 and 4 threads, one and two sequences a step.
// Decode steps of one or two sequences (few (row, KV head) pairs for the
// threads): the heads split over the threads, and past 256 positions each
// call split over positions and dims, give each head's own call's bits.
TEST(FewKvHeads, DecodeHeadsMatchExplicitAttention) {
  constexpr int64_t nh = 9, nkv = 3, d = 40, len = 300;
  constexpr int64_t q_size = nh * d, kv_size = nkv * d;
  std::mt19937 gen(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ChunkOptions opt;
  opt.num_heads = nh;
  opt.num_kv_heads = nkv;
  opt.head_dim = d;
  opt.score = {0.3f, 0.0f, false};
  for (int threads : {2, 4}) {
    for (int64_t seqs : {1, 2}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(seqs) + " sequences");
      ThreadPool pool(threads);
      KvCache cache(1, seqs, kv_size);
      LayerWorkspace ws;
      std::vector<std::vector<float>> q(seqs), k(seqs), v(seqs);
      for (int64_t s = 0; s < seqs; ++s) {
        for (auto* x : {&q[s], &k[s], &v[s]}) {
          x->resize(len * (x == &q[s] ? q_size : kv_size));
          for (float& f : *x) f = dist(gen);
        }
      }
      std::vector<float> blocks, expect(d);
      for (int64_t p = 0; p < len; ++p) {
        TokenBatch batch;
        std::vector<float> qs, ks, vs;
        for (int64_t s = 0; s < seqs; ++s) {
          batch.add(0, s, static_cast<int32_t>(p));
          cache.reserve(s, p + 1);
          qs.insert(qs.end(), &q[s][p * q_size], &q[s][(p + 1) * q_size]);
          ks.insert(ks.end(), &k[s][p * kv_size], &k[s][(p + 1) * kv_size]);
          vs.insert(vs.end(), &v[s][p * kv_size], &v[s][(p + 1) * kv_size]);
        }
        std::vector<float> out(seqs * q_size);
        attend_chunk(batch, qs.data(), ks.data(), vs.data(), cache, 0, opt, out.data(), pool, ws);
        for (int64_t s = 0; s < seqs; ++s) {
          cache.set_length(s, p + 1);
          for (int64_t h = 0; h < nh; ++h) {
            const int64_t kvh = h / (nh / nkv);
            blocks.assign(key_blocks(0, p + 1) * d * kKeyBlock, 0.0f);
            transpose_key_blocks_reference(&k[s][kvh * d], kv_size, 0, p + 1, d, blocks.data());
            attend_online_f32_reference({.q = &q[s][p * q_size + h * d],
                                         .q_stride = d,
                                         .nq = 1,
                                         .kt = blocks.data(),
                                         .kt_stride = d * kKeyBlock,
                                         .values = &v[s][kvh * d],
                                         .v_stride = kv_size,
                                         .lane0 = 0,
                                         .len = p + 1,
                                         .d = d,
                                         .scale = 0.3f,
                                         .out = expect.data(),
                                         .out_stride = d});
            for (int64_t i = 0; i < d; ++i) {
              ASSERT_EQ(out[s * q_size + h * d + i], expect[i])
                  << "position " << p << ", sequence " << s << ", head " << h << ", dim " << i;
            }
          }
        }
      }
    }
  }
}

TEST(RingKvCache, MemoryStopsAtTheWindow) {
  ThreadPool pool(1);
  const std::vector<Rows> seqs = {random_rows(40, 5), random_rows(40, 6)};
  KvCache cache({KvLayerSpec{kKv, kWindow}, KvLayerSpec{kKv, 0}}, 2);
  // Whole pages of 16 positions: a window of 7 spans at most 2 of them.
  const int64_t page = 2 * kKvPage * kKv * static_cast<int64_t>(sizeof(float));
  EXPECT_EQ(cache.slot_bytes_at(3), 2 * page);
  EXPECT_EQ(cache.slot_bytes_at(1000), 2 * 2 * page + 63 * page);
  for (int64_t n = 1; n <= 40; ++n) {
    cache.reserve(0, n);
    cache.set_length(0, n);
    EXPECT_LE(cache.bytes(0, 0), 2 * page) << "at " << n << " positions";
    EXPECT_EQ(cache.bytes(1, 0), (n + kKvPage - 1) / kKvPage * page);
  }
  EXPECT_EQ(cache.bytes(0, 0), page);  // positions 33..39 are in page 2 alone
  cache.clear(0);
  EXPECT_EQ(cache.bytes(0, 0), 0);
  EXPECT_EQ(cache.bytes(1, 0), 0);
}

TEST(RingKvCache, DeferredStoreServesALayerReadingAnotherLayersKeys) {
  // KV sharing: a producer attends without storing, a consumer reads the producer's
  // cache layer and chunk, then store_chunk stores it: both see what a plain
  // store-as-you-go layer sees, over chunks longer than the window.
  ThreadPool pool(2);
  const std::vector<Rows> seqs = {random_rows(30, 11), random_rows(30, 12)};
  const std::vector<std::vector<int64_t>> chunks = {{9, 1, 13, 1, 6}, {3, 12, 1, 1, 13}};
  const auto opt = options(false, 0.0f);
  KvCache plain({KvLayerSpec{kKv, kWindow}}, 2);
  const auto want = run(plain, seqs, chunks, opt, pool);
  KvCache shared({KvLayerSpec{kKv, kWindow}}, 2);
  std::vector<std::vector<float>> producer(2), consumer(2);
  std::vector<int64_t> done(2, 0);
  LayerWorkspace ws;
  for (size_t step = 0; step < chunks[0].size(); ++step) {
    const Step st = step_rows(seqs, chunks, step, done);
    const TokenBatch& batch = st.batch;
    for (int s = 0; s < 2; ++s) shared.reserve(s, done[s] + chunks[s][step]);
    std::vector<float> a(batch.size() * kQ), b(batch.size() * kQ);
    const float *q = st.q.data(), *k = st.k.data(), *v = st.v.data();
    attend_chunk(batch, q, k, v, shared, 0, opt, a.data(), pool, ws, false);
    attend_chunk(batch, q, k, v, shared, 0, opt, b.data(), pool, ws, false);
    store_chunk(batch, k, v, shared, 0);
    for (int64_t t = 0; t < batch.size(); ++t) {
      auto& pa = producer[batch.slot[t]];
      auto& pb = consumer[batch.slot[t]];
      pa.insert(pa.end(), &a[t * kQ], &a[(t + 1) * kQ]);
      pb.insert(pb.end(), &b[t * kQ], &b[(t + 1) * kQ]);
    }
    for (int s = 0; s < 2; ++s) shared.set_length(s, done[s] += chunks[s][step]);
  }
  for (int s = 0; s < 2; ++s) {
    expect_same_bits(producer[s], want[s]);
    expect_same_bits(consumer[s], want[s]);
  }
}

// Bidirectional (an encoder, EmbeddingGemma): each row attends to its
// sequence's positions [p - window + 1, p + window - 1] (all of them without a
// window), the same bits from a ring or a full cache, alone or beside
// another sequence; a sequence continuing a cached one is refused.
TEST(BidirectionalAttention, SeesBothWaysWithinTheWindow) {
  ThreadPool pool(2);
  const std::vector<Rows> seqs = {random_rows(21, 13), random_rows(21, 14)};
  for (int64_t window : {int64_t{0}, int64_t{5}, kWindow}) {
    ChunkOptions opt = options(false, 0.0f);
    opt.window = window;
    opt.bidirectional = true;
    KvCache full(1, 2, kKv);
    const auto out = run(full, seqs, {{21}, {9}}, opt, pool);
    for (bool eager : {false, true}) {
      ChunkOptions o = options(eager, 0.0f);
      o.window = window;
      o.bidirectional = true;
      KvCache ring({KvLayerSpec{kKv, window}}, 2), rows(1, 2, kKv);
      const auto a = run(ring, seqs, {{21}, {9}}, o, pool);
      const auto b = run(rows, seqs, {{21}, {9}}, o, pool);
      expect_same_bits(a[0], b[0]);
      expect_same_bits(a[1], b[1]);
      if (!eager) expect_same_bits(a[0], out[0]);
    }
    std::vector<float> blocks, expect(kDim);
    for (int64_t p = 0; p < 21; ++p) {
      const int64_t lo = window ? std::max<int64_t>(0, p - window + 1) : 0;
      const int64_t hi = window ? std::min<int64_t>(21, p + window) : 21, len = hi - lo;
      const int64_t lane0 = lo % kKeyBlock;
      for (int64_t h = 0; h < kHeads; ++h) {
        const int64_t kvh = h / (kHeads / kKvHeads);
        blocks.assign(key_blocks(lane0, len) * kDim * kKeyBlock, 0.0f);
        transpose_key_blocks_reference(&seqs[0].k[lo * kKv + kvh * kDim], kKv, lane0, len, kDim,
                                       blocks.data());
        attend_online_f32_reference({.q = &seqs[0].q[p * kQ + h * kDim],
                                     .q_stride = kDim,
                                     .nq = 1,
                                     .kt = blocks.data(),
                                     .kt_stride = kDim * kKeyBlock,
                                     .values = &seqs[0].v[lo * kKv + kvh * kDim],
                                     .v_stride = kKv,
                                     .lane0 = lane0,
                                     .len = len,
                                     .d = kDim,
                                     .scale = 0.3f,
                                     .out = expect.data(),
                                     .out_stride = kDim});
        for (int64_t i = 0; i < kDim; ++i) {
          ASSERT_EQ(out[0][p * kQ + h * kDim + i], expect[i]) << "window " << window << " p " << p;
        }
      }
    }
    // A second chunk would need keys after the first chunk's rows: refused.
    KvCache again(1, 2, kKv);
    EXPECT_THROW(run(again, seqs, {{5, 3}, {4, 1}}, opt, pool), InvalidArgument);
  }
}

TEST(RingKvCache, RefusesAWindowLargerThanTheRing) {
  ThreadPool pool(1);
  const auto seqs = std::vector<Rows>{random_rows(2, 7), random_rows(2, 8)};
  KvCache ring2({KvLayerSpec{kKv, kWindow - 1}}, 2);
  EXPECT_THROW(run(ring2, seqs, {{2}, {2}}, options(false, 0.0f), pool), InvalidArgument);
  EXPECT_THROW(KvCache({KvLayerSpec{0, 3}}, 1), InvalidArgument);
}

// T5's position bias: softmax(q k^T * scale + bias) v, computed here in double.
TEST(AttendHeadScored, AddsThePositionBiasToEveryScore) {
  const int64_t len = 5, d = 4;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> q(d), k(len * d), v(len * d), bias(len);
  for (auto* x : {&q, &k, &v, &bias}) {
    for (float& f : *x) f = dist(rng);
  }
  std::vector<double> p(len);
  double total = 0;
  for (int64_t j = 0; j < len; ++j) {
    double s = 0;
    for (int64_t i = 0; i < d; ++i) s += double(q[i]) * k[j * d + i];
    p[j] = std::exp(s * 0.5 + bias[j]);
    total += p[j];
  }
  ScoreOptions o;
  o.scale = 0.5f;
  o.bias = bias.data();
  std::vector<float> scores(len), out(d), plain(d);
  attend_head_scored(q.data(), k.data(), v.data(), d, len, d, o, scores.data(), out.data());
  for (int64_t i = 0; i < d; ++i) {
    double want = 0;
    for (int64_t j = 0; j < len; ++j) want += p[j] / total * v[j * d + i];
    EXPECT_NEAR(out[i], want, 1e-5) << i;
  }
  // Without the bias the result differs (the bias is not dropped on the way).
  o.bias = nullptr;
  attend_head_scored(q.data(), k.data(), v.data(), d, len, d, o, scores.data(), plain.data());
  EXPECT_NE(std::memcmp(out.data(), plain.data(), d * sizeof(float)), 0);
}

}  // namespace
}  // namespace hubzoo
