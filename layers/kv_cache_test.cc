// The paged KV cache's accounting: pages follow the positions a slot uses,
// a windowed layer keeps only its window's pages, the budget is never
// exceeded (a page that does not fit is refused before anything changes),
// and clearing every slot returns the cache to zero bytes.
#include "layers/kv_cache.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "ops/bf16.h"
#include "ops/f16.h"

namespace hubzoo {
namespace {

constexpr int64_t kRow = 8;
constexpr int64_t kPageBytes = 2 * kKvPage * kRow * sizeof(float);

// glibc's malloc only: the sanitizers bring their own allocator (GCC says so
// with __SANITIZE_*__, clang with __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HUBZOO_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define HUBZOO_SANITIZER_ALLOCATOR 1
#endif
#endif

#if defined(__GLIBC__) && !defined(HUBZOO_SANITIZER_ALLOCATOR)
int64_t resident_bytes() {
  int64_t size = 0, resident = 0;
  std::ifstream("/proc/self/statm") >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// A cache's pages are small heap blocks: freed, they would stay resident under
// whatever the heap allocated after them. Their memory goes back to the system.
TEST(PagedKvCache, FreedPagesLeaveResidentMemory) {
  constexpr int64_t kLayers = 8, kWideRow = 256, kPositions = 2048;
  constexpr int64_t kBytes = kLayers * kPositions * kWideRow * 2 * sizeof(float);  // 32 MiB
  static_assert(2 * kKvPage * kWideRow * sizeof(float) < 128 * 1024,
                "pages below mmap's threshold");
  std::unique_ptr<char[]> above;
  int64_t before = 0;
  {
    KvCache cache(kLayers, 1, kWideRow);
    cache.reserve(0, kPositions);  // zeroed pages: resident
    ASSERT_EQ(cache.bytes(), kBytes);
    above.reset(new char[4096]);  // allocated after the pages: the heap cannot shrink from its top
    std::memset(above.get(), 1, 4096);
    before = resident_bytes();
  }
  EXPECT_LT(resident_bytes(), before - kBytes * 3 / 4);
}
#endif

TEST(PagedKvCache, PagesFollowPositions) {
  KvCache cache(2, 3, kRow);
  EXPECT_EQ(cache.bytes(), 0);
  cache.reserve(1, 1);
  EXPECT_EQ(cache.pages_held(), 2);  // one page in each of 2 layers
  EXPECT_EQ(cache.bytes(), 2 * kPageBytes);
  cache.reserve(1, 16);  // still the first page
  EXPECT_EQ(cache.pages_held(), 2);
  cache.reserve(1, 17);
  EXPECT_EQ(cache.pages_held(), 4);
  EXPECT_EQ(cache.bytes(0, 1), 2 * kPageBytes);
  EXPECT_EQ(cache.bytes(0, 0), 0);
  cache.reserve(2, 40);
  EXPECT_EQ(cache.pages_held(), 4 + 2 * 3);
  // Rows land in their page at pos % 16, and read back.
  std::vector<float> row(kRow, 2.5f), scratch(kRow);
  cache.store_key(0, 1, 16, row.data());
  cache.store_value(0, 1, 21, row.data());
  const float* key = cache.read_key(0, 1, 16, 0, kRow, scratch.data());
  EXPECT_EQ(key[3], 2.5f);
  EXPECT_EQ(cache.key_pages(0, 1)[1], key);  // float32: a pointer into the page
  EXPECT_EQ(static_cast<const float*>(cache.value_pages(0, 1)[1]) + 5 * kRow,
            cache.read_value(0, 1, 21, 0, kRow, scratch.data()));
  EXPECT_THROW(cache.read_key(0, 1, 32, 0, kRow, scratch.data()), InvalidArgument);
  cache.clear(1);
  cache.clear(2);
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_EQ(cache.pages_held(), 0);
}

// page_regions names each held page of the positions asked for, keys then
// values, in position order; released pages and pages past the table are left out.
TEST(PagedKvCache, PageRegionsNameThePagesOfPositions) {
  KvCache cache({KvLayerSpec{kRow, 0}, KvLayerSpec{kRow, 20, false, KvElement::kBF16}}, 2);
  cache.reserve(1, 40);
  const int64_t half = kKvPage * kRow * 4;    // a page's float32 keys (or values)
  constexpr int64_t kBig = int64_t{1} << 40;  // no budget to speak of
  std::vector<ThreadPool::Region> got;
  EXPECT_EQ(cache.page_regions(0, 1, 0, 40, kBig, got), 6 * half);  // pages 0, 1, 2
  ASSERT_EQ(got.size(), 6u);
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_EQ(got[2 * b].at, cache.key_pages(0, 1)[b]) << b;
    EXPECT_EQ(got[2 * b + 1].at, cache.value_pages(0, 1)[b]) << b;
    EXPECT_EQ(got[2 * b].bytes, half);
    EXPECT_EQ(got[2 * b + 1].bytes, half);
  }
  got.clear();
  cache.page_regions(0, 1, 17, 33, kBig, got);  // positions 17 .. 32: pages 1 and 2
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].at, cache.key_pages(0, 1)[1]);
  got.clear();
  cache.page_regions(0, 1, 16, 16, kBig, got);   // no positions
  cache.page_regions(0, 0, 0, 40, kBig, got);    // a slot holding none
  cache.page_regions(0, 1, 0, 1000, kBig, got);  // past what the slot holds: its 3 pages
  EXPECT_EQ(got.size(), 6u);
  // A windowed bf16 layer: the released pages are not named; bf16 halves the bytes.
  cache.set_length(1, 40);
  got.clear();
  cache.page_regions(1, 1, 0, 40, kBig, got);
  ASSERT_EQ(got.size(), 4u);  // pages 1 and 2 hold positions 20 .. 39
  EXPECT_EQ(got[0].at, cache.key_pages(1, 1)[1]);
  EXPECT_EQ(got[0].bytes, half / 2);
  // A budget takes whole pages from the first on: 2.5 pages' bytes give 2.
  got.clear();
  EXPECT_EQ(cache.page_regions(0, 1, 0, 40, 5 * half, got), 4 * half);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3].at, cache.value_pages(0, 1)[1]);
  EXPECT_EQ(cache.page_regions(0, 1, 0, 40, half, got), 0);  // not even one page
  EXPECT_EQ(got.size(), 4u);
}

