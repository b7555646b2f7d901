#include "layers/linear.h"

#include "ops/elementwise.h"

namespace hubzoo {

Linear Linear::load(WeightLoader& w, const std::string& prefix, int64_t in, int64_t out,
                    bool has_bias) {
  Linear l;
  l.weight = w.take_packed(prefix + ".weight", out, in);
  if (has_bias) l.bias = w.take(prefix + ".bias", {out});
  return l;
}

void Linear::forward(const float* x, int64_t m, float* y, ThreadPool& pool) const {
  MatmulArgs a;
  a.x = x;
  a.m = m;
  a.ldx = in_features();
  a.w = &weight;
  a.bias = bias ? bias->data() : nullptr;
  a.y = y;
  a.ldy = out_features();
  matmul(a, pool);
}

RMSNorm RMSNorm::load(WeightLoader& w, const std::string& name, int64_t n, float eps) {
  RMSNorm norm;
  norm.weight = w.take(name, {n});
  norm.eps = eps;
  return norm;
}

void RMSNorm::forward(const float* x, int64_t rows, float* out) const {
  const int64_t n = size();
  for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * n, weight.data(), eps, n, out + r * n);
}

}  // namespace hubzoo
