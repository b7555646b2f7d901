#include "ops/f16.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "hwy/targets.h"

namespace hubzoo {
namespace {

// Floats that probe every branch of a half conversion: each half itself and
// the midpoints between neighbours (ties, both parities), beyond the largest
// half and the overflow threshold, subnormals, infinities, NaN, and random
// floats over the whole exponent range.
std::vector<float> probes() {
  std::vector<float> x;
  for (uint32_t h = 0; h < 0x7C00u; ++h) {  // every finite non-negative half
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    const float next = f16_to_f32(static_cast<uint16_t>(h + 1));
    x.push_back(v);
    if (h + 1 < 0x7C00u) {
      const float mid = v + (next - v) / 2;  // exact: a tie
      x.push_back(mid);
      x.push_back(std::nextafter(mid, 0.0f));
      x.push_back(std::nextafter(mid, HUGE_VALF));
    }
  }
  for (float v :
       {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e6f, 3.0e38f, std::numeric_limits<float>::max(),
        1e-9f, 2.9802322e-8f, 1e-30f, std::numeric_limits<float>::denorm_min(), HUGE_VALF}) {
    x.push_back(v);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i)
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng() & 0x7F7FFFFFu)));
  const size_t n = x.size();
  for (size_t i = 0; i < n; ++i) x.push_back(-x[i]);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(-std::numeric_limits<float>::quiet_NaN());
  x.push_back(3.0f);  // an odd count: every target's tail runs
  return x;
}

TEST(F16Saturated, SaturatesOnlyFiniteFloatsBeyondTheLargestHalf) {
  EXPECT_EQ(f16_bits_saturated(65504.0f), 0x7BFFu);
  EXPECT_EQ(f16_bits_saturated(65520.0f), 0x7BFFu);  // f32_to_f16: infinity
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00u);
  EXPECT_EQ(f16_bits_saturated(-1e30f), 0xFBFFu);
  EXPECT_EQ(f16_bits_saturated(HUGE_VALF), 0x7C00u);
  EXPECT_EQ(f16_bits_saturated(-HUGE_VALF), 0xFC00u);
  EXPECT_TRUE(std::isnan(round_f16_saturated(std::numeric_limits<float>::quiet_NaN())));
  // Round to nearest even below the limit: 1 + 2^-11 is a tie between 1 and 1 + 2^-10.
  EXPECT_EQ(round_f16_saturated(1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(round_f16_saturated(1.0f + 3 * 0x1p-11f), 1.0f + 2 * 0x1p-10f);
  EXPECT_EQ(round_f16_saturated(0x1p-25f), 0.0f);        // half the least subnormal: even
  EXPECT_EQ(round_f16_saturated(0x1.8p-25f), 0x1p-24f);  // above it: up
  const std::vector<float> x = probes();
  for (float v : x) {
    if (std::isfinite(v) && std::fabs(v) <= kF16Max) {
      ASSERT_EQ(f16_bits_saturated(v), f32_to_f16(v)) << v;
    }
  }
}

// The array functions give the scalar bits on every SIMD target compiled,
// whatever the length (tails of each vector width).
TEST(F16Saturated, ArraysMatchTheScalarFunctionsOnEveryTarget) {
  const std::vector<float> x = probes();
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(f16_target_name());
    for (int64_t n :
         {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{33}, static_cast<int64_t>(x.size())}) {
      std::vector<uint16_t> bits(n + 1, 0xABCDu);
      to_f16_saturated(x.data(), n, bits.data());
      std::vector<float> rounded(x.begin(), x.begin() + n + 1);
      round_f16_saturated(rounded.data(), n);
      std::vector<float> wide(n + 1, -1.0f);
      from_f16(bits.data(), n, wide.data());
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want = f16_bits_saturated(x[i]);
        if (std::isnan(x[i])) {
          ASSERT_EQ(bits[i] & 0x7E00u, 0x7E00u) << i;  // a quiet NaN
          ASSERT_TRUE(std::isnan(rounded[i]) && std::isnan(wide[i])) << i;
          continue;
        }
        ASSERT_EQ(bits[i], want) << "n " << n << " x " << x[i];
        ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), std::bit_cast<uint32_t>(f16_to_f32(want)))
            << "n " << n << " x " << x[i];
        ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), std::bit_cast<uint32_t>(f16_to_f32(want)));
      }
      // Nothing past n is written.
      EXPECT_EQ(bits[n], 0xABCDu);
      EXPECT_EQ(std::bit_cast<uint32_t>(rounded[n]), std::bit_cast<uint32_t>(x[n]));
      EXPECT_EQ(wide[n], -1.0f);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace hubzoo
