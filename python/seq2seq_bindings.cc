// Bindings of encoder-decoder models (models/seq2seq.h): numpy in and out.
// The encoder's padding is resolved here: each row's real tokens (mask != 0)
// become one sequence of a ragged EncoderBatch; encoder captures scatter back
// to [B, S, ...], decoder outputs are [B, T, ...] (decoder inputs are unpadded).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "base/error.h"
#include "engine/seq2seq_generate.h"
#include "models/seq2seq.h"
#include "models/t5.h"
#include "ops/matmul.h"

namespace nb = nanobind;
using namespace hubzoo;

namespace {

using IdArray = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

nb::ndarray<nb::numpy, float> to_array(std::vector<float>&& v, std::vector<size_t> shape) {
  auto* data = new std::vector<float>(std::move(v));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::ndarray<nb::numpy, float>(data->data(), shape.size(), shape.data(), owner);
}

class PySeq2SeqLM {
 public:
  PySeq2SeqLM(const std::string& model, int threads, const std::string& dtype,
              const std::string& mode)
      : model_(load_seq2seq_lm(model, {threads, Numerics::parse(dtype, mode)})) {}

  nb::dict info() const {
    const Seq2SeqInfo& i = model_->info();
    nb::dict d;
    d["architecture"] = i.architecture;
    d["snapshot"] = i.snapshot.string();
    d["vocab_size"] = i.vocab_size;
    d["hidden_size"] = i.hidden_size;
    d["num_layers"] = i.num_layers;
    d["num_decoder_layers"] = i.num_decoder_layers;
    d["max_tokens"] = i.max_tokens;
    d["decoder_start_token_id"] = i.decoder_start_token_id;
    d["pad_token_id"] = i.pad_token_id;
    d["eos_token_ids"] = i.eos_token_ids;
    d["num_parameters"] = i.num_parameters;
    d["ignored_tensors"] = i.ignored_tensors;
    d["matmul_target"] = std::string(matmul_target_name());
    d["dtype"] = std::string(i.numerics.dtype_name());
    d["mode"] = std::string(i.numerics.mode_name());
    return d;
  }

  std::vector<std::string> capture_names() const { return model_->capture_names(); }

