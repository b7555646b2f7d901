// hubzoo._hubzoo.ops: single blocks (RMSNorm, LayerNorm, softmax, RoPE, one
// attention head) on numpy float32 arrays, through the same layer code a model
// runs, so block-level tests can hold each one against PyTorch's own op.
// Inputs are float32 arrays; for bf16 they should hold bf16 values (weights are
// rounded to bf16 as a checkpoint's would be, activations are taken as given).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/sampler.h"
#include "layers/attention.h"
#include "layers/linear.h"
#include "layers/numerics.h"
#include "layers/rope.h"
#include "ops/elementwise.h"

namespace nb = nanobind;
using namespace hubzoo;

namespace {

using In = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using Out = nb::ndarray<nb::numpy, float>;

Out make_array(std::vector<float>&& v, std::vector<size_t> shape) {
  auto* data = new std::vector<float>(std::move(v));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return Out(data->data(), shape.size(), shape.data(), owner);
}

std::vector<float> values(const In& a) { return {a.data(), a.data() + a.size()}; }

std::vector<size_t> shape_of(const In& a) {
  std::vector<size_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = a.shape(i);
  return s;
}

// A [rows, n] view of a 1-D or 2-D array whose last dimension must be n.
int64_t rows_of(const In& x, int64_t n, const char* what) {
  if (x.ndim() != 1 && x.ndim() != 2) {
    throw InvalidArgument(std::string(what) + " must be 1-D or 2-D");
  }
  if (static_cast<int64_t>(x.shape(x.ndim() - 1)) != n) {
    throw InvalidArgument(std::string(what) + "'s last dimension is " +
                          std::to_string(x.shape(x.ndim() - 1)) + ", expected " +
                          std::to_string(n));
  }
  return x.ndim() == 1 ? 1 : static_cast<int64_t>(x.shape(0));
}

void check_vector(const In& a, const char* what) {
  if (a.ndim() != 1) throw InvalidArgument(std::string(what) + " must be 1-D");
}

// [heads, d] -> heads, with d == head_dim.
int64_t heads_of(const In& a, int64_t d, const char* what) {
  if (a.ndim() != 2 || static_cast<int64_t>(a.shape(1)) != d) {
    throw InvalidArgument(std::string(what) + " must be [heads, " + std::to_string(d) + "]");
  }
  return static_cast<int64_t>(a.shape(0));
}

Out py_rms_norm(const In& x, const In& weight, float eps, const std::string& dtype,
                const std::string& mode) {
  check_vector(weight, "weight");
  const int64_t n = static_cast<int64_t>(weight.size());
  const int64_t rows = rows_of(x, n, "x");
  const RMSNorm norm = RMSNorm::from_values(values(weight), eps, Numerics::parse(dtype, mode));
  std::vector<float> out(rows * n);
  norm.forward(x.data(), rows, out.data());
  return make_array(std::move(out), shape_of(x));
}

Out py_layer_norm(const In& x, const In& weight, std::optional<In> bias, float eps,
                  const std::string& dtype, const std::string& mode) {
  check_vector(weight, "weight");
  const int64_t n = static_cast<int64_t>(weight.size());
  const int64_t rows = rows_of(x, n, "x");
  std::vector<float> b;
  if (bias) {
    check_vector(*bias, "bias");
    b = values(*bias);
  }
  const LayerNorm norm =
      LayerNorm::from_values(values(weight), std::move(b), eps, Numerics::parse(dtype, mode));
  std::vector<float> out(rows * n);
  norm.forward(x.data(), rows, out.data());
  return make_array(std::move(out), shape_of(x));
}

// Row softmax in fp32; eager bf16 casts the result to bf16 (transformers'
// softmax(..., dtype=float32).to(bfloat16)).
Out py_softmax(const In& x, const std::string& dtype, const std::string& mode) {
  if (x.ndim() != 1 && x.ndim() != 2) throw InvalidArgument("x must be 1-D or 2-D");
  const int64_t n = static_cast<int64_t>(x.shape(x.ndim() - 1));
  const int64_t rows = rows_of(x, n, "x");
  const Numerics numerics = Numerics::parse(dtype, mode);
  std::vector<float> out = values(x);
  for (int64_t r = 0; r < rows; ++r) softmax_inplace(out.data() + r * n, n);
  numerics.round_eager(out.data(), rows * n);
  return make_array(std::move(out), shape_of(x));
}

// Default RoPE at one position over q [q_heads, d] and k [k_heads, d].
nb::tuple py_rope(const In& q, const In& k, int64_t position, double theta, bool eager_bf16) {
  if (q.ndim() != 2) throw InvalidArgument("q must be [heads, head_dim]");
  const int64_t d = static_cast<int64_t>(q.shape(1));
  if (d <= 0 || d % 2 != 0 || d > 1024) {
    throw InvalidArgument("head_dim must be even and in [2, 1024], got " + std::to_string(d));
  }
  const int64_t q_heads = heads_of(q, d, "q"), k_heads = heads_of(k, d, "k");
  if (position < 0) throw InvalidArgument("position must be >= 0");
  RopeParams params;
  params.theta = theta;
  const Rope rope(params, d, position + 1);
  std::vector<float> qv = values(q), kv = values(k);
  rope.apply(position, qv.data(), q_heads, kv.data(), k_heads, eager_bf16);
  return nb::make_tuple(make_array(std::move(qv), shape_of(q)),
                        make_array(std::move(kv), shape_of(k)));
}

// One query head over len positions: (out [d], probabilities [len]).
nb::tuple py_attention(const In& q, const In& keys, const In& vals, float scale, bool eager_bf16) {
  check_vector(q, "q");
  const int64_t d = static_cast<int64_t>(q.size());
  const int64_t len = rows_of(keys, d, "keys");
  if (keys.ndim() != 2 || vals.ndim() != 2 || rows_of(vals, d, "values") != len) {
    throw InvalidArgument("keys and values must both be [len, " + std::to_string(d) + "]");
  }
  if (len <= 0) throw InvalidArgument("attention over no positions");
  std::vector<float> scores(len), out(d);
  attend_head(q.data(), keys.data(), vals.data(), d, len, d, scale, eager_bf16, scores.data(),
              out.data());
  return nb::make_tuple(make_array(std::move(out), {static_cast<size_t>(d)}),
                        make_array(std::move(scores), {static_cast<size_t>(len)}));
}

// Sampler::process on one row of logits: what the sampler draws from, for the
// parity test against transformers' logits processors (-inf: removed).
Out py_sampler_process(const In& logits, const std::vector<int64_t>& prompt,
                       const std::vector<int64_t>& generated, float temperature, int64_t top_k,
                       float top_p, float min_p, float repetition_penalty, float presence_penalty,
                       float frequency_penalty,
                       const std::vector<std::pair<int64_t, float>>& logit_bias) {
  check_vector(logits, "logits");
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repetition_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  p.logit_bias = logit_bias;
  const auto vocab = static_cast<int64_t>(logits.size());
  validate(p, vocab);
  Sampler s(p);
  s.set_prompt(prompt);
  for (int64_t id : generated) s.accept(id);
  std::vector<float> out = values(logits);
  s.process(out.data(), vocab);
  return make_array(std::move(out), {static_cast<size_t>(vocab)});
}

}  // namespace

