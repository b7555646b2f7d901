#include "ops/dot_axpy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "hwy/targets.h"
#include "ops/elementwise.h"
#include "ops/test_values.h"

namespace hubzoo {
namespace {

// Spread-out exponents: a fused multiply-add or another summation order
// changes the bits.
std::vector<float> random_values(int64_t count, uint32_t seed) {
  return test::spread_values(count, seed, -8, 8);
}

using test::bits;

template <typename Body>
void every_target(Body body) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    EXPECT_STREQ(dot_axpy_target_name(), hwy::TargetName(target));
    body();
    hwy::SetSupportedTargetsForTest(0);
  }
}

TEST(DotAxpy, DotBitIdenticalToReferenceOnEveryTarget) {
  every_target([] {
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 128, 576, 1001}) {
      // Offsets make the loads unaligned.
      const auto a = random_values(n + 3, 1 + n), b = random_values(n + 5, 2 + n);
      for (int off : {0, 1, 3}) {
        const float got = dot_simd(a.data() + off, b.data() + off, n);
        ASSERT_EQ(bits(got), bits(dot_reference(a.data() + off, b.data() + off, n)))
            << "n=" << n << " off=" << off;
        ASSERT_EQ(bits(got), bits(dot(a.data() + off, b.data() + off, n)));
      }
    }
  });
}

// rms_norm's scaling, and rms_norm itself against its scalar form (the sum
// of squares in dot_reference's order, then w * (x * inv_rms)), bit for bit.
TEST(DotAxpy, ScaleMulAndRmsNormBitIdenticalToScalarOnEveryTarget) {
  every_target([] {
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 576, 1001}) {
      const auto x = random_values(n + 3, 11 + n), w = random_values(n + 3, 12 + n);
      for (int off : {0, 1, 3}) {
        std::vector<float> got(n), want(n);
        scale_mul_simd(w.data() + off, x.data() + off, 0.37f, got.data(), n);
        scale_mul_reference(w.data() + off, x.data() + off, 0.37f, want.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[i]), bits(want[i])) << "n=" << n;
        const float* xs = x.data() + off;
        const float inv =
            1.0f / std::sqrt(dot_reference(xs, xs, n) / static_cast<float>(n) + 1e-6f);
        for (int64_t i = 0; i < n; ++i) want[i] = w[off + i] * (xs[i] * inv);
        rms_norm(xs, w.data() + off, 1e-6f, n, got.data());
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(bits(got[i]), bits(want[i])) << "rms_norm n=" << n << " off=" << off;
      }
    }
  });
}

// The SIMD argmax against the scalar scan: every length up to a few vectors
// and a vocabulary's, with ties, signed zeros, infinities and NaNs placed
// in the vectors' body and in the tail, on every target (4, 8, 16 lanes).
TEST(DotAxpy, ArgmaxEqualsScalarScanOnEveryTarget) {
  every_target([] {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> pick(0, 9);
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float values[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, 2.5f, inf, -inf, -3.0f, 0.5f};
    for (int64_t n : {1, 2, 7, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 49152}) {
      for (int trial = 0; trial < 40; ++trial) {
        std::vector<float> x(n);
        for (float& v : x) v = values[pick(rng)];
        if (trial % 4 == 1) x[rng() % n] = nan;  // one NaN anywhere
        if (trial % 4 == 2) {                    // only the last element is NaN
          x[n - 1] = nan;
        }
        if (trial % 4 == 3) {  // all the same but one larger at a random place
          std::fill(x.begin(), x.end(), -0.0f);
          x[rng() % n] = 0.0f;
        }
        EXPECT_EQ(argmax_simd(x.data(), n), argmax_reference(x.data(), n))
            << "n=" << n << " trial=" << trial;
      }
    }
    std::vector<float> neg(40, -inf);  // the maximum is -inf itself
    EXPECT_EQ(argmax_simd(neg.data(), 40), 0);
  });
}

TEST(DotAxpy, AxpyBitIdenticalToReferenceOnEveryTarget) {
  every_target([] {
    for (int64_t n : {0, 1, 5, 15, 16, 17, 64, 100, 1001}) {
      const auto x = random_values(n + 2, 3 + n), y0 = random_values(n + 2, 4 + n);
      for (float a : {0.0f, 1.0f, -0.3712f, 1.1e5f}) {
        auto want = y0, got = y0;
        axpy_reference(a, x.data() + 1, want.data() + 1, n);
        axpy_simd(a, x.data() + 1, got.data() + 1, n);
        for (int64_t i = 0; i < n + 2; ++i) ASSERT_EQ(bits(got[i]), bits(want[i])) << i;
      }
    }
  });
}

TEST(DotAxpy, ProductsAreNotFused) {
  // 1 + 2^-13 squared needs 27 mantissa bits: a product rounded on its own
  // loses 2^-26, an FMA would keep it. Every lane and the tail hold this case.
  const float e = 1.0f + std::ldexp(1.0f, -13);
  std::vector<float> a(19, e), y(19, -1.0f);
  every_target([&] {
    auto got = y;
    axpy_simd(e, a.data(), got.data(), 19);
    for (float v : got) EXPECT_EQ(v, std::ldexp(1.0f, -12));  // (1 + 2^-12 + 2^-26) - 1, rounded
  });
}

}  // namespace
}  // namespace hubzoo
