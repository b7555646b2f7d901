// Bindings of the encoders and the sentence-embedding pipeline: numpy out.
// Padding is resolved here as for CausalLM: each row's real tokens (mask != 0)
// become one sequence of a ragged EncoderBatch; outputs scatter back to [B, S, ...].
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "base/error.h"
#include "engine/embedder.h"
#include "models/encoder.h"
#include "ops/matmul.h"

namespace nb = nanobind;
using namespace hubzoo;

namespace {

using IdArray = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

nb::ndarray<nb::numpy, float> to_numpy(std::vector<float>&& v, std::vector<size_t> shape) {
  auto* data = new std::vector<float>(std::move(v));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::ndarray<nb::numpy, float>(data->data(), shape.size(), shape.data(), owner);
}

nb::dict numerics_dict(const Numerics& n) {
  nb::dict d;
  d["dtype"] = std::string(n.dtype_name());
  d["mode"] = std::string(n.mode_name());
  return d;
}

nb::dict encoder_info_dict(const EncoderInfo& i) {
  nb::dict d = numerics_dict(i.numerics);
  d["architecture"] = i.architecture;
  d["snapshot"] = i.snapshot.string();
  d["vocab_size"] = i.vocab_size;
  d["hidden_size"] = i.hidden_size;
  d["num_layers"] = i.num_layers;
  d["max_position_embeddings"] = i.max_position_embeddings;
  d["max_tokens"] = i.max_tokens;
  d["pad_token_id"] = i.pad_token_id;
  d["uses_token_type_ids"] = i.uses_token_type_ids;
  d["causal"] = i.causal;
  d["num_parameters"] = i.num_parameters;
  d["ignored_tensors"] = i.ignored_tensors;
  d["matmul_target"] = std::string(matmul_target_name());
  return d;
}

class PyEncoder {
 public:
  PyEncoder(const std::string& model, int threads, const std::string& dtype,
            const std::string& mode)
      : encoder_(load_encoder(model, {threads, Numerics::parse(dtype, mode)})) {}

  nb::dict info() const { return encoder_info_dict(encoder_->info()); }
  std::vector<std::string> capture_names() const { return encoder_->capture_names(); }

  // -> (hidden [B, S, H], {name: [B, S, F]}); padded positions hold zeros.
  nb::tuple forward(IdArray ids, std::optional<IdArray> mask, std::optional<IdArray> type_ids,
                    std::vector<std::string> capture) {
    const size_t batch = ids.shape(0), seq = ids.shape(1);
    for (const auto* a : {mask ? &*mask : nullptr, type_ids ? &*type_ids : nullptr}) {
      if (a && (a->shape(0) != batch || a->shape(1) != seq)) {
        throw InvalidArgument("attention_mask / token_type_ids shape differs from input_ids");
      }
    }
    struct Pos {
      size_t b, c;
    };
    EncoderBatch eb;
    std::vector<Pos> where;
    for (size_t b = 0; b < batch; ++b) {
      std::vector<int64_t> row, types;
      for (size_t c = 0; c < seq; ++c) {
        if (mask && (*mask)(b, c) == 0) continue;
        row.push_back(ids(b, c));
        if (type_ids) types.push_back((*type_ids)(b, c));
        where.push_back({b, c});
      }
      if (!row.empty()) eb.add(row, types);
    }
    EncoderOptions opt;
    opt.capture.insert(capture.begin(), capture.end());
    EncoderResult r;
    if (eb.size() > 0) {
      nb::gil_scoped_release release;
      encoder_->forward(eb, opt, r);
    }
    auto scatter = [&](const std::vector<float>& values) {
      const size_t width =
          where.empty() ? encoder_->info().hidden_size : values.size() / where.size();
      std::vector<float> dst(batch * seq * width, 0.0f);
      for (size_t t = 0; t < where.size(); ++t) {
        std::memcpy(&dst[(where[t].b * seq + where[t].c) * width], &values[t * width],
                    width * sizeof(float));
      }
      return to_numpy(std::move(dst), {batch, seq, width});
    };
    nb::dict caps;
    for (const auto& [name, values] : r.captured) caps[name.c_str()] = scatter(values);
    return nb::make_tuple(scatter(r.hidden), caps);
  }

