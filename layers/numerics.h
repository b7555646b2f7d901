// How a model computes: float32, or bf16 in one of two modes (docs/design.md,
// Numerics). Weights are bf16 in both bf16 modes (rounded at load as
// transformers' .to(bfloat16) rounds them) and so is the KV cache; every
// matmul and reduction accumulates in float32. The modes differ in where
// activations are rounded to bf16:
//
// eager: at the op boundaries of transformers' eager PyTorch code, so a bf16
//   model rounds where transformers' bf16 model rounds: norm statistics in
//   fp32 then cast, weight * normed in bf16, every matmul output, RoPE on bf16
//   cos/sin, bf16 scores, softmax in fp32 cast to bf16, SiLU and products,
//   residual adds, logits.
// fused: each layer runs as fused kernels that keep fp32 throughout; only what
//   is stored past the forward pass (weights, the KV cache) is bf16. Rounding
//   activations at kernel boundaries as well was measured worse than
//   transformers' own bf16 (error ratio 1.05 on SmolLM2 against 0.29 without;
//   docs/architecture.md), and fp32 activations cost nothing on CPU, where
//   decode time is the weights' bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/error.h"
#include "ops/attend_online.h"
#include "ops/bf16.h"
#include "ops/f16.h"
#include "tensor/quant_type.h"

namespace hubzoo {

// --quantize q4_k_m / q5_k_m: llama-quantize's per-tensor type mixes
// (layers/quant_mix.h) over the base type Q4_K / Q5_K.
enum class QuantMix : uint8_t { kNone, kQ4_K_M, kQ5_K_M };

// bf16dot: fused, but every matmul input is rounded to bf16, so bf16 weights
//   multiply on the CPU's bf16 dot products (AVX512-BF16; ops/matmul.h,
//   bf16_activations), as llama.cpp's BF16 files and oneDNN compute. Eager's
//   matmul inputs are bf16 already and run on them too.
//
// Quantized weights (GGUF blocks, the Hub's int4/int8, or --quantize) add a
// mode "int8": activations are quantized per block to int8 for integer
// dot products, as llama.cpp computes (ops/quant.h); under "fused" (the
// default) quantized weights multiply fp32 activations exactly dequantized.
struct Numerics {
  constexpr Numerics() = default;
  constexpr Numerics(bool bf16_, bool eager_) : bf16(bf16_), eager(eager_) {}
  bool bf16 = false;
  bool eager = false;
  bool int8 = false;      // mode "int8": int8 activations against quantized weights
  bool bf16_dot = false;  // mode "bf16dot": fused with bf16 matmul inputs
  // --quantize: fp32/bf16/f16 matrices are quantized to this block type at load.
  std::optional<QuantType> quantize;
  // --quantize dequantize: a quantized checkpoint's matrices (GGUF blocks, the
  // Hub's int4/int8) are dequantized at load into dense ones in the dtype, as
  // transformers loads a GGUF: more memory, and bf16dot then runs them on
  // the bf16 dot products and tiles.
  bool dequantize = false;
  QuantMix quant_mix = QuantMix::kNone;  // with quantize = its base type

