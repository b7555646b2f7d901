// hubzoo._hubzoo.Tokenizer: the C++ tokenizer, with HF-style results
// (ids, tokens, character offsets) for parity tests and Python users.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <memory>

#include "tokenizer/tokenizer.h"

namespace nb = nanobind;

namespace {

using EncodingTuple = std::tuple<std::vector<int64_t>, std::vector<std::string>,
                                 std::vector<std::pair<size_t, size_t>>>;

EncodingTuple to_tuple(hubzoo::Encoding&& e) {
  return {std::move(e.ids), std::move(e.tokens), std::move(e.offsets)};
}

class PyTokenizer {
 public:
  explicit PyTokenizer(const std::string& path)
      : tokenizer_(std::filesystem::is_directory(path) ||
                           std::filesystem::path(path).extension() == ".gguf"
                       ? hubzoo::Tokenizer::from_pretrained(path)
                       : hubzoo::Tokenizer::from_file(path)) {}

  EncodingTuple encode(const std::string& text, bool add_special_tokens) const {
    nb::gil_scoped_release release;
    return to_tuple(tokenizer_.encode(text, add_special_tokens));
  }
  std::vector<EncodingTuple> encode_batch(const std::vector<std::string>& texts,
                                          bool add_special_tokens) const {
    nb::gil_scoped_release release;
    std::vector<EncodingTuple> out;
    for (auto& e : tokenizer_.encode_batch(texts, add_special_tokens))
      out.push_back(to_tuple(std::move(e)));
    return out;
  }
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
    return tokenizer_.decode(ids, skip_special_tokens);
  }
  // Pieces DecodeStream returns for `ids` in order (None where nothing completed).
  std::vector<std::optional<std::string>> decode_stream(const std::vector<int64_t>& ids,
                                                        bool skip_special_tokens) const {
    hubzoo::DecodeStream stream(tokenizer_, skip_special_tokens);
    std::vector<std::optional<std::string>> out;
    for (int64_t id : ids) out.push_back(stream.step(id));
    return out;
  }
  const hubzoo::Tokenizer& get() const { return tokenizer_; }

 private:
  hubzoo::Tokenizer tokenizer_;
};

}  // namespace

void bind_tokenizer(nb::module_& m) {
  nb::class_<PyTokenizer>(m, "Tokenizer")
      .def(nb::init<const std::string&>(), nb::arg("path"),
           "Load a tokenizer.json, or a snapshot directory holding one.")
      .def("encode", &PyTokenizer::encode, nb::arg("text"), nb::arg("add_special_tokens") = true,
           "(ids, tokens, offsets); offsets are character offsets as HF tokenizers reports them.")
      .def(
          "encode_pair",
          [](const PyTokenizer& t, const std::string& a, const std::string& b, bool add,
             size_t max_length) {
            hubzoo::Encoding e = t.get().encode_pair(a, b, add, max_length);
            std::vector<int64_t> types = e.type_ids;
            return std::make_tuple(to_tuple(std::move(e)), std::move(types));
          },
          nb::arg("text"), nb::arg("pair"), nb::arg("add_special_tokens") = true,
          nb::arg("max_length") = 0)
      .def("encode_batch", &PyTokenizer::encode_batch, nb::arg("texts"),
           nb::arg("add_special_tokens") = true)
      .def("decode", &PyTokenizer::decode, nb::arg("ids"), nb::arg("skip_special_tokens") = false)
      .def("decode_stream", &PyTokenizer::decode_stream, nb::arg("ids"),
           nb::arg("skip_special_tokens") = false)
      .def("token_to_id",
           [](const PyTokenizer& t, const std::string& s) { return t.get().token_to_id(s); })
      .def("id_to_token", [](const PyTokenizer& t, int64_t id) { return t.get().id_to_token(id); })
      .def("vocab_size", [](const PyTokenizer& t) { return t.get().vocab_size(); });
}
