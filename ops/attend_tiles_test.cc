#include "ops/attend_tiles.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "hwy/aligned_allocator.h"
#include "hwy/targets.h"
#include "ops/bf16.h"
#include "ops/cpu_amx.h"
#include "ops/test_values.h"

namespace hubzoo {
namespace {

using test::bits;

// A sequence of `len` positions of bf16 keys and values, and its packing
// for positions [base, top).
struct Sequence {
  int64_t d, len;
  std::vector<float> keys, values;  // [len][d], bf16 values
  Sequence(int64_t d_, int64_t len_, uint32_t seed) : d(d_), len(len_) {
    keys = test::spread_values(len * d, seed, -3, 2);
    values = test::spread_values(len * d, seed + 1, -6, 3);
    for (int64_t i = 0; i < len * d; i += 37) values[i] = std::ldexp(values[i], -124);  // ~denormal
    for (int64_t i = 5; i < len * d; i += 41) keys[i] = 0.0f;
    for (float& x : keys) x = round_bf16(x);
    for (float& x : values) x = round_bf16(x);
  }
};

struct Packed {
  hwy::AlignedFreeUniquePtr<uint16_t[]> keys, values;
  TileKv kv;
  Packed(const Sequence& s, int64_t base, int64_t top) {
    kv.d = s.d;
    kv.block0 = base / kTileBlock;
    kv.blocks = (top + kTileBlock - 1) / kTileBlock - kv.block0;
    keys = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(kv.key_elements()));
    values = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(kv.value_elements()));
    kv.keys = keys.get();
    kv.values = values.get();
    kv.clear();
    for (int64_t j = base; j < top; ++j) kv.put(j, &s.keys[j * s.d], &s.values[j * s.d]);
  }
};

// Rows r = 0..rows-1 seeing [lo[r], end[r]), queries from `queries`.
struct Rows {
  std::vector<float> queries, out;
  TileRows r;
  Rows(int64_t d, const std::vector<int64_t>& lo, const std::vector<int64_t>& end, uint32_t seed,
       float scale) {
    const auto n = static_cast<int64_t>(lo.size());
    queries = test::spread_values(n * d, seed, -2, 2);
    queries[0] = 0x1p-130f;  // a denormal query element: flushed
    out.assign(n * d, std::numeric_limits<float>::quiet_NaN());
    r.rows = n;
    r.scale = scale;
    for (int64_t i = 0; i < n; ++i) {
      r.q[i] = &queries[i * d];
      r.out[i] = &out[i * d];
      r.lo[i] = lo[i];
      r.end[i] = end[i];
    }
  }
};

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(bits(a[i]), bits(b[i])) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(AttendTiles, BitIdenticalToReference) {
  const int64_t before = attend_tiles_amx_calls();
  int64_t calls = 0;
  for (int64_t d : {64, 128, 80, 256, 8, 2}) {
    for (int64_t len : {1, 31, 32, 33, 200, 517}) {
      const Sequence s(d, len, static_cast<uint32_t>(d * 1000 + len));
      // Causal rows of a chunk ending at len (up to 16), a window, and rows
      // of a decode step: each its own [lo, end).
      std::vector<std::vector<int64_t>> los, ends;
      std::vector<int64_t> lo, end;
      for (int64_t i = 0; i < std::min<int64_t>(16, len); ++i) {
        lo.push_back(0);
        end.push_back(len - i);
      }
      los.push_back(lo), ends.push_back(end);
      lo.clear(), end.clear();
      for (int64_t i = 0; i < std::min<int64_t>(13, len); ++i) {
        end.push_back(len - 2 * i > 0 ? len - 2 * i : 1);
        lo.push_back(std::max<int64_t>(0, end.back() - 40));
      }
      los.push_back(lo), ends.push_back(end);
      los.push_back({0, 0, 0}), ends.push_back({len, len, len});
      los.push_back({len - 1, 0}), ends.push_back({len, 0});  // one position; an empty row
      for (size_t c = 0; c < los.size(); ++c) {
        const Packed p(s, 0, len);
        Rows kernel(d, los[c], ends[c], static_cast<uint32_t>(c + 7), 0.125f);
        Rows reference(d, los[c], ends[c], static_cast<uint32_t>(c + 7), 0.125f);
        attend_tiles(p.kv, kernel.r);
        ++calls;
        attend_tiles_reference(p.kv, reference.r);
        SCOPED_TRACE("d " + std::to_string(d) + " len " + std::to_string(len) + " case " +
                     std::to_string(c));
        expect_bits(kernel.out, reference.out, "kernel vs reference");
        for (int64_t i = 0; i < kernel.r.rows; ++i) {
          if (kernel.r.end[i] <= kernel.r.lo[i]) {
            for (int64_t k = 0; k < d; ++k) EXPECT_EQ(kernel.out[i * d + k], 0.0f);
          }
        }
      }
    }
  }
  EXPECT_EQ(attend_tiles_amx_calls() - before, attend_tiles_amx() ? calls : 0);
  // AMX-BF16 with an AVX-512 target built and dispatched: the tiles ran (not
  // the reference twice).
  const int64_t avx512 = HWY_AVX3 | HWY_AVX3_DL;
  EXPECT_EQ(attend_tiles_amx(), amx_bf16_ready() && (hwy::SupportedTargets() & avx512) != 0 &&
                                    (HWY_TARGETS & avx512) != 0);
}

