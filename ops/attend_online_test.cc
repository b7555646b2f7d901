#include "ops/attend_online.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "hwy/targets.h"
#include "ops/bf16.h"
#include "ops/f16.h"
#include "ops/test_values.h"

namespace hubzoo {
namespace {

std::vector<float> random_values(int64_t count, uint32_t seed, int max_exponent = 2) {
  return test::spread_values(count, seed, -4, max_exponent);
}

using test::bits;

// softmax(q k^T * scale) v in double, the textbook two-pass way.
std::vector<double> attention_double(const float* q, const float* keys, const float* values,
                                     int64_t stride, int64_t len, int64_t d, float scale) {
  std::vector<double> s(len), out(d, 0.0);
  double max = -std::numeric_limits<double>::infinity(), total = 0.0;
  for (int64_t j = 0; j < len; ++j) {
    double dot = 0.0;
    for (int64_t k = 0; k < d; ++k) dot += static_cast<double>(q[k]) * keys[j * stride + k];
    s[j] = dot * scale;
    max = std::max(max, s[j]);
  }
  for (int64_t j = 0; j < len; ++j) total += (s[j] = std::exp(s[j] - max));
  for (int64_t j = 0; j < len; ++j) {
    for (int64_t k = 0; k < d; ++k) out[k] += s[j] / total * values[j * stride + k];
  }
  return out;
}

// attend_online_f32's result from attend_online_scores over `block_parts`
// ranges of blocks and attend_online_values over dims cut at multiples of
// kKeyBlock (`dim_cut` of them a part), in `out` (reference: the scalar parts).
void attend_split(OnlineAttention a, int block_parts, int64_t dim_cut, float* out,
                  bool reference = false) {
  const int64_t blocks = key_blocks(a.lane0, a.len);
  std::vector<float> scores(a.nq * blocks * kKeyBlock, 5.0f);
  for (int part = 0; part < block_parts; ++part) {
    const int64_t b0 = blocks * part / block_parts, b1 = blocks * (part + 1) / block_parts;
    if (reference) {
      attend_online_scores_reference(a, b0, b1, scores.data());
    } else {
      attend_online_scores(a, b0, b1, scores.data());
    }
  }
  a.out = out;
  for (int64_t dim0 = 0; dim0 < a.d; dim0 += dim_cut * kKeyBlock) {
    const int64_t dim1 = std::min(a.d, dim0 + dim_cut * kKeyBlock);
    if (reference) {
      attend_online_values_reference(a, scores.data(), dim0, dim1);
    } else {
      attend_online_values(a, scores.data(), dim0, dim1);
    }
  }
}

TEST(AttendOnline, ExpMatchesStdExp) {
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-88.0f), 0.0f);
  EXPECT_EQ(exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  double worst = 0.0;
  for (float x = -86.99f; x <= 0.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(exp_f32(x) - want) / want);
  }
  EXPECT_LT(worst, 2.4e-7);  // 2^-22
}

