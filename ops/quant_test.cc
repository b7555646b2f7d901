#include "ops/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "hwy/targets.h"
#include "ops/cpu_amx.h"
#include "ops/quant_internal.h"
#include "ops/test_quant.h"
#include "ops/test_values.h"

namespace hubzoo {
namespace {

using namespace quant_test;  // NOLINT(build/namespaces)

TEST(QuantMatmul, EqualsReferenceOnEveryTarget) {
  ThreadPool pool(3);
  for (QuantType t : kAll) {
    SCOPED_TRACE(std::string(quant_name(t)));
    // k = 1056 is 33 blocks of 32: an odd last block (half a 64-column span
    // of the int8 order) in a third k range; 1280 is five K-type blocks.
    const int64_t n = 37;
    for (int64_t k : {int64_t{512}, int64_t{quant_traits(t).block_elems == 256 ? 1280 : 1056}}) {
      const Weights w = random_weights(t, n, k, 1);
      // The same blocks with panels (quant.h): what the VNNI kernels read then.
      QuantMatrix wp = w.w;
      if (quant_has_panel_layout(t)) attach_panels(wp);
      for (int64_t m : {1, 2, 3, 7, 16, 33}) {
        SCOPED_TRACE("k " + std::to_string(k) + " m " + std::to_string(m));
        const Shape s{m, n, k};
        const auto x = test::spread_values(m * s.ldx(), 2 + m, -6, 6);
        const auto bias = test::spread_values(n, 3, -4, 4);
        for (QuantMode mode : kModes) {
          const auto ref = run(s, x, w.w, bias, mode, nullptr);
          every_target([&] {
            for (const QuantMatrix* wm : std::initializer_list<const QuantMatrix*>{&w.w, &wp}) {
              SCOPED_TRACE(wm->panels ? "panels" : "rows");
              expect_same_bits(run(s, x, *wm, bias, mode, &pool), ref);
              // Where the CPU has AVX512-VNNI, the int8 mode's vpmaddwd path as well.
              quant::set_int8_vnni_allowed(false);
              expect_same_bits(run(s, x, *wm, bias, mode, &pool), ref);
              quant::set_int8_vnni_allowed(true);
              // Where the CPU has AMX, its tiles for groups of 16 rows as well.
              quant::set_int8_amx_enabled(true);
              expect_same_bits(run(s, x, *wm, bias, mode, &pool), ref);
              quant::set_int8_amx_enabled(false);
              // The int8 mode's tiled path where few rows take the fused kernels.
              if (mode == QuantMode::kInt8 && m <= 16) {
                quant::set_int8_fused_allowed(false);
                expect_same_bits(run(s, x, *wm, bias, mode, &pool), ref);
                quant::set_int8_fused_allowed(true);
              }
            }
          });
        }
      }
    }
  }
}

// Where /proc/cpuinfo lists AMX-TILE and AMX-INT8 (Linux lists them only if
// it saves their state), amx_int8_ready() holds and, on an AVX-512 target, a
// prefill-sized int8 product with the tiles enabled (quant::set_int8_amx_enabled) reaches
// them, and not when they are off: 40 rows of x are two 16-row tiles and 8 rows on
// the vpdpbusd tile per panel, the same bits as the reference, for every
// 32-weight type (offsets, mins, per-row zeros), with 2 blocks (fewer than
// the tiles run ahead of the floats) and 7 (odd, and no multiple of the four
// tile sets).
TEST(QuantMatmul, AmxTilesWhereTheCpuHasThem) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && line.rfind("flags", 0) != 0) {
  }
  line += ' ';
  const bool listed =
      line.find(" amx_tile ") != std::string::npos && line.find(" amx_int8 ") != std::string::npos;
  EXPECT_EQ(amx_int8_ready(), listed);
  // The tiles are code of the AVX-512 targets only (a sanitizer build compiles
  // its static target alone).
  const bool reached = listed && std::string(quant_target_name()).rfind("AVX3", 0) == 0;
  ThreadPool pool(2);
  for (QuantType t : {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                      QuantType::Q8_0, QuantType::Q4_G, QuantType::Q8_G}) {
    for (int64_t blocks : {2, 7}) {
      SCOPED_TRACE(std::string(quant_name(t)) + ", blocks " + std::to_string(blocks));
      const Shape s{40, 53, blocks * 32};
      Weights w = random_weights(t, s.n, s.k, 11);
      if (quant_has_panel_layout(t)) attach_panels(w.w);
      const auto x = test::spread_values(s.m * s.ldx(), 13, -6, 6);
      const auto bias = test::spread_values(s.n, 3, -4, 4);
      const auto ref = run(s, x, w.w, bias, QuantMode::kInt8, nullptr);
      const int64_t before = quant::int8_amx_tiles();
      expect_same_bits(run(s, x, w.w, bias, QuantMode::kInt8, &pool), ref);
      EXPECT_EQ(quant::int8_amx_tiles(), before);  // off by default
      quant::set_int8_amx_enabled(true);
      expect_same_bits(run(s, x, w.w, bias, QuantMode::kInt8, &pool), ref);
      quant::set_int8_amx_enabled(false);
      EXPECT_EQ(quant::int8_amx_tiles() > before, reached);
    }
  }
}

