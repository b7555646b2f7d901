#include "layers/weights.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <vector>

#include "base/test_util.h"
#include "layers/hub_quant.h"
#include "ops/matmul.h"
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

// bf16- and fp16-stored matrices stay so under float32 numerics, alone and
// fused, and multiply exactly as their float32 widening (ops/matmul.h); fused
// with a float32 part they become float32. bf16 numerics round fp16 to bf16.
TEST(WeightLoader, HalfMatricesStayHalfUnderFloat32Numerics) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const bool f16 = dtype == DType::F16;
    TempDir dir;
    const int64_t k = 96;
    const std::vector<int64_t> rows = {40, 24, 24};
    std::vector<std::vector<uint16_t>> bits;
    std::vector<std::vector<float>> wide;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto v = test::spread_values(rows[i] * k, 40 + static_cast<int>(i), -6, 3);
      bits.emplace_back();
      wide.emplace_back();
      for (float x : v) {
        bits.back().push_back(f16 ? f32_to_f16(x) : f32_to_bf16(x));
        wide.back().push_back(f16 ? f16_to_f32(bits.back().back())
                                  : bf16_to_f32(bits.back().back()));
      }
    }
    write_safetensors(dir / "model.safetensors",
                      {{"a.weight", {dtype, {rows[0], k}, bits[0].data()}},
                       {"b.weight", {dtype, {rows[1], k}, bits[1].data()}},
                       {"c.weight", {DType::F32, {rows[2], k}, wide[2].data()}}});
    ThreadPool pool(2);
    const auto x = test::spread_values(3 * k, 9, -4, 4);
    // y = x W^T for W the rows of `parts` stacked, packed float32: what each product must equal.
    const auto expect_product = [&](const PackedMatrix& p, const std::vector<size_t>& parts) {
      std::vector<float> w;
      for (size_t i : parts) w.insert(w.end(), wide[i].begin(), wide[i].end());
      const PackedMatrix ref = pack_weights(w.data(), p.n, k);
      std::vector<float> got(3 * p.n), want(3 * p.n);
      matmul({x.data(), 3, k, &p, nullptr, got.data(), p.n}, pool);
      matmul({x.data(), 3, k, &ref, nullptr, want.data(), p.n}, pool);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    };
    const auto open = [&] { return std::make_shared<Checkpoint>(Checkpoint::open(dir.path())); };
    for (bool int8 : {false, true}) {
      Numerics numerics;
      numerics.int8 = int8;
      WeightLoader loader(open(), numerics);
      const PackedMatrix a = loader.take_packed("a.weight", rows[0], k);
      EXPECT_EQ(a.is_f16(), f16);
      EXPECT_EQ(a.is_bf16(), !f16);
      EXPECT_FALSE(a.bf16_activations);
      // Two panels of 32 rows, 2 bytes a weight (bf16 is coded where an AVX-512
      // kernel multiplies it so and that saves bytes, ops/matmul_coded.h: not
      // at this K, whose last k block would be stored whole).
      EXPECT_FALSE(a.is_coded());
      EXPECT_EQ(a.bytes(), 2 * 64 * k);
      expect_product(a, {0});
      const PackedMatrix ab =
          loader.take_packed_concat({"b.weight", "c.weight"}, {rows[1], rows[2]}, k);
      EXPECT_FALSE(ab.is_half());
      expect_product(ab, {1, 2});
    }
    WeightLoader again(open());
    const PackedMatrix ba =
        again.take_packed_concat({"b.weight", "a.weight"}, {rows[1], rows[0]}, k);
    EXPECT_EQ(ba.is_f16(), f16);
    EXPECT_EQ(ba.is_bf16(), !f16);
    expect_product(ba, {1, 0});
    WeightLoader bf16(open(), Numerics{true, false});
    const PackedMatrix rounded = bf16.take_packed("a.weight", rows[0], k);
    EXPECT_TRUE(rounded.is_bf16());
    for (int64_t r = 0; r < rows[0]; ++r) {
      for (int64_t c = 0; c < k; ++c)
        ASSERT_EQ(std::bit_cast<uint32_t>(rounded.at(r, c)),
                  std::bit_cast<uint32_t>(round_bf16(wide[0][r * k + c])));
    }
  }
}

