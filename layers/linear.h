// Linear (y = x W^T + b), RMSNorm and LayerNorm over rows of a [M, features] buffer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "layers/weights.h"
#include "ops/matmul.h"

namespace hubzoo {

struct Linear {
  PackedMatrix weight;  // [out, in], packed
  std::optional<FloatWeights> bias;

  static Linear load(WeightLoader& w, const std::string& prefix, int64_t in, int64_t out,
                     bool has_bias);
  // One Linear computing parts[0], parts[1], ... side by side (outputs
  // concatenated in that order), e.g. q/k/v or gate/up: x is read and packed
  // once, one parallel job instead of several. Every output element is the
  // same chain over K as in its own part, so the values are bit for bit those
  // of the separate projections. The parts must share in_features and dtype;
  // either all or none have a bias.
  static Linear concat(const std::vector<const Linear*>& parts);
  // The same fusion straight from the checkpoint: tensors {prefixes[i]}.weight
  // [outs[i], in] (and .bias) packed once as one matrix, never separately.
  static Linear load_concat(WeightLoader& w, const std::vector<std::string>& prefixes, int64_t in,
                            const std::vector<int64_t>& outs, bool has_bias);
  int64_t in_features() const { return weight.k; }
  int64_t out_features() const { return weight.n; }
  // x: [m, in] (rows ldx apart; 0: in) -> y: [m, out]
  void forward(const float* x, int64_t m, float* y, ThreadPool& pool, int64_t ldx = 0) const;
};

// How an RMSNorm scales the normalised x: by w after casting it (Llama,
// Qwen), by (1 + w) in fp32 (Gemma 2/3), by w in fp32 (Gemma 4).
enum class NormKind { kWeight, kUnitOffset, kScaleInFp32 };

struct RMSNorm {
  FloatWeights weight;  // [n]
  float eps = 1e-6f;
  Numerics numerics;  // eager bf16 rounds the normalised x, then x * weight

  // Gemma's form: normalised x times the weight in fp32, cast once (eager
  // bf16). Gemma 2/3 scale by (1 + w) (load_unit_offset stores 1 + w), Gemma 4
  // by w (load_scale_in_fp32).
  bool scale_in_fp32 = false;

  static RMSNorm load(WeightLoader& w, const std::string& name, int64_t n, float eps);
  static RMSNorm load_unit_offset(WeightLoader& w, const std::string& name, int64_t n, float eps);
  static RMSNorm load_scale_in_fp32(WeightLoader& w, const std::string& name, int64_t n, float eps);
  // load, load_unit_offset or load_scale_in_fp32, as `kind` says.
  static RMSNorm load_kind(NormKind kind, WeightLoader& w, const std::string& name, int64_t n,
                           float eps);
  // Gemma 4's norm without a scale (v_norm): x * rsqrt(mean(x^2) + eps), cast once.
  static RMSNorm unscaled(int64_t n, float eps, Numerics numerics);
  // From values, without a checkpoint; weights are rounded as WeightLoader::take
  // rounds them under `numerics`.
  static RMSNorm from_values(std::vector<float> weight, float eps, Numerics numerics);
  int64_t size() const { return weight.size(); }
  // Normalises `rows` rows of size() floats: x: [rows, n] -> out (may alias x).
  // Statistics are fp32 in every mode; eager bf16 rounds as transformers does.
  void forward(const float* x, int64_t rows, float* out) const;
  // The same normalisation kept in fp32 (inside a fused kernel).
  void forward_fp32(const float* x, int64_t rows, float* out) const;
  // The residual add fused in: x += branch (rounded as `residual` rounds a
  // residual add), then out = forward(x), a row at a time while the row is in
  // L1. Bit for bit add_inplace + residual.round_eager + forward.
  void add_forward(float* x, const float* branch, int64_t rows, float* out,
                   const Numerics& residual) const;
};

// torch.nn.LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias.
struct LayerNorm {
  FloatWeights weight;  // [n]
  std::optional<FloatWeights> bias;
  float eps = 1e-5f;
  Numerics numerics;  // eager bf16 rounds the output once, as PyTorch's bf16 kernel

  // Tensors {prefix}.weight and, with has_bias, {prefix}.bias.
  static LayerNorm load(WeightLoader& w, const std::string& prefix, int64_t n, float eps,
                        bool has_bias = true);
  // From values, without a checkpoint (bias may be empty: none); weights are
  // rounded as WeightLoader::take rounds them under `numerics`.
  static LayerNorm from_values(std::vector<float> weight, std::vector<float> bias, float eps,
                               Numerics numerics);
  int64_t size() const { return weight.size(); }
  // Normalises `rows` rows of size() floats: x: [rows, n] -> out (may alias x).
  // Statistics and the affine map are fp32 in every mode; eager bf16 rounds the
  // result once (PyTorch's bf16 layer_norm computes in fp32 and casts back).
  void forward(const float* x, int64_t rows, float* out) const;
  // The same normalisation kept in fp32 (inside a fused kernel).
  void forward_fp32(const float* x, int64_t rows, float* out) const;
};

}  // namespace hubzoo
