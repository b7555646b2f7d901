// Gated MLP: down(act(gate(x)) * up(x)), act = SiLU (Llama, Qwen) or GELU
// with the tanh approximation (Gemma's gelu_pytorch_tanh).
#pragma once

#include <string>

#include "layers/linear.h"
#include "layers/workspace.h"

namespace hubzoo {

enum class Activation { kSilu, kGeluTanh };

// GELU, tanh approximation, as PyTorch's CPU kernel computes it in fp32.
float gelu_tanh(float x);

class GatedMlp {
 public:
  // Tensors: {prefix}.{gate,up,down}_proj.weight (+ .bias when `bias`).
  GatedMlp(WeightLoader& w, const std::string& prefix, int64_t hidden, int64_t intermediate,
           bool bias, Activation act = Activation::kSilu);
  // From loaded projections (e.g. slices of fused MoE expert tensors).
  GatedMlp(Linear gate, Linear up, Linear down, Numerics numerics,
           Activation act = Activation::kSilu);
  // Tensors: {prefix}.gate_up_proj.weight [2 * intermediate, hidden], the gate
  // rows then the up rows (Phi-3; transformers' chunk(2)), and
  // {prefix}.down_proj.weight (+ .bias when `bias`): loaded as they are stored.
  static GatedMlp load_fused(WeightLoader& w, const std::string& prefix, int64_t hidden,
                             int64_t intermediate, bool bias, Activation act = Activation::kSilu);
  // x: [M, hidden] -> out: [M, hidden], the down_proj output (bf16 in eager
  // mode, fp32 in fused mode for the residual add). The [M, gate | up]
  // intermediate lives in ws.step.
  void forward(const float* x, int64_t m, float* out, ThreadPool& pool, LayerWorkspace& ws) const;

 private:
  GatedMlp(Numerics numerics, Activation act, Linear gate_up, Linear down);

  Numerics numerics_;
  Activation act_;
  Linear gate_up_;  // gate_proj and up_proj as one Linear: [M, intermediate | intermediate]
  Linear down_;
};

}  // namespace hubzoo
