// Element types of the safetensors format, and conversion to/from float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace hubzoo {

// Every dtype the safetensors format defines.
enum class DType {
  BOOL,
  U8,
  I8,
  F8_E4M3,
  F8_E5M2,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  F64,
  I64,
  U64,
};

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling, e.g. "BF16"
// Parses the safetensors spelling; throws FormatError naming the string.
DType parse_dtype(std::string_view s);
// True for dtypes usable as weights (F32, BF16, F16).
bool is_float_weight_dtype(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round-to-nearest-even, NaN preserved (as torch does).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of a float dtype (F32, BF16, F16, F64) to float32.
// Throws InvalidArgument for other dtypes.
void convert_to_f32(DType src_type, const void* src, float* dst, size_t n);

}  // namespace hubzoo
