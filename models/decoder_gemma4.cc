// Gemma 4's blocks beyond the common layer: per-layer inputs (PLE) and the MoE
// beside the dense MLP. Methods of Decoder; the forward pass is models/decoder.cc.
#include <cmath>

#include "models/decoder_impl.h"
#include "models/decoder_step.h"
#include "models/decoder_steps.h"
#include "ops/elementwise.h"

namespace hubzoo {

// PLE: (norm(per_layer_model_projection(embeds) * H^-0.5) + embed_per_layer(ids)
// * sqrt(P)) * 2^-0.5, per layer: proj [M, L, P].
void Decoder::per_layer_inputs(const TokenBatch& batch, const float* x, float* proj) const {
  const int64_t m = batch.size(), h = spec_.hidden_size;
  const int64_t nl = static_cast<int64_t>(layers_.size());
  const int64_t width = nl * spec_.hidden_size_per_layer_input;
  const Numerics& num = numerics_;
  per_layer_model_projection_.forward(x, m, proj, *pool_);
  num.round_eager(proj, m * width);
  const auto proj_scale = static_cast<float>(std::pow(static_cast<double>(h), -0.5));
  for (int64_t j = 0; j < m * width; ++j) proj[j] = num.round_eager(proj[j] * proj_scale);
  per_layer_projection_norm_.forward(proj, m * nl, proj);
  const auto input_scale = static_cast<float>(std::pow(2.0, -0.5));
  for (int64_t t = 0; t < m; ++t) {
    const float* token = embed_tokens_per_layer_.data() + embedding_id(batch.ids[t]) * width;
    for (int64_t j = 0; j < width; ++j) {
      const float tok = num.round_eager(token[j] * ple_embed_scale_);
      float& value = proj[t * width + j];
      value = num.round_eager(num.round_eager(value + tok) * input_scale);
    }
  }
}

// Gemma 4: branch = norm_1(mlp(norm(x))) + norm_2(moe(route on x, experts on norm_2'(x))).
void Decoder::moe_beside_mlp(const DecoderLayer& layer, Step& s) {
  const int64_t n = s.m * s.h;
  float* const moe_out = ws_.moe_out.get(n);
  layer.post_feedforward_layernorm_1->forward(s.branch, s.m, s.branch);
  layer.pre_feedforward_layernorm_2->forward(s.x, s.m, s.normed);
  MoeRouting routing;
  layer.moe->forward(s.x, s.normed, s.m, moe_out, *pool_, ws_.layers, &routing);
  layer.post_feedforward_layernorm_2->forward(moe_out, s.m, moe_out);
  add_inplace(s.branch, moe_out, n);
  numerics_.round_eager(s.branch, n);
  s.capture_routing(layer.names, routing, spec_.moe);
}

// PLE: x += norm(projection(gelu(gate(x)) * per_layer_input[i])), rounded as transformers.
void Decoder::per_layer_block(const DecoderLayer& layer, Step& s) {
  const Numerics& num = numerics_;
  const int64_t m = s.m, h = s.h, ple = spec_.hidden_size_per_layer_input;
  const int64_t nl = static_cast<int64_t>(layers_.size()), i = &layer - layers_.data();
  const float* per_layer = ws_.per_layer.get(m * nl * ple);  // filled by per_layer_inputs
  float* const gate = ws_.ple_gate.get(m * ple);
  layer.per_layer_input_gate->forward(s.x, m, gate, *pool_);
  num.round_eager(gate, m * ple);
  for (int64_t t = 0; t < m; ++t) {
    const float* in = &per_layer[(t * nl + i) * ple];
    for (int64_t j = 0; j < ple; ++j) {
      float& g = gate[t * ple + j];
      g = num.round_eager(num.round_eager(gelu_tanh(g)) * in[j]);
    }
  }
  layer.per_layer_projection->forward(gate, m, s.branch, *pool_);
  num.round_eager(s.branch, m * h);
  layer.post_per_layer_input_norm->forward(s.branch, m, s.branch);
  add_inplace(s.x, s.branch, m * h);
  num.round_eager(s.x, m * h);
}

}  // namespace hubzoo
