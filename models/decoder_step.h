// Decoder::Step: one forward's batch, cache, options and [M, H] buffers, shared by
// the forward pass (models/decoder.cc) and Gemma 4's extra blocks (models/decoder_gemma4.cc).
#pragma once

#include <string>
#include <vector>

#include "models/decoder_impl.h"

namespace hubzoo {

// One forward's inputs, outputs and [M, H] buffers (the model's workspace).
struct Decoder::Step {
  const TokenBatch& batch;
  KvCache& cache;
  const ForwardOptions& opt;
  ForwardResult& out;
  int64_t m, h;
  float *x, *normed, *branch;

  // Records data [rows, cols] under `name` when asked; asks nothing of a
  // step that captures nothing.
  void capture(const std::string& name, const float* data, int64_t rows, int64_t cols) const {
    if (opt.capture.empty() || !opt.capture.count(name)) return;
    out.captured[name].assign(data, data + rows * cols);
  }
  void capture_routing(const LayerNames& n, const MoeRouting& r, const MoeOptions& o) const {
    if (opt.capture.empty()) return;
    const int64_t e = o.num_experts, k = o.num_experts_per_tok;
    capture(n.router_logits, r.router_logits.data(), m, e);
    capture(n.routing_weights, r.weights.data(), m, k);
    if (opt.capture.count(n.selected_experts)) {
      const std::vector<float> ids(r.experts.begin(), r.experts.end());
      capture(n.selected_experts, ids.data(), m, k);
    }
  }
};

}  // namespace hubzoo
