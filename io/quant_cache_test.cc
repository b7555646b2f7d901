#include "io/quant_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/test_util.h"

namespace hubzoo {
namespace {

using test_util::TempDir;
namespace fs = std::filesystem;

std::vector<uint8_t> bytes_of(uint64_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 131 + i / 7);
  return v;
}

// Q8_0 rows of k = 64: two blocks of 34 bytes.
const QuantCacheShape kShape{QuantType::Q8_0, 100, 64, 68};

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

TEST(QuantCacheKey, CoversEveryInput) {
  std::vector<float> w(4 * 64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.25f - 3.0f;
  const QuantCacheSource src{w.data(), w.size() * sizeof(float), DType::F32, {}, nullptr, 0.0f};
  const QuantCacheKey base = quant_cache_key(1, QuantType::Q4_0, 4, 64, src);
  EXPECT_EQ(base, quant_cache_key(1, QuantType::Q4_0, 4, 64, src));
  EXPECT_EQ(base.hex().size(), 32u);
  EXPECT_NE(base, quant_cache_key(2, QuantType::Q4_0, 4, 64, src));   // revision
  EXPECT_NE(base, quant_cache_key(1, QuantType::Q8_0, 4, 64, src));   // type
  EXPECT_NE(base, quant_cache_key(1, QuantType::Q4_0, 2, 128, src));  // shape, same bytes
  std::vector<float> other = w;
  other.back() = std::nextafter(other.back(), 100.0f);  // one bit of one weight
  QuantCacheSource changed = src;
  changed.data = other.data();
  EXPECT_NE(base, quant_cache_key(1, QuantType::Q4_0, 4, 64, changed));
  changed = src;
  changed.dtype = DType::I32;  // the same bytes read as another dtype
  EXPECT_NE(base, quant_cache_key(1, QuantType::Q4_0, 4, 64, changed));
  changed = src;
  changed.add = 1.0f;  // Gemma's 1 + w
  EXPECT_NE(base, quant_cache_key(1, QuantType::Q4_0, 4, 64, changed));
  const std::vector<int64_t> order = {1, 0, 2, 3}, identity = {0, 1, 2, 3};
  changed = src;
  changed.row_order = &order;
  const QuantCacheKey reordered = quant_cache_key(1, QuantType::Q4_0, 4, 64, changed);
  EXPECT_NE(base, reordered);
  changed.row_order = &identity;
  EXPECT_NE(reordered, quant_cache_key(1, QuantType::Q4_0, 4, 64, changed));
  changed = src;
  changed.quant = QuantType::Q8_0;
  EXPECT_NE(base, quant_cache_key(1, QuantType::Q4_0, 4, 64, changed));
}

TEST(QuantCache, StoresAndFindsTheRows) {
  TempDir dir;
  const QuantCache cache(dir / "q");  // created on the first store
  const QuantCacheKey key{0x1234, 0xabcd};
  EXPECT_FALSE(cache.find(key, kShape));
  const auto rows = bytes_of(kShape.bytes(), 3);
  const auto stored = cache.store(key, kShape, rows.data());
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->bytes, kShape.bytes());
  EXPECT_EQ(std::vector<uint8_t>(stored->rows.get(), stored->rows.get() + stored->bytes), rows);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(stored->rows.get()) % 4096, 0u);  // page-aligned rows
  const auto found = cache.find(key, kShape);
  ASSERT_TRUE(found);
  EXPECT_EQ(std::vector<uint8_t>(found->rows.get(), found->rows.get() + found->bytes), rows);
  EXPECT_EQ(fs::file_size(cache.path_of(key)), kQuantCacheHeaderBytes + kShape.bytes());
  // Nothing but the entry is left in the directory (the temporary file was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "q"), fs::directory_iterator()), 1);
  // Released pages read back from the file.
  found->release(0, found->bytes);
  EXPECT_EQ(std::vector<uint8_t>(found->rows.get(), found->rows.get() + found->bytes), rows);
}

// A cache in a fresh directory holding one entry.
struct OneEntry {
  TempDir dir;
  QuantCache cache{dir.path()};
  QuantCacheKey key;
  std::vector<uint8_t> rows;
  OneEntry(QuantCacheKey k, uint8_t seed) : key(k), rows(bytes_of(kShape.bytes(), seed)) {
    EXPECT_TRUE(cache.store(key, kShape, rows.data()));
  }
};

TEST(QuantCache, MissesWhatItWasNotAskedFor) {
  const OneEntry e(QuantCacheKey{1, 2}, 5);
  const QuantCache& cache = e.cache;
  const QuantCacheKey& key = e.key;
  EXPECT_FALSE(cache.find(QuantCacheKey{1, 3}, kShape));
  for (QuantCacheShape other : {QuantCacheShape{QuantType::Q4_0, 100, 64, 68},
                                QuantCacheShape{QuantType::Q8_0, 50, 128, 136},
                                QuantCacheShape{QuantType::Q8_0, 100, 64, 70}}) {
    EXPECT_FALSE(cache.find(key, other));
  }
  // The same file renamed to another key's name is still the first key's entry.
  fs::rename(cache.path_of(key), cache.path_of(QuantCacheKey{7, 8}));
  EXPECT_FALSE(cache.find(QuantCacheKey{7, 8}, kShape));
}

