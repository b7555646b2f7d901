// Rotary position embeddings as transformers computes them: inverse
// frequencies from rope_theta and the scaling type (default, linear, llama3,
// yarn), angles pos * inv_freq in fp32, cos/sin times attention_scaling, and
// rotate_half pairing (i, i + d/2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/json.h"

namespace hubzoo {

struct RopeParams {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  // proportional (Gemma 4): the first int(partial_rotary_factor * head_dim / 2)
  // frequencies rotate, the rest are 0 (those dims pass unrotated); all / factor.
  double partial_rotary_factor = 1.0;
};

// Reads RoPE settings from config.json in either spelling: transformers 4
// (`rope_theta` + `rope_scaling` {type|rope_type, ...}) or transformers 5
// (`rope_parameters` {rope_type, rope_theta, ...}). Unknown types or keys are a
// ConfigError naming them.
RopeParams parse_rope_params(const JsonObject& config);

class Rope {
 public:
  Rope(const RopeParams& params, int64_t head_dim, int64_t max_position_embeddings);

  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float attention_scaling() const { return attention_scaling_; }
  // Rotates, in place, the q heads and k heads (each head_dim floats, laid out
  // contiguously) of one token; cos/sin are computed once for both.
  // eager_bf16: as transformers in bf16: cos/sin cast to bf16, and q * cos,
  // rotate_half(q) * sin and their sum each rounded to bf16.
  void apply(int64_t position, float* q, int64_t q_heads, float* k = nullptr, int64_t k_heads = 0,
             bool eager_bf16 = false) const;

 private:
  int64_t head_dim_;
  std::vector<float> inv_freq_;  // head_dim / 2
  float attention_scaling_ = 1.0f;
};

}  // namespace hubzoo
