// The Hub's int4/int8 safetensors formats (config.json's quantization_config)
// read into hubzoo's private block types Q4_G / Q8_G (tensor/quant_type.h).
//
// Supported (anything else is a ConfigError naming the option):
// - quant_method "compressed-tensors": format "pack-quantized" (int4 or int8
//   packed in int32), "int-quantized" / "naive-quantized" (int8 storage) and
//   "mixed-precision" of those; weight-only (no input/output activation
//   quantization), strategies group (size a multiple of 32), channel and
//   tensor, symmetric or with zero points; targets "Linear", module names or
//   "re:" patterns; ignore lists.
// - quant_method "gptq": bits 4, group_size -1 or a multiple of 32, desc_act
//   false/true (g_idx), sym true/false, checkpoint format "gptq" (v1: zero
//   points stored minus one) or "gptq_v2".
// - quant_method "awq": bits 4, version/format "gemm", zero_point true.
//
// Every format dequantizes as w = scale * (q - zero) with integer q and zero
// and one scale per (row, group); Q4_G/Q8_G keep exactly those integers and the
// scale as float32, so the block dequantizes to the product computed in fp32
// (exact: |q - zero| < 2^9 and the scale has at most 24 significant bits, so
// the only rounding is the product's own). docs/architecture.md, "The Hub's
// quantized safetensors", has each format's layout.
//
// Block layouts written here (24 and 40 bytes, as quant_type.h sizes them):
//   Q4_G: f32 scale (little-endian), i8 zero (0..15), 3 zero bytes, then 16
//         bytes of nibbles in GGML's Q4_0 order: byte j holds weight j in its
//         low nibble and weight j + 16 in its high nibble (q in 0..15).
//   Q8_G: f32 scale, i8 zero, 3 zero bytes, 32 x i8 q.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/json.h"
#include "io/safetensors.h"
#include "ops/quant.h"

namespace hubzoo {

enum class HubQuantMethod : uint8_t { kCompressedTensors, kGptq, kAwq };

struct HubQuantSpec;  // the parsed quantization_config (layers/hub_quant_spec.h)

class HubQuant {
 public:
  // nullopt when config.json has no quantization_config. ConfigError naming
  // config.json and the field for a method, format or option not listed above,
  // or for missing, mistyped or inconsistent fields.
  static std::optional<HubQuant> from_config(const JsonObject& config);

  HubQuantMethod method() const;
  // One line for logs and model info, e.g. "gptq int4 group 128 desc_act v1".
  std::string describe() const;

  // Whether the Linear whose weight is `{prefix}.weight` in an unquantized
  // checkpoint (prefix e.g. "model.layers.0.self_attn.q_proj") is stored
  // quantized. compressed-tensors: its config_groups' targets minus `ignore`
  // match it and it has `weight_packed` or `weight_scale` (targets also match
  // modules the package does not compress, e.g. an embedding; a quantized
  // tensor of a module the config leaves dense is a TensorMappingError);
  // GPTQ/AWQ: whether `{prefix}.qweight` exists (both quantize a model's
  // linears except the ones they skip, e.g. lm_head).
  bool is_quantized(const Checkpoint& ckpt, const std::string& prefix) const;

  // The [n, k] (out, in) weight of `prefix` as a Q4_G or Q8_G QuantMatrix
  // owning its bytes; k_perm filled when GPTQ's g_idx orders the columns
  // otherwise than by group (desc_act). Every tensor read is checked against
  // n, k and the config (dtype, shape, value ranges) before anything is
  // allocated: TensorMappingError naming the file, tensor and field. The names
  // of the tensors consumed are appended to `used` (may be null); a bias is
  // not one of them.
  QuantMatrix take(const Checkpoint& ckpt, const std::string& prefix, int64_t n, int64_t k,
                   std::vector<std::string>* used) const;

  // The [n, k] the stored tensors of `prefix` imply (for tools and tests that
  // have no config-derived shape); TensorMappingError if they are missing.
  std::vector<int64_t> stored_shape(const Checkpoint& ckpt, const std::string& prefix) const;

  const HubQuantSpec& spec() const { return *spec_; }

 private:
  explicit HubQuant(std::shared_ptr<const HubQuantSpec> spec) : spec_(std::move(spec)) {}
  std::shared_ptr<const HubQuantSpec> spec_;
};

}  // namespace hubzoo
