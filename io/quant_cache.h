// Quantize-on-load results on disk (--quantize): the blocks a matrix
// quantizes to, kept under a key made from what was quantized, so that
//  - a later load of the same weights maps them instead of quantizing again
//    (SmolLM2-135M q4_k_m: the quantizers take most of a second on 2 cores);
//  - the rows are pages of a file, which the loader drops once the int8
//    kernels' panels are made from them (ops/quant.h) and which read back
//    from the file if anything needs them again, rather than anonymous memory
//    held beside the panels for the life of the model.
//
// An entry is one file, <dir>/<32 hex digits of the key>.hzq: a header of
// kQuantCacheHeaderBytes, then the rows (n * row_bytes bytes, page-aligned
// in the file so that the mapping hands them out aligned). The header holds
// a magic string, the format version, what the rows are (type, n, k,
// row_bytes), the key again and an XXH3-64 checksum of the rows. A file that
// differs from what the caller expects in any field, is not a regular file,
// has another size or fails its checksum is a miss, never an error: the
// next store replaces it. Stores write a temporary file in the directory and
// rename it into place, so readers see a whole entry or none, and two
// processes storing the same key both leave a valid one.
//
// The key covers the quantizer's input (the stored bytes and how they become
// floats, n, k), the block type and the quantizers' revision
// (kQuantizerRevision, ops/quant.h): an entry can only be read back by code
// that would have written the same bytes.
//
// The directory is bounded: once its entries would pass max_bytes
// (HUBZOO_QUANT_CACHE_MAX, default kQuantCacheDefaultMaxBytes), the least
// recently used go (a hit refreshes an entry's modification time), down to
// 7/8 of the bound so that the next stores do not each scan the directory
// again. An entry larger than the bound alone is not stored. The directory is
// listed once per QuantCache (a load) and then tracked; a store that may
// pass the bound lists it again, which also removes temporary files older
// than a day (a store that died half-way). Entries in use by this or another
// process may go: their mappings stay valid, and the next load quantizes
// them again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant_type.h"

namespace hubzoo {

constexpr uint64_t kQuantCacheHeaderBytes = 4096;
constexpr uint64_t kQuantCacheDefaultMaxBytes = uint64_t{32} << 30;

// A size as HUBZOO_QUANT_CACHE_MAX gives it: digits, then optionally K, M,
// G or T (powers of 1024, with or without "iB" / "B"). InvalidArgument
// naming `what` otherwise, or past 2^63.
uint64_t parse_byte_size(const std::string& text, const std::string& what);

struct QuantCacheKey {
  uint64_t lo = 0, hi = 0;
  std::string hex() const;  // 32 hex digits, hi first
  bool operator==(const QuantCacheKey&) const = default;
};

// What a matrix to quantize is read from: the bytes a checkpoint stores and
// how a loader turns them into floats (a TensorInfo's dtype, quant,
// row_order and add; io/safetensors.h). Keying on these rather than on the
// floats lets a load that finds its entry skip the conversion too.
struct QuantCacheSource {
  const void* data = nullptr;
  uint64_t bytes = 0;
  DType dtype = DType::F32;
  std::optional<QuantType> quant;                   // stored block-quantized (dequantized first)
  const std::vector<int64_t>* row_order = nullptr;  // null or empty: stored order
  float add = 0.0f;
};

// The key of quantizing the [n, k] matrix read from `source` to type t with
// the quantizers of `revision`.
QuantCacheKey quant_cache_key(uint32_t revision, QuantType t, int64_t n, int64_t k,
                              const QuantCacheSource& source);

// What an entry's rows are; find() misses unless the file says the same.
struct QuantCacheShape {
  QuantType type = QuantType::Q8_0;
  int64_t n = 0, k = 0, row_bytes = 0;
  uint64_t bytes() const { return static_cast<uint64_t>(n) * static_cast<uint64_t>(row_bytes); }
};

// An entry's rows, mapped read-only from its file.
struct QuantCacheEntry {
  // The first row; the pointer keeps the mapping alive.
  std::shared_ptr<const uint8_t> rows;
  uint64_t bytes = 0;
  // Drops the resident pages wholly inside rows [from, to) bytes (they read
  // back from the file if touched again).
  void release(uint64_t from, uint64_t to) const;
};

class QuantCache {
 public:
  // An empty dir disables the cache: find() misses and store() keeps nothing.
  // max_bytes 0: unbounded.
  explicit QuantCache(std::filesystem::path dir = {},
                      uint64_t max_bytes = kQuantCacheDefaultMaxBytes)
      : dir_(std::move(dir)), max_bytes_(max_bytes), usage_(std::make_shared<Usage>()) {}
  // The cache the environment asks for: $HUBZOO_QUANT_CACHE, a directory, or
  // "0" / "off" for none; unset, $HUBZOO_CACHE/quantized, else
  // $XDG_CACHE_HOME/hubzoo/quantized, else $HOME/.cache/hubzoo/quantized.
  // Its bound: $HUBZOO_QUANT_CACHE_MAX (parse_byte_size; 0: unbounded).
  static QuantCache from_env();

  bool enabled() const { return !dir_.empty(); }
  const std::filesystem::path& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_bytes_; }
  std::filesystem::path path_of(const QuantCacheKey& key) const;

  // The entry stored under `key` if it holds rows of exactly `shape` and
  // they pass their checksum (which reads them once).
  std::optional<QuantCacheEntry> find(const QuantCacheKey& key, const QuantCacheShape& shape) const;
  // Writes `rows` (shape.bytes() bytes) under `key` and returns the stored
  // entry, or nothing where the directory cannot take it (not writable, the
  // disk full, the entry alone past max_bytes): the caller then keeps its own
  // copy, and no partial file is left. Then evicts as above.
  std::optional<QuantCacheEntry> store(const QuantCacheKey& key, const QuantCacheShape& shape,
                                       const uint8_t* rows) const;

 private:
  // The entries' bytes as last listed plus what this cache stored since
  // (shared by copies of the cache: one load's loader and its copies).
  struct Usage {
    std::mutex mu;
    bool listed = false;
    uint64_t bytes = 0;
  };
  // Makes room for `incoming` more bytes (see above); `keep` is never removed.
  void evict_for(uint64_t incoming, const std::filesystem::path& keep) const;

  std::filesystem::path dir_;
  uint64_t max_bytes_ = kQuantCacheDefaultMaxBytes;
  std::shared_ptr<Usage> usage_;
};

}  // namespace hubzoo
