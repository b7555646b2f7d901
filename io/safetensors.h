// safetensors reader: memory-mapped, header validated, sharded checkpoints.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data buffer; offsets are relative to the buffer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tensor/quant_type.h"
#include "tensor/tensor.h"

namespace hubzoo {

struct TensorInfo {
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // offsets into the data buffer
  uint64_t end = 0;
  // A GGUF tensor stored in a block type (then dtype is U8 and a view's bytes
  // are the blocks, rows of quant_row_bytes(*quant, shape.back())).
  std::optional<QuantType> quant;
  // Transforms a loader applies to a GGUF tensor (as transformers does when it
  // reads the file): rows reordered, row i taken from stored row row_order[i]
  // (llama.cpp's q/k permutation undone), and `add` added to every value
  // (Gemma's norms, stored as 1 + w).
  std::vector<int64_t> row_order;
  float add = 0.0f;
};

// One mapped .safetensors file. Validates on open: header length bound
// (<= 100 MB and inside the file), well-formed JSON, known dtypes, offsets
// inside the buffer, no overlapping ranges, bytes == numel * dtype size.
// Throws FileError / FormatError naming the file (and tensor).
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Zero-copy view into the mapping. Throws TensorMappingError if absent.
  TensorView view(const std::string& name) const;
  // Tells the kernel the mapped pages of `name` are no longer needed
  // (used after a tensor was repacked into another layout).
  void release(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data buffer
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: `model.safetensors`, or the shards
// listed by `model.safetensors.index.json` (weight_map), or (failing both) every
// *.safetensors file in the directory. A tensor name present in two files, a
// shard listed but missing, or an index naming a tensor its shard lacks is an error.
class GgufFile;

// A checkpoint tensor made of GGUF tensors: one (`gguf_names` of size 1), or
// several [E, r, ...] tensors stacked along dimension 1 per leading index
// (Qwen3-MoE's gate and up experts as HF's fused gate_up_proj [E, 2r, ...]);
// with the transforms of TensorInfo.
struct GgufCheckpointTensor {
  std::string hf_name;
  std::vector<std::string> gguf_names;
  std::vector<int64_t> row_order;
  float add = 0.0f;
};

class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& dir);
  // The tensors of one GGUF file under the names `mapping` gives them; every
  // tensor of the file must be mapped or listed in `unused` (GGUF names of
  // tensors transformers does not load either), else TensorMappingError naming it.
  static Checkpoint from_gguf(std::shared_ptr<const GgufFile> file,
                              const std::vector<GgufCheckpointTensor>& mapping,
                              const std::set<std::string>& unused = {});

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;
  TensorView view(const std::string& name) const;
  void release(const std::string& name) const;
  // The pages of `name`'s bytes [from, to) as GgufFile::release(t, from, to)
  // does, for a GGUF tensor (elsewhere nothing: the caller releases the whole
  // tensor when done).
  void release(const std::string& name, uint64_t from, uint64_t to) const;
  // The file holding `name`, for error messages.
  const std::filesystem::path& file_of(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
  struct GgufEntry {
    TensorInfo info;
    const void* data = nullptr;
    std::vector<std::string> gguf_names;
    std::shared_ptr<std::vector<uint8_t>> owned;  // stacked parts, copied once at open
  };
  std::shared_ptr<const GgufFile> gguf_;
  std::map<std::string, GgufEntry> gguf_where_;
  const std::filesystem::path& gguf_path() const;
  TensorView gguf_view(const GgufEntry& e) const;
  void gguf_release(const GgufEntry& e) const;
};

// Writes tensors (used by tests and tools). Data is copied from the views.
void write_safetensors(const std::filesystem::path& path,
                       const std::map<std::string, TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace hubzoo
