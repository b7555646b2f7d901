// Bindings of the reranker (engine/reranker.h): scores out as numpy.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "engine/reranker.h"

namespace nb = nanobind;
using namespace hubzoo;

namespace {

nb::ndarray<nb::numpy, float> scores_array(std::vector<float>&& v, size_t rows, size_t cols) {
  auto* data = new std::vector<float>(std::move(v));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  const size_t shape[2] = {rows, cols};
  return nb::ndarray<nb::numpy, float>(data->data(), 2, shape, owner);
}

class PyReranker {
 public:
  PyReranker(const std::string& model, int threads, const std::string& dtype,
             const std::string& mode, int64_t max_length) {
    RerankerOptions o;
    o.num_threads = threads;
    o.numerics = Numerics::parse(dtype, mode);
    o.max_length = max_length;
    reranker_ = Reranker::load(model, o);
  }

  nb::dict info() const {
    const RerankerInfo& i = reranker_->info();
    nb::dict d;
    d["snapshot"] = i.snapshot.string();
    d["architecture"] = i.architecture;
    d["decoder"] = i.decoder;
    d["num_labels"] = i.num_labels;
    d["activation"] = i.activation;
    d["max_length"] = i.max_length;
    return d;
  }

  // [pairs, num_labels] scores.
  nb::ndarray<nb::numpy, float> score_pairs(const std::vector<std::string>& a,
                                            const std::vector<std::string>& b, bool raw,
                                            std::optional<std::string> instruction,
                                            int64_t batch_size) {
    RerankOptions o;
    o.raw = raw;
    o.instruction = std::move(instruction);
    o.batch_size = batch_size;
    std::vector<float> out;
    {
      nb::gil_scoped_release release;
      out = reranker_->score_pairs(a, b, o);
    }
    return scores_array(std::move(out), a.size(),
                        static_cast<size_t>(reranker_->info().num_labels));
  }

  nb::tuple tokenize(const std::string& query, const std::string& document,
                     std::optional<std::string> instruction) const {
    RerankOptions o;
    o.instruction = std::move(instruction);
    PairTokens p = reranker_->tokenize(query, document, o);
    return nb::make_tuple(p.ids, p.type_ids);
  }

 private:
  std::unique_ptr<Reranker> reranker_;
};

}  // namespace

void bind_rerank(nb::module_& m) {
  nb::class_<PyReranker>(m, "Reranker")
      .def(nb::init<const std::string&, int, const std::string&, const std::string&, int64_t>(),
           nb::arg("model"), nb::arg("threads") = 0, nb::arg("dtype") = "float32",
           nb::arg("mode") = "fused", nb::arg("max_length") = 0)
      .def("info", &PyReranker::info)
      .def("score_pairs", &PyReranker::score_pairs, nb::arg("a"), nb::arg("b"), nb::arg("raw"),
           nb::arg("instruction").none(), nb::arg("batch_size"))
      .def("tokenize", &PyReranker::tokenize, nb::arg("query"), nb::arg("document"),
           nb::arg("instruction").none());
}
