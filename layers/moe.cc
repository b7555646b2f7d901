#include "layers/moe.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "ops/elementwise.h"

namespace hubzoo {
namespace {

void check_options(const MoeOptions& o) {
  if (o.hidden_size <= 0 || o.num_experts <= 0 || o.moe_intermediate_size <= 0 ||
      o.num_experts_per_tok <= 0 || o.num_experts_per_tok > o.num_experts ||
      o.shared_expert_intermediate_size < 0) {
    throw InvalidArgument("SparseMoe: need hidden, experts, intermediate > 0 and 0 < k <= experts");
  }
}

// routing.weights[t*k + j] * y: rounded as transformers' bf16 product when
// the weights are in the activation dtype, fp32 when they are fp32 (Gemma 4).
void weighted(const float* y, float w, int64_t h, const Numerics& n, bool round, float* out) {
  for (int64_t i = 0; i < h; ++i) out[i] = round ? n.round_eager(y[i] * w) : y[i] * w;
}

// out[t] = sum over ranks j of cells[t*k + j], from 0 in rank order, fp32; one rounding.
void combine(const float* cells, int64_t m, int64_t k, int64_t h, const Numerics& n, float* out) {
  for (int64_t t = 0; t < m; ++t) {
    float* o = out + t * h;
    for (int64_t i = 0; i < h; ++i) o[i] = 0.0f;
    for (int64_t j = 0; j < k; ++j) add_inplace(o, cells + (t * k + j) * h, h);
  }
  n.round_eager(out, m * h);
}

}  // namespace

// torch's CPU kernel (aten/src/ATen/native/TopKImpl.h): partial_sort when
// k * 64 <= n, else nth_element and a sort of the first k - 1, comparing the
// value alone (NaN largest). The same libstdc++ algorithms over the same
// sequence make the same moves, so ties come out in torch's order.
void torch_topk_order(std::vector<std::pair<float, int32_t>>& queue, int64_t k) {
  auto greater = [](const std::pair<float, int32_t>& x, const std::pair<float, int32_t>& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  const int64_t n = static_cast<int64_t>(queue.size());
  if (k * 64 <= n) {
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
  } else {
    std::nth_element(queue.begin(), queue.begin() + (k - 1), queue.end(), greater);
    std::sort(queue.begin(), queue.begin() + (k - 1), greater);
  }
}

SparseMoe::SparseMoe(WeightLoader& w, const std::string& prefix, const MoeOptions& options)
    : opt_(options), numerics_(w.numerics()) {
  check_options(opt_);
  const int64_t e = opt_.num_experts, h = opt_.hidden_size, inter = opt_.moe_intermediate_size;
  // Routing is discrete: a probability rounded across a near-tie swaps an
  // expert, an error far above bf16's elsewhere. Fused mode therefore keeps
  // the router ([E, H], a tiny matrix) as stored; eager rounds it to bf16
  // because transformers' bf16 model does. --quantize never quantizes it
  // either (llama-quantize keeps ffn_gate_inp in F32 for the same reason).
  const bool gemma4 = opt_.router == MoeRouter::kGemma4;
  const std::string router = prefix + (gemma4 ? ".router.proj.weight" : ".gate.weight");
  const bool as_stored = (numerics_.bf16 && !numerics_.eager) || numerics_.quantize;
  router_.weight = as_stored ? w.take_packed_fp32(router, e, h) : w.take_packed(router, e, h);
  if (gemma4) {
    router_norm_ = RMSNorm::unscaled(h, opt_.rms_norm_eps, numerics_);
    router_scale_ = w.take(prefix + ".router.scale", {h});
    per_expert_scale_ = w.take(prefix + ".router.per_expert_scale", {e});
  }
  const std::string fused = prefix + ".experts.gate_up_proj";
  if (w.contains(fused)) {
    // transformers 5's in-memory layout: gate rows [0, I), up rows [I, 2I).
    auto gate_up = w.take_packed_stack(fused, e, 2 * inter, h, /*parts=*/2);
    auto down = w.take_packed_stack(prefix + ".experts.down_proj", e, h, inter);
    for (int64_t x = 0; x < e; ++x) {
      experts_.emplace_back(Linear{std::move(gate_up[2 * x]), {}},
                            Linear{std::move(gate_up[2 * x + 1]), {}},
                            Linear{std::move(down[x]), {}}, numerics_, opt_.activation);
    }
  } else {
    for (int64_t x = 0; x < e; ++x) {
      experts_.emplace_back(w, prefix + ".experts." + std::to_string(x), h, inter, false,
                            opt_.activation);
    }
  }
  if (opt_.shared_expert_intermediate_size > 0) {
    // The gate, [1, H], kept as stored in fused mode as the router is.
    const std::string gate = prefix + ".shared_expert_gate.weight";
    shared_.emplace(SharedExpert{
        GatedMlp(w, prefix + ".shared_expert", h, opt_.shared_expert_intermediate_size, false,
                 opt_.activation),
        Linear{as_stored ? w.take_packed_fp32(gate, 1, h) : w.take_packed(gate, 1, h), {}}});
  }
}

SparseMoe::SparseMoe(Linear router, std::vector<GatedMlp> experts, const MoeOptions& options,
                     Numerics numerics, std::optional<SharedExpert> shared)
    : opt_(options),
      numerics_(numerics),
      router_(std::move(router)),
      experts_(std::move(experts)),
      shared_(std::move(shared)) {
  check_options(opt_);
  if (shared_.has_value() != (opt_.shared_expert_intermediate_size > 0) ||
      (shared_ &&
       (shared_->gate.out_features() != 1 || shared_->gate.in_features() != opt_.hidden_size))) {
    throw InvalidArgument("SparseMoe: the shared expert differs from the options");
  }
  if (opt_.router != MoeRouter::kSoftmaxTopK) {
    throw InvalidArgument("SparseMoe: only a softmax-top-k router can be built from values");
  }
  if (static_cast<int64_t>(experts_.size()) != opt_.num_experts ||
      router_.out_features() != opt_.num_experts || router_.in_features() != opt_.hidden_size) {
    throw InvalidArgument("SparseMoe: router/expert shapes differ from the options");
  }
}

void SparseMoe::route(const float* x, int64_t m, MoeRouting& r, ThreadPool& pool) const {
  const int64_t e = opt_.num_experts, k = opt_.num_experts_per_tok;
  r.router_logits.resize(m * e);
  r.experts.resize(m * k);
  r.weights.resize(m * k);
  const bool gemma4 = opt_.router == MoeRouter::kGemma4;
  if (gemma4) {
    // norm(x) (cast once) * scale * hidden^-0.5, each product in the activation dtype.
    const int64_t h = opt_.hidden_size;
    const auto root = static_cast<float>(std::pow(static_cast<double>(h), -0.5));
    std::vector<float> scaled(m * h);
    router_norm_->forward(x, m, scaled.data());
    for (int64_t t = 0; t < m; ++t) {
      for (int64_t i = 0; i < h; ++i) {
        float& v = scaled[t * h + i];
        v = numerics_.round_eager(numerics_.round_eager(v * router_scale_[i]) * root);
      }
    }
    router_.forward(scaled.data(), m, r.router_logits.data(), pool);
  } else {
    router_.forward(x, m, r.router_logits.data(), pool);
  }
  numerics_.round_eager(r.router_logits.data(), m * e);  // F.linear in the activation dtype
  std::vector<float> probs(e);
  std::vector<std::pair<float, int32_t>> queue(e);  // (probability, expert)
  for (int64_t t = 0; t < m; ++t) {
    std::copy_n(&r.router_logits[t * e], e, probs.data());
    softmax_inplace(probs.data(), e);  // fp32
    for (int64_t x = 0; x < e; ++x) queue[x] = {probs[x], static_cast<int32_t>(x)};
    torch_topk_order(queue, k);
    int32_t* experts = &r.experts[t * k];
    float* weights = &r.weights[t * k];
    float total = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      experts[j] = queue[j].second;
      weights[j] = queue[j].first;
      total += weights[j];
    }
    if (gemma4) {
      // Renormalised, times per_expert_scale (bf16 in bf16 modes): fp32 * bf16 stays fp32.
      for (int64_t j = 0; j < k; ++j)
        weights[j] = weights[j] / total * per_expert_scale_[experts[j]];
      continue;
    }
    if (opt_.norm_topk_prob) {
      for (int64_t j = 0; j < k; ++j) weights[j] /= total;
    }
    numerics_.round_eager(weights, k);  // .to(router_logits.dtype)
  }
}

void SparseMoe::forward(const float* router_x, const float* x, int64_t m, float* out,
                        ThreadPool& pool, LayerWorkspace& ws, MoeRouting* routing) const {
  const int64_t h = opt_.hidden_size, k = opt_.num_experts_per_tok;
  MoeRouting local;
  MoeRouting& r = routing ? *routing : local;
  route(router_x, m, r, pool);
  // Cells (token t, rank j) = t*k + j routed to each expert, in token order.
  std::vector<std::vector<int64_t>> cells_of(opt_.num_experts);
  for (int64_t c = 0; c < m * k; ++c) cells_of[r.experts[c]].push_back(c);
  // [M*k, H] weighted expert outputs: every cell is written by its one expert.
  float* const cells = ws.moe_cells.get(m * k * h);
  float* const rows = ws.expert_rows.get(m * k * h);  // at most every cell's row at once
  float* const y = ws.expert_out.get(m * k * h);
  for (int64_t e = 0; e < opt_.num_experts; ++e) {
    const auto& cs = cells_of[e];
    const int64_t n = static_cast<int64_t>(cs.size());
    if (n == 0) continue;
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + (cs[i] / k) * h, h, &rows[i * h]);
    experts_[e].forward(rows, n, y, pool, ws);
    for (int64_t i = 0; i < n; ++i) {
      weighted(&y[i * h], r.weights[cs[i]], h, numerics_, rounds_weighted(), &cells[cs[i] * h]);
    }
  }
  combine(cells, m, k, h, numerics_, out);
  add_shared_expert(x, m, out, pool, ws);
}