TEST(PagedKvCache, BlockedKeysGoToTheirLane) {
  KvCache cache({KvLayerSpec{kRow, 0, true}}, 1);
  cache.reserve(0, 20);
  std::vector<float> row(kRow);
  for (int64_t c = 0; c < kRow; ++c) row[c] = static_cast<float>(c + 1);
  cache.store_key(0, 0, 18, row.data());
  const float* page = static_cast<const float*>(cache.key_pages(0, 0)[1]);
  for (int64_t c = 0; c < kRow; ++c) EXPECT_EQ(page[c * kKvPage + 2], c + 1.0f);
}

TEST(PagedKvCache, WindowKeepsOnlyItsPages) {
  const int64_t window = 20;
  KvCache cache({KvLayerSpec{kRow, window}, KvLayerSpec{kRow, 0}}, 1);
  std::vector<float> scratch(kRow);
  int64_t most = 0;
  for (int64_t n = 1; n <= 300; n += 7) {  // decode-like growth in uneven steps
    cache.reserve(0, n);
    most = std::max(most, cache.bytes());
    EXPECT_LE(cache.bytes(), cache.slot_bytes_at(n)) << n;
    cache.set_length(0, n);
    // The window's positions are held; pages wholly before it are not.
    for (int64_t p = std::max<int64_t>(0, n - window); p < n; ++p) {
      EXPECT_NO_THROW(cache.read_value(0, 0, p, 0, kRow, scratch.data())) << n << " " << p;
    }
    const int64_t window_pages = cache.bytes(0, 0) / kPageBytes;
    EXPECT_LE(window_pages, (window + kKvPage - 1) / kKvPage + 1) << n;
    EXPECT_EQ(cache.bytes(1, 0), (n + kKvPage - 1) / kKvPage * kPageBytes);
  }
  EXPECT_THROW(cache.read_value(0, 0, 0, 0, kRow, scratch.data()), InvalidArgument);  // released
  cache.clear(0);
  EXPECT_EQ(cache.bytes(), 0);
}

TEST(PagedKvCache, BudgetIsNeverExceeded) {
  KvCache cache(2, 4, kRow);
  cache.set_budget_bytes(5 * kPageBytes);
  cache.reserve(0, 16);  // 2 pages
  cache.reserve(1, 16);  // 4 pages
  // Slot 2 needs 2 more pages: refused, and nothing of it is allocated.
  EXPECT_THROW(cache.reserve(2, 10), KvCacheFull);
  EXPECT_EQ(cache.pages_held(), 4);
  EXPECT_EQ(cache.bytes(0, 2), 0);
  EXPECT_EQ(cache.bytes(1, 2), 0);
  EXPECT_LE(cache.bytes(), cache.budget_bytes());
  cache.clear(0);
  cache.reserve(2, 10);  // fits now
  EXPECT_EQ(cache.bytes(), 4 * kPageBytes);
  cache.clear(1);
  cache.clear(2);
  EXPECT_EQ(cache.bytes(), 0);
}

