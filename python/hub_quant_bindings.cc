// hubzoo._hubzoo.hub_quant_*: one quantized linear of a Hub checkpoint (GPTQ,
// AWQ, compressed-tensors) as hubzoo converts it, for the tests that hold the
// conversion against each format's own dequantization.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <vector>

#include "base/error.h"
#include "io/json.h"
#include "layers/hub_quant.h"

namespace nb = nanobind;
using namespace hubzoo;

namespace {

struct Loaded {
  HubQuant quant;
  Checkpoint ckpt;
};

Loaded open_quantized(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const JsonObject config(read_json_file(dir / "config.json"), (dir / "config.json").string());
  std::optional<HubQuant> q = HubQuant::from_config(config);
  if (!q) throw ConfigError(config.where() + ": no quantization_config");
  return {std::move(*q), Checkpoint::open(dir)};
}

struct Taken {
  QuantMatrix matrix;
  std::vector<std::string> used;
};

Taken take(const Loaded& l, const std::string& prefix) {
  if (!l.quant.is_quantized(l.ckpt, prefix)) {
    throw InvalidArgument("'" + prefix + "' is not a quantized linear of this checkpoint");
  }
  const std::vector<int64_t> shape = l.quant.stored_shape(l.ckpt, prefix);
  Taken t;
  t.matrix = l.quant.take(l.ckpt, prefix, shape[0], shape[1], &t.used);
  return t;
}

// W [n, k] dequantized, k_perm undone (input columns in checkpoint order).
nb::ndarray<nb::numpy, float> dequantize(const std::string& model_dir, const std::string& prefix) {
  const Loaded l = open_quantized(model_dir);
  const QuantMatrix m = take(l, prefix).matrix;
  auto* out = new std::vector<float>(static_cast<size_t>(m.n * m.k));
  nb::capsule owner(out, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  m.dequantize(out->data());
  const size_t shape[2] = {static_cast<size_t>(m.n), static_cast<size_t>(m.k)};
  return nb::ndarray<nb::numpy, float>(out->data(), 2, shape, owner);
}

nb::dict info(const std::string& model_dir, const std::string& prefix) {
  const Loaded l = open_quantized(model_dir);
  nb::dict d;
  d["describe"] = l.quant.describe();
  d["is_quantized"] = l.quant.is_quantized(l.ckpt, prefix);
  if (!nb::cast<bool>(d["is_quantized"])) return d;
  const Taken t = take(l, prefix);
  d["type"] = std::string(quant_name(t.matrix.type));
  d["n"] = t.matrix.n;
  d["k"] = t.matrix.k;
  d["k_perm"] = t.matrix.k_perm;
  d["tensors"] = t.used;
  return d;
}

}  // namespace

void bind_hub_quant(nb::module_& m) {
  m.def("hub_quant_dequantize", &dequantize, nb::arg("model_dir"), nb::arg("prefix"),
        "The quantized linear `prefix` as hubzoo converts it, dequantized: float32 [n, k].");
  m.def("hub_quant_info", &info, nb::arg("model_dir"), nb::arg("prefix"),
        "describe, is_quantized and, when quantized: type, n, k, k_perm, tensors (consumed).");
}