// A decode step (one row of x) reads a range of panels as several streams
// at once, each a contiguous run of panels, the longer runs' last panels in
// a second pass: every split of a range (2 .. 11 panels, a last panel with
// fewer than 16 rows) equals the reference for the 32-weight and the K
// types, on one thread (one range) and on two, with three streams (the
// default on most CPUs), two and one, each with and without software prefetch
// (quant::int8_decode_prefetch, whose default depends on the CPU), and with
// every piece read as a long one (seven streams, no prefetch:
// quant::int8_long_piece_bytes()).
TEST(QuantMatmul, DecodeStreamsEqualReference) {
  ThreadPool one(1), two(2);
  for (QuantType t : {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                      QuantType::Q8_0, QuantType::Q4_G, QuantType::Q8_G, QuantType::Q2_K,
                      QuantType::Q3_K, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K}) {
    SCOPED_TRACE(std::string(quant_name(t)));
    const int64_t k = 3 * quant_traits(t).block_elems;
    for (int64_t n : {int64_t{32}, int64_t{48}, int64_t{69}, int64_t{80}, int64_t{147},
                      int64_t{160}, int64_t{176}}) {
      SCOPED_TRACE("n " + std::to_string(n));
      Weights w = random_weights(t, n, k, 7 + static_cast<uint32_t>(n));
      attach_panels(w.w);
      const Shape s{1, n, k};
      const auto x = test::spread_values(s.ldx(), 5, -6, 6);
      const auto bias = test::spread_values(n, 3, -4, 4);
      const auto ref = run(s, x, w.w, bias, QuantMode::kInt8, nullptr);
      const int default_streams = quant::int8_decode_streams();
      const bool default_prefetch = quant::int8_decode_prefetch();
      const int64_t default_long = quant::int8_long_piece_bytes();
      every_target([&] {
        for (int64_t long_bytes : {default_long, int64_t{0}}) {
          quant::set_int8_long_piece_bytes(long_bytes);
          for (int streams : {3, 2, 1}) {
            for (bool prefetch : {true, false}) {
              SCOPED_TRACE("streams " + std::to_string(streams) +
                           (prefetch ? "" : ", no prefetch") + ", long pieces from " +
                           std::to_string(long_bytes) + " bytes");
              quant::set_int8_decode_streams(streams);
              quant::set_int8_decode_prefetch(prefetch);
              expect_same_bits(run(s, x, w.w, bias, QuantMode::kInt8, &one), ref);
              expect_same_bits(run(s, x, w.w, bias, QuantMode::kInt8, &two), ref);
            }
          }
        }
      });
      quant::set_int8_decode_streams(default_streams);
      quant::set_int8_decode_prefetch(default_prefetch);
      quant::set_int8_long_piece_bytes(default_long);
    }
  }
}

