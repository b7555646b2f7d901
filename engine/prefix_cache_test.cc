// The prefix index over a paged KV cache: hash chains of whole pages,
// reference counts shared with the slots that adopt them, least recently
// used eviction of leaves no slot holds, and room made within a budget.
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace hubzoo {
namespace {

constexpr int64_t kRow = 4;
constexpr int64_t kPage = 2 * kKvPage * kRow * sizeof(float);  // one layer's page

std::vector<int64_t> iota_tokens(int64_t n, int64_t first) {
  std::vector<int64_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(PrefixCache, AdoptsTheLongestRunOfWholeIndexedPages) {
  KvCache cache(2, 3, kRow);
  PrefixCache index(cache, model_seed("A", "s", "", "float32/fused"));
  const auto tokens = iota_tokens(40, 100);
  cache.reserve(0, 40);
  index.insert(0, tokens, 40);  // blocks 0 and 1 (positions 0..31); 32..39 is partial
  EXPECT_EQ(index.cached_pages(), 4);
  EXPECT_EQ(cache.page_refs(cache.page_id(0, 0, 0)), 2);  // slot 0 and the index
  EXPECT_EQ(index.adopt(1, tokens, 39), 32);
  EXPECT_EQ(cache.page_id(1, 1, 1), cache.page_id(1, 0, 1));
  EXPECT_EQ(cache.page_refs(cache.page_id(1, 0, 1)), 3);
  EXPECT_EQ(cache.pages_held(), 2 * 3);  // nothing copied
  // A prefix ending mid-page: the whole pages before it (the rest is recomputed).
  auto mid = tokens;
  mid[20] = 7;
  EXPECT_EQ(index.adopt(2, mid, 39), 16);
  // The limit keeps the last prompt token out; nothing for another model's seed.
  cache.clear(2);
  EXPECT_EQ(index.adopt(2, tokens, 31), 16);
  cache.clear(2);
  PrefixCache other(cache, model_seed("A", "s", "", "bfloat16/fused"));
  EXPECT_EQ(other.adopt(2, tokens, 39), 0);
}

TEST(PrefixCache, ChainHashesTheWholePrefix) {
  // Block 1 holds the same tokens in both sequences, after different block 0s.
  KvCache cache(1, 2, kRow);
  PrefixCache index(cache, 1);
  auto a = iota_tokens(32, 0), b = a;
  b[3] = 99;
  cache.reserve(0, 32);
  index.insert(0, a, 32);
  EXPECT_EQ(index.adopt(1, b, 32), 0);
  EXPECT_EQ(index.adopt(1, a, 32), 32);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesNoSlotHolds) {
  KvCache cache(1, 2, kRow);
  PrefixCache index(cache, 1);
  const auto a = iota_tokens(48, 0), b = iota_tokens(32, 500);
  cache.reserve(0, 48);
  index.insert(0, a, 48);  // chain a0 <- a1 <- a2
  cache.clear(0);
  cache.reserve(0, 32);
  index.insert(0, b, 32);  // chain b0 <- b1, held by slot 0
  EXPECT_EQ(cache.bytes(), 5 * kPage);
  EXPECT_EQ(index.idle_bytes(), 3 * kPage);
  // Only a's leaves, deepest first, while slot 0 holds b's pages.
  EXPECT_TRUE(index.evict_one());
  EXPECT_EQ(index.adopt(1, a, 47), 32);  // a2 gone; a0, a1 adopted (and touched)
  cache.clear(1);
  EXPECT_TRUE(index.evict_one());   // a1
  EXPECT_TRUE(index.evict_one());   // a0
  EXPECT_FALSE(index.evict_one());  // b's pages are held by slot 0
  EXPECT_EQ(index.evicted_pages(), 3u);
  cache.clear(0);
  EXPECT_TRUE(index.evict_one());
  EXPECT_TRUE(index.evict_one());
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_EQ(index.cached_pages(), 0);
}

TEST(PrefixCache, BudgetMakesRoomByEvicting) {
  KvCache cache(1, 2, kRow);
  cache.set_budget_bytes(3 * kPage);
  PrefixCache index(cache, 1);
  cache.set_make_room([&] { return index.evict_one(); });
  cache.reserve(0, 48);
  index.insert(0, iota_tokens(48, 0), 48);
  cache.clear(0);
  EXPECT_EQ(cache.bytes(), 3 * kPage);  // all cached, none held by a slot
  cache.reserve(1, 32);                 // evicts two
  EXPECT_EQ(cache.bytes(), 3 * kPage);
  EXPECT_EQ(index.cached_pages(), 1);
  EXPECT_EQ(index.evicted_pages(), 2u);
  EXPECT_THROW(cache.reserve(1, 64), KvCacheFull);  // evicts a0 too, still no room
  EXPECT_EQ(index.cached_pages(), 0);
  EXPECT_LE(cache.bytes(), cache.budget_bytes());
}

TEST(PrefixCache, NotForWindowedOrTokenIdCaches) {
  EXPECT_TRUE(PrefixCache::supported(KvCache(2, 1, kRow)));
  EXPECT_FALSE(PrefixCache::supported(KvCache({KvLayerSpec{kRow, 8}}, 1)));
  KvCache ids(1, 1, kRow);
  ids.keep_token_ids();
  EXPECT_FALSE(PrefixCache::supported(ids));
}

}  // namespace
}  // namespace hubzoo