// 16-bit layers (bf16, half): 2 bytes an element, and values of the type
// read back as the same floats (rows and blocked keys); other floats are
// stored rounded as Numerics::round_kv rounds them (half: saturated).
TEST(PagedKvCache, SixteenBitPagesHoldTheirValuesExactly) {
  for (KvElement type : {KvElement::kBF16, KvElement::kF16}) {
    const bool f16 = type == KvElement::kF16;
    SCOPED_TRACE(f16 ? "f16" : "bf16");
    const auto round16 = [&](float x) { return f16 ? round_f16_saturated(x) : round_bf16(x); };
    KvLayerSpec rows{kRow, 0}, blocked{kRow, 0, true}, fp32{kRow, 0};
    rows.element = blocked.element = type;
    KvCache cache({rows, blocked, fp32}, 1);
    EXPECT_EQ(cache.page_bytes(0), kPageBytes / 2);
    EXPECT_EQ(cache.page_bytes(1), kPageBytes / 2);
    EXPECT_EQ(cache.page_bytes(2), kPageBytes);
    cache.reserve(0, 20);
    EXPECT_EQ(cache.bytes(), 2 * (kPageBytes / 2 + kPageBytes / 2 + kPageBytes));
    std::vector<float> row(kRow), scratch(kRow);
    for (int64_t c = 0; c < kRow; ++c) row[c] = round16(0.37f * static_cast<float>(c) - 1.1f);
    for (int64_t layer = 0; layer < 3; ++layer) {
      cache.store_key(layer, 0, 17, row.data());
      cache.store_value(layer, 0, 17, row.data());
      const float* v = cache.read_value(layer, 0, 17, 2, kRow - 2, scratch.data());
      for (int64_t c = 2; c < kRow; ++c) EXPECT_EQ(v[c - 2], row[c]) << layer;
    }
    const float* k = cache.read_key(0, 0, 17, 0, kRow, scratch.data());
    for (int64_t c = 0; c < kRow; ++c) EXPECT_EQ(k[c], row[c]);
    const auto* lanes = static_cast<const uint16_t*>(cache.key_pages(1, 0)[1]);
    for (int64_t c = 0; c < kRow; ++c) {
      EXPECT_EQ(f16 ? f16_to_f32(lanes[c * kKvPage + 1]) : bf16_to_float(lanes[c * kKvPage + 1]),
                row[c]);
    }
    // Unrounded floats, one beyond the largest half: stored rounded.
    const std::vector<float> raw = {1.0f / 3, -70000.0f, 1e-6f, 2.71828f,
                                    -0.1f,    65519.0f,  7e4f,  -1e-9f};
    for (int64_t layer = 0; layer < 2; ++layer) {
      cache.store_key(layer, 0, 3, raw.data());
      cache.store_value(layer, 0, 3, raw.data());
      const float* rk = cache.read_key(layer, 0, 3, 0, kRow, scratch.data());
      for (int64_t c = 0; c < kRow; ++c) EXPECT_EQ(rk[c], round16(raw[c])) << layer << " " << c;
      const float* rv = cache.read_value(layer, 0, 3, 0, kRow, scratch.data());
      for (int64_t c = 0; c < kRow; ++c) EXPECT_EQ(rv[c], round16(raw[c])) << layer << " " << c;
    }
    if (f16) {
      EXPECT_EQ(round16(raw[1]), -kF16Max);
    }
    cache.clear(0);
    EXPECT_EQ(cache.bytes(), 0);
  }
}

// Half rows longer than the store's conversion buffer (256 elements), in
// blocked keys (lanes 16 apart) and in value rows.
TEST(PagedKvCache, LongHalfRowsRoundTrip) {
  constexpr int64_t kLong = 600;
  KvLayerSpec spec{kLong, 0, true};
  spec.element = KvElement::kF16;
  KvCache cache({spec}, 1);
  cache.reserve(0, 40);
  std::vector<float> row(kLong), scratch(kLong);
  for (int64_t c = 0; c < kLong; ++c) row[c] = 0.013f * static_cast<float>(c) - 3.9f;
  for (int64_t pos : {0, 21, 39}) {
    cache.store_key(0, 0, pos, row.data());
    cache.store_value(0, 0, pos, row.data());
    const float* k = cache.read_key(0, 0, pos, 0, kLong, scratch.data());
    for (int64_t c = 0; c < kLong; ++c) ASSERT_EQ(k[c], round_f16_saturated(row[c])) << pos;
    const float* v = cache.read_value(0, 0, pos, 0, kLong, scratch.data());
    for (int64_t c = 0; c < kLong; ++c) ASSERT_EQ(v[c], round_f16_saturated(row[c])) << pos;
    for (float& x : row) x = -x * 1.5f;
  }
}

TEST(PagedKvCache, SlotBytesAtCountsWholePages) {
  KvCache cache({KvLayerSpec{kRow, 0}, KvLayerSpec{2 * kRow, 40}}, 1);
  EXPECT_EQ(cache.slot_bytes_at(1), kPageBytes + 2 * kPageBytes);
  EXPECT_EQ(cache.slot_bytes_at(16), 3 * kPageBytes);
  EXPECT_EQ(cache.slot_bytes_at(17), 2 * kPageBytes + 2 * 2 * kPageBytes);
  // The windowed layer: at most two windows' pages (ceil(40 / 16) + 1 each).
  EXPECT_EQ(cache.slot_bytes_at(10000), 625 * kPageBytes + 8 * 2 * kPageBytes);
}

}  // namespace
}  // namespace hubzoo
