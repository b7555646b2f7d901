#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"
#include "ops/test_quant.h"
#include "ops/test_values.h"

namespace hubzoo {
namespace {

using namespace quant_test;  // NOLINT(build/namespaces)

// Panels hold the rows' bytes: every row read back from them is its blocks,
// bit for bit (Q5's high bits, Q8_0's offset codes, the K types' runs, the
// rows of a last partial panel), and dequantize_row reads them then.
TEST(QuantMatrix, PanelsHoldEveryRowsBlocks) {
  for (QuantType t : kAll) {
    if (!quant_has_panel_layout(t)) {
      QuantMatrix w = random_weights(t, 3, 256, 1).w;
      EXPECT_THROW(attach_panels(w), InvalidArgument);
      continue;
    }
    SCOPED_TRACE(std::string(quant_name(t)));
    const int64_t k = 3 * quant_traits(t).block_elems;
    Weights w = random_weights(t, 37, k, 30);
    QuantMatrix wp = w.w;
    int64_t reported = 0;
    attach_panels(wp, [&](int64_t rows) { reported = rows; });
    EXPECT_EQ(reported, 37);
    EXPECT_EQ(quant_panel_bytes(wp), 48 * wp.row_bytes);
    EXPECT_THROW(panel_row_blocks(w.w, 0, nullptr), InvalidArgument);  // no panels
    EXPECT_THROW(panel_row_blocks(wp, 37, nullptr), InvalidArgument);
    std::vector<uint8_t> row(wp.row_bytes);
    std::vector<float> a(k), b(k);
    for (int64_t r = 0; r < 37; ++r) {
      panel_row_blocks(wp, r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), w.w.row(r), wp.row_bytes), 0) << "row " << r;
      w.w.dequantize_row(r, a.data());
      wp.dequantize_row(r, b.data());
      expect_same_bits(b, a);
    }
  }
}

// A matrix of many runs of panels (made in parallel, `read` after each run):
// the counts grow to n, and every row reads back.
TEST(QuantMatrix, PanelsOfALargeMatrixReportTheirRows) {
  const int64_t n = 16 * 300 + 5;
  Weights w = random_weights(QuantType::Q5_1, n, 64, 31);
  QuantMatrix wp = w.w;
  std::vector<int64_t> reported;
  attach_panels(wp, [&](int64_t rows) { reported.push_back(rows); });
  ASSERT_GE(reported.size(), 3u);
  EXPECT_EQ(reported.back(), n);
  EXPECT_TRUE(std::is_sorted(reported.begin(), reported.end()));
  EXPECT_LE(reported[0], 1024 * ThreadPool::shared(0)->num_threads());  // 1024 rows a thread
  std::vector<uint8_t> row(wp.row_bytes);
  for (int64_t r = 0; r < n; ++r) {
    panel_row_blocks(wp, r, row.data());
    ASSERT_EQ(std::memcmp(row.data(), w.w.row(r), wp.row_bytes), 0) << "row " << r;
  }
}

// A row order reads the stored rows through it, as the reordered copy
// permute_rows makes: the same bytes per row, the same panels, and products
// equal to the copy's bit for bit on every target, from the rows and from the
// panels (the loader's GGUF q/k in int8 mode).
TEST(QuantMatrix, RowOrderReadsLikeAReorderedCopy) {
  ThreadPool pool(2);
  for (QuantType t : {QuantType::Q8_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q4_K}) {
    SCOPED_TRACE(std::string(quant_name(t)));
    const int64_t n = 40, k = 512;
    const Weights w = random_weights(t, n, k, 32);
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = (i % 2) * (n / 2) + i / 2;  // llama's interleave
    const QuantMatrix copy = permute_rows(w.w, order);
    QuantMatrix ordered = w.w;
    ordered.row_order.assign(order.begin(), order.end());
    for (int64_t r = 0; r < n; ++r)
      ASSERT_EQ(std::memcmp(ordered.row(r), copy.row(r), w.w.row_bytes), 0) << "row " << r;
    std::vector<const QuantMatrix*> kinds{&ordered};
    QuantMatrix panels = ordered;
    if (quant_has_panel_layout(t)) {
      attach_panels(panels);
      std::vector<uint8_t> row(w.w.row_bytes);
      for (int64_t r = 0; r < n; ++r) {
        panel_row_blocks(panels, r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), copy.row(r), w.w.row_bytes), 0) << "row " << r;
      }
      kinds.push_back(&panels);
    }
    for (int64_t m : {1, 3, 20}) {
      const Shape s{m, n, k};
      const auto x = test::spread_values(m * s.ldx(), 4 + m, -6, 6);
      const auto bias = test::spread_values(n, 5, -4, 4);
      for (QuantMode mode : kModes) {
        const auto ref = run(s, x, copy, bias, mode, nullptr);
        expect_same_bits(run(s, x, ordered, bias, mode, nullptr), ref);
        every_target([&] {
          for (const QuantMatrix* wm : kinds)
            expect_same_bits(run(s, x, *wm, bias, mode, &pool), ref);
        });
      }
    }
  }
}

