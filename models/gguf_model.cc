// A GGUF file as a model: config.json and HF-named tensors from its metadata
// (models/gguf_import.h), over the mapped file (io/gguf.h).
#include "models/gguf_model.h"

#include <map>
#include <set>

#include "base/error.h"
#include "base/heap.h"
#include "io/gguf.h"
#include "models/gguf_import.h"

namespace hubzoo {

GgufModel open_gguf_model(const std::filesystem::path& path) {
  std::unique_ptr<GgufFile> opened = GgufFile::open(path);
  std::vector<std::string> names;
  for (const GgufTensorInfo& t : opened->tensors()) names.push_back(t.name);
  const nlohmann::ordered_json config = gguf_config(opened->metadata(), names);
  const GgufTensorMap map = gguf_tensor_map(opened->metadata(), config, names);
  // The checkpoint keeps the file mapped for as long as the model lives; the
  // tokenizer reads the metadata on its own.
  opened->drop_metadata();
  // Its freed pages (~20 MB of JSON values for Gemma's 262k-token vocabulary)
  // go back now: the weights' panels come from chunks of their own
  // (ops/weight_arena.h), not the heap, so the load would otherwise hold
  // both until its end (Gemma 3 270M's peak RSS: +22 MB).
  release_free_heap();
  std::shared_ptr<const GgufFile> file = std::move(opened);

  // HF tensors in file order; a fused HF tensor collects its parts in part order.
  std::vector<GgufCheckpointTensor> tensors;
  std::map<std::string, size_t> index;
  std::map<std::string, std::map<int, std::string>> fused;
  for (const GgufTensorMapping& m : map.tensors) {
    auto [it, inserted] = index.emplace(m.hf_name, tensors.size());
    if (inserted) {
      GgufCheckpointTensor t;
      t.hf_name = m.hf_name;
      t.row_order = m.row_perm;
      t.add = m.subtract_one ? -1.0f : 0.0f;
      tensors.push_back(std::move(t));
    }
    if (m.fused_part < 0) {
      if (!inserted) throw TensorMappingError(path.string() + ": two tensors map to " + m.hf_name);
      tensors[it->second].gguf_names = {m.gguf_name};
    } else if (!fused[m.hf_name].emplace(m.fused_part, m.gguf_name).second) {
      throw TensorMappingError(path.string() + ": two tensors fill part " +
                               std::to_string(m.fused_part) + " of " + m.hf_name);
    }
  }
  for (const auto& [hf, parts] : fused) {
    auto& t = tensors[index.at(hf)];
    int expect = 0;
    for (const auto& [part, name] : parts) {
      if (part != expect++)
        throw TensorMappingError(path.string() + ": " + hf + " lacks part " +
                                 std::to_string(expect - 1));
      t.gguf_names.push_back(name);
    }
  }
  std::set<std::string> unused;
  for (const std::string& entry : map.ignored) unused.insert(entry.substr(0, entry.find(':')));

  GgufModel model;
  const std::string where = path.string() + " (config from its metadata)";
  model.config = JsonObject(parse_json(config.dump(), where), where);
  model.checkpoint =
      std::make_shared<const Checkpoint>(Checkpoint::from_gguf(file, tensors, unused));
  return model;
}

}  // namespace hubzoo