  // Encodes `ids` (padding dropped through `mask`), then runs `dec` through the
  // decoder in one pass (prefill_len < 0) or prefill_len columns then one step
  // per column. -> (logits [B, T, V], {name: array}).
  nb::tuple forward(IdArray ids, std::optional<IdArray> mask, IdArray dec,
                    std::vector<std::string> capture, int64_t prefill_len) {
    const int64_t batch = ids.shape(0), steps = dec.shape(1);
    if (mask && (mask->shape(0) != ids.shape(0) || mask->shape(1) != ids.shape(1))) {
      throw InvalidArgument("attention_mask shape differs from input_ids shape");
    }
    if (dec.shape(0) != ids.shape(0)) {
      throw InvalidArgument("decoder_input_ids has another batch size than input_ids");
    }
    const int64_t vocab = model_->info().vocab_size, d = model_->info().hidden_size;
    const std::set<std::string> names(capture.begin(), capture.end());
    std::set<std::string> enc_names, dec_names;
    for (const auto& n : names) (n.starts_with("encoder.") ? enc_names : dec_names).insert(n);
    std::vector<float> logits(batch * steps * vocab);
    Captured caps;
    Shapes shapes;
    {
      nb::gil_scoped_release release;
      EncoderBatch eb;
      const EncoderResult enc = encode_padded(ids, mask, enc_names, eb, caps, shapes);
      std::vector<std::unique_ptr<Seq2SeqState>> states;
      std::vector<Seq2SeqState*> ptrs;
      int64_t at = 0;
      for (int64_t b = 0; b < batch; ++b) {
        states.push_back(model_->start(&enc.hidden[at * d], eb.lengths[b]));
        ptrs.push_back(states.back().get());
        at += eb.lengths[b];
      }
      auto run = [&](int64_t c0, int64_t c1) {
        if (c1 <= c0) return;
        std::vector<std::vector<int64_t>> tokens(batch);
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t c = c0; c < c1; ++c) tokens[b].push_back(dec(b, c));
        }
        Seq2SeqDecodeResult out;
        model_->decode(ptrs, tokens, dec_names, out);
        const int64_t n = c1 - c0;
        for (int64_t b = 0; b < batch; ++b) {
          std::memcpy(&logits[(b * steps + c0) * vocab], &out.logits[b * n * vocab],
                      n * vocab * sizeof(float));
        }
        for (auto& [name, values] : out.captured) {
          const int64_t width = static_cast<int64_t>(values.size()) / (batch * n);
          auto& dst = caps[name];
          if (dst.empty()) dst.assign(batch * steps * width, 0.0f);
          shapes[name] = {size_t(batch), size_t(steps), size_t(width)};
          for (int64_t b = 0; b < batch; ++b) {
            std::memcpy(&dst[(b * steps + c0) * width], &values[b * n * width],
                        n * width * sizeof(float));
          }
        }
      };
      if (prefill_len < 0 || prefill_len >= steps) {
        run(0, steps);
      } else {
        run(0, prefill_len);
        for (int64_t c = prefill_len; c < steps; ++c) run(c, c + 1);
      }
    }
    nb::dict out;
    for (auto& [name, values] : caps) out[name.c_str()] = to_array(std::move(values), shapes[name]);
    auto arr = to_array(std::move(logits), {size_t(batch), size_t(steps), size_t(vocab)});
    return nb::make_tuple(arr, out);
  }

  // New tokens [batch, steps], rows that finished early padded with pad_token_id.
  nb::ndarray<nb::numpy, int64_t> generate(IdArray ids, std::optional<IdArray> mask,
                                           int64_t max_new_tokens, float temperature, int64_t top_k,
                                           float top_p, uint64_t seed, bool stop_at_eos) {
    const int64_t batch = ids.shape(0), seq = ids.shape(1);
    std::vector<Seq2SeqRequest> requests(batch);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t c = 0; c < seq; ++c) {
        if (!mask || (*mask)(b, c) != 0) requests[b].input_ids.push_back(ids(b, c));
      }
      requests[b].max_new_tokens = max_new_tokens;
      requests[b].sampling = {temperature, top_k, top_p, seed};
      requests[b].stop_at_eos = stop_at_eos;
    }
    std::vector<std::vector<int64_t>> done;
    {
      nb::gil_scoped_release release;
      done = seq2seq_generate(*model_, requests);
    }
    size_t steps = 0;
    for (const auto& t : done) steps = std::max(steps, t.size());
    const int64_t pad = std::max<int64_t>(model_->info().pad_token_id, 0);
    auto* data = new std::vector<int64_t>(batch * steps, pad);
    for (int64_t b = 0; b < batch; ++b) {
      std::copy(done[b].begin(), done[b].end(), data->begin() + b * steps);
    }
    nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
    size_t shape[2] = {static_cast<size_t>(batch), steps};
    return nb::ndarray<nb::numpy, int64_t>(data->data(), 2, shape, owner);
  }

 private:
  using Captured = std::map<std::string, std::vector<float>>;
  using Shapes = std::map<std::string, std::vector<size_t>>;

  // Encodes each row's real tokens (mask != 0) as one sequence of `eb`;
  // encoder captures scatter back to [B, S, width] (padded positions zero).
  EncoderResult encode_padded(const IdArray& ids, const std::optional<IdArray>& mask,
                              const std::set<std::string>& enc_names, EncoderBatch& eb,
                              Captured& caps, Shapes& shapes) {
    const int64_t batch = ids.shape(0), seq = ids.shape(1);
    std::vector<std::vector<int64_t>> cols(batch);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int64_t> row;
      for (int64_t c = 0; c < seq; ++c) {
        if (!mask || (*mask)(b, c) != 0) {
          row.push_back(ids(b, c));
          cols[b].push_back(c);
        }
      }
      eb.add(row);
    }
    EncoderResult enc;
    model_->encode(eb, enc_names, enc);
    for (auto& [name, values] : enc.captured) {
      const int64_t width = static_cast<int64_t>(values.size()) / eb.size();
      std::vector<float> dst(batch * seq * width, 0.0f);
      int64_t r = 0;
      for (int64_t b = 0; b < batch; ++b) {
        for (const int64_t c : cols[b]) {
          std::memcpy(&dst[(b * seq + c) * width], &values[r++ * width], width * sizeof(float));
        }
      }
      caps[name] = std::move(dst);
      shapes[name] = {size_t(batch), size_t(seq), size_t(width)};
    }
    return enc;
  }

  std::unique_ptr<Seq2SeqLM> model_;
};

}  // namespace

void bind_seq2seq(nb::module_& m) {
  // T5's relative position bucket of each relative position (tests compare it with transformers).
  m.def(
      "t5_relative_buckets",
      [](const std::vector<int64_t>& rel, bool bidirectional, int64_t buckets, int64_t distance) {
        std::vector<int64_t> out;
        for (const int64_t r : rel) {
          out.push_back(t5_relative_bucket(r, bidirectional, buckets, distance));
        }
        return out;
      },
      nb::arg("relative"), nb::arg("bidirectional"), nb::arg("num_buckets"),
      nb::arg("max_distance"));
  nb::class_<PySeq2SeqLM>(m, "Seq2SeqLM")
      .def(nb::init<const std::string&, int, const std::string&, const std::string&>(),
           nb::arg("model"), nb::arg("threads") = 0, nb::arg("dtype") = "float32",
           nb::arg("mode") = "fused")
      .def("info", &PySeq2SeqLM::info)
      .def("capture_names", &PySeq2SeqLM::capture_names)
      .def("forward", &PySeq2SeqLM::forward, nb::arg("ids"), nb::arg("mask").none(),
           nb::arg("decoder_ids"), nb::arg("capture"), nb::arg("prefill_len"))
      .def("generate", &PySeq2SeqLM::generate, nb::arg("ids"), nb::arg("mask").none(),
           nb::arg("max_new_tokens"), nb::arg("temperature"), nb::arg("top_k"), nb::arg("top_p"),
           nb::arg("seed"), nb::arg("stop_at_eos") = true);
}
