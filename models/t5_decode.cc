// T5Model's stack pass (embed, blocks, final norm; encoder and decoder alike)
// and its decoder step over a ragged batch of request states.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "models/t5_model.h"

namespace hubzoo::t5 {

std::vector<float> T5Model::run_stack(const StackPass& pass, Rows& rows, std::vector<float>& kv,
                                      const Captures& cap) {
  check_tokens(rows.ids);
  const T5Context c{cfg_, numerics_, *pool_};
  const int64_t m = rows.m, d = cfg_.d_model, inner = cfg_.inner();
  std::vector<float> x(m * d), n(m * d), q(m * inner), ctx(m * inner), branch(m * d);
  for (int64_t t = 0; t < m; ++t) std::copy_n(shared_.data() + rows.ids[t] * d, d, &x[t * d]);
  cap(pass.prefix + "embed", x.data(), m * d);
  for (size_t i = 0; i < pass.blocks.size(); ++i) {
    const T5Block& b = pass.blocks[i];
    const std::string l = pass.prefix + "layers." + std::to_string(i);
    const bool first = i == 0;  // transformers' bf16 residual stream is bf16 until wo's fp32
    b.self_norm.forward(x.data(), m, n.data());
    b.self_attn.q.forward(n.data(), m, q.data(), c.pool);
    b.self_attn.kv.forward(n.data(), m, kv.data(), c.pool);
    numerics_.round_eager(q.data(), m * inner);
    numerics_.round_eager(kv.data(), m * 2 * inner);
    if (pass.store_kv) pass.store_kv(static_cast<int64_t>(i));
    b.self_attn.attend(c, q.data(), m, rows.self_keys, ctx.data());
    b.self_attn.o.forward(ctx.data(), m, branch.data(), c.pool);
    numerics_.round_eager(branch.data(), m * d);
    cap(l + ".self_attn", branch.data(), m * d);
    t5_residual_add(c, x.data(), branch.data(), m * d, first);
    if (b.cross_attn) {
      b.cross_norm->forward(x.data(), m, n.data());
      b.cross_attn->q.forward(n.data(), m, q.data(), c.pool);
      numerics_.round_eager(q.data(), m * inner);
      b.cross_attn->attend(
          c, q.data(), m, [&](int64_t t) { return pass.cross_keys(static_cast<int64_t>(i), t); },
          ctx.data());
      b.cross_attn->o.forward(ctx.data(), m, branch.data(), c.pool);
      numerics_.round_eager(branch.data(), m * d);
      cap(l + ".cross_attn", branch.data(), m * d);
      t5_residual_add(c, x.data(), branch.data(), m * d, first);
    }
    b.ff_norm.forward(x.data(), m, n.data());
    b.ff.forward(c, n.data(), m, branch.data());
    cap(l + ".mlp", branch.data(), m * d);
    t5_residual_add(c, x.data(), branch.data(), m * d, false);
    cap(l, x.data(), m * d);
  }
  pass.final_norm.forward(x.data(), m, x.data());
  cap(pass.prefix + "norm", x.data(), m * d);
  return x;
}

std::vector<T5State*> T5Model::own_states(const std::vector<Seq2SeqState*>& states) const {
  std::vector<T5State*> st;
  for (Seq2SeqState* s : states) {
    auto* t = dynamic_cast<T5State*>(s);
    if (!t || t->cross_kv.size() != decoder_.size()) {
      throw InvalidArgument("decode: a state this model did not start");
    }
    if (std::find(st.begin(), st.end(), t) != st.end()) {
      throw InvalidArgument("decode: the same state twice in one call");
    }
    st.push_back(t);
  }
  return st;
}

void T5Model::decode(const std::vector<Seq2SeqState*>& states,
                     const std::vector<std::vector<int64_t>>& tokens,
                     const std::set<std::string>& capture, Seq2SeqDecodeResult& out) {
  check_capture(capture);
  if (states.size() != tokens.size()) {
    throw InvalidArgument("decode: " + std::to_string(states.size()) + " states for " +
                          std::to_string(tokens.size()) + " token lists");
  }
  const std::vector<T5State*> st = own_states(states);
  Rows rows;
  std::vector<int64_t> state_of, pos;
  int64_t max_pos = 0;
  for (size_t s = 0; s < st.size(); ++s) {
    const int64_t count = static_cast<int64_t>(tokens[s].size());
    if (st[s]->pos + count > kMaxTokens) {
      throw InvalidArgument("decoder sequence over the limit of " + std::to_string(kMaxTokens));
    }
    for (int64_t j = 0; j < count; ++j) {
      rows.ids.push_back(tokens[s][j]);
      state_of.push_back(static_cast<int64_t>(s));
      pos.push_back(st[s]->pos + j);
      max_pos = std::max(max_pos, st[s]->pos + j);
    }
  }
  rows.m = static_cast<int64_t>(rows.ids.size());
  check_tokens(rows.ids);
  const int64_t inner = cfg_.inner(), width = 2 * inner, vocab = cfg_.vocab_size;
  out.logits.clear();
  if (rows.m == 0) return;
  // Relative positions -max_pos .. 0, per head; a row at p reads from max_pos - p.
  const std::vector<float> bias = t5_position_bias(cfg_, dec_bias_, -max_pos, max_pos + 1, false);
  std::vector<float> kv(rows.m * width);
  int64_t layer = 0;
  StackPass pass{decoder_, dec_norm_, "decoder."};
  pass.store_kv = [&](int64_t l) {
    layer = l;
    numerics_.round_stored(kv.data(), static_cast<int64_t>(kv.size()));
    for (size_t s = 0; s < st.size(); ++s)
      st[s]->self_kv[l].resize((st[s]->pos + tokens[s].size()) * width);
    for (int64_t t = 0; t < rows.m; ++t) {
      std::copy_n(&kv[t * width], width, &st[state_of[t]]->self_kv[l][pos[t] * width]);
    }
  };
  rows.self_keys = [&](int64_t t) {
    const float* k = st[state_of[t]]->self_kv[layer].data();
    return T5Keys{k, k + inner, width, pos[t] + 1, bias.data() + (max_pos - pos[t]), max_pos + 1};
  };
  pass.cross_keys = [&](int64_t l, int64_t t) {
    const T5State& s = *st[state_of[t]];
    const float* k = s.cross_kv[l].data();
    return T5Keys{k, k + inner, width, s.enc_len, nullptr, 0};
  };
  Captures cap{capture, out.captured};
  std::vector<float> x = run_stack(pass, rows, kv, cap);
  for (size_t s = 0; s < st.size(); ++s) st[s]->pos += static_cast<int64_t>(tokens[s].size());
  if (cfg_.scale_decoder_outputs) {
    const float scale = static_cast<float>(std::pow(static_cast<double>(cfg_.d_model), -0.5));
    for (float& v : x) v = numerics_.round_eager(v * scale);
  }
  out.logits.resize(rows.m * vocab);
  lm_head_.forward(x.data(), rows.m, out.logits.data(), *pool_);
  numerics_.round_eager(out.logits.data(), rows.m * vocab);
  cap("logits", out.logits.data(), rows.m * vocab);
}

}  // namespace hubzoo::t5
