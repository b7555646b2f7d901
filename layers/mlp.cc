#include "layers/mlp.h"

#include <cmath>
#include <utility>
#include <vector>

#include "ops/bf16.h"
#include "ops/elementwise.h"
#include "ops/vector_math.h"

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
      gate_up_(Linear::load_concat(w, {prefix + ".gate_proj", prefix + ".up_proj"}, hidden,
                                   {intermediate, intermediate}, bias)),
      down_(Linear::load(w, prefix + ".down_proj", intermediate, hidden, bias)) {}

GatedMlp::GatedMlp(Linear gate, Linear up, Linear down, Numerics numerics, Activation act)
    : numerics_(numerics),
      act_(act),
      gate_up_(Linear::concat({&gate, &up})),
      down_(std::move(down)) {}

GatedMlp::GatedMlp(Numerics numerics, Activation act, Linear gate_up, Linear down)
    : numerics_(numerics), act_(act), gate_up_(std::move(gate_up)), down_(std::move(down)) {}

GatedMlp GatedMlp::load_fused(WeightLoader& w, const std::string& prefix, int64_t hidden,
                              int64_t intermediate, bool bias, Activation act) {
  Linear gate_up = Linear::load(w, prefix + ".gate_up_proj", hidden, 2 * intermediate, bias);
  Linear down = Linear::load(w, prefix + ".down_proj", intermediate, hidden, bias);
  return GatedMlp(w.numerics(), act, std::move(gate_up), std::move(down));
}

void GatedMlp::forward(const float* x, int64_t m, float* out, ThreadPool& pool,
                       LayerWorkspace& ws) const {
  const int64_t inter = down_.in_features();
  // [M, gate | up] in the layer workspace; act(gate) * up is written over the
  // gate half, which down_proj reads with a row stride of 2 * inter.
  float* const gate_up = ws.step.get(m * 2 * inter);
  gate_up_.forward(x, m, gate_up, pool);
  pool.parallel_rows(m, min_parallel_rows(2 * inter), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* g = &gate_up[r * 2 * inter];
      const float* u = g + inter;
      if (act_ == Activation::kGeluTanh && !numerics_.eager_bf16()) {
        gelu_tanh_mul(g, u, inter, g);
      } else if (act_ == Activation::kGeluTanh) {
        // transformers: act(gate) * up; in bf16 gate, up, the activation and the
        // product are each rounded.
        for (int64_t i = 0; i < inter; ++i) {
          const float gi = numerics_.round_eager(g[i]), ui = numerics_.round_eager(u[i]);
          g[i] = numerics_.round_eager(numerics_.round_eager(gelu_tanh(gi)) * ui);
        }
      } else if (numerics_.eager_bf16()) {
        // transformers in bf16: gate, up, silu(gate) and the product each rounded.
        for (int64_t i = 0; i < inter; ++i) {
          const float gi = round_bf16(g[i]), ui = round_bf16(u[i]);
          g[i] = round_bf16(round_bf16(gi / (1.0f + std::exp(-gi))) * ui);
        }
      } else {
        silu_mul(g, u, inter, g);
      }
    }
  });
  down_.forward(gate_up, m, out, pool, 2 * inter);
  numerics_.round_eager(out, m * down_.out_features());
}

}  // namespace hubzoo
