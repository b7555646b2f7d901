#include "layers/mlp.h"

#include <vector>

#include "ops/elementwise.h"

namespace hubzoo {

GatedMlp::GatedMlp(WeightLoader& w, const std::string& prefix, int64_t hidden, int64_t intermediate,
                   bool bias)
    : gate_(Linear::load(w, prefix + ".gate_proj", hidden, intermediate, bias)),
      up_(Linear::load(w, prefix + ".up_proj", hidden, intermediate, bias)),
      down_(Linear::load(w, prefix + ".down_proj", intermediate, hidden, bias)) {}

void GatedMlp::forward(const float* x, int64_t m, float* out, ThreadPool& pool) const {
  const int64_t inter = gate_.out_features();
  std::vector<float> gate(m * inter), up(m * inter);  // [M, intermediate]
  gate_.forward(x, m, gate.data(), pool);
  up_.forward(x, m, up.data(), pool);
  silu_mul(gate.data(), up.data(), m * inter, gate.data());
  down_.forward(gate.data(), m, out, pool);
}

}  // namespace hubzoo