// The int8 mode's activation quantizer (vectorised per target) against the
// reference's scalar one: rounding ties (x * id exactly n + 1/2), an all-zero
// block, subnormals, a NaN among finite values.
TEST(QuantMatmul, Int8ActivationEdgeCasesEqualReference) {
  ThreadPool pool(2);
  const int64_t n = 5, k = 128;
  const Weights w = random_weights(QuantType::Q8_0, n, k, 9);
  std::vector<float> x(k, 0.0f);
  for (int64_t i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) + 0.5f;  // ties at id = 1
  x[31] = 127.0f;
  for (int64_t i = 64; i < 96; ++i) x[i] = static_cast<float>(i - 80) * 1e-40f;  // subnormal
  for (int64_t i = 96; i < 128; ++i) x[i] = static_cast<float>(i - 100) * 0.25f;
  x[100] = std::numeric_limits<float>::quiet_NaN();
  const Shape s{1, n, k};
  const auto bias = test::spread_values(n, 3, -4, 4);
  const auto ref = run(s, x, w.w, bias, QuantMode::kInt8, nullptr);
  every_target([&] { expect_same_bits(run(s, x, w.w, bias, QuantMode::kInt8, &pool), ref); });
}

// A NaN or infinite block scale or min reaches the output as the reference's
// NaN (its sign included: the int8 mode's min term is -dmin, a sign flip) on
// every kernel: rows and panels, few and many rows of x.
TEST(QuantMatmul, NonFiniteScalesEqualReference) {
  ThreadPool pool(2);
  for (QuantType t : {QuantType::Q2_K, QuantType::Q3_K, QuantType::Q4_K, QuantType::Q5_K,
                      QuantType::Q6_K, QuantType::Q4_1}) {
    SCOPED_TRACE(std::string(quant_name(t)));
    const QuantTraits& tr = quant_traits(t);
    const int64_t n = 37, k = 2 * tr.block_elems;
    Weights w = random_weights(t, n, k, 21);
    const std::vector<int> fields = fp16_fields(t);
    const auto set_half = [&](int64_t row, int64_t block, int field, uint16_t h) {
      uint8_t* b = w.bytes.data() + row * w.w.row_bytes + block * tr.block_bytes + field;
      b[0] = static_cast<uint8_t>(h & 0xFF);
      b[1] = static_cast<uint8_t>(h >> 8);
    };
    set_half(3, 1, fields.back(), 0x7E00);   // NaN min (or scale, Q6_K)
    set_half(20, 0, fields.back(), 0xFE00);  // a negative NaN
    set_half(30, 1, fields[0], 0x7C00);      // +inf scale
    QuantMatrix wp = w.w;
    attach_panels(wp);
    for (int64_t m : {1, 5, 20}) {
      const Shape s{m, n, k};
      const auto x = test::spread_values(m * s.ldx(), 4 + m, -6, 6);
      const auto bias = test::spread_values(n, 3, -4, 4);
      const auto ref = run(s, x, w.w, bias, QuantMode::kInt8, nullptr);
      every_target([&] {
        expect_same_bits(run(s, x, w.w, bias, QuantMode::kInt8, &pool), ref);
        expect_same_bits(run(s, x, wp, bias, QuantMode::kInt8, &pool), ref);
      });
    }
  }
}