TEST(AttendOnline, BitIdenticalToScalarReferenceOnEveryTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    EXPECT_STREQ(attend_online_target_name(), hwy::TargetName(target));
    for (int64_t d : {64, 128, 48, 100, 7, 8, 256}) {
      for (int64_t len : {1, 2, 5, 16, 17, 33, 300}) {
        for (int64_t lane0 : {0, 5, 15}) {
          for (int64_t nq : {1, 3, 9}) {
            const int64_t stride = 3 * d + 5;  // rows of a KV cache with other heads between
            const uint32_t seed = static_cast<uint32_t>(d * 1000 + len * 10 + lane0 + nq);
            const auto q = random_values(nq * (d + 3), 1 + seed);
            const auto k = random_values(len * stride, 2 + seed);
            const auto v = random_values(len * stride, 3 + seed);
            const float scale = 1.0f / std::sqrt(static_cast<float>(d));
            const int64_t blocks = key_blocks(lane0, len);
            std::vector<float> kt1(blocks * d * kKeyBlock, 9.0f), kt2(kt1.size(), -9.0f);
            transpose_key_blocks(k.data() + 2, stride, lane0, len, d, kt1.data());
            transpose_key_blocks_reference(k.data() + 2, stride, lane0, len, d, kt2.data());
            for (size_t i = 0; i < kt1.size(); ++i) ASSERT_EQ(bits(kt1[i]), bits(kt2[i])) << i;
            std::vector<float> o1(nq * (d + 1), 7.0f), o2(nq * (d + 1), -7.0f);
            OnlineAttention a{.q = q.data(),
                              .q_stride = d + 3,
                              .nq = nq,
                              .kt = kt1.data(),
                              .kt_stride = d * kKeyBlock,
                              .values = v.data() + 1,
                              .v_stride = stride,
                              .lane0 = lane0,
                              .len = len,
                              .d = d,
                              .scale = scale,
                              .out = o1.data(),
                              .out_stride = d + 1};
            attend_online_f32(a);
            a.out = o2.data();
            attend_online_f32_reference(a);
            for (int64_t g = 0; g < nq; ++g) {
              for (int64_t i = 0; i < d; ++i) {
                ASSERT_EQ(bits(o1[g * (d + 1) + i]), bits(o2[g * (d + 1) + i]))
                    << "d " << d << " len " << len << " lane0 " << lane0 << " row " << g;
              }
              // And it is attention: close to the double-precision two-pass result.
              const auto want = attention_double(q.data() + g * (d + 3), k.data() + 2, v.data() + 1,
                                                 stride, len, d, scale);
              for (int64_t i = 0; i < d; ++i) {
                ASSERT_NEAR(o1[g * (d + 1) + i], want[i], 2e-6 * (1.0 + std::fabs(want[i])))
                    << "d " << d << " len " << len << " row " << g << " col " << i;
              }
            }
          }
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

// Split over blocks of positions (scores) and over dims (values), in any
// parts, the result is attend_online_f32's to the bit, on every target, as
// it is the scalar reference's split the same way.
TEST(AttendOnline, SplitOverPositionsAndDimsBitIdentical) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t d : {256, 100, 64, 48, 7}) {
      for (int64_t len : {1, 17, 144, 300}) {
        for (int64_t lane0 : {0, 5}) {
          for (int64_t nq : {1, 4, 9}) {
            const int64_t stride = 2 * d + 3;
            const uint32_t seed = static_cast<uint32_t>(d * 977 + len * 7 + lane0 + nq);
            const auto q = random_values(nq * d, 1 + seed, 4);  // large scores: the max moves
            const auto k = random_values(len * stride, 2 + seed);
            const auto v = random_values(len * stride, 3 + seed);
            std::vector<float> kt(key_blocks(lane0, len) * d * kKeyBlock);
            transpose_key_blocks(k.data(), stride, lane0, len, d, kt.data());
            std::vector<float> whole(nq * d), split(nq * d, 7.0f), ref(nq * d, -7.0f);
            OnlineAttention a{.q = q.data(),
                              .q_stride = d,
                              .nq = nq,
                              .kt = kt.data(),
                              .kt_stride = d * kKeyBlock,
                              .values = v.data(),
                              .v_stride = stride,
                              .lane0 = lane0,
                              .len = len,
                              .d = d,
                              .scale = 0.125f,
                              .out = whole.data(),
                              .out_stride = d};
            attend_online_f32(a);
            for (int block_parts : {1, 2, 3}) {
              for (int64_t dim_cut : {1, 3}) {
                attend_split(a, block_parts, dim_cut, split.data());
                attend_split(a, block_parts, dim_cut, ref.data(), /*reference=*/true);
                for (int64_t i = 0; i < nq * d; ++i) {
                  ASSERT_EQ(bits(split[i]), bits(whole[i]))
                      << "d " << d << " len " << len << " lane0 " << lane0 << " nq " << nq
                      << " parts " << block_parts << " cut " << dim_cut << " at " << i;
                  ASSERT_EQ(bits(ref[i]), bits(whole[i])) << "reference, at " << i;
                }
              }
            }
          }
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

// A row that reads positions [lo, p] of a sequence gives the same bits from
// the blocks of the whole sequence (offset to block lo / 16, lane lo % 16) as
// from blocks built for its range alone; and alone as in a group of rows.
TEST(AttendOnline, RowResultIndependentOfBlocksBuiltAndOfOtherRows) {
  const int64_t d = 64, n = 200, stride = d;
  const auto k = random_values(n * d, 11), v = random_values(n * d, 12);
  const auto q = random_values(4 * d, 13, 4);  // large scores: the running max moves
  std::vector<float> all(key_blocks(0, n) * d * kKeyBlock);
  transpose_key_blocks(k.data(), stride, 0, n, d, all.data());
  for (int64_t lo : {0, 1, 16, 37, 150}) {
    for (int64_t p : {lo, lo + 15, lo + 16, n - 1}) {
      if (p >= n) continue;
      const int64_t len = p - lo + 1, lane0 = lo % kKeyBlock;
      std::vector<float> own(key_blocks(lane0, len) * d * kKeyBlock);
      transpose_key_blocks(k.data() + lo * stride, stride, lane0, len, d, own.data());
      std::vector<float> a(4 * d), b(4 * d), c(d);
      OnlineAttention args{.q = q.data(),
                           .q_stride = d,
                           .nq = 4,
                           .kt = all.data() + (lo / kKeyBlock) * d * kKeyBlock,
                           .kt_stride = d * kKeyBlock,
                           .values = v.data() + lo * stride,
                           .v_stride = stride,
                           .lane0 = lane0,
                           .len = len,
                           .d = d,
                           .scale = 0.125f,
                           .out = a.data(),
                           .out_stride = d};
      attend_online_f32(args);  // the whole sequence's blocks
      args.kt = own.data();
      args.out = b.data();
      attend_online_f32(args);  // the range's own blocks
      args.q = q.data() + 2 * d;
      args.nq = 1;
      args.out = c.data();
      attend_online_f32(args);  // one row alone
      for (int64_t i = 0; i < 4 * d; ++i) ASSERT_EQ(bits(a[i]), bits(b[i])) << lo << " " << p;
      for (int64_t i = 0; i < d; ++i) ASSERT_EQ(bits(a[2 * d + i]), bits(c[i])) << lo << " " << p;
    }
  }
}

// Keys and values read through page tables (a paged KV cache: each 16-position
// block in an allocation of its own, one KV head at an offset in it), as
// floats or as 16-bit elements of type `e` (bf16 or half bits), give the bits
// the contiguous float blocks give, on every target and in the reference.
// Keys and values are values of that type, as the cache stores them.
void check_paged_blocks(int64_t d, KvElement e) {
  const bool f16 = e == KvElement::kF16;
  const char* name = f16 ? "f16" : "bf16";
  SCOPED_TRACE(std::string(name) + " d " + std::to_string(d));
  const int64_t heads = 2, row = heads * d, n = 77;
  auto k = random_values(n * row, 21), v = random_values(n * row, 22);
  const auto round16 = [&](std::vector<float>& x) {
    f16 ? round_f16_saturated(x.data(), x.size()) : round_bf16(x.data(), x.size());
  };
  const auto to16 = [&](const std::vector<float>& x, std::vector<uint16_t>& out) {
    out.resize(x.size());
    f16 ? to_f16_saturated(x.data(), x.size(), out.data())
        : to_bf16(x.data(), x.size(), out.data());
  };
  round16(k);
  round16(v);
  const auto q = random_values(3 * d, 23, 4);
  const int64_t pages = key_blocks(0, n);
  // Page b: keys [row][16] (head h's [d][16] block at h * d * 16), values [16][row].
  std::vector<std::vector<float>> key_pages(pages), value_pages(pages);
  std::vector<std::vector<uint16_t>> key_pages16(pages), value_pages16(pages);
  std::vector<const void*> kp(pages), vp(pages), kp16(pages), vp16(pages);
  for (int64_t b = 0; b < pages; ++b) {
    const int64_t len = std::min(kKeyBlock, n - b * kKeyBlock);
    key_pages[b].assign(row * kKeyBlock, 0.0f);
    value_pages[b].assign(kKeyBlock * row, 0.0f);
    for (int64_t h = 0; h < heads; ++h) {
      transpose_key_blocks(k.data() + b * kKeyBlock * row + h * d, row, 0, len, d,
                           key_pages[b].data() + h * d * kKeyBlock);
    }
    std::copy_n(v.data() + b * kKeyBlock * row, len * row, value_pages[b].data());
    kp[b] = key_pages[b].data();
    vp[b] = value_pages[b].data();
    to16(key_pages[b], key_pages16[b]);
    to16(value_pages[b], value_pages16[b]);
    kp16[b] = key_pages16[b].data();
    vp16[b] = value_pages16[b].data();
  }
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> all(pages * d * kKeyBlock);
      transpose_key_blocks(k.data() + h * d, row, 0, n, d, all.data());
      for (int64_t lo : {0, 5, 16, 40}) {
        for (int64_t p : {lo, lo + 11, n - 1}) {
          const int64_t len = p - lo + 1;
          std::vector<float> want(3 * d), got(3 * d), ref_want(3 * d), ref_got(3 * d);
          std::vector<float> got16(3 * d), ref_got16(3 * d), got_mixed(3 * d);
          OnlineAttention flat{.q = q.data(),
                               .q_stride = d,
                               .nq = 3,
                               .kt = all.data() + lo / kKeyBlock * d * kKeyBlock,
                               .kt_stride = d * kKeyBlock,
                               .values = v.data() + lo * row + h * d,
                               .v_stride = row,
                               .lane0 = lo % kKeyBlock,
                               .len = len,
                               .d = d,
                               .scale = 0.2f,
                               .out = want.data(),
                               .out_stride = d};
          OnlineAttention paged = flat;
          paged.kt = nullptr;
          paged.values = nullptr;
          paged.kt_pages = kp.data() + lo / kKeyBlock;
          paged.kt_offset = h * d * kKeyBlock;
          paged.v_pages = vp.data() + lo / kKeyBlock;
          paged.v_offset = h * d;
          paged.fetch_ahead = true;  // and its copies below; `quiet` without
          paged.out = got.data();
          attend_online_f32(flat);
          attend_online_f32(paged);
          flat.out = ref_want.data();
          paged.out = ref_got.data();
          attend_online_f32_reference(flat);
          attend_online_f32_reference(paged);
          OnlineAttention paged16 = paged;  // 16-bit pages
          paged16.kt_pages = kp16.data() + lo / kKeyBlock;
          paged16.v_pages = vp16.data() + lo / kKeyBlock;
          paged16.kt_type = paged16.v_type = e;
          paged16.out = got16.data();
          attend_online_f32(paged16);
          paged16.out = ref_got16.data();
          attend_online_f32_reference(paged16);
          std::vector<float> split16(3 * d);
          attend_split(paged16, 2, 1, split16.data());
          OnlineAttention quiet = paged16;  // no software prefetch: the same bits
          quiet.fetch_ahead = false;
          std::vector<float> got_quiet(3 * d), split_quiet(3 * d);
          quiet.out = got_quiet.data();
          attend_online_f32(quiet);
          attend_split(quiet, 2, 1, split_quiet.data());
          OnlineAttention mixed = paged16;  // float key blocks, 16-bit value pages
          mixed.kt = flat.kt;
          mixed.kt_pages = nullptr;
          mixed.kt_type = KvElement::kF32;
          mixed.out = got_mixed.data();
          attend_online_f32(mixed);
          std::vector<float> split_mixed(3 * d);
          attend_split(mixed, 3, 2, split_mixed.data());
          // 16-bit keys with float values: not a pair attention passes (the
          // reference serves it), still the same bits.
          OnlineAttention swapped = paged16;
          swapped.values = flat.values;
          swapped.v_pages = nullptr;
          swapped.v_type = KvElement::kF32;
          std::vector<float> got_swapped(3 * d);
          swapped.out = got_swapped.data();
          attend_online_f32(swapped);
          for (int64_t i = 0; i < 3 * d; ++i) {
            ASSERT_EQ(bits(want[i]), bits(got16[i])) << "16-bit head " << h << " lo " << lo;
            ASSERT_EQ(bits(want[i]), bits(ref_got16[i])) << "16-bit head " << h << " lo " << lo;
            ASSERT_EQ(bits(want[i]), bits(split16[i]))
                << "16-bit split, head " << h << " lo " << lo;
            ASSERT_EQ(bits(want[i]), bits(got_quiet[i])) << "no prefetch " << h << " lo " << lo;
            ASSERT_EQ(bits(want[i]), bits(split_quiet[i])) << "no prefetch split " << h;
            ASSERT_EQ(bits(want[i]), bits(got_mixed[i])) << "mixed head " << h << " lo " << lo;
            ASSERT_EQ(bits(want[i]), bits(split_mixed[i])) << "mixed split " << h << " lo " << lo;
            ASSERT_EQ(bits(want[i]), bits(got_swapped[i])) << "swapped " << h << " lo " << lo;
            ASSERT_EQ(bits(want[i]), bits(got[i])) << "head " << h << " lo " << lo << " p " << p;
            ASSERT_EQ(bits(ref_want[i]), bits(ref_got[i])) << "head " << h << " lo " << lo;
            ASSERT_EQ(bits(want[i]), bits(ref_want[i])) << "head " << h << " lo " << lo;
          }
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

// Head sizes of one chunk of output vectors and of several (Gemma 3's 256):
// a chunk before the last loads whole vectors of 16-bit values.
TEST(AttendOnline, PagedBlocksBitIdenticalToContiguous) {
  for (KvElement e : {KvElement::kBF16, KvElement::kF16}) {
    for (int64_t d : {48, 128, 256}) check_paged_blocks(d, e);
  }
}

TEST(AttendOnline, EmptyRangeGivesZeros) {
  std::vector<float> q(16, 1.0f), out(16, 3.0f);
  attend_online_f32({.q = q.data(),
                     .q_stride = 8,
                     .nq = 2,
                     .kt_stride = 128,
                     .v_stride = 8,
                     .len = 0,
                     .d = 8,
                     .out = out.data(),
                     .out_stride = 8});
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace hubzoo
