// hubzoo._hubzoo.gguf_info: a GGUF file's header as hubzoo reads it, so tests
// can hold the reader against gguf-py's GGUFReader on files its writer made.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "io/gguf.h"
#include "tensor/quant_type.h"

namespace nb = nanobind;
using namespace hubzoo;

namespace {

// {"version", "alignment", "data_offset", "metadata": JSON text (key order as
// in the file), "tensors": [{"name", "type" (GGML name), "shape" (row-major,
// ne reversed), "offset" (into the data section), "nbytes"}]}.
nb::dict gguf_info(const std::string& path) {
  const auto f = GgufFile::open(path);
  nb::dict out;
  out["version"] = f->version();
  out["alignment"] = f->alignment();
  out["data_offset"] = f->data_offset();
  out["metadata"] = f->metadata().dump();
  nb::list tensors;
  for (const GgufTensorInfo& t : f->tensors()) {
    nb::dict d;
    d["name"] = t.name;
    d["type"] = ggml_type_name(t.ggml_type);
    nb::list shape;
    for (int64_t x : t.shape) shape.append(x);
    d["shape"] = nb::tuple(shape);
    d["offset"] = t.offset;
    d["nbytes"] = t.nbytes;
    tensors.append(d);
  }
  out["tensors"] = tensors;
  return out;
}

}  // namespace

void bind_gguf(nb::module_& m) { m.def("gguf_info", &gguf_info, nb::arg("path")); }
