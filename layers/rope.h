// Rotary position embeddings as transformers computes them: inverse
// frequencies from rope_theta and the scaling type (default, linear, llama3,
// yarn, longrope), angles pos * inv_freq in fp32, cos/sin times
// attention_scaling, and rotate_half pairing (i, i + r/2) over the first r =
// rotary_dim dims of a head (r = head_dim unless a partial rotary factor
// says less; the rest pass unrotated).
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
  // Any other type (RopeParseOptions::partial_rotary, Phi-3): only the first
  // int(head_dim * partial_rotary_factor) dims of a head rotate (transformers'
  // q[..., :rotary_dim]), paired (i, i + rotary_dim / 2).
  double partial_rotary_factor = 1.0;
  // longrope (Phi-3): inv_freq = 1 / (factor_i * theta^(2i/r)) with the short
  // factors, or the long ones for a sequence longer than
  // original_max_position_embeddings; cos/sin times attention_factor (default
  // sqrt(1 + ln(factor) / ln(original)), factor default max_pos / original).
  std::vector<double> short_factor, long_factor;
};

// What a family accepts beyond the common RoPE settings; each refused by name
// otherwise.
struct RopeParseOptions {
  bool partial_rotary = false;  // partial_rotary_factor < 1 (top level or in the rope dict)
  bool longrope = false;        // rope_type longrope (su, yarn spelled as Phi-3's old configs)
};

// Reads RoPE settings from config.json in either spelling: transformers 4
// (`rope_theta` + `rope_scaling` {type|rope_type, ...}) or transformers 5
// (`rope_parameters` {rope_type, rope_theta, ...}). Unknown types or keys are a
// ConfigError naming them.
RopeParams parse_rope_params(const JsonObject& config);
RopeParams parse_rope_params(const JsonObject& config, const RopeParseOptions& options);

class Rope {
 public:
  Rope(const RopeParams& params, int64_t head_dim, int64_t max_position_embeddings);

  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float attention_scaling() const { return attention_scaling_; }
  int64_t rotary_dim() const { return rotary_dim_; }
  // longrope: a sequence of more than long_after() positions takes the long
  // factors at every position (transformers: seq_len = max(position_ids) + 1 of
  // the forward, > original_max_position_embeddings); 0: one set of frequencies.
  int64_t long_after() const { return long_after_; }
  // Rotates, in place, the q heads and k heads (each head_dim floats, laid out
  // contiguously) of one token; cos/sin are computed once for both.
  // eager_bf16: as transformers in bf16: cos/sin cast to bf16, and q * cos,
  // rotate_half(q) * sin and their sum each rounded to bf16. long_factors:
  // longrope's long frequencies (long_after() > 0 only).
  void apply(int64_t position, float* q, int64_t q_heads, float* k = nullptr, int64_t k_heads = 0,
             bool eager_bf16 = false, bool long_factors = false) const;

 private:
  void init_yarn(const RopeParams& params, const std::vector<float>& pos_freq);
  void init_longrope(const RopeParams& params, const std::vector<float>& pos_freq);

  int64_t head_dim_, rotary_dim_;
  std::vector<float> inv_freq_;       // rotary_dim / 2 (the short factors' for longrope)
  std::vector<float> long_inv_freq_;  // longrope: rotary_dim / 2
  int64_t long_after_ = 0;
  float attention_scaling_ = 1.0f;
};

}  // namespace hubzoo
