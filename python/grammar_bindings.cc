// hubzoo._hubzoo.Grammar / GrammarVocab / GrammarMatcher: the structured
// generation engine (grammar/) for Python users and for the parity tests that
// compare its allowed-token sets with xgrammar's.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <memory>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_vocabulary.h"

namespace nb = nanobind;

namespace {

using hubzoo::grammar::Grammar;
using hubzoo::grammar::GrammarMatcher;
using hubzoo::grammar::TokenVocabulary;

// A tokenizer's token bytes (from a snapshot folder, a .gguf or a tokenizer.json).
struct PyGrammarVocab {
  explicit PyGrammarVocab(const std::string& path) {
    const bool pretrained =
        std::filesystem::is_directory(path) || std::filesystem::path(path).extension() == ".gguf";
    const auto t =
        pretrained ? hubzoo::Tokenizer::from_pretrained(path) : hubzoo::Tokenizer::from_file(path);
    vocab = TokenVocabulary::from_tokenizer(t);
  }
  std::shared_ptr<const TokenVocabulary> vocab;
};

struct PyGrammar {
  std::shared_ptr<const Grammar> g;
};

struct PyGrammarMatcher {
  PyGrammarMatcher(const PyGrammar& g, const PyGrammarVocab& v, std::vector<int64_t> ends)
      : m(g.g, v.vocab, std::move(ends)), vocab_size(v.vocab->size()) {}
  // Allowed ids in increasing order (end tokens included when the text is complete).
  std::vector<int64_t> allowed_tokens(const std::vector<int64_t>& end_tokens) {
    std::vector<int64_t> out;
    const auto& words = m.allowed_bitmask();
    for (int64_t id = 0; id < vocab_size; ++id) {
      if ((words[id >> 5] >> (id & 31)) & 1) out.push_back(id);
    }
    if (m.is_accepting()) out.insert(out.end(), end_tokens.begin(), end_tokens.end());
    return out;
  }
  GrammarMatcher m;
  int64_t vocab_size;
};

}  // namespace

void bind_grammar(nb::module_& m) {
  nb::class_<PyGrammarVocab>(m, "GrammarVocab")
      .def(nb::init<const std::string&>(), nb::arg("tokenizer_path"))
      .def("size", [](const PyGrammarVocab& v) { return v.vocab->size(); })
      .def("kind", [](const PyGrammarVocab& v) { return static_cast<int>(v.vocab->kind()); })
      .def("token_bytes", [](const PyGrammarVocab& v, int64_t id) {
        const std::string* b = v.vocab->bytes(id);
        return b ? nb::bytes(b->data(), b->size()) : nb::bytes("", 0);
      });
  nb::class_<PyGrammar>(m, "Grammar")
      .def_static("from_json_schema",
                  [](const std::string& s) { return PyGrammar{Grammar::from_json_schema_text(s)}; })
      .def_static("from_regex",
                  [](const std::string& p) { return PyGrammar{Grammar::from_regex(p)}; })
      .def_static(
          "from_choices",
          [](const std::vector<std::string>& c) { return PyGrammar{Grammar::from_choices(c)}; })
      .def_static("json_object", [] { return PyGrammar{Grammar::json_object()}; })
      .def("matches",
           [](const PyGrammar& g, nb::bytes text) {
             return g.g->matches(std::string_view(text.c_str(), text.size()));
           })
      .def("num_nodes", [](const PyGrammar& g) { return g.g->num_nodes(); });
  nb::class_<PyGrammarMatcher>(m, "GrammarMatcher")
      .def(nb::init<const PyGrammar&, const PyGrammarVocab&, std::vector<int64_t>>(),
           nb::arg("grammar"), nb::arg("vocab"), nb::arg("end_tokens"))
      .def("allowed_tokens", &PyGrammarMatcher::allowed_tokens, nb::arg("end_tokens"))
      .def("accept_token", [](PyGrammarMatcher& p, int64_t id) { return p.m.accept(id); })
      .def("accept_bytes",
           [](PyGrammarMatcher& p, nb::bytes b) {
             return p.m.accept_bytes(std::string_view(b.c_str(), b.size()));
           })
      .def("is_accepting", [](const PyGrammarMatcher& p) { return p.m.is_accepting(); })
      .def("is_complete", [](const PyGrammarMatcher& p) { return p.m.is_complete(); })
      .def("stats", [](const PyGrammarMatcher& p) {
        nb::dict d;
        d["masks"] = p.m.stats().masks;
        d["cache_hits"] = p.m.stats().cache_hits;
        d["trie_nodes_visited"] = p.m.stats().trie_nodes_visited;
        d["mask_seconds"] = p.m.stats().mask_seconds;
        return d;
      });
}
