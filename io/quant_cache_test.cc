#include "io/quant_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

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
               Saved("HOME")};
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
  for (const char* off : {"0", "off"}) {
    ::setenv("HUBZOO_QUANT_CACHE", off, 1);
    EXPECT_FALSE(QuantCache::from_env().enabled()) << off;
  }
}

}  // namespace
}  // namespace hubzoo