// The int8 kernels' integer sums at their bounds: every code at its largest
// magnitude (4-bit 15, 5-bit 31, 6-bit 63, Q8_0 -128 and 127, Q3_K -4 and 3
// with scales -32 and 31; Q4_G 15 with zeros -128 and 127, Q8_G -128 and
// 127 with zeros 127 and -128) and the K types' scales and mins at theirs, against
// x at +-127 with one sign per 256
// columns, so each int16 partial sum of the vpmaddubsw kernels (AVX2, AVX-512
// without VNNI) is as large as it gets. A sum that saturated or wrapped
// would differ from the reference by thousands of scale units.
TEST(QuantMatmul, Int8ExtremeCodesEqualReference) {
  ThreadPool pool(2);
  for (QuantType t : {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                      QuantType::Q8_0, QuantType::Q4_G, QuantType::Q8_G, QuantType::Q2_K,
                      QuantType::Q3_K, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K}) {
    SCOPED_TRACE(std::string(quant_name(t)));
    const QuantTraits& tr = quant_traits(t);
    const int64_t n = 35, k = 512, nb = k / tr.block_elems;
    Weights w = random_weights(t, n, k, 41);
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = w.bytes.data() + row * w.w.row_bytes + b * tr.block_bytes;
        if (t == QuantType::Q6_K) {  // ql, qh all ones (codes 63); int8 scales -128 or 127
          std::memset(blk, 0xFF, 192);
          std::memset(blk + 192, row % 2 ? 0x7F : 0x80, 16);
          continue;
        }
        if (t == QuantType::Q2_K) {  // scales, mins 15; codes 3
          std::memset(blk, 0xFF, 80);
          continue;
        }
        if (t == QuantType::Q3_K) {  // hmask, qs, scales all ones (3, 31) or zeros (-4, -32)
          std::memset(blk, row % 2 ? 0xFF : 0x00, 108);
          continue;
        }
        if (t == QuantType::Q4_G || t == QuantType::Q8_G) {  // past the f32 scale: zero, codes
          const bool q8 = t == QuantType::Q8_G;
          blk[4] = row % 2 ? 0x80 : 0x7F;  // int8 -128 or 127
          std::memset(blk + 8, q8 ? (row % 2 ? 0x7F : 0x80) : 0xFF, tr.block_bytes - 8);
          continue;
        }
        // Past the fp16 fields: codes (Q5's high bits, the K types' 6-bit
        // scales and mins: 63). Q8_0 rows alternate all -128 and all 127.
        const int head = fp16_fields(t).back() + 2;
        const uint8_t code = t == QuantType::Q8_0 ? (row % 2 ? 0x7F : 0x80) : 0xFF;
        std::memset(blk + head, code, tr.block_bytes - head);
      }
    }
    QuantMatrix wp = w.w;
    attach_panels(wp);
    for (int64_t m : {1, 3, 6}) {
      SCOPED_TRACE("m " + std::to_string(m));
      const Shape s{m, n, k};
      std::vector<float> x(m * s.ldx());
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t i = 0; i < k; ++i) {
          // 256 columns (a K block) at a time all +127 or all -127: an
          // alternating sign within a K block would cancel its group sums.
          const bool negative = ((i / 256) + r) % 2 == 1;
          x[r * s.ldx() + i] = negative ? -3.0f : 3.0f;
        }
      }
      const auto bias = test::spread_values(n, 3, -4, 4);
      const auto ref = run(s, x, w.w, bias, QuantMode::kInt8, nullptr);
      every_target([&] {
        expect_same_bits(run(s, x, w.w, bias, QuantMode::kInt8, &pool), ref);
        expect_same_bits(run(s, x, wp, bias, QuantMode::kInt8, &pool), ref);
      });
    }
  }
}

TEST(QuantMatmul, BatchInvariant) {
  ThreadPool pool(2);
  for (QuantType t : {QuantType::Q4_K, QuantType::Q8_0, QuantType::Q6_K, QuantType::Q4_1}) {
    const int64_t n = 41, k = 768, m = 150;  // more than one row chunk (128 rows in both modes)
    const Weights w = random_weights(t, n, k, 5);
    QuantMatrix wp =
        w.w;  // with panels: the int8 loads' layout (a chunk edge of their kernels too)
    attach_panels(wp);
    const Shape all{m, n, k, true, false};
    const auto x = test::spread_values(m * k, 6, -6, 6);
    const auto bias = test::spread_values(n, 7, -4, 4);
    for (QuantMode mode : kModes) {
      const auto y = run(all, x, w.w, bias, mode, &pool);
      expect_same_bits(y, run(all, x, w.w, bias, mode, nullptr));
      expect_same_bits(run(all, x, wp, bias, mode, &pool), y);
      for (int64_t r : {0, 5, 32, 149}) {
        const Shape one{1, n, k, true, false};
        const std::vector<float> xr(x.begin() + r * k, x.begin() + (r + 1) * k);
        const auto yr = run(one, xr, w.w, bias, mode, &pool);
        expect_same_bits(yr, std::vector<float>(y.begin() + r * n, y.begin() + (r + 1) * n));
        expect_same_bits(run(one, xr, wp, bias, mode, &pool), yr);
      }
    }
  }
}

