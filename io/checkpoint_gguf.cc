// Checkpoint over one GGUF file: its tensors under Hugging Face names.
#include <cstring>
#include <set>

#include "base/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace hubzoo {
namespace {

// Checks that `order` permutes [0, rows).
void check_row_order(const std::vector<int64_t>& order, int64_t rows, const std::string& what) {
  if (static_cast<int64_t>(order.size()) != rows) {
    throw TensorMappingError(what + ": a row order of " + std::to_string(order.size()) +
                             " rows for " + std::to_string(rows) + " rows");
  }
  std::vector<bool> seen(static_cast<size_t>(rows), false);
  for (int64_t r : order) {
    if (r < 0 || r >= rows || seen[static_cast<size_t>(r)])
      throw TensorMappingError(what + ": the row order is not a permutation");
    seen[static_cast<size_t>(r)] = true;
  }
}

}  // namespace

Checkpoint Checkpoint::from_gguf(std::shared_ptr<const GgufFile> file,
                                 const std::vector<GgufCheckpointTensor>& mapping,
                                 const std::set<std::string>& unused) {
  if (!file) throw InvalidArgument("Checkpoint::from_gguf: no file");
  const std::string where = file->path().string();
  Checkpoint ck;
  std::set<std::string> mapped;
  for (const GgufCheckpointTensor& m : mapping) {
    if (m.gguf_names.empty())
      throw InvalidArgument(where + ": '" + m.hf_name + "' maps to nothing");
    std::vector<const GgufTensorInfo*> parts;
    for (const std::string& name : m.gguf_names) {
      const GgufTensorInfo* t = file->find(name);
      if (!t) throw TensorMappingError(where + ": no tensor '" + name + "'");
      if (!mapped.insert(name).second)
        throw TensorMappingError(where + ": tensor '" + name + "' is mapped twice");
      parts.push_back(t);
    }
    const GgufTensorInfo& first = *parts[0];
    const std::string what = where + ": tensor '" + first.name + "'";
    GgufEntry e;
    e.info.dtype = first.dtype ? *first.dtype : DType::U8;
    e.info.quant = first.quant;
    e.info.shape = first.shape;
    e.info.begin = first.offset;
    e.info.end = first.offset + first.nbytes;
    e.data = file->data(first);
    e.gguf_names = m.gguf_names;
    if (parts.size() > 1) {
      // [E, r, ...] parts -> [E, P * r, ...]: expert by expert, part after part.
      for (const GgufTensorInfo* t : parts) {
        if (t->shape != first.shape || t->ggml_type != first.ggml_type || t->shape.size() < 2)
          throw TensorMappingError(what + ": the tensors stacked into '" + m.hf_name +
                                   "' differ in shape or type");
      }
      const auto count = static_cast<size_t>(first.shape[0]);
      const size_t chunk = first.nbytes / count;
      e.owned = std::make_shared<std::vector<uint8_t>>(first.nbytes * parts.size());
      uint8_t* dst = e.owned->data();
      for (size_t i = 0; i < count; ++i) {
        for (const GgufTensorInfo* t : parts) {
          std::memcpy(dst, file->data(*t) + i * chunk, chunk);
          dst += chunk;
        }
      }
      for (const GgufTensorInfo* t : parts) file->release(*t);
      e.info.shape[1] *= static_cast<int64_t>(parts.size());
      e.info.end = e.info.begin + e.owned->size();
      e.data = e.owned->data();
    }
    if (!m.row_order.empty()) {
      if (parts.size() > 1) throw TensorMappingError(what + ": a row order on stacked tensors");
      check_row_order(m.row_order, first.shape.empty() ? 0 : first.shape[0], what);
    }
    e.info.row_order = m.row_order;
    e.info.add = m.add;
    if (!ck.gguf_where_.emplace(m.hf_name, std::move(e)).second) {
      throw TensorMappingError(where + ": two tensors map to '" + m.hf_name + "'");
    }
  }
  std::string unmapped;
  for (const GgufTensorInfo& t : file->tensors()) {
    if (!mapped.count(t.name) && !unused.count(t.name))
      unmapped += (unmapped.empty() ? "" : ", ") + t.name;
  }
  if (!unmapped.empty()) {
    throw TensorMappingError(where + ": tensors with no Hugging Face name: " + unmapped);
  }
  ck.gguf_ = std::move(file);
  return ck;
}

const std::filesystem::path& Checkpoint::gguf_path() const { return gguf_->path(); }

TensorView Checkpoint::gguf_view(const GgufEntry& e) const {
  TensorView v;
  v.dtype = e.info.dtype;
  v.data = e.data;
  if (e.info.quant) {
    v.shape = {static_cast<int64_t>(e.info.end - e.info.begin)};  // the blocks' bytes
  } else {
    v.shape = e.info.shape;
  }
  return v;
}

void Checkpoint::release(const std::string& name, uint64_t from, uint64_t to) const {
  const auto g = gguf_where_.find(name);
  if (g == gguf_where_.end() || g->second.owned || g->second.gguf_names.size() != 1) return;
  if (const GgufTensorInfo* t = gguf_->find(g->second.gguf_names[0])) gguf_->release(*t, from, to);
}

void Checkpoint::gguf_release(const GgufEntry& e) const {
  if (e.owned) return;  // a copy: its pages are ours, kept while the checkpoint is
  for (const std::string& name : e.gguf_names) {
    if (const GgufTensorInfo* t = gguf_->find(name)) gguf_->release(*t);
  }
}

}  // namespace hubzoo
