// IEEE binary16 (half) values as the int8 mode's KV cache keeps them
// (layers/kv_cache.h): rounded to nearest even as tensor/dtype.h's
// f32_to_f16 and F16C's vcvtps2ph round, except that a finite float beyond
// the largest half (65504) saturates to it rather than becoming infinite: a
// key that large would turn every score it meets into NaN, where the
// saturated one gives a finite, if clipped, result. Infinities and NaN stay
// what they are. A half widens exactly (f16_to_f32).
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/dtype.h"

namespace hubzoo {

constexpr float kF16Max = 65504.0f;

inline uint16_t f16_bits_saturated(float x) {
  if (std::isfinite(x) && std::fabs(x) > kF16Max) x = std::copysign(kF16Max, x);
  return f32_to_f16(x);
}

inline float round_f16_saturated(float x) { return f16_to_f32(f16_bits_saturated(x)); }

// The same over n floats, in SIMD on targets with F16C (bit for bit the
// scalar ones above on every input).
void round_f16_saturated(float* x, int64_t n);  // in place
void to_f16_saturated(const float* x, int64_t n, uint16_t* out);
void from_f16(const uint16_t* x, int64_t n, float* out);

// The SIMD target the three run on ("scalar" where there is no F16C).
const char* f16_target_name();

}  // namespace hubzoo