// Exact mode against dequantize_row + a double dot product: within the
// rounding bound of the order, (k / 16 + 5) * 2^-24 * (sum |x w| + |bias|).
// Int8 mode against the same: plus half an int8 step of x per block times sum |w|.
TEST(QuantMatmul, CloseToDoubleProduct) {
  ThreadPool pool(2);
  for (QuantType t : kAll) {
    SCOPED_TRACE(std::string(quant_name(t)));
    const int64_t n = 19, k = 1024, m = 3, be = quant_traits(t).block_elems;
    const Weights w = random_weights(t, n, k, 9);
    const Shape s{m, n, k, true, false};
    std::mt19937 rng(10);
    std::normal_distribution<float> normal;
    std::vector<float> x(m * k), bias(n), wr(k);
    for (auto& v : x) v = normal(rng);
    for (auto& v : bias) v = normal(rng);
    for (QuantMode mode : kModes) {
      const auto y = run(s, x, w.w, bias, mode, &pool);
      for (int64_t c = 0; c < n; ++c) {
        w.w.dequantize_row(c, wr.data());
        for (int64_t r = 0; r < m; ++r) {
          double ref = bias[c], mag = std::abs(bias[c]), q8 = 0;
          for (int64_t j = 0; j < k; ++j) {
            ref += double(x[r * k + j]) * wr[j];
            mag += std::abs(double(x[r * k + j]) * wr[j]);
          }
          // The int8 mode's activation blocks (x_block_of): 16 columns against
          // the 32-weight types, 32 against the K types.
          const int64_t xb = quant::x_block_of(be);
          for (int64_t b = 0; b < k; b += xb) {
            double amax = 0, wsum = 0;
            for (int64_t j = b; j < b + xb; ++j)
              amax = std::max(amax, double(std::abs(x[r * k + j])));
            for (int64_t j = b; j < b + xb; ++j) wsum += std::abs(wr[j]);
            q8 += amax / 127 * 0.50001 * wsum;
          }
          double tol = (k / 16 + 5) * std::ldexp(1.0, -24) * mag;
          if (mode == QuantMode::kInt8) tol += q8 * 1.001;
          EXPECT_LE(std::abs(y[r * n + c] - ref), tol) << "row " << r << " col " << c;
        }
      }
    }
  }
}

