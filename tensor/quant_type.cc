#include "tensor/quant_type.h"

#include <array>
#include <cctype>
#include <string>

#include "base/error.h"

namespace hubzoo {
namespace {

constexpr std::array<QuantTraits, 12> kTraits = {{
    {QuantType::Q4_0, "Q4_0", 32, 18, 2},
    {QuantType::Q4_1, "Q4_1", 32, 20, 3},
    {QuantType::Q5_0, "Q5_0", 32, 22, 6},
    {QuantType::Q5_1, "Q5_1", 32, 24, 7},
    {QuantType::Q8_0, "Q8_0", 32, 34, 8},
    {QuantType::Q2_K, "Q2_K", 256, 84, 10},
    {QuantType::Q3_K, "Q3_K", 256, 110, 11},
    {QuantType::Q4_K, "Q4_K", 256, 144, 12},
    {QuantType::Q5_K, "Q5_K", 256, 176, 13},
    {QuantType::Q6_K, "Q6_K", 256, 210, 14},
    {QuantType::Q4_G, "Q4_G", 32, 24, -1},
    {QuantType::Q8_G, "Q8_G", 32, 40, -1},
}};

// GGML's type names by id (ggml.h, enum ggml_type); gaps are retired ids.
constexpr std::array<std::string_view, 42> kGgmlNames = {"F32",
                                                         "F16",
                                                         "Q4_0",
                                                         "Q4_1",
                                                         "Q4_2 (removed)",
                                                         "Q4_3 (removed)",
                                                         "Q5_0",
                                                         "Q5_1",
                                                         "Q8_0",
                                                         "Q8_1",
                                                         "Q2_K",
                                                         "Q3_K",
                                                         "Q4_K",
                                                         "Q5_K",
                                                         "Q6_K",
                                                         "Q8_K",
                                                         "IQ2_XXS",
                                                         "IQ2_XS",
                                                         "IQ3_XXS",
                                                         "IQ1_S",
                                                         "IQ4_NL",
                                                         "IQ3_S",
                                                         "IQ2_S",
                                                         "IQ4_XS",
                                                         "I8",
                                                         "I16",
                                                         "I32",
                                                         "I64",
                                                         "F64",
                                                         "IQ1_M",
                                                         "BF16",
                                                         "Q4_0_4_4 (removed)",
                                                         "Q4_0_4_8 (removed)",
                                                         "Q4_0_8_8 (removed)",
                                                         "TQ1_0",
                                                         "TQ2_0",
                                                         "IQ4_NL_4_4 (removed)",
                                                         "IQ4_NL_4_8 (removed)",
                                                         "IQ4_NL_8_8 (removed)",
                                                         "MXFP4",
                                                         "NVFP4",
                                                         "Q1_0"};

}  // namespace

const QuantTraits& quant_traits(QuantType t) {
  const auto i = static_cast<size_t>(t);
  if (i >= kTraits.size()) throw InvalidArgument("unknown QuantType " + std::to_string(i));
  return kTraits[i];
}

std::string_view quant_name(QuantType t) { return quant_traits(t).name; }

std::optional<QuantType> parse_quant_name(std::string_view s) {
  std::string upper(s);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const QuantTraits& q : kTraits) {
    if (q.name == upper) return q.type;
  }
  return std::nullopt;
}

std::optional<QuantType> quant_type_from_ggml(uint32_t ggml_id) {
  for (const QuantTraits& q : kTraits) {
    if (q.ggml_id >= 0 && static_cast<uint32_t>(q.ggml_id) == ggml_id) return q.type;
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t ggml_id) {
  if (ggml_id < kGgmlNames.size()) return std::string(kGgmlNames[ggml_id]);
  return "unknown type " + std::to_string(ggml_id);
}

int64_t quant_row_bytes(QuantType t, int64_t k) {
  const QuantTraits& q = quant_traits(t);
  if (k <= 0 || k % q.block_elems != 0) {
    throw InvalidArgument(std::string(q.name) + ": a row of " + std::to_string(k) +
                          " weights is not a whole number of " + std::to_string(q.block_elems) +
                          "-weight blocks");
  }
  return k / q.block_elems * q.block_bytes;
}

}  // namespace hubzoo