void bind_ops(nb::module_& m) {
  nb::module_ ops = m.def_submodule("ops", "Single blocks, for block-level numerics tests.");
  ops.def("rms_norm", &py_rms_norm, nb::arg("x"), nb::arg("weight"), nb::arg("eps"),
          nb::arg("dtype") = "bfloat16", nb::arg("mode") = "eager",
          "RMSNorm over the last dimension of x [rows, n] (or [n]), as the RMSNorm layer.");
  ops.def("layer_norm", &py_layer_norm, nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(),
          nb::arg("eps"), nb::arg("dtype") = "bfloat16", nb::arg("mode") = "eager",
          "LayerNorm over the last dimension of x [rows, n] (or [n]), as the LayerNorm layer.");
  ops.def("softmax", &py_softmax, nb::arg("x"), nb::arg("dtype") = "bfloat16",
          nb::arg("mode") = "eager", "Softmax over the last dimension of x [rows, n] (or [n]).");
  ops.def("rope", &py_rope, nb::arg("q"), nb::arg("k"), nb::arg("position"),
          nb::arg("theta") = 10000.0, nb::arg("eager_bf16") = true,
          "Default RoPE of q [q_heads, d] and k [k_heads, d] at one position -> (q, k).");
  ops.def("attention", &py_attention, nb::arg("q"), nb::arg("keys"), nb::arg("values"),
          nb::arg("scale"), nb::arg("eager_bf16") = true,
          "softmax(q keys^T * scale) values for one head -> (out [d], probabilities [len]).");
  ops.def("sampler_process", &py_sampler_process, nb::arg("logits"), nb::arg("prompt"),
          nb::arg("generated"), nb::arg("temperature") = 0.0f, nb::arg("top_k") = 0,
          nb::arg("top_p") = 1.0f, nb::arg("min_p") = 0.0f, nb::arg("repetition_penalty") = 1.0f,
          nb::arg("presence_penalty") = 0.0f, nb::arg("frequency_penalty") = 0.0f,
          nb::arg("logit_bias") = std::vector<std::pair<int64_t, float>>{},
          "Sampler::process on logits [vocab] after the prompt and generated tokens: the "
          "processed logits, -inf where a filter removed the token.");
}
