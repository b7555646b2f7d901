#include "tensor/dtype.h"

#include <string>

#include "base/error.h"

namespace hubzoo {

namespace {

struct DTypeEntry {
  DType type;
  std::string_view name;
  size_t size;
};

// Order matches the enum.
constexpr DTypeEntry kDTypes[] = {
    {DType::BOOL, "BOOL", 1},       {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1}, {DType::I16, "I16", 2},
    {DType::U16, "U16", 2},         {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::I32, "I32", 4},         {DType::U32, "U32", 4},         {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},         {DType::I64, "I64", 8},         {DType::U64, "U64", 8},
};

const DTypeEntry& entry(DType t) {
  const auto i = static_cast<size_t>(t);
  if (i >= std::size(kDTypes)) throw InvalidArgument("invalid DType value " + std::to_string(i));
  return kDTypes[i];
}

// Branch-light IEEE half -> single; exact for every input.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float32.
    float f = static_cast<float>(mant) * 0x1p-24f;
    std::memcpy(&bits, &f, sizeof bits);
    bits |= sign;
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, or NaN with its payload
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace

size_t dtype_size(DType t) { return entry(t).size; }

std::string_view dtype_name(DType t) { return entry(t).name; }

DType parse_dtype(std::string_view s) {
  for (const auto& e : kDTypes) {
    if (e.name == s) return e.type;
  }
  throw FormatError("unknown dtype '" + std::string(s) + "'");
}

bool is_float_weight_dtype(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

float f16_to_f32(uint16_t h) { return half_to_float(h); }

// Round-to-nearest-even; overflow -> inf; NaN stays a (quiet) NaN with the sign
// and the top payload bits.
uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  if (x >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536 (or inf)
  if (x >= 0x38800000u) {
    // Normal half range [2^-14, 65536): rebias the exponent, round 13 dropped bits.
    // A carry out of the mantissa correctly bumps the exponent (up to inf).
    uint32_t h = (x - 0x38000000u) >> 13;
    const uint32_t rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half (or zero): result = round(value * 2^24).
  const uint32_t e = x >> 23;
  const uint32_t shift = 126 - e;  // >= 14 here
  if (shift >= 25) return sign;    // below half the smallest subnormal (ties -> even 0)
  const uint32_t mant = (x & 0x7fffffu) | 0x800000u;
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // 0x400 = smallest normal
  return static_cast<uint16_t>(sign | h);
}

void convert_to_f32(DType src_type, const void* src, float* dst, size_t n) {
  switch (src_type) {
    case DType::F32:
      if (n) std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = half_to_float(s[i]);
      return;
    }
    case DType::F64: {
      const auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    default:
      throw InvalidArgument("convert_to_f32: unsupported source dtype " +
                            std::string(dtype_name(src_type)));
  }
}

}  // namespace hubzoo