// A damaged or hostile entry is a miss, never an error or a hang, and the
// next store replaces it.
TEST(QuantCache, DamagedEntriesMiss) {
  const OneEntry e(QuantCacheKey{42, 43}, 9);
  const QuantCache& cache = e.cache;
  const QuantCacheKey& key = e.key;
  const std::vector<uint8_t>& rows = e.rows;
  const fs::path path = cache.path_of(key);
  const auto good = read_file(path);
  const auto expect_miss_then_repair = [&](const char* what) {
    EXPECT_FALSE(cache.find(key, kShape)) << what;
    ASSERT_TRUE(cache.store(key, kShape, rows.data())) << what;
    EXPECT_TRUE(cache.find(key, kShape)) << what;
  };
  auto bad = good;
  bad[kQuantCacheHeaderBytes + 1000] ^= 1;  // one bit of the rows: the checksum
  write_file(path, bad);
  expect_miss_then_repair("a flipped bit in the rows");
  bad = good;
  bad[3] ^= 1;  // the magic
  write_file(path, bad);
  expect_miss_then_repair("a flipped bit in the header");
  write_file(path, std::vector<uint8_t>(good.begin(), good.end() - 1));
  expect_miss_then_repair("one byte short");
  write_file(path, std::vector<uint8_t>(good.begin(), good.begin() + 100));
  expect_miss_then_repair("shorter than the header");
  auto longer = good;
  longer.push_back(0);
  write_file(path, longer);
  expect_miss_then_repair("one byte long");
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);  // opening it must not wait for a writer
  EXPECT_FALSE(cache.find(key, kShape));
  fs::remove(path);
  fs::create_directory(path);  // a directory under the entry's name: stores fail cleanly
  EXPECT_FALSE(cache.find(key, kShape));
  EXPECT_FALSE(cache.store(key, kShape, rows.data()));
}

TEST(QuantCache, StoreFailsCleanlyWhereItCannotWrite) {
  TempDir dir;
  write_file(dir / "file", {1, 2, 3});
  const auto rows = bytes_of(kShape.bytes(), 1);
  const QuantCache under_a_file(dir / "file" / "q");  // the directory cannot be made
  EXPECT_FALSE(under_a_file.store(QuantCacheKey{1, 1}, kShape, rows.data()));
  const QuantCache disabled;
  EXPECT_FALSE(disabled.enabled());
  EXPECT_FALSE(disabled.store(QuantCacheKey{1, 1}, kShape, rows.data()));
  EXPECT_FALSE(disabled.find(QuantCacheKey{1, 1}, kShape));
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directory(dir / "ro");
    fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_FALSE(QuantCache(dir / "ro").store(QuantCacheKey{1, 1}, kShape, rows.data()));
    fs::permissions(dir / "ro", fs::perms::owner_all);
  }
  // Nothing half-written is left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()),
            ::geteuid() != 0 ? 2 : 1);
}

TEST(QuantCache, FromEnvironment) {
  struct Saved {
    const char* name;
    std::optional<std::string> value;
    explicit Saved(const char* n) : name(n) {
      if (const char* v = std::getenv(n)) value = v;
    }
    ~Saved() {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  } saved[] = {Saved("HUBZOO_QUANT_CACHE"), Saved("HUBZOO_CACHE"), Saved("XDG_CACHE_HOME"),
               Saved("HOME"), Saved("HUBZOO_QUANT_CACHE_MAX")};
  ::unsetenv("HUBZOO_QUANT_CACHE_MAX");
  ::unsetenv("HUBZOO_QUANT_CACHE");
  ::unsetenv("HUBZOO_CACHE");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(QuantCache::from_env().dir(), fs::path("/h/.cache/hubzoo/quantized"));
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  EXPECT_EQ(QuantCache::from_env().dir(), fs::path("/x/hubzoo/quantized"));
  ::setenv("HUBZOO_CACHE", "/c", 1);
  EXPECT_EQ(QuantCache::from_env().dir(), fs::path("/c/quantized"));
  ::setenv("HUBZOO_QUANT_CACHE", "/q", 1);
  EXPECT_EQ(QuantCache::from_env().dir(), fs::path("/q"));
  EXPECT_EQ(QuantCache::from_env().max_bytes(), kQuantCacheDefaultMaxBytes);
  ::setenv("HUBZOO_QUANT_CACHE_MAX", "64M", 1);
  EXPECT_EQ(QuantCache::from_env().max_bytes(), uint64_t{64} << 20);
  ::setenv("HUBZOO_QUANT_CACHE_MAX", "0", 1);  // unbounded
  EXPECT_EQ(QuantCache::from_env().max_bytes(), 0u);
  ::setenv("HUBZOO_QUANT_CACHE_MAX", "12X", 1);
  try {
    QuantCache::from_env();
    ADD_FAILURE() << "a bad bound was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HUBZOO_QUANT_CACHE_MAX"), std::string::npos) << e.what();
  }
  for (const char* off : {"0", "off"}) {
    ::setenv("HUBZOO_QUANT_CACHE", off, 1);
    EXPECT_FALSE(QuantCache::from_env().enabled()) << off;
  }
}

