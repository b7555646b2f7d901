// hubzoo._hubzoo.gguf_*: GGUF metadata -> config.json, tensor map and
// tokenizer files (models/gguf_import.h, tokenizer/gguf_tokenizer.h), with
// the metadata passed as JSON text (GgufFile::metadata()'s shape).
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "io/json.h"
#include "models/gguf_import.h"
#include "tokenizer/gguf_tokenizer.h"

namespace nb = nanobind;

namespace {

// GGUF metadata of real files is tens of MB as JSON (vocabulary, scores, merges).
nlohmann::ordered_json parse_metadata(const std::string& text) {
  hubzoo::JsonLimits limits;
  limits.max_depth = 4;
  return hubzoo::parse_ordered_json(text, "GGUF metadata", limits);
}

using Mapping = std::tuple<std::string, std::string, std::vector<int64_t>, bool, int>;

}  // namespace

void bind_gguf_import(nb::module_& m) {
  m.def(
      "gguf_config",
      [](const std::string& metadata, const std::vector<std::string>& tensor_names) {
        return hubzoo::gguf_config(parse_metadata(metadata), tensor_names).dump();
      },
      nb::arg("metadata_json"), nb::arg("tensor_names"),
      "config.json (as JSON text) for GGUF metadata and the file's tensor names.");
  m.def(
      "gguf_tensor_map",
      [](const std::string& metadata, const std::vector<std::string>& tensor_names) {
        const auto meta = parse_metadata(metadata);
        const auto config = hubzoo::gguf_config(meta, tensor_names);
        auto map = hubzoo::gguf_tensor_map(meta, config, tensor_names);
        std::vector<Mapping> out;
        for (auto& t : map.tensors) {
          out.emplace_back(t.gguf_name, t.hf_name, std::move(t.row_perm), t.subtract_one,
                           t.fused_part);
        }
        return std::make_pair(std::move(out), std::move(map.ignored));
      },
      nb::arg("metadata_json"), nb::arg("tensor_names"),
      "([(gguf_name, hf_name, row_perm, subtract_one, fused_part)], ignored).");
  m.def(
      "gguf_tokenizer_files",
      [](const std::string& metadata) {
        const auto files = hubzoo::gguf_tokenizer_files(parse_metadata(metadata));
        return std::make_pair(files.tokenizer.dump(), files.config.dump());
      },
      nb::arg("metadata_json"), "(tokenizer.json text, tokenizer_config.json text).");
}
