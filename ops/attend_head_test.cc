#include "ops/attend_head.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "hwy/targets.h"
#include "ops/test_values.h"

namespace hubzoo {
namespace {

std::vector<float> random_values(int64_t count, uint32_t seed) {
  return test::spread_values(count, seed, -4, 2);
}

using test::bits;

TEST(AttendHead, BitIdenticalToScalarOpsOnEveryTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    EXPECT_STREQ(attend_head_target_name(), hwy::TargetName(target));
    for (int64_t d : {64, 128, 48, 100, 7, 256}) {
      for (int64_t len : {1, 2, 5, 33, 300}) {
        const int64_t stride = 3 * d + 5;  // rows of a KV cache with other heads between
        const auto q = random_values(d, 1 + d + len);
        const auto k = random_values(len * stride, 2 + d + len);
        const auto v = random_values(len * stride, 3 + d + len);
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        std::vector<float> s1(len), s2(len), o1(d, 7.0f), o2(d, -7.0f);
        attend_head_f32(q.data(), k.data() + 2, v.data() + 1, stride, len, d, scale, s1.data(),
                        o1.data());
        attend_head_f32_reference(q.data(), k.data() + 2, v.data() + 1, stride, len, d, scale,
                                  s2.data(), o2.data());
        for (int64_t j = 0; j < len; ++j) ASSERT_EQ(bits(s1[j]), bits(s2[j])) << d << " " << len;
        for (int64_t i = 0; i < d; ++i) ASSERT_EQ(bits(o1[i]), bits(o2[i])) << d << " " << len;
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

TEST(AttendHead, EmptyRangeGivesZeros) {
  std::vector<float> q(8, 1.0f), out(8, 3.0f);
  attend_head_f32(q.data(), nullptr, nullptr, 8, 0, 8, 1.0f, nullptr, out.data());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace hubzoo