TEST(QuantCache, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("0", "x"), 0u);
  EXPECT_EQ(parse_byte_size("4096", "x"), 4096u);
  EXPECT_EQ(parse_byte_size("1k", "x"), 1024u);
  EXPECT_EQ(parse_byte_size("2KiB", "x"), 2048u);
  EXPECT_EQ(parse_byte_size("3MB", "x"), uint64_t{3} << 20);
  EXPECT_EQ(parse_byte_size("32G", "x"), uint64_t{32} << 30);
  EXPECT_EQ(parse_byte_size("1t", "x"), uint64_t{1} << 40);
  EXPECT_EQ(parse_byte_size("8388608T", "x"), uint64_t{1} << 63);
  for (const char* bad : {"", "G", "-1", "1.5G", "1 G", "1P", "1Gx", "8388609T",
                          "99999999999999999999", "18446744073709551615"}) {
    EXPECT_THROW(parse_byte_size(bad, "x"), InvalidArgument) << bad;
  }
}

// Entries of kShape take kFile bytes on disk.
constexpr uint64_t kFile = kQuantCacheHeaderBytes + 100 * 68;

void set_age(const fs::path& p, std::chrono::seconds age) {
  fs::last_write_time(p, fs::file_time_type::clock::now() - age);
}

TEST(QuantCache, EvictsTheLeastRecentlyUsedPastItsBound) {
  TempDir dir;
  const auto rows = bytes_of(kShape.bytes(), 3);
  const QuantCache cache(dir.path(), 3 * kFile);  // three entries
  const QuantCacheKey k1{1, 1}, k2{2, 2}, k3{3, 3}, k4{4, 4};
  for (const QuantCacheKey& k : {k1, k2, k3}) ASSERT_TRUE(cache.store(k, kShape, rows.data()));
  set_age(cache.path_of(k1), std::chrono::hours(3));  // the oldest write ...
  set_age(cache.path_of(k2), std::chrono::hours(2));
  set_age(cache.path_of(k3), std::chrono::hours(1));
  ASSERT_TRUE(cache.find(k1, kShape));  // ... but the latest use
  ASSERT_TRUE(cache.store(k4, kShape, rows.data()));
  // Four entries passed the bound: the least recently used went until 7/8 of
  // it was left (two entries), the one just stored stays.
  EXPECT_TRUE(fs::exists(cache.path_of(k1)));
  EXPECT_FALSE(fs::exists(cache.path_of(k2)));
  EXPECT_FALSE(fs::exists(cache.path_of(k3)));
  EXPECT_TRUE(fs::exists(cache.path_of(k4)));
  EXPECT_TRUE(cache.find(k4, kShape));
  // A cache that lists the directory afresh counts what is there.
  const QuantCache again(dir.path(), 2 * kFile);
  ASSERT_TRUE(again.store(k2, kShape, rows.data()));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  EXPECT_TRUE(fs::exists(again.path_of(k2)));
  // Unbounded: nothing goes.
  const QuantCache unbounded(dir.path(), 0);
  for (const QuantCacheKey& k : {k1, k3, k4}) ASSERT_TRUE(unbounded.store(k, kShape, rows.data()));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 4);
}

TEST(QuantCache, KeepsNothingLargerThanItsBoundAndClearsDeadStores) {
  TempDir dir;
  const auto rows = bytes_of(kShape.bytes(), 4);
  EXPECT_FALSE(QuantCache(dir.path(), kFile - 1).store(QuantCacheKey{1, 1}, kShape, rows.data()));
  EXPECT_TRUE(fs::is_empty(dir.path()));
  // Temporary files: a day old, a store that died; fresh, one under way.
  write_file(dir / "0123.tmp.dead01", {1, 2, 3});
  set_age(dir / "0123.tmp.dead01", std::chrono::hours(25));
  write_file(dir / "0123.tmp.live01", {1, 2, 3});
  write_file(dir / "notes.txt", std::vector<uint8_t>(4 * kFile, 7));  // not an entry: not counted
  const QuantCache cache(dir.path(), 2 * kFile);
  ASSERT_TRUE(cache.store(QuantCacheKey{1, 1}, kShape, rows.data()));
  EXPECT_FALSE(fs::exists(dir / "0123.tmp.dead01"));
  EXPECT_TRUE(fs::exists(dir / "0123.tmp.live01"));
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_TRUE(cache.find(QuantCacheKey{1, 1}, kShape));
}

}  // namespace
}  // namespace hubzoo
