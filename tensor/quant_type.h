// Block-quantized weight types: GGML's (as GGUF files store them) and the
// two hubzoo-private block types the Hub's int4/int8 safetensors formats
// (GPTQ, AWQ, compressed-tensors) are converted to at load.
//
// A quantized [n, k] matrix is n rows, each k / block_elems blocks of
// block_bytes, rows stored one after another (GGML's layout). k must be a
// multiple of block_elems.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hubzoo {

enum class QuantType : uint8_t {
  // GGML types, block layouts bit for bit as ggml-common.h defines them.
  Q4_0,  // 32: f16 d, 16 B nibbles;             w = d * (q - 8)
  Q4_1,  // 32: f16 d, f16 m, 16 B nibbles;      w = d * q + m
  Q5_0,  // 32: f16 d, u32 high bits, 16 B;      w = d * (q - 16)
  Q5_1,  // 32: f16 d, f16 m, u32 high bits, 16 B; w = d * q + m
  Q8_0,  // 32: f16 d, 32 x i8;                  w = d * q
  Q2_K,  // 256 (super-block), 84 B
  Q3_K,  // 256, 110 B
  Q4_K,  // 256, 144 B
  Q5_K,  // 256, 176 B
  Q6_K,  // 256, 210 B
  // hubzoo-private (never in a file): group-wise affine int4 and int8 with
  // fp32 scales, so GPTQ/AWQ/compressed-tensors dequantize exactly as
  // scale * (q - zero) in fp32 (one rounding).
  Q4_G,  // 32: f32 scale, i8 zero (0..15), 3 B pad, 16 B nibbles (q in 0..15); 24 B
  Q8_G,  // 32: f32 scale, i8 zero (-128..127), 3 B pad, 32 x i8 (q); 40 B; w = scale * (q - zero)
};

struct QuantTraits {
  QuantType type;
  std::string_view name;  // "Q4_K", as llama.cpp spells it
  int64_t block_elems;    // weights per block
  int64_t block_bytes;    // bytes per block
  int ggml_id;            // GGML type id in a GGUF file; -1 for private types
};

const QuantTraits& quant_traits(QuantType t);
std::string_view quant_name(QuantType t);
// Parses "q8_0", "Q4_K", ... (case-insensitive); nullopt if unknown.
std::optional<QuantType> parse_quant_name(std::string_view s);
// The quantized type with this GGML id; nullopt for F32/F16/BF16 and
// for GGML types hubzoo does not implement (IQ*, Q8_1, ...).
std::optional<QuantType> quant_type_from_ggml(uint32_t ggml_id);
// GGML's own name for any type id ("IQ2_XXS", "F32", ...), for error messages;
// "unknown type 57" past its table.
std::string ggml_type_name(uint32_t ggml_id);
// Bytes of one row of k weights; throws InvalidArgument unless k is a
// positive multiple of block_elems.
int64_t quant_row_bytes(QuantType t, int64_t k);

}  // namespace hubzoo
