// WeightArena: allocations are aligned, disjoint and kept alive by their
// chunk; chunks go with their last user; a collapse keeps every byte and,
// where the kernel has transparent huge pages, backs the whole 2 MiB pages
// handed out by huge pages.
#include "ops/weight_arena.h"

#include <gtest/gtest.h>
#include <sys/utsname.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <new>
#include <string>
#include <vector>

namespace hubzoo {
namespace {

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}
bool holds(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != static_cast<uint8_t>(seed + i * 7)) return false;
  }
  return true;
}

// The kernel's THP mode ("always", "madvise" or "never"), as sysfs marks it.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  for (const char* mode : {"always", "madvise", "never"}) {
    if (line.find(std::string("[") + mode + "]") != std::string::npos) return mode;
  }
  return "";
}

// Whether the running kernel has MADV_COLLAPSE (Linux 6.1 on).
bool kernel_collapses() {
  utsname u{};
  if (uname(&u) != 0) return false;
  int major = 0, minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return major > 6 || (major == 6 && minor >= 1);
}

TEST(WeightArena, AllocationsAreAlignedDisjointAndShareAChunk) {
  const int64_t before = WeightArena::live_chunks();
  {
    WeightArena arena;
    std::vector<std::shared_ptr<uint8_t[]>> parts;
    const std::vector<size_t> sizes = {1, 100, 4096, 300000, 65, 1 << 20};
    for (size_t i = 0; i < sizes.size(); ++i) {
      parts.push_back(arena.allocate(sizes[i]));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(parts.back().get()) % WeightArena::kAlign, 0u);
      fill(parts.back().get(), sizes[i], static_cast<uint8_t>(i));
    }
    EXPECT_EQ(WeightArena::live_chunks(), before + 1);  // all of them in one chunk
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(holds(parts[i].get(), sizes[i], static_cast<uint8_t>(i))) << "allocation " << i;
    }
  }
  EXPECT_EQ(WeightArena::live_chunks(), before);
}

TEST(WeightArena, ALargeAllocationGetsAChunkAndAFullChunkIsLeft) {
  const int64_t before = WeightArena::live_chunks();
  WeightArena arena;
  auto small = arena.allocate(1000);
  auto large = arena.allocate(WeightArena::kChunkBytes / 2 + 1);  // a chunk of its own
  EXPECT_EQ(WeightArena::live_chunks(), before + 2);
  // Nearly half a chunk fits beside `small`'s 1 KiB; another does not, and
  // opens a third chunk (a sanitizer build's gaps after each included).
  const size_t half = WeightArena::kChunkBytes / 2 - WeightArena::kAlign;
  auto first_half = arena.allocate(half);
  EXPECT_EQ(WeightArena::live_chunks(), before + 2);
  auto second_half = arena.allocate(half);
  EXPECT_EQ(WeightArena::live_chunks(), before + 3);
  fill(large.get(), WeightArena::kChunkBytes / 2 + 1, 3);
  EXPECT_TRUE(holds(large.get(), WeightArena::kChunkBytes / 2 + 1, 3));
}

TEST(WeightArena, AnAllocationOutlivesItsArenaAndItsChunkGoesWithIt) {
  const int64_t before = WeightArena::live_chunks();
  std::shared_ptr<uint8_t[]> kept;
  {
    WeightArena arena;
    kept = arena.allocate(5000);
    fill(kept.get(), 5000, 9);
    arena.allocate(7000);  // dropped at once: the chunk stays for `kept`
  }
  EXPECT_EQ(WeightArena::live_chunks(), before + 1);
  EXPECT_TRUE(holds(kept.get(), 5000, 9));
  kept.reset();
  EXPECT_EQ(WeightArena::live_chunks(), before);
}

TEST(WeightArena, CollapseKeepsEveryByteAndBacksWholePagesByHugePages) {
  const int64_t before = WeightArena::live_chunks();
  const int64_t huge_before = anon_huge_page_bytes();
  const size_t part = 1536 * 1024;  // three of them: 4.5 MiB, two whole huge pages
  std::vector<std::shared_ptr<uint8_t[]>> parts;
  int64_t collapsed = 0;
  {
    WeightArena arena;
    for (int i = 0; i < 3; ++i) {
      parts.push_back(arena.allocate(part));
      fill(parts.back().get(), part, static_cast<uint8_t>(40 + i));
    }
    arena.collapse();
    auto later = arena.allocate(100);  // after a collapse: a new chunk
    EXPECT_EQ(WeightArena::live_chunks(), before + 2);
    // The arena goes before its collapse is waited for: the collapse holds the chunk.
    WeightArena::wait_for_collapses();
    collapsed = arena.collapsed_bytes();
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(holds(parts[i].get(), part, static_cast<uint8_t>(40 + i))) << "part " << i;
  }
  const int64_t whole =
      static_cast<int64_t>(3 * part / WeightArena::kHugePage * WeightArena::kHugePage);
  if (thp_mode() == "never" || !kernel_collapses()) {
    EXPECT_EQ(collapsed, 0);
  } else {
    // THP on a kernel with MADV_COLLAPSE: the two whole pages, now huge pages.
    EXPECT_EQ(collapsed, whole);
    EXPECT_GE(anon_huge_page_bytes() - huge_before, whole);
  }
  parts.clear();
  EXPECT_EQ(WeightArena::live_chunks(), before);
}

TEST(WeightArena, AnAbsurdSizeIsRefusedBeforeAnythingIsMapped) {
  const int64_t before = WeightArena::live_chunks();
  WeightArena arena;
  EXPECT_THROW(arena.allocate(SIZE_MAX), std::bad_alloc);
  EXPECT_THROW(arena.allocate(WeightArena::kMaxBytes + 1), std::bad_alloc);
  EXPECT_EQ(WeightArena::live_chunks(), before);
}

TEST(WeightArena, CollapseWithNothingAllocatedDoesNothing) {
  WeightArena arena;
  arena.collapse();
  WeightArena::wait_for_collapses();
  EXPECT_EQ(arena.collapsed_bytes(), 0);
}

}  // namespace
}  // namespace hubzoo
