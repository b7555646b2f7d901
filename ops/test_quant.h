// Helpers shared by the quantized-matmul tests (ops/quant_test.cc,
// ops/quant_matrix_test.cc): random weight blocks, a product runner, bit
// comparison and a loop over the SIMD targets.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hwy/targets.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"
#include "ops/test_values.h"
#include "ops/thread_pool.h"

namespace hubzoo::quant_test {

using test::bits;

constexpr QuantType kAll[] = {QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                              QuantType::Q8_0, QuantType::Q2_K, QuantType::Q3_K, QuantType::Q4_K,
                              QuantType::Q5_K, QuantType::Q6_K, QuantType::Q4_G, QuantType::Q8_G};
constexpr QuantMode kModes[] = {QuantMode::kExact, QuantMode::kInt8};

inline float sentinel() {
  const uint32_t u = 0x7fc0beefu;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Byte offsets of the fp16 scales of a GGML block (set to finite values).
inline std::vector<int> fp16_fields(QuantType t) {
  switch (t) {
    case QuantType::Q4_1:
    case QuantType::Q5_1:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
      return {0, 2};
    case QuantType::Q2_K:
      return {80, 82};
    case QuantType::Q3_K:
      return {108};
    case QuantType::Q6_K:
      return {208};
    default:
      return {0};
  }
}

// n rows of random blocks: random quants, finite scales over many binades.
struct Weights {
  std::vector<uint8_t> bytes;
  QuantMatrix w;
};
inline Weights random_weights(QuantType t, int64_t n, int64_t k, uint32_t seed) {
  const QuantTraits& tr = quant_traits(t);
  std::mt19937 rng(seed);
  Weights out;
  out.bytes.resize(n * quant_row_bytes(t, k));
  for (auto& b : out.bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-16, 2);
  for (size_t at = 0; at < out.bytes.size(); at += tr.block_bytes) {
    uint8_t* b = out.bytes.data() + at;
    if (t == QuantType::Q4_G || t == QuantType::Q8_G) {
      const float s = std::ldexp(mant(rng), expo(rng));
      std::memcpy(b, &s, 4);
      if (t == QuantType::Q4_G) b[4] = static_cast<uint8_t>(rng() % 16);
      continue;
    }
    for (int f : fp16_fields(t)) {
      const uint16_t h = quant::float_to_fp16(std::ldexp(mant(rng), expo(rng)));
      b[f] = static_cast<uint8_t>(h & 0xFF);
      b[f + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  out.w = {t, n, k, quant_row_bytes(t, k), out.bytes.data(), nullptr, {}, {}, nullptr};
  return out;
}

struct Shape {
  int64_t m, n, k;
  bool bias = true, strided = true;
  int64_t ldx() const { return strided ? k + 3 : k; }
  int64_t ldy() const { return strided ? n + 5 : n; }
};

inline std::vector<float> run(const Shape& s, const std::vector<float>& x, const QuantMatrix& w,
                              const std::vector<float>& bias, QuantMode mode, ThreadPool* pool) {
  std::vector<float> y(s.m * s.ldy(), sentinel());
  const QuantMatmulArgs a{x.data(), s.m,     s.ldx(), &w, s.bias ? bias.data() : nullptr,
                          y.data(), s.ldy(), mode};
  if (pool) {
    quant_matmul(a, *pool);
  } else {
    quant_matmul_reference(a);
  }
  return y;
}

inline void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (bits(a[i]) != bits(b[i]) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": " << a[i] << " vs " << b[i];
  }
  EXPECT_EQ(bad, 0);
}

// Runs body once per SIMD target this machine and build offer.
template <typename Body>
void every_target(Body body) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    EXPECT_STREQ(quant_target_name(), hwy::TargetName(target));
    body();
    hwy::SetSupportedTargetsForTest(0);
  }
}

}  // namespace hubzoo::quant_test
