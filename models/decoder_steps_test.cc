#include "models/decoder_steps.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace hubzoo {
namespace {

// A cache of 3 slots that keeps token ids, slot s holding `held[s]` positions.
KvCache cache_holding(const std::vector<int64_t>& held) {
  KvCache cache(1, 3, 4);
  cache.keep_token_ids();
  for (int64_t s = 0; s < 3; ++s) {
    cache.reserve(s, held[s]);
    for (int64_t p = 0; p < held[s]; ++p)
      cache.set_token_id(s, p, static_cast<int32_t>(100 * s + p));
    cache.set_length(s, held[s]);
  }
  return cache;
}

TEST(LongRopeReplay, ASlotCrossingReplaysItsTokensAheadOfItsRows) {
  // long_after 4: slot 0 holds 3 and crosses with 2 rows; slot 1 holds 5 (already long);
  // slot 2 holds 2 and stays at 3.
  KvCache cache = cache_holding({3, 5, 2});
  TokenBatch batch;
  batch.add(7, 1, 5);
  batch.add(8, 0, 3);
  batch.add(9, 2, 2);
  batch.add(10, 0, 4);
  ForwardOptions opt;
  opt.logits_rows = {3, 0};
  LongRopeReplay r;
  ASSERT_TRUE(plan_long_rope_replay(batch, cache, 4, opt, r));
  EXPECT_EQ(r.batch.ids, (std::vector<int32_t>{7, 0, 1, 2, 8, 9, 10}));
  EXPECT_EQ(r.batch.slot, (std::vector<int32_t>{1, 0, 0, 0, 0, 2, 0}));
  EXPECT_EQ(r.batch.pos, (std::vector<int32_t>{5, 0, 1, 2, 3, 2, 4}));
  EXPECT_EQ(r.rows, (std::vector<int64_t>{0, 4, 5, 6}));
  EXPECT_EQ(r.options.logits_rows, (std::vector<int64_t>{6, 0}));
  EXPECT_EQ(cache.length(0), 0);  // recomputed from position 0
  EXPECT_EQ(cache.length(1), 5);
  EXPECT_EQ(cache.length(2), 2);

  ForwardResult out;
  out.captured["norm"] = {0, 1, 2, 3, 4, 5, 6};  // one column per replay row
  out.captured["logits"] = {6, 0};
  drop_replayed_rows(r, out);
  EXPECT_EQ(out.captured["norm"], (std::vector<float>{0, 4, 5, 6}));
  EXPECT_EQ(out.captured["logits"], (std::vector<float>{6, 0}));
}

TEST(LongRopeReplay, NothingToReplay) {
  LongRopeReplay r;
  TokenBatch batch;
  batch.add(1, 0, 0);  // an empty slot crossing in one step: the step itself is long
  for (int p = 1; p < 6; ++p) batch.add(1, 0, p);
  KvCache empty = cache_holding({0, 0, 0});
  EXPECT_FALSE(plan_long_rope_replay(batch, empty, 4, {}, r));
  KvCache cache = cache_holding({4, 0, 0});  // 4 held, one more row: crosses
  TokenBatch one;
  one.add(1, 0, 4);
  EXPECT_FALSE(plan_long_rope_replay(one, cache, 0, {}, r));  // no longrope
  KvCache no_ids(1, 3, 4);
  no_ids.reserve(0, 4);
  no_ids.set_length(0, 4);
  EXPECT_FALSE(plan_long_rope_replay(one, no_ids, 4, {}, r));  // ids not kept
  EXPECT_TRUE(plan_long_rope_replay(one, cache, 4, {}, r));
  EXPECT_EQ(r.batch.size(), 5);
}

TEST(LongRopeReplay, ABadLogitsRowLeavesTheCacheAsItWas) {
  KvCache cache = cache_holding({4, 0, 0});
  TokenBatch one;
  one.add(1, 0, 4);
  ForwardOptions opt;
  opt.logits_rows = {1};
  LongRopeReplay r;
  EXPECT_THROW(plan_long_rope_replay(one, cache, 4, opt, r), InvalidArgument);
  EXPECT_EQ(cache.length(0), 4);
}

}  // namespace
}  // namespace hubzoo
