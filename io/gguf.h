// GGUF reader: memory-mapped, header validated before anything is allocated.
//
// Format (v2/v3, little-endian): magic "GGUF", u32 version, u64 tensor count,
// u64 metadata count, metadata key/value pairs (typed; arrays nested at most
// one level deep as GGUF writers produce them), tensor infos (name, n_dims,
// ne[n_dims] innermost first, u32 GGML type, u64 offset), padding to
// `general.alignment` (default 32), then the data section.
//
// Validation names the file and the field: magic, version (2 or 3), counts and
// string/array lengths bounded against the bytes left in the file before any
// allocation, alignment a power of two, every tensor's offset aligned and its
// bytes inside the file, no two tensors overlapping, element counts that fit
// int64, rows a whole number of blocks, unknown value types and unknown tensor
// types rejected by name (ggml_type_name). Every error is a FormatError
// (FileError for I/O) starting "<path>: " and naming the key or tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor/quant_type.h"
#include "tensor/tensor.h"

namespace hubzoo {

class GgufParser;  // io/gguf.cc

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;  // raw GGML type id
  // Exactly one of these says how elements are stored: a float dtype (F32,
  // F16, BF16 -> dtype set, quant empty) or a block type (quant set).
  std::optional<DType> dtype;
  std::optional<QuantType> quant;
  // Row-major shape as PyTorch/HF see it: GGUF's ne reversed, so a linear
  // weight of ne = [k, n] is [n, k].
  Shape shape;
  uint64_t offset = 0;  // into the data section
  uint64_t nbytes = 0;
};

class GgufFile {
 public:
  // Limits applied while parsing (defaults suit every real file).
  struct Limits {
    uint64_t max_tensors = 1u << 16;
    uint64_t max_metadata = 1u << 16;
    uint64_t max_string_bytes = 1u << 26;      // one string (chat templates are ~10 KB)
    uint64_t max_array_elems = 1u << 24;       // tokenizer vocabularies are ~260 K
    uint64_t max_metadata_bytes = 1ull << 30;  // sum over all metadata
    uint32_t max_dims = 4;
    uint64_t max_name_bytes = 63;  // a tensor name; ggml's GGML_MAX_NAME is 64 with the NUL
  };
  static std::unique_ptr<GgufFile> open(const std::filesystem::path& path, const Limits& limits);
  static std::unique_ptr<GgufFile> open(const std::filesystem::path& path) {
    return open(path, Limits{});
  }
  // Parses a GGUF held in memory (fuzzing, tests); the bytes must outlive the object.
  static std::unique_ptr<GgufFile> parse(const uint8_t* data, size_t size, const std::string& where,
                                         const Limits& limits);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  // `general.alignment` (default 32) and the data section's offset in the file
  // (a tensor's bytes start at data_offset() + offset).
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  // Every metadata key in file order. Values: integers and floats as JSON
  // numbers (u64 stays unsigned), bools, strings (bytes as stored; invalid
  // UTF-8 is a FormatError), arrays as JSON arrays.
  const nlohmann::ordered_json& metadata() const { return metadata_; }
  // Frees the metadata once read (a vocabulary as JSON values is ~30 MB for
  // Gemma's 262k tokens) and the header's mapped pages; metadata() is then an
  // empty object. Tensors stay.
  void drop_metadata();
  // Tensor infos in file order, and an index by name (duplicate names rejected).
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find(const std::string& name) const;
  // Pointer to a tensor's bytes in the mapping (nbytes long).
  const uint8_t* data(const GgufTensorInfo& t) const;
  // Tells the kernel the pages of a tensor are no longer needed.
  void release(const GgufTensorInfo& t) const;
  // The same for its bytes [0, to) as they are read for the last time, a
  // range at a time: the whole pages among them after `from` (a page holding
  // bytes of the tensor before `from` was read before and goes too).
  void release(const GgufTensorInfo& t, uint64_t from, uint64_t to) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  void release_pages(const uint8_t* begin, const uint8_t* end) const;
  std::filesystem::path path_;
  const uint8_t* map_ = nullptr;  // owned mapping (null when parsed from memory)
  size_t map_size_ = 0;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  nlohmann::ordered_json metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

}  // namespace hubzoo