// Stacked experts ([count, n, k], MoE) stored as bf16 or fp16: each matrix
// packed from its bits as take_packed packs one, multiplying as its widening.
TEST(WeightLoader, StackedHalfMatricesStayHalf) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const bool f16 = dtype == DType::F16;
    const int64_t count = 2, n = 48, k = 64, rows = n / 2;
    std::vector<uint16_t> bits;
    std::vector<float> wide;
    for (float x : test::spread_values(count * n * k, 31, -6, 3)) {
      bits.push_back(f16 ? f32_to_f16(x) : f32_to_bf16(x));
      wide.push_back(f16 ? f16_to_f32(bits.back()) : bf16_to_f32(bits.back()));
    }
    TempDir dir;
    write_safetensors(dir / "model.safetensors",
                      {{"experts.weight", {dtype, {count, n, k}, bits.data()}}});
    ThreadPool pool(2);
    const auto x = test::spread_values(3 * k, 9, -4, 4);
    for (bool bf16_numerics : {false, true}) {
      WeightLoader loader(std::make_shared<Checkpoint>(Checkpoint::open(dir.path())),
                          Numerics{bf16_numerics, false});
      const std::vector<PackedMatrix> stack =
          loader.take_packed_stack("experts.weight", count, n, k, /*parts=*/2);
      ASSERT_EQ(stack.size(), 4u);
      for (size_t b = 0; b < stack.size(); ++b) {
        const PackedMatrix& p = stack[b];
        EXPECT_EQ(p.is_f16(), f16 && !bf16_numerics);
        EXPECT_EQ(p.is_bf16(), !f16 || bf16_numerics);
        // One panel of 32 rows, 2 bytes a weight (bf16: coded in fewer where an
        // AVX-512 kernel multiplies them so, ops/matmul_coded.h; not on AMX tiles).
        const bool coded =
            !p.bf16_tiles && (!f16 || bf16_numerics) && matmul_bf16_coded(p.bf16_activations);
        EXPECT_EQ(p.is_coded(), coded);
        if (coded) {
          EXPECT_LT(p.bytes(), 2 * 32 * k * 13 / 16);  // 12 bits, a header, escapes
        } else {
          EXPECT_EQ(p.bytes(), 2 * 32 * k);
        }
        const std::vector<float> w(wide.begin() + b * rows * k, wide.begin() + (b + 1) * rows * k);
        if (bf16_numerics) {  // rounded to bf16 (in the tile layout where AMX is)
          for (int64_t i = 0; i < rows * k; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(p.at(i / k, i % k)),
                      std::bit_cast<uint32_t>(round_bf16(w[i])));
          continue;
        }
        const PackedMatrix ref = pack_weights(w.data(), rows, k);
        std::vector<float> got(3 * rows), want(3 * rows);
        matmul({x.data(), 3, k, &p, nullptr, got.data(), rows}, pool);
        matmul({x.data(), 3, k, &ref, nullptr, want.data(), rows}, pool);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      }
    }
  }
}

