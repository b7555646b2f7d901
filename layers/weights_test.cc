#include "layers/weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <vector>

#include "base/test_util.h"
#include "ops/quant.h"
#include "ops/test_values.h"

namespace hubzoo {
namespace {

using test_util::TempDir;
namespace fs = std::filesystem;

// A checkpoint of two fp32 matrices, [48, 256] and [20, 256] (20 rows: a
// partial last panel of the int8 kernels).
struct TwoMatrices {
  TempDir dir;
  std::vector<float> a = test::spread_values(48 * 256, 21, -6, 3);
  std::vector<float> b = test::spread_values(20 * 256, 22, -6, 3);
  TwoMatrices() {
    write_safetensors(dir / "model.safetensors", {{"a.weight", {DType::F32, {48, 256}, a.data()}},
                                                  {"b.weight", {DType::F32, {20, 256}, b.data()}}});
  }
  std::shared_ptr<const Checkpoint> open() const {
    return std::make_shared<Checkpoint>(Checkpoint::open(dir.path()));
  }
};

Numerics quantized(QuantType t, bool int8) {
  Numerics n;
  n.quantize = t;
  n.int8 = int8;
  return n;
}

struct Taken {
  std::vector<uint8_t> rows, panels;
};

// The rows (and panels, where the loader made them) of `name` taken by `loader`.
Taken take(WeightLoader& loader, const std::string& name, int64_t n) {
  const PackedMatrix p = loader.take_packed(name, n, 256);
  EXPECT_EQ(p.quant.size(), 1u);
  const QuantMatrix& q = *p.quant.at(0);
  Taken t{std::vector<uint8_t>(q.data, q.data + q.bytes()), {}};
  if (q.panels) t.panels.assign(q.panels.get(), q.panels.get() + quant_panel_bytes(q));
  return t;
}

// --quantize through the cache: the first load stores each matrix, the next
// maps what was stored, and both hold exactly the blocks (and panels) a load
// without a cache quantizes to.
TEST(WeightLoaderQuantCache, StoresThenReadsTheSameBlocks) {
  const TwoMatrices ckpt;
  TempDir cache_dir;
  for (QuantType t : {QuantType::Q4_0, QuantType::Q4_K}) {
    for (bool int8 : {false, true}) {
      SCOPED_TRACE(std::string(quant_name(t)) + (int8 ? " int8" : " exact"));
      WeightLoader plain(ckpt.open(), quantized(t, int8));
      plain.set_quant_cache(QuantCache());
      const Taken want_a = take(plain, "a.weight", 48), want_b = take(plain, "b.weight", 20);
      EXPECT_EQ(plain.quant_cache_hits() + plain.quant_cache_stores(), 0);
      EXPECT_EQ(!want_a.panels.empty(), int8 && quant_reads_panels(t));

      const QuantCache cache(cache_dir.path() / std::string(quant_name(t)));
      WeightLoader first(ckpt.open(), quantized(t, int8));
      first.set_quant_cache(cache);
      const Taken a1 = take(first, "a.weight", 48), b1 = take(first, "b.weight", 20);
      EXPECT_EQ(first.quant_cache_stores(), int8 ? 0 : 2);  // int8: stored by the exact pass
      EXPECT_EQ(first.quant_cache_hits(), int8 ? 2 : 0);

      WeightLoader second(ckpt.open(), quantized(t, int8));
      second.set_quant_cache(cache);
      const Taken a2 = take(second, "a.weight", 48), b2 = take(second, "b.weight", 20);
      EXPECT_EQ(second.quant_cache_hits(), 2);
      EXPECT_EQ(second.quant_cache_stores(), 0);
      for (const Taken* got : {&a1, &a2}) {
        EXPECT_EQ(got->rows, want_a.rows);
        EXPECT_EQ(got->panels, want_a.panels);
      }
      for (const Taken* got : {&b1, &b2}) {
        EXPECT_EQ(got->rows, want_b.rows);
        EXPECT_EQ(got->panels, want_b.panels);
      }
    }
  }
}

// Other weights are another key; a damaged entry is quantized and stored again.
TEST(WeightLoaderQuantCache, OtherWeightsAndDamagedEntriesQuantizeAgain) {
  const TwoMatrices ckpt;
  TempDir cache_dir;
  const QuantCache cache(cache_dir.path());
  WeightLoader first(ckpt.open(), quantized(QuantType::Q8_0, true));
  first.set_quant_cache(cache);
  const Taken want = take(first, "a.weight", 48);
  ASSERT_EQ(first.quant_cache_stores(), 1);

  TwoMatrices changed;
  changed.a[7] = std::nextafter(changed.a[7], 1e9f);
  write_safetensors(changed.dir / "model.safetensors",
                    {{"a.weight", {DType::F32, {48, 256}, changed.a.data()}},
                     {"b.weight", {DType::F32, {20, 256}, changed.b.data()}}});
  WeightLoader other(changed.open(), quantized(QuantType::Q8_0, true));
  other.set_quant_cache(cache);
  take(other, "a.weight", 48);
  EXPECT_EQ(other.quant_cache_hits(), 0);
  EXPECT_EQ(other.quant_cache_stores(), 1);

  for (const auto& entry : fs::directory_iterator(cache_dir.path())) {
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kQuantCacheHeaderBytes + 5));
    f.put('\x7f');  // a byte of every entry's rows
  }
  WeightLoader again(ckpt.open(), quantized(QuantType::Q8_0, true));
  again.set_quant_cache(cache);
  const Taken got = take(again, "a.weight", 48);
  EXPECT_EQ(again.quant_cache_hits(), 0);
  EXPECT_EQ(again.quant_cache_stores(), 1);
  EXPECT_EQ(got.rows, want.rows);
  EXPECT_EQ(got.panels, want.panels);
}

}  // namespace
}  // namespace hubzoo