  // dtype "float32" | "bfloat16", mode "eager" | "fused" | "bf16dot" | "int8"
  // (eager is ignored for float32; bf16dot needs bfloat16; int8 needs float32
  // and quantized weights).
  static Numerics parse(const std::string& dtype, const std::string& mode) {
    if (dtype != "float32" && dtype != "bfloat16") {
      throw InvalidArgument("dtype must be 'float32' or 'bfloat16', got '" + dtype + "'");
    }
    if (mode != "eager" && mode != "fused" && mode != "bf16dot" && mode != "int8") {
      throw InvalidArgument("mode must be 'eager', 'fused', 'bf16dot' or 'int8', got '" + mode +
                            "'");
    }
    if (mode == "int8" && dtype != "float32") {
      throw InvalidArgument("mode 'int8' (int8 activations) runs with dtype float32");
    }
    if (mode == "bf16dot" && dtype != "bfloat16") {
      throw InvalidArgument("mode 'bf16dot' (bf16 dot products) runs with dtype bfloat16");
    }
    Numerics n;
    n.bf16 = dtype == "bfloat16";
    n.eager = n.bf16 && mode == "eager";
    n.int8 = mode == "int8";
    n.bf16_dot = mode == "bf16dot";
    return n;
  }
  // `name` ("q8_0", "q4_0", "q4_k", ..., or the mixes "q4_k_m", "q5_k_m";
  // empty: none) as the quantize option.
  // "dequantize": the dequantize option instead.
  void set_quantize(const std::string& name) {
    quant_mix = QuantMix::kNone;
    quantize.reset();
    dequantize = false;
    if (name.empty()) return;
    std::string lower;
    for (char c : name) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    if (lower == "dequantize") {
      if (int8) {
        throw InvalidArgument(
            "quantize 'dequantize' makes the weights dense; mode 'int8' runs on quantized ones");
      }
      dequantize = true;
      return;
    }
    if (lower == "q4_k_m" || lower == "q5_k_m") {
      quant_mix = lower == "q4_k_m" ? QuantMix::kQ4_K_M : QuantMix::kQ5_K_M;
      quantize = lower == "q4_k_m" ? QuantType::Q4_K : QuantType::Q5_K;
      return;
    }
    quantize = parse_quant_name(name);
    if (!quantize || quant_traits(*quantize).ggml_id < 0) {  // can_quantize() is checked at load
      throw InvalidArgument(
          "quantize must name a GGML block type such as q8_0, q4_0 or q4_k, or a mix "
          "(q4_k_m, q5_k_m); got '" +
          name + "'");
    }
  }
  // The quantize option as reported ("Q4_K", "Q4_K_M"; empty: none).
  std::string quantize_name() const {
    if (dequantize) return "dequantize";
    if (!quantize) return "";
    if (quant_mix != QuantMix::kNone) return quant_mix == QuantMix::kQ4_K_M ? "Q4_K_M" : "Q5_K_M";
    return std::string(quant_name(*quantize));
  }
  const char* dtype_name() const { return bf16 ? "bfloat16" : "float32"; }
  const char* mode_name() const {
    return int8 ? "int8" : eager ? "eager" : bf16_dot ? "bf16dot" : "fused";
  }
  // Whether bf16 matmul weights multiply bf16 activations (ops/matmul.h).
  bool bf16_matmul_inputs() const { return eager_bf16() || bf16_dot; }

  // A value transformers' eager bf16 code rounds here.
  float round_eager(float x) const { return eager_bf16() ? round_bf16(x) : x; }
  void round_eager(float* x, int64_t n) const {
    if (eager_bf16()) round_bf16(x, n);
  }
  // A tensor kept past the forward pass (weights, KV cache): bf16 in both bf16 modes.
  // (The KV cache: round_kv.)
  float round_stored(float x) const { return bf16 ? round_bf16(x) : x; }
  void round_stored(float* x, int64_t n) const {
    if (bf16) round_bf16(x, n);
  }
  bool eager_bf16() const { return bf16 && eager; }
  // Keys and values as the KV cache keeps them: bf16 in both bf16 modes
  // (transformers' bf16 cache), IEEE half in int8 (half the bytes a decode
  // step's attention reads, as llama.cpp's f16 cache, with 3 more mantissa
  // bits than bf16; docs/architecture.md, "The int8 mode's KV cache"),
  // float32 otherwise. Rounded before attention uses them, so a fresh chunk
  // and the cache agree.
  KvElement kv_element() const {
    return bf16 ? KvElement::kBF16 : int8 ? KvElement::kF16 : KvElement::kF32;
  }
  void round_kv(float* x, int64_t n) const {
    if (bf16) {
      round_bf16(x, n);
    } else if (int8) {
      round_f16_saturated(x, n);
    }
  }
};

}  // namespace hubzoo
