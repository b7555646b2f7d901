// Inputs and bit views shared by the SIMD kernels' tests against their scalar
// references (tests only).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace hubzoo::test {

// Values with spread-out exponents (mantissa in [-1, 1) times 2^[min_exp,
// max_exp]): another rounding or summation order changes the bits.
inline std::vector<float> spread_values(int64_t count, uint32_t seed, int min_exp, int max_exp) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(min_exp, max_exp);
  std::vector<float> v(count);
  for (auto& x : v) {
    // In sequence: as two arguments of one call, the draws' order was the
    // compiler's (GCC drew the exponent first, clang the mantissa), and so
    // were the values.
    const int e = exponent(rng);
    const float m = mantissa(rng);
    x = std::ldexp(m, e);
  }
  return v;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

}  // namespace hubzoo::test
