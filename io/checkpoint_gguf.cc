// Checkpoint over one GGUF file: its tensors under Hugging Face names.
#include <set>

#include "base/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace hubzoo {

Checkpoint Checkpoint::from_gguf(std::shared_ptr<const GgufFile> file,
                                 const std::vector<GgufTensorMapping>& mapping) {
  if (!file) throw InvalidArgument("Checkpoint::from_gguf: no file");
  const std::string where = file->path().string();
  Checkpoint ck;
  std::set<std::string> mapped;
  for (const GgufTensorMapping& m : mapping) {
    const GgufTensorInfo* t = file->find(m.gguf_name);
    if (!t) throw TensorMappingError(where + ": no tensor '" + m.gguf_name + "'");
    if (!mapped.insert(m.gguf_name).second) {
      throw TensorMappingError(where + ": tensor '" + m.gguf_name + "' is mapped twice");
    }
    GgufEntry e;
    e.info.dtype = t->dtype ? *t->dtype : DType::U8;
    e.info.quant = t->quant;
    e.info.shape = t->shape;
    e.info.begin = t->offset;
    e.info.end = t->offset + t->nbytes;
    if (!m.row_order.empty()) {
      const int64_t rows = t->shape.empty() ? 0 : t->shape[0];
      if (static_cast<int64_t>(m.row_order.size()) != rows) {
        throw TensorMappingError(where + ": tensor '" + m.gguf_name + "': a row order of " +
                                 std::to_string(m.row_order.size()) + " rows for " +
                                 std::to_string(rows) + " rows");
      }
      std::vector<bool> seen(static_cast<size_t>(rows), false);
      for (int64_t r : m.row_order) {
        if (r < 0 || r >= rows || seen[static_cast<size_t>(r)])
          throw TensorMappingError(where + ": tensor '" + m.gguf_name +
                                   "': the row order is not a permutation");
        seen[static_cast<size_t>(r)] = true;
      }
    }
    e.info.row_order = m.row_order;
    e.info.add = m.add;
    e.data = file->data(*t);
    e.gguf_name = m.gguf_name;
    if (!ck.gguf_where_.emplace(m.hf_name, std::move(e)).second) {
      throw TensorMappingError(where + ": two tensors map to '" + m.hf_name + "'");
    }
  }
  std::string unmapped;
  for (const GgufTensorInfo& t : file->tensors()) {
    if (!mapped.count(t.name)) unmapped += (unmapped.empty() ? "" : ", ") + t.name;
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

void Checkpoint::gguf_release(const GgufEntry& e) const {
  if (const GgufTensorInfo* t = gguf_->find(e.gguf_name)) gguf_->release(*t);
}

}  // namespace hubzoo