// The int8 mode scales each half of a 32-weight block on its own: with one
// half of x on the int8 grid of a large scale (exactly quantized) and the
// other small, the small half keeps its precision. One scale per 32 columns
// would round every small value to 0 and miss by sum |w x| over that half.
TEST(QuantMatmul, Int8ScalesEachHalfOfA32WeightBlock) {
  ThreadPool pool(2);
  const int64_t n = 21, k = 128, m = 2;
  for (QuantType t : kAll) {
    if (quant_traits(t).block_elems != 32) continue;
    SCOPED_TRACE(std::string(quant_name(t)));
    Weights w = random_weights(t, n, k, 31);
    if (quant_has_panel_layout(t)) attach_panels(w.w);
    std::mt19937 rng(32);
    std::uniform_int_distribution<int> code(-127, 127);
    std::uniform_real_distribution<float> small(-1.0f, 1.0f);
    std::vector<float> x(m * k), wr(k);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        // Row 0: the first half of each block large, row 1: the second.
        const bool large = (j % 32 < 16) == (r == 0);
        x[r * k + j] = large ? (j % 16 == 0 ? 1270.0f : 10.0f * code(rng)) : small(rng);
      }
    }
    const Shape s{m, n, k, false, false};
    const auto y = run(s, x, w.w, {}, QuantMode::kInt8, &pool);
    expect_same_bits(run(s, x, w.w, {}, QuantMode::kInt8, nullptr), y);
    for (int64_t c = 0; c < n; ++c) {
      w.w.dequantize_row(c, wr.data());
      for (int64_t r = 0; r < m; ++r) {
        double ref = 0, mag = 0, small_half = 0, bound = 0;
        for (int64_t j = 0; j < k; ++j) {
          const double p = double(x[r * k + j]) * wr[j];
          ref += p;
          mag += std::abs(p);
          if (std::abs(x[r * k + j]) < 2) small_half += std::abs(p);
        }
        for (int64_t b = 0; b < k; b += 16) {  // the small halves' rounding
          double amax = 0, wsum = 0;
          for (int64_t j = b; j < b + 16; ++j) {
            if (std::abs(x[r * k + j]) >= 2) continue;
            amax = std::max(amax, double(std::abs(x[r * k + j])));
            wsum += std::abs(wr[j]);
          }
          bound += amax / 127 * 0.50001 * wsum;
        }
        const double tol = bound + 1e-5 * mag;  // plus the float chain's rounding
        EXPECT_LE(std::abs(y[r * n + c] - ref), tol) << "row " << r << " col " << c;
        EXPECT_LT(tol, 0.2 * small_half) << "row " << r << " col " << c;
      }
    }
  }
}

TEST(QuantMatmul, KPermGathersX) {
  ThreadPool pool(2);
  const int64_t n = 9, k = 256, m = 4;
  Weights w = random_weights(QuantType::Q4_G, n, k, 12);
  std::vector<int32_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(13));
  const auto x = test::spread_values(m * k, 14, -4, 4);
  std::vector<float> xp(m * k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < k; ++j) xp[r * k + j] = x[r * k + perm[j]];
  }
  const Shape s{m, n, k, false, false};
  for (QuantMode mode : kModes) {
    const auto plain = run(s, xp, w.w, {}, mode, &pool);
    QuantMatrix permuted = w.w;
    permuted.k_perm = perm;
    expect_same_bits(run(s, x, permuted, {}, mode, &pool), plain);
    expect_same_bits(run(s, x, permuted, {}, mode, nullptr), plain);
  }
}

// Several parts of one x in one job (q/k/v, gate/up as separate tensors): each
// output bit for bit its part's quant_matmul alone, with parts of different
// block sizes (activations quantized once per size), a permuted part (its
// own activations), an empty part, and up to kMaxQuantParts parts.
TEST(QuantMatmul, PartsEqualEachPartAlone) {
  const int64_t k = 512;
  const QuantType types[] = {QuantType::Q4_0, QuantType::Q6_K, QuantType::Q8_0, QuantType::Q4_K,
                             QuantType::Q4_1, QuantType::Q5_0, QuantType::Q8_G, QuantType::Q4_G};
  const int64_t rows[] = {24, 16, 0, 40, 8, 5, 33, 12};
  std::vector<Weights> w;
  for (int i = 0; i < kMaxQuantParts; ++i)
    w.push_back(random_weights(types[i], rows[i], k, 20 + i));
  std::vector<int32_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(21));
  w[7].w.k_perm = perm;
  for (int i : {0, 2, 5}) attach_panels(w[i].w);  // Q4_0, Q8_0 (no rows), Q5_0
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int count : {1, 2, 3, kMaxQuantParts}) {
      for (int64_t m : {1, 4, 19}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + " parts " + std::to_string(count) +
                     " m " + std::to_string(m));
        const Shape s{m, 0, k};
        const auto x = test::spread_values(m * s.ldx(), 22 + m, -6, 6);
        int64_t ldy = 0;
        for (int i = 0; i < count; ++i) ldy += rows[i];
        const auto bias = test::spread_values(ldy, 23, -4, 4);
        for (QuantMode mode : kModes) {
          std::vector<float> together(m * ldy, sentinel()), alone(m * ldy, sentinel());
          std::vector<QuantMatmulArgs> parts;
          int64_t col = 0;
          for (int i = 0; i < count; ++i) {
            const QuantMatmulArgs a{
                x.data(), m, s.ldx(), &w[i].w, bias.data() + col, together.data() + col, ldy, mode};
            parts.push_back(a);
            QuantMatmulArgs one = a;
            one.y = alone.data() + col;
            quant_matmul_reference(one);
            col += rows[i];
          }
          quant_matmul_parts(parts.data(), count, pool);
          expect_same_bits(together, alone);
        }
      }
    }
  }
}

