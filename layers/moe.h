// Sparse mixture-of-experts MLP (Qwen3-MoE, Gemma 4): a router picks top-k
// experts per token; each expert is a gated MLP (SiLU or GELU-tanh); a
// token's output is the routing-weighted sum of its experts' outputs.
//
// Routing, as transformers' Qwen3MoeTopKRouter: logits = x W_gate^T (in the
// activation dtype), probabilities = softmax(logits) in fp32, the k largest
// probabilities (descending), divided by their sum when norm_topk_prob, then
// cast to the activation dtype. torch.topk does not document the order of
// equal values (bf16 router logits tie often); we order them as its CPU kernel
// does, by running the same standard-library selection (layers/moe.cc).
//
// Gemma 4's router (Gemma4TextRouter) differs: its input is the layer's
// residual, normed without a weight (fp32 statistics, cast once), times a
// learned `scale` and hidden_size^-0.5; logits = that x proj^T; softmax in
// fp32, top-k, always renormalised, then multiplied by `per_expert_scale`
// of each chosen expert. Those weights stay fp32 (fp32 * a bf16 parameter
// promotes to fp32), so each weighted expert output is fp32 too and the
// token's sum rounds once.
//
// Qwen2-MoE adds a shared expert, a gated MLP every token runs, weighted by a
// sigmoid gate of its own: out = routed + sigmoid(x shared_expert_gate^T) *
// shared_expert(x), each op rounded to the activation dtype in eager bf16.
//
// Compute is grouped by expert: the rows routed to an expert are gathered,
// run through its matmuls together and their weighted outputs written to the
// (token, rank) cell they came from; a token's output then sums its k cells
// in rank order (transformers' grouped_mm path: weighted_out.view(T, k, H)
// .sum(1), fp32 accumulation, one rounding in bf16). Matmuls are row-wise
// batch invariant and the sum order depends only on the token's own routing,
// so a token's output is bit-identical whatever else is in the batch.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "layers/linear.h"
#include "layers/mlp.h"

namespace hubzoo {

enum class MoeRouter {
  kSoftmaxTopK,  // Qwen3-MoE: {prefix}.gate.weight on the experts' input
  kGemma4,       // {prefix}.router.{proj.weight,scale,per_expert_scale} on its own input
};

struct MoeOptions {
  int64_t hidden_size = 0;
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;  // k
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;  // always on for kGemma4
  MoeRouter router = MoeRouter::kSoftmaxTopK;
  Activation activation = Activation::kSilu;    // the experts' gate activation
  float rms_norm_eps = 1e-6f;                   // kGemma4's router norm
  int64_t shared_expert_intermediate_size = 0;  // > 0: a shared expert (Qwen2-MoE)
};

// Qwen2-MoE's shared expert: a gated MLP of shared_expert_intermediate_size
// and its gate, [1, H].
struct SharedExpert {
  GatedMlp mlp;
  Linear gate;
};

// A forward pass's routing, per token (row-major, fp32).
struct MoeRouting {
  std::vector<float> router_logits;  // [M, E], as the router computed them
  std::vector<int32_t> experts;      // [M, k], descending probability
  std::vector<float> weights;        // [M, k], activation dtype (kGemma4: fp32)
};

class SparseMoe {
 public:
  // Tensors under `prefix` (e.g. "model.layers.0.mlp"): the router (gate.weight
  // [E, H]; kGemma4: router.proj.weight [E, H], router.scale [H],
  // router.per_expert_scale [E]) and the experts either as the Hub stores them,
  // experts.{e}.{gate,up,down}_proj .weight, or fused as transformers 5 holds them in memory,
  // experts.gate_up_proj [E, 2I, H] (gate rows first) and experts.down_proj [E, H, I].
  // With a shared expert: shared_expert.{gate,up,down}_proj.weight and
  // shared_expert_gate.weight [1, H].
  SparseMoe(WeightLoader& w, const std::string& prefix, const MoeOptions& options);
  // From values, without a checkpoint (tests).
  // Experts are gated MLPs without biases: down(act(gate(x)) * up(x)).
  // kSoftmaxTopK only (kGemma4 routers load from a checkpoint). `shared` is
  // required exactly when options.shared_expert_intermediate_size > 0.
  SparseMoe(Linear router, std::vector<GatedMlp> experts, const MoeOptions& options,
            Numerics numerics, std::optional<SharedExpert> shared = std::nullopt);

  const MoeOptions& options() const { return opt_; }
  const Numerics& numerics() const { return numerics_; }
  const GatedMlp& expert(int64_t e) const { return experts_[e]; }
  // Router: x [M, H] -> routing (logits, top-k experts and weights).
  void route(const float* x, int64_t m, MoeRouting& routing, ThreadPool& pool) const;
  // x: [M, H] -> out: [M, H]. `routing` (may be null) receives the routing.
  // The experts' rows, outputs and (token, rank) cells live in `ws`.
  void forward(const float* x, int64_t m, float* out, ThreadPool& pool, LayerWorkspace& ws,
               MoeRouting* routing = nullptr) const {
    forward(x, x, m, out, pool, ws, routing);
  }
  // Routes on router_x [M, H] and runs the experts on x [M, H] (Gemma 4 routes
  // on the residual and feeds the experts its pre_feedforward_layernorm_2).
  void forward(const float* router_x, const float* x, int64_t m, float* out, ThreadPool& pool,
               LayerWorkspace& ws, MoeRouting* routing = nullptr) const;
  // out [M, H] += sigmoid(x gate^T) * shared_expert(x) for x [M, H]; nothing
  // without a shared expert. Row by row batch invariant.
  void add_shared_expert(const float* x, int64_t m, float* out, ThreadPool& pool,
                         LayerWorkspace& ws) const;
  // Whether a weighted expert output is rounded to the activation dtype
  // (Qwen3-MoE's bf16 weights) or kept fp32 until the sum (Gemma 4's).
  bool rounds_weighted() const { return opt_.router == MoeRouter::kSoftmaxTopK; }

 private:
  MoeOptions opt_;
  Numerics numerics_;
  Linear router_;  // [E, H]
  std::vector<GatedMlp> experts_;
  // kGemma4's router: unweighted norm, then x * scale_ * hidden^-0.5; per-expert weight scale.
  std::optional<RMSNorm> router_norm_;
  FloatWeights router_scale_, per_expert_scale_;
  std::optional<SharedExpert> shared_;
};

// Puts the k largest (probability, expert) pairs first, descending, exactly
// as torch.topk on CPU orders them, equal values included: the order of ties
// depends on the whole row and on nothing else.
void torch_topk_order(std::vector<std::pair<float, int32_t>>& queue, int64_t k);

// The same block computed token by token, each expert's MLP on one row, in
// the same per-token order: the reference the grouped forward must equal bit
// for bit (layers/moe_test.cc).
void sparse_moe_reference(const SparseMoe& moe, const float* x, int64_t m, float* out,
                          ThreadPool& pool);

}  // namespace hubzoo