// A GPTQ checkpoint (4-bit, group 64, desc_act: a column order) of one
// [40, 256] linear "lin" (40 rows: a partial last panel).
struct GptqLinear {
  static constexpr int64_t kN = 40, kK = 256, kGroup = 64;
  TempDir dir;
  GptqLinear() {
    std::vector<int32_t> qweight(kK / 8 * kN, 0), qzeros(kK / kGroup * kN / 8, 0), g_idx(kK);
    std::vector<float> scales(kK / kGroup * kN);
    for (int64_t i = 0; i < kK; ++i) g_idx[(i * 37) % kK] = static_cast<int32_t>(i / kGroup);
    for (int64_t c = 0; c < kK; ++c) {
      for (int64_t r = 0; r < kN; ++r)
        qweight[(c / 8) * kN + r] |= static_cast<int32_t>((r * 7 + c * 3) % 16) << (4 * (c % 8));
    }
    for (int64_t g = 0; g < kK / kGroup; ++g) {
      for (int64_t r = 0; r < kN; ++r) {
        qzeros[g * (kN / 8) + r / 8] |= static_cast<int32_t>((r + g) % 16) << (4 * (r % 8));
        scales[g * kN + r] = 0.01f * static_cast<float>(1 + (r * 5 + g) % 9);
      }
    }
    write_safetensors(dir / "model.safetensors",
                      {{"lin.qweight", {DType::I32, {kK / 8, kN}, qweight.data()}},
                       {"lin.qzeros", {DType::I32, {kK / kGroup, kN / 8}, qzeros.data()}},
                       {"lin.scales", {DType::F32, {kK / kGroup, kN}, scales.data()}},
                       {"lin.g_idx", {DType::I32, {kK}, g_idx.data()}}});
  }
  std::unique_ptr<WeightLoader> loader(bool int8, const QuantCache& cache) const {
    Numerics numerics;
    numerics.int8 = int8;
    auto w = std::make_unique<WeightLoader>(
        std::make_shared<Checkpoint>(Checkpoint::open(dir.path())), numerics);
    w->set_hub_quant(HubQuant::from_config(
        JsonObject(parse_json(R"({"quantization_config": {"quant_method": "gptq", "bits": 4,
                     "group_size": 64, "desc_act": true, "sym": false}})",
                              "config"),
                   "config.json")));
    w->set_quant_cache(cache);
    return w;
  }
};

// The Hub's int4 matrices in int8 mode: where the kernels read panels, the
// converted rows go to the cache (keyed by their bytes), so that they are a
// file's pages beside the panels rather than memory held for the life of the
// model; the blocks, the panels and the column order are those of a load
// without a cache. Exact mode makes no panels and leaves the cache alone.
TEST(WeightLoaderQuantCache, HubMatricesWithPanelsKeepTheirRowsInTheCache) {
  const GptqLinear ckpt;
  TempDir cache_dir;
  const QuantCache cache(cache_dir.path());
  const bool panels = quant_reads_panels(QuantType::Q4_G);
  const auto take_lin = [](WeightLoader& w) {
    PackedMatrix p = w.take_packed("lin.weight", GptqLinear::kN, GptqLinear::kK);
    EXPECT_EQ(p.quant.size(), 1u);
    return p;
  };
  const auto entries = [&] {
    return std::distance(fs::directory_iterator(cache_dir.path()), fs::directory_iterator());
  };
  const auto exact = ckpt.loader(false, cache);
  const PackedMatrix e = take_lin(*exact);
  EXPECT_FALSE(e.quant.at(0)->panels);
  EXPECT_EQ(exact->quant_cache_hits() + exact->quant_cache_stores(), 0);
  EXPECT_EQ(entries(), 0);

  const auto plain = ckpt.loader(true, QuantCache());
  const PackedMatrix want = take_lin(*plain);
  const QuantMatrix& w = *want.quant.at(0);
  EXPECT_EQ(w.type, QuantType::Q4_G);
  EXPECT_EQ(w.k_perm.size(), static_cast<size_t>(GptqLinear::kK));
  EXPECT_EQ(static_cast<bool>(w.panels), panels);
  const std::vector<uint8_t> rows(e.quant.at(0)->data, e.quant.at(0)->data + w.bytes());
  EXPECT_EQ(std::vector<uint8_t>(w.data, w.data + w.bytes()), rows);

  for (int load = 0; load < 2; ++load) {
    SCOPED_TRACE("load " + std::to_string(load));
    const auto cached = ckpt.loader(true, cache);
    const PackedMatrix got = take_lin(*cached);
    const QuantMatrix& q = *got.quant.at(0);
    EXPECT_EQ(cached->quant_cache_stores(), panels && load == 0 ? 1 : 0);
    EXPECT_EQ(cached->quant_cache_hits(), panels && load == 1 ? 1 : 0);
    EXPECT_EQ(entries(), panels ? 1 : 0);
    EXPECT_EQ(std::vector<uint8_t>(q.data, q.data + q.bytes()), rows);
    EXPECT_EQ(q.k_perm, w.k_perm);
    ASSERT_EQ(static_cast<bool>(q.panels), panels);
    if (panels) {
      EXPECT_EQ(std::memcmp(q.panels.get(), w.panels.get(), quant_panel_bytes(q)), 0);
    }
  }
}

}  // namespace
}  // namespace hubzoo