// A decode step's product tells the pool what it streams (StreamHint): after
// product A then B, the pool's next stream for A is where each thread's
// share of B starts: B's first part's panels (the int8 kernels, where they
// read panels) or rows, and the second part's rows from the unit the second
// share starts at, to the end of that part, at most 128 KiB.
TEST(QuantMatmul, DecodeProductsHintTheWeightsTheyStream) {
  const int64_t k = 512, n = 256;
  Weights a = random_weights(QuantType::Q8_0, n, k, 30);
  Weights b0 = random_weights(QuantType::Q4_0, n, k, 31);
  const Weights b1 = random_weights(QuantType::Q4_K, n, k, 32);
  attach_panels(a.w);
  attach_panels(b0.w);
  const auto x = test::spread_values(k, 33, -6, 6);
  std::vector<float> ya(n), yb(2 * n);
  for (QuantMode mode : kModes) {
    SCOPED_TRACE(mode == QuantMode::kInt8 ? "int8" : "exact");
    ThreadPool pool(2);
    const QuantMatmulArgs pa{x.data(), 1, k, &a.w, nullptr, ya.data(), n, mode};
    const QuantMatmulArgs pb[] = {{x.data(), 1, k, &b0.w, nullptr, yb.data(), 2 * n, mode},
                                  {x.data(), 1, k, &b1.w, nullptr, yb.data() + n, 2 * n, mode}};
    quant_matmul(pa, pool);
    quant_matmul_parts(pb, 2, pool);
    const auto next = pool.next_stream(&a.w);
    ASSERT_EQ(next.size(), 2u);
    // Units: B's first part 16 panels of 16 rows, its second 64 of 4 rows
    // (no panels); the worker's share starts at unit 40, the second part's row 96.
    ASSERT_EQ(pool.balanced_share_begin(16 + 64, 1, 1), 40);
    const bool panels = mode == QuantMode::kInt8 && quant_reads_panels(QuantType::Q4_0);
    EXPECT_EQ(next[0].at, panels ? b0.w.panels.get() : b0.w.data);
    EXPECT_EQ(next[0].bytes, n * b0.w.row_bytes);
    EXPECT_EQ(next[1].at, b1.w.data + 96 * b1.w.row_bytes);
    EXPECT_EQ(next[1].bytes, (n - 96) * b1.w.row_bytes);
    // The other way round, B's successor is A, whose first share is over 128 KiB.
    quant_matmul(pa, pool);
    const auto after_b = pool.next_stream(&b0.w);
    ASSERT_EQ(after_b.size(), 2u);
    const bool panels_a = mode == QuantMode::kInt8 && quant_reads_panels(QuantType::Q8_0);
    EXPECT_EQ(after_b[0].at, panels_a ? a.w.panels.get() : a.w.data);
    EXPECT_EQ(after_b[1].at, (panels_a ? a.w.panels.get() : a.w.data) + 128 * a.w.row_bytes);
    EXPECT_EQ(after_b[0].bytes, 128 * 1024);  // the cap (the whole part is 139264 bytes)
    EXPECT_EQ(after_b[1].bytes, 128 * a.w.row_bytes);
  }
}

