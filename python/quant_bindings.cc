// hubzoo._hubzoo.quant: the block formats and quantized products of
// ops/quant.h on numpy arrays, so Python tests can hold them against gguf-py
// (dequantize / quantize bytes) and against numpy products.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "ops/quant.h"

namespace nb = nanobind;
using namespace hubzoo;

namespace {

using Bytes = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;
using In = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

template <typename T>
nb::ndarray<nb::numpy, T> make_array(std::vector<T>&& v, std::vector<size_t> shape) {
  auto* data = new std::vector<T>(std::move(v));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(data->data(), shape.size(), shape.data(), owner);
}

QuantType parse_type(const std::string& name) {
  const auto t = parse_quant_name(name);
  if (!t) throw InvalidArgument("unknown quantized type '" + name + "'");
  return *t;
}

QuantMode parse_mode(const std::string& mode) {
  if (mode == "exact") return QuantMode::kExact;
  if (mode == "int8") return QuantMode::kInt8;
  throw InvalidArgument("mode must be 'exact' or 'int8', got '" + mode + "'");
}

// n rows of k weights of type t in `bytes` (exactly n * row_bytes of them).
QuantMatrix view(QuantType t, const Bytes& bytes, int64_t n, int64_t k) {
  QuantMatrix w;
  w.type = t;
  w.n = n;
  w.k = k;
  w.row_bytes = quant_row_bytes(t, k);
  if (n < 0 || static_cast<int64_t>(bytes.size()) != n * w.row_bytes) {
    throw InvalidArgument("expected " + std::to_string(n) + " rows of " +
                          std::to_string(w.row_bytes) + " bytes, got " +
                          std::to_string(bytes.size()) + " bytes");
  }
  w.data = bytes.data();
  return w;
}

nb::ndarray<nb::numpy, float> py_dequantize(const std::string& type, const Bytes& bytes,
                                            int64_t k) {
  const QuantType t = parse_type(type);
  const int64_t row = quant_row_bytes(t, k);
  if (static_cast<int64_t>(bytes.size()) != row) {
    throw InvalidArgument("dequantize: " + std::to_string(k) + " weights are " +
                          std::to_string(row) + " bytes, got " + std::to_string(bytes.size()));
  }
  std::vector<float> out(k);
  dequantize_row(t, bytes.data(), out.data(), k);
  return make_array(std::move(out), {static_cast<size_t>(k)});
}

nb::ndarray<nb::numpy, uint8_t> py_quantize(const std::string& type, const In& x) {
  const QuantType t = parse_type(type);
  const int64_t k = static_cast<int64_t>(x.size());
  std::vector<uint8_t> out(quant_row_bytes(t, k));
  quantize_row(t, x.data(), out.data(), k);
  const size_t size = out.size();
  return make_array(std::move(out), {size});
}

nb::ndarray<nb::numpy, float> py_quant_matmul(const std::string& type, const Bytes& bytes,
                                              int64_t n, int64_t k, const In& x,
                                              const std::string& mode, std::optional<In> bias,
                                              bool reference, int threads) {
  const QuantMatrix w = view(parse_type(type), bytes, n, k);
  if (x.ndim() != 2 || static_cast<int64_t>(x.shape(1)) != k) {
    throw InvalidArgument("x must be [m, " + std::to_string(k) + "]");
  }
  if (bias && (bias->ndim() != 1 || static_cast<int64_t>(bias->shape(0)) != n)) {
    throw InvalidArgument("bias must be [" + std::to_string(n) + "]");
  }
  const int64_t m = static_cast<int64_t>(x.shape(0));
  std::vector<float> y(m * n);
  const QuantMatmulArgs a{x.data(),        m, k, &w, bias ? bias->data() : nullptr, y.data(), n,
                          parse_mode(mode)};
  if (reference) {
    quant_matmul_reference(a);
  } else {
    quant_matmul(a, *ThreadPool::shared(threads));
  }
  return make_array(std::move(y), {static_cast<size_t>(m), static_cast<size_t>(n)});
}

}  // namespace

void bind_quant(nb::module_& m) {
  nb::module_ q = m.def_submodule("quant", "Block-quantized weights (ops/quant.h).");
  q.def("dequantize", &py_dequantize, nb::arg("type"), nb::arg("blocks"), nb::arg("k"),
        "k weights of `type` (e.g. 'Q4_K') from their blocks (uint8) -> float32 [k].");
  q.def("quantize", &py_quantize, nb::arg("type"), nb::arg("x"),
        "float32 x [k] quantized to `type` -> its blocks (uint8).");
  q.def(
      "can_quantize", [](const std::string& type) { return can_quantize(parse_type(type)); },
      nb::arg("type"));
  q.def("quant_matmul", &py_quant_matmul, nb::arg("type"), nb::arg("blocks"), nb::arg("n"),
        nb::arg("k"), nb::arg("x"), nb::arg("mode") = "exact", nb::arg("bias").none() = nb::none(),
        nb::arg("reference") = false, nb::arg("threads") = 1,
        "y [m, n] = x [m, k] @ W^T (+ bias) for W [n, k] given as blocks (uint8).");
  q.def("target", [] { return std::string(quant_target_name()); });
  q.def(
      "reads_panels", [](const std::string& type) { return quant_reads_panels(parse_type(type)); },
      nb::arg("type"),
      "Whether the int8 kernels read panels of `type` here: int8 loads then make them.");
}
