#include "layers/mlp.h"

#include <cmath>
#include <utility>
#include <vector>

#include "ops/bf16.h"
#include "ops/elementwise.h"

namespace hubzoo {

GatedMlp::GatedMlp(WeightLoader& w, const std::string& prefix, int64_t hidden, int64_t intermediate,
                   bool bias)
    : numerics_(w.numerics()),
      gate_(Linear::load(w, prefix + ".gate_proj", hidden, intermediate, bias)),
      up_(Linear::load(w, prefix + ".up_proj", hidden, intermediate, bias)),
      down_(Linear::load(w, prefix + ".down_proj", intermediate, hidden, bias)) {}

GatedMlp::GatedMlp(Linear gate, Linear up, Linear down, Numerics numerics)
    : numerics_(numerics), gate_(std::move(gate)), up_(std::move(up)), down_(std::move(down)) {}

void GatedMlp::forward(const float* x, int64_t m, float* out, ThreadPool& pool) const {
  const int64_t inter = gate_.out_features();
  std::vector<float> gate(m * inter), up(m * inter);  // [M, intermediate]
  gate_.forward(x, m, gate.data(), pool);
  up_.forward(x, m, up.data(), pool);
  if (numerics_.eager_bf16()) {
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