TEST(QuantMatmul, PartsMustShareTheirInput) {
  ThreadPool pool(2);
  Weights a = random_weights(QuantType::Q4_0, 4, 256, 1),
          b = random_weights(QuantType::Q8_0, 4, 256, 2);
  Weights c = random_weights(QuantType::Q8_0, 4, 512, 3);
  std::vector<float> x(512), x2(512), y(8);
  QuantMatmulArgs parts[2] = {{x.data(), 1, 256, &a.w, nullptr, y.data(), 8},
                              {x.data(), 1, 256, &b.w, nullptr, y.data() + 4, 8}};
  EXPECT_NO_THROW(quant_matmul_parts(parts, 2, pool));
  EXPECT_THROW(quant_matmul_parts(parts, 0, pool), InvalidArgument);
  EXPECT_THROW(quant_matmul_parts(parts, kMaxQuantParts + 1, pool), InvalidArgument);
  parts[1].x = x2.data();
  EXPECT_THROW(quant_matmul_parts(parts, 2, pool), InvalidArgument);
  parts[1].x = x.data();
  parts[1].mode = QuantMode::kInt8;
  EXPECT_THROW(quant_matmul_parts(parts, 2, pool), InvalidArgument);
  parts[1].mode = QuantMode::kExact;
  parts[1].w = &c.w;
  parts[1].ldx = 512;
  parts[0].ldx = 512;
  EXPECT_THROW(quant_matmul_parts(parts, 2, pool), InvalidArgument);  // k 256 and 512
  parts[1].w = nullptr;
  EXPECT_THROW(quant_matmul_parts(parts, 2, pool), InvalidArgument);
}

TEST(QuantMatmul, BadArguments) {
  ThreadPool pool(1);
  Weights w = random_weights(QuantType::Q4_K, 4, 256, 1);
  std::vector<float> x(256), y(4);
  QuantMatmulArgs a{x.data(), 1, 256, &w.w, nullptr, y.data(), 4};
  EXPECT_NO_THROW(quant_matmul(a, pool));
  QuantMatrix bad_k = w.w;
  bad_k.k = 200;  // not a whole number of 256-blocks
  a.w = &bad_k;
  EXPECT_THROW(quant_matmul(a, pool), InvalidArgument);
  EXPECT_THROW(quant_matmul_reference(a), InvalidArgument);
  QuantMatrix no_data = w.w;
  no_data.data = nullptr;
  a.w = &no_data;
  EXPECT_THROW(quant_matmul(a, pool), InvalidArgument);
  a.w = nullptr;
  EXPECT_THROW(quant_matmul(a, pool), InvalidArgument);
  a.w = &w.w;
  a.x = nullptr;
  EXPECT_THROW(quant_matmul(a, pool), InvalidArgument);
  a.x = x.data();
  a.ldx = 100;
  EXPECT_THROW(quant_matmul(a, pool), InvalidArgument);
  a.ldx = 256;
  QuantMatrix bad_perm = w.w;
  bad_perm.k_perm = {0, 1, 2};
  a.w = &bad_perm;
  EXPECT_THROW(quant_matmul(a, pool), InvalidArgument);
  bad_perm.k_perm.assign(256, 0);
  bad_perm.k_perm[7] = 256;
  EXPECT_THROW(quant_matmul(a, pool), InvalidArgument);
  EXPECT_THROW(dequantize_row(QuantType::Q8_0, w.bytes.data(), y.data(), 33), InvalidArgument);
  EXPECT_THROW(dequantize_row(QuantType::Q8_0, nullptr, y.data(), 32), InvalidArgument);
  EXPECT_THROW(quantize_row(QuantType::Q3_K, x.data(), w.bytes.data(), 256), InvalidArgument);
  EXPECT_THROW(quantize_row(QuantType::Q8_0, x.data(), w.bytes.data(), 48), InvalidArgument);
  EXPECT_THROW(w.w.dequantize_row(4, x.data()), InvalidArgument);
}

}  // namespace
}  // namespace hubzoo
