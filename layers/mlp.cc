#include "layers/mlp.h"

#include <cmath>
#include <utility>
#include <vector>

#include "ops/bf16.h"
#include "ops/elementwise.h"

namespace hubzoo {

float gelu_tanh(float x) {
  // at::native GeluKernel (approximate="tanh"): kBeta = sqrt(2) * (2 / sqrt(pi)) * 0.5.
  constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  constexpr float kKappa = 0.044715f;
  const float x_cube = x * x * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

GatedMlp::GatedMlp(WeightLoader& w, const std::string& prefix, int64_t hidden, int64_t intermediate,
                   bool bias, Activation act)
    : numerics_(w.numerics()),
      act_(act),
      gate_(Linear::load(w, prefix + ".gate_proj", hidden, intermediate, bias)),
      up_(Linear::load(w, prefix + ".up_proj", hidden, intermediate, bias)),
      down_(Linear::load(w, prefix + ".down_proj", intermediate, hidden, bias)) {}

GatedMlp::GatedMlp(Linear gate, Linear up, Linear down, Numerics numerics, Activation act)
    : numerics_(numerics),
      act_(act),
      gate_(std::move(gate)),
      up_(std::move(up)),
      down_(std::move(down)) {}

void GatedMlp::forward(const float* x, int64_t m, float* out, ThreadPool& pool) const {
  const int64_t inter = gate_.out_features();
  std::vector<float> gate(m * inter), up(m * inter);  // [M, intermediate]
  gate_.forward(x, m, gate.data(), pool);
  up_.forward(x, m, up.data(), pool);
  if (act_ == Activation::kGeluTanh) {
    // transformers: act(gate) * up; in bf16 gate, up, the activation and the
    // product are each rounded.
    numerics_.round_eager(gate.data(), m * inter);
    numerics_.round_eager(up.data(), m * inter);
    for (int64_t i = 0; i < m * inter; ++i) {
      gate[i] = numerics_.round_eager(numerics_.round_eager(gelu_tanh(gate[i])) * up[i]);
    }
  } else if (numerics_.eager_bf16()) {
    // transformers in bf16: gate, up, silu(gate) and the product each rounded.
    round_bf16(gate.data(), m * inter);
    round_bf16(up.data(), m * inter);
    for (int64_t i = 0; i < m * inter; ++i) {
      const float g = gate[i];
      gate[i] = round_bf16(round_bf16(g / (1.0f + std::exp(-g))) * up[i]);
    }
  } else {
    silu_mul(gate.data(), up.data(), m * inter, gate.data());
  }
  down_.forward(gate.data(), m, out, pool);
  numerics_.round_eager(out, m * down_.out_features());
}

}  // namespace hubzoo