// The sequence as a bf16 KV cache's pages of one KV head: keys blocked
// [d][16], values [16][d]; lanes past the sequence hold NaN (never read as
// values, masked as scores).
struct Pages {
  std::vector<std::vector<uint16_t>> keys, values;
  std::vector<const void*> key_ptrs, value_ptrs;
  TilePages kv;
  explicit Pages(const Sequence& s) {
    const int64_t pages = (s.len + 15) / 16;
    for (int64_t b = 0; b < pages; ++b) {
      std::vector<uint16_t> k(s.d * 16, 0x7FC0), v(16 * s.d, 0x7FC0);
      for (int64_t i = 0; i < 16 && b * 16 + i < s.len; ++i) {
        for (int64_t c = 0; c < s.d; ++c) {
          k[c * 16 + i] = bf16_bits(s.keys[(b * 16 + i) * s.d + c]);
          v[i * s.d + c] = bf16_bits(s.values[(b * 16 + i) * s.d + c]);
        }
      }
      keys.push_back(std::move(k));
      values.push_back(std::move(v));
    }
    for (int64_t b = 0; b < pages; ++b) {
      key_ptrs.push_back(keys[b].data());
      value_ptrs.push_back(values[b].data());
    }
    kv = {.d = s.d,
          .key_pages = key_ptrs.data(),
          .value_pages = value_ptrs.data(),
          .value_stride = s.d};
  }
};

TEST(AttendTiles, PagesBitIdenticalToReference) {
  for (int64_t d : {64, 128, 80, 8}) {
    for (int64_t len : {1, 17, 32, 33, 200}) {
      const Sequence s(d, len, static_cast<uint32_t>(d * 77 + len));
      const Pages pages(s);
      const Packed packed(s, 0, len);
      const std::vector<int64_t> lo = {0, len / 2, len - 1, 0}, end = {len, len, len, 0};
      Rows kernel(d, lo, end, 3, 0.09f), reference(d, lo, end, 3, 0.09f);
      attend_tiles_pages(pages.kv, kernel.r);
      attend_tiles_reference(packed.kv, reference.r);
      SCOPED_TRACE("d " + std::to_string(d) + " len " + std::to_string(len));
      expect_bits(kernel.out, reference.out, "pages vs reference");
    }
  }
}

// A row's result does not depend on the rows it is grouped with or on which
// blocks were packed around its own.
TEST(AttendTiles, RowIndependentOfItsGroup) {
  const int64_t d = 64, len = 300;
  const Sequence s(d, len, 99);
  std::vector<int64_t> lo, end;
  for (int64_t i = 0; i < 16; ++i) {
    lo.push_back(i * 7);
    end.push_back(len - i * 11);
  }
  const Packed all(s, 0, len);
  Rows group(d, lo, end, 5, 0.3f);
  attend_tiles(all.kv, group.r);
  for (int64_t i = 0; i < 16; ++i) {
    const Packed own(s, lo[i], end[i]);
    Rows alone(d, {lo[i]}, {end[i]}, 1, 0.3f);
    alone.queries.assign(group.queries.begin() + i * d, group.queries.begin() + (i + 1) * d);
    alone.r.q[0] = alone.queries.data();
    attend_tiles(own.kv, alone.r);
    const std::vector<float> mine(group.out.begin() + i * d, group.out.begin() + (i + 1) * d);
    SCOPED_TRACE("row " + std::to_string(i));
    expect_bits(alone.out, mine, "alone vs in its group");
  }
}

// The contract is attention: close to softmax(q k^T * scale) v in double
// (bf16 queries and probabilities: errors of a few 2^-9 relative).
TEST(AttendTiles, CloseToSoftmaxInDouble) {
  const int64_t d = 64, len = 100;
  const Sequence s(d, len, 3);
  const Packed p(s, 0, len);
  Rows rows(d, {0, 20}, {len, 90}, 11, 0.125f);
  attend_tiles(p.kv, rows.r);
  for (int64_t i = 0; i < 2; ++i) {
    std::vector<double> score(len, 0.0), out(d, 0.0);
    double max = -1e300, total = 0.0, vmax = 0.0;
    for (int64_t j = rows.r.lo[i]; j < rows.r.end[i]; ++j) {
      for (int64_t k = 0; k < d; ++k)
        score[j] += double{rows.queries[i * d + k]} * s.keys[j * d + k];
      score[j] *= 0.125;
      max = std::max(max, score[j]);
    }
    for (int64_t j = rows.r.lo[i]; j < rows.r.end[i]; ++j)
      total += score[j] = std::exp(score[j] - max);
    for (int64_t j = rows.r.lo[i]; j < rows.r.end[i]; ++j) {
      for (int64_t k = 0; k < d; ++k) {
        out[k] += score[j] / total * s.values[j * d + k];
        vmax = std::max(vmax, std::fabs(double{s.values[j * d + k]}));
      }
    }
    for (int64_t k = 0; k < d; ++k) {
      EXPECT_NEAR(rows.out[i * d + k], out[k], 0.02 * vmax) << "row " << i << " column " << k;
    }
  }
}

TEST(AttendTiles, RefusesWhatIsOutOfRange) {
  const Sequence s(64, 40, 1);
  const Packed p(s, 0, 40);
  std::vector<float> row(64, 1.0f);
  EXPECT_THROW(p.kv.put(64, row.data(), row.data()), InvalidArgument);
  EXPECT_THROW(p.kv.put(-1, row.data(), row.data()), InvalidArgument);
  Rows beyond(64, {0}, {65}, 1, 1.0f);
  EXPECT_THROW(attend_tiles(p.kv, beyond.r), InvalidArgument);
  Rows many(64, {0}, {40}, 1, 1.0f);
  many.r.rows = 17;
  EXPECT_THROW(attend_tiles(p.kv, many.r), InvalidArgument);
}

}  // namespace
}  // namespace hubzoo