void SparseMoe::add_shared_expert(const float* x, int64_t m, float* out, ThreadPool& pool,
                                  LayerWorkspace& ws) const {
  if (!shared_) return;
  const int64_t h = opt_.hidden_size;
  const Numerics& n = numerics_;
  float* const y = ws.shared_out.get(m * h);
  float* const g = ws.shared_gate.get(m);
  shared_->mlp.forward(x, m, y, pool, ws);
  shared_->gate.forward(x, m, g, pool);
  n.round_eager(g, m);
  for (int64_t t = 0; t < m; ++t) {
    // F.sigmoid(gate) * shared, then expert_output + shared, each in the activation dtype.
    const float s = n.round_eager(1.0f / (1.0f + std::exp(-g[t])));
    for (int64_t i = 0; i < h; ++i) {
      out[t * h + i] = n.round_eager(out[t * h + i] + n.round_eager(s * y[t * h + i]));
    }
  }
}

void sparse_moe_reference(const SparseMoe& moe, const float* x, int64_t m, float* out,
                          ThreadPool& pool) {
  const MoeOptions& o = moe.options();
  const int64_t h = o.hidden_size, k = o.num_experts_per_tok;
  std::vector<float> cells(m * k * h), y(h);
  LayerWorkspace ws;
  for (int64_t t = 0; t < m; ++t) {
    MoeRouting r;
    moe.route(x + t * h, 1, r, pool);
    for (int64_t j = 0; j < k; ++j) {
      moe.expert(r.experts[j]).forward(x + t * h, 1, y.data(), pool, ws);
      weighted(y.data(), r.weights[j], h, moe.numerics(), moe.rounds_weighted(),
               &cells[(t * k + j) * h]);
    }
  }
  combine(cells.data(), m, k, h, moe.numerics(), out);
  for (int64_t t = 0; t < m; ++t) moe.add_shared_expert(x + t * h, 1, out + t * h, pool, ws);
}

}  // namespace hubzoo