TEST(QuantMatrix, RowOrderMustCoverTheRows) {
  ThreadPool pool(1);
  const Weights w = random_weights(QuantType::Q8_0, 4, 64, 33);
  QuantMatrix short_order = w.w;
  short_order.row_order = {0, 1, 2};
  const Shape s{1, 4, 64};
  const auto x = test::spread_values(s.ldx(), 1, -1, 1);
  const auto bias = test::spread_values(4, 2, -1, 1);
  EXPECT_THROW(run(s, x, short_order, bias, QuantMode::kInt8, &pool), InvalidArgument);
  EXPECT_THROW(attach_panels(short_order), InvalidArgument);
  QuantMatrix outside = w.w;
  outside.row_order = {0, 1, 4, 3};
  EXPECT_THROW(attach_panels(outside), InvalidArgument);
  outside.row_order = {0, -1, 2, 3};
  EXPECT_THROW(attach_panels(outside), InvalidArgument);
  QuantMatrix ordered = w.w;
  ordered.row_order = {3, 2, 1, 0};
  EXPECT_THROW(concat_quant({&ordered, &w.w}), InvalidArgument);
}

TEST(QuantMatrix, ConcatAndPermuteRows) {
  const Weights a = random_weights(QuantType::Q6_K, 3, 256, 1);
  const Weights b = random_weights(QuantType::Q6_K, 2, 256, 2);
  const QuantMatrix c = concat_quant({&a.w, &b.w});
  ASSERT_EQ(c.n, 5);
  EXPECT_EQ(std::memcmp(c.row(0), a.w.row(0), 3 * a.w.row_bytes), 0);
  EXPECT_EQ(std::memcmp(c.row(3), b.w.row(0), 2 * b.w.row_bytes), 0);
  const QuantMatrix p = permute_rows(c, {4, 0, 2});
  ASSERT_EQ(p.n, 3);
  EXPECT_EQ(std::memcmp(p.row(0), c.row(4), c.row_bytes), 0);
  EXPECT_EQ(std::memcmp(p.row(1), c.row(0), c.row_bytes), 0);
  EXPECT_EQ(std::memcmp(p.row(2), c.row(2), c.row_bytes), 0);
  EXPECT_THROW(permute_rows(c, {5}), InvalidArgument);
  const Weights other = random_weights(QuantType::Q4_K, 2, 256, 3);
  EXPECT_THROW(concat_quant({&a.w, &other.w}), InvalidArgument);
  EXPECT_THROW(concat_quant({}), InvalidArgument);
}

TEST(Fp16, ConversionsRoundTripEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = quant::fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(quant::float_to_fp16(f), h);
  }
  EXPECT_EQ(quant::float_to_fp16(65520.0f), 0x7C00);          // rounds to inf
  EXPECT_EQ(quant::float_to_fp16(65519.0f), 0x7BFF);          // max half
  EXPECT_EQ(quant::float_to_fp16(std::ldexp(1.0f, -25)), 0);  // tie to even: 0
  EXPECT_EQ(quant::float_to_fp16(std::ldexp(3.0f, -25)), 2);  // 1.5 ulp -> 2
}

}  // namespace
}  // namespace hubzoo
