// bfloat16: the top 16 bits of an IEEE float32. Conversions round to nearest
// even exactly as PyTorch's .to(torch.bfloat16) does (NaN stays a quiet NaN).
//
// Activations in bf16 modes are kept in float32 buffers holding values that
// bf16 can represent: "rounding to bf16" is then an in-place float op, and
// every product of two such values is exact in float32.
#pragma once

#include <bit>
#include <cstdint>

namespace hubzoo {

inline uint16_t bf16_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

// A stored weight as a float: itself, or a bf16 bit pattern widened exactly.
inline float widen(float w) { return w; }
inline float widen(uint16_t w) { return bf16_to_float(w); }

// x rounded to the nearest bf16 value, as a float.
inline float round_bf16(float x) { return bf16_to_float(bf16_bits(x)); }

// In place over n floats.
void round_bf16(float* x, int64_t n);
void to_bf16(const float* x, int64_t n, uint16_t* out);
void from_bf16(const uint16_t* x, int64_t n, float* out);

}  // namespace hubzoo
