// The parsed quantization_config of layers/hub_quant.h (internal to layers/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layers/hub_quant.h"

namespace hubzoo {

// compressed-tensors' storage formats hubzoo reads.
enum class CtFormat : uint8_t {
  kPackQuantized,  // weight_packed int32 words, weight_shape, packed zero points
  kIntQuantized,   // weight stored as int8 ("int-quantized" / "naive-quantized")
};

enum class CtStrategy : uint8_t { kTensor, kChannel, kGroup };

// One entry of compressed-tensors' config_groups (a QuantizationScheme).
struct CtScheme {
  std::string name;  // the group's key, for messages
  std::vector<std::string> targets;
  CtFormat format = CtFormat::kPackQuantized;
  int bits = 4;  // 4 or 8
  bool symmetric = true;
  CtStrategy strategy = CtStrategy::kGroup;
  int64_t group_size = 0;  // kGroup only
};

struct HubQuantSpec {
  HubQuantMethod method = HubQuantMethod::kCompressedTensors;
  std::string where;  // "<snapshot>/config.json: quantization_config"

  // GPTQ / AWQ (4-bit).
  int64_t group_size = 0;     // -1: one group per row (GPTQ only)
  bool desc_act = false;      // GPTQ: g_idx may order columns arbitrarily
  bool sym = true;            // GPTQ: informational (zeros are stored either way)
  bool gptq_v1_zeros = true;  // GPTQ: stored zero = zero - 1 (checkpoint format "gptq")

  // compressed-tensors.
  std::vector<CtScheme> schemes;
  std::vector<std::string> ignore;

  // The scheme quantizing `module` (nullptr: left dense). ConfigError when
  // two groups target it.
  const CtScheme* ct_scheme_for(const std::string& module) const;
};

// Parsers of each method's fields (layers/hub_quant_config.cc).
HubQuantSpec parse_gptq_config(const JsonObject& q);
HubQuantSpec parse_awq_config(const JsonObject& q);
HubQuantSpec parse_ct_config(const JsonObject& q);

}  // namespace hubzoo
