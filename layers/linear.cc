#include "layers/linear.h"

#include "base/error.h"
#include "ops/elementwise.h"

namespace hubzoo {

Linear Linear::load(WeightLoader& w, const std::string& prefix, int64_t in, int64_t out,
                    bool has_bias) {
  Linear l;
  l.weight = w.take_packed(prefix + ".weight", out, in);
  if (has_bias) l.bias = w.take(prefix + ".bias", {out});
  return l;
}

Linear Linear::concat(const std::vector<const Linear*>& parts) {
  if (parts.empty()) throw InvalidArgument("Linear::concat: no parts");
  const int64_t k = parts[0]->in_features();
  const bool has_bias = parts[0]->bias.has_value();
  std::vector<const PackedMatrix*> weights;
  std::vector<float> bias;
  for (const Linear* p : parts) {  // (concat_packed checks the weights' dtypes)
    if (p->in_features() != k || p->bias.has_value() != has_bias) {
      throw InvalidArgument("Linear::concat: parts differ in input size or bias");
    }
    weights.push_back(&p->weight);
    if (has_bias) bias.insert(bias.end(), p->bias->data(), p->bias->data() + p->out_features());
  }
  Linear l;
  l.weight = concat_packed(weights);
  if (has_bias) l.bias = FloatWeights(std::move(bias));
  return l;
}

Linear Linear::load_concat(WeightLoader& w, const std::vector<std::string>& prefixes, int64_t in,
                           const std::vector<int64_t>& outs, bool has_bias) {
  std::vector<std::string> names;
  for (const auto& p : prefixes) names.push_back(p + ".weight");
  Linear l;
  l.weight = w.take_packed_concat(names, outs, in);
  if (has_bias) {
    std::vector<float> bias;
    for (size_t i = 0; i < prefixes.size(); ++i) {
      const FloatWeights b = w.take(prefixes[i] + ".bias", {outs[i]});
      bias.insert(bias.end(), b.data(), b.data() + outs[i]);
    }
    l.bias = FloatWeights(std::move(bias));
  }
  return l;
}

void Linear::forward(const float* x, int64_t m, float* y, ThreadPool& pool, int64_t ldx) const {
  MatmulArgs a;
  a.x = x;
  a.m = m;
  a.ldx = ldx > 0 ? ldx : in_features();
  a.w = &weight;
  a.bias = bias ? bias->data() : nullptr;
  a.y = y;
  a.ldy = out_features();
  matmul(a, pool);
}

void RMSNorm::forward_fp32(const float* x, int64_t rows, float* out) const {
  const int64_t n = size();
  for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * n, weight.data(), eps, n, out + r * n);
}

RMSNorm RMSNorm::load(WeightLoader& w, const std::string& name, int64_t n, float eps) {
  RMSNorm norm;
  norm.weight = w.take(name, {n});
  norm.eps = eps;
  norm.numerics = w.numerics();
  return norm;
}

RMSNorm RMSNorm::load_kind(NormKind kind, WeightLoader& w, const std::string& name, int64_t n,
                           float eps) {
  switch (kind) {
    case NormKind::kUnitOffset:
      return load_unit_offset(w, name, n, eps);
    case NormKind::kScaleInFp32:
      return load_scale_in_fp32(w, name, n, eps);
    default:
      return load(w, name, n, eps);
  }
}

RMSNorm RMSNorm::load_unit_offset(WeightLoader& w, const std::string& name, int64_t n, float eps) {
  RMSNorm norm = load_scale_in_fp32(w, name, n, eps);  // bf16 values in bf16 modes
  std::vector<float> one_plus(norm.weight.data(), norm.weight.data() + n);
  for (float& x : one_plus) x = 1.0f + x;  // transformers: 1.0 + weight.float(), in fp32
  norm.weight = FloatWeights(std::move(one_plus));
  return norm;
}

RMSNorm RMSNorm::load_scale_in_fp32(WeightLoader& w, const std::string& name, int64_t n,
                                    float eps) {
  RMSNorm norm = load(w, name, n, eps);
  norm.scale_in_fp32 = true;
  return norm;
}

RMSNorm RMSNorm::unscaled(int64_t n, float eps, Numerics numerics) {
  RMSNorm norm = from_values(std::vector<float>(n, 1.0f), eps, numerics);  // 1 * y == y exactly
  norm.scale_in_fp32 = true;
  return norm;
}

RMSNorm RMSNorm::from_values(std::vector<float> weight, float eps, Numerics numerics) {
  numerics.round_stored(weight.data(), static_cast<int64_t>(weight.size()));
  RMSNorm norm;
  norm.weight = FloatWeights(std::move(weight));
  norm.eps = eps;
  norm.numerics = numerics;
  return norm;
}

void RMSNorm::forward(const float* x, int64_t rows, float* out) const {
  const int64_t n = size();
  if (!numerics.eager_bf16() || scale_in_fp32) {  // fp32, fused bf16, Gemma's form
    forward_fp32(x, rows, out);
    numerics.round_eager(out, rows * n);  // Gemma: (x * (1 + w)).to(bf16), one cast
    return;
  }
  // transformers: weight * (x * rsqrt(mean(x^2) + eps)).to(bf16), in bf16.
  for (int64_t r = 0; r < rows; ++r) {
    rms_norm(x + r * n, nullptr, eps, n, out + r * n);
    for (int64_t i = 0; i < n; ++i) {
      out[r * n + i] = round_bf16(weight[i] * round_bf16(out[r * n + i]));
    }
  }
}

void RMSNorm::add_forward(float* x, const float* branch, int64_t rows, float* out,
                          const Numerics& residual) const {
  const int64_t n = size();
  for (int64_t r = 0; r < rows; ++r) {
    add_inplace(x + r * n, branch + r * n, n);
    residual.round_eager(x + r * n, n);
    forward(x + r * n, 1, out + r * n);
  }
}

LayerNorm LayerNorm::load(WeightLoader& w, const std::string& prefix, int64_t n, float eps,
                          bool has_bias) {
  LayerNorm norm;
  norm.weight = w.take(prefix + ".weight", {n});
  if (has_bias) norm.bias = w.take(prefix + ".bias", {n});
  norm.eps = eps;
  norm.numerics = w.numerics();
  return norm;
}

LayerNorm LayerNorm::from_values(std::vector<float> weight, std::vector<float> bias, float eps,
                                 Numerics numerics) {
  if (!bias.empty() && bias.size() != weight.size()) {
    throw InvalidArgument("LayerNorm bias has " + std::to_string(bias.size()) +
                          " values, weight has " + std::to_string(weight.size()));
  }
  numerics.round_stored(weight.data(), static_cast<int64_t>(weight.size()));
  numerics.round_stored(bias.data(), static_cast<int64_t>(bias.size()));
  LayerNorm norm;
  norm.weight = FloatWeights(std::move(weight));
  if (!bias.empty()) norm.bias = FloatWeights(std::move(bias));
  norm.eps = eps;
  norm.numerics = numerics;
  return norm;
}

void LayerNorm::forward_fp32(const float* x, int64_t rows, float* out) const {
  const int64_t n = size();
  const float* b = bias ? bias->data() : nullptr;
  for (int64_t r = 0; r < rows; ++r) layer_norm(x + r * n, weight.data(), b, eps, n, out + r * n);
}

void LayerNorm::forward(const float* x, int64_t rows, float* out) const {
  forward_fp32(x, rows, out);
  numerics.round_eager(out, rows * size());
}

}  // namespace hubzoo