 private:
  std::unique_ptr<Encoder> encoder_;
};

class PyEmbedder {
 public:
  PyEmbedder(const std::string& model, int threads, const std::string& dtype,
             const std::string& mode)
      : embedder_(Embedder::load(model, {threads, Numerics::parse(dtype, mode)})) {}

  nb::dict info() const {
    const EmbedderInfo& i = embedder_->info();
    nb::dict d = numerics_dict(embedder_->encoder_info().numerics);
    d["snapshot"] = i.snapshot.string();
    d["modules"] = i.modules;
    d["default_modules"] = i.default_modules;
    std::vector<std::string> modes;
    for (const PoolingMode m : i.pooling.modes) modes.push_back(pooling_mode_name(m));
    d["pooling_modes"] = modes;
    d["include_prompt"] = i.pooling.include_prompt;
    d["max_seq_length"] = i.max_seq_length;
    d["do_lower_case"] = i.do_lower_case;
    d["prompts"] = i.prompts;
    d["default_prompt_name"] = i.default_prompt_name;
    d["dimension"] = i.dimension;
    d["encoder"] = encoder_info_dict(embedder_->encoder_info());
    return d;
  }

  nb::ndarray<nb::numpy, float> encode(const std::vector<std::string>& texts,
                                       std::optional<bool> normalize,
                                       std::optional<std::string> prompt_name,
                                       std::optional<std::string> prompt, int64_t batch_size) {
    EmbedOptions o;
    o.normalize = normalize;
    o.prompt_name = std::move(prompt_name);
    o.prompt = std::move(prompt);
    o.batch_size = batch_size;
    std::vector<float> out;
    {
      nb::gil_scoped_release release;
      out = embedder_->encode(texts, o);
    }
    return to_numpy(std::move(out),
                    {texts.size(), static_cast<size_t>(embedder_->info().dimension)});
  }

  std::vector<int64_t> tokenize(const std::string& text) const {
    return embedder_->tokenize(text).ids;
  }
  int64_t prompt_length(const std::string& prompt) const {
    return embedder_->prompt_length(prompt);
  }

 private:
  std::unique_ptr<Embedder> embedder_;
};

}  // namespace

void bind_embed(nb::module_& m) {
  m.def("supported_encoders", &supported_encoders);
  nb::class_<PyEncoder>(m, "Encoder")
      .def(nb::init<const std::string&, int, const std::string&, const std::string&>(),
           nb::arg("model"), nb::arg("threads") = 0, nb::arg("dtype") = "float32",
           nb::arg("mode") = "fused")
      .def("info", &PyEncoder::info)
      .def("capture_names", &PyEncoder::capture_names)
      .def("forward", &PyEncoder::forward, nb::arg("ids"), nb::arg("mask").none(),
           nb::arg("type_ids").none(), nb::arg("capture"));
  nb::class_<PyEmbedder>(m, "Embedder")
      .def(nb::init<const std::string&, int, const std::string&, const std::string&>(),
           nb::arg("model"), nb::arg("threads") = 0, nb::arg("dtype") = "float32",
           nb::arg("mode") = "fused")
      .def("info", &PyEmbedder::info)
      .def("encode", &PyEmbedder::encode, nb::arg("texts"), nb::arg("normalize").none(),
           nb::arg("prompt_name").none(), nb::arg("prompt").none(), nb::arg("batch_size"))
      .def("tokenize", &PyEmbedder::tokenize, nb::arg("text"))
      .def("prompt_length", &PyEmbedder::prompt_length, nb::arg("prompt"));
}
