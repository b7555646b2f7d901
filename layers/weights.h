// Loading a checkpoint's tensors under the tensor-mapping contract: every
// tensor is taken exactly once with the shape the config implies, or ignored
// with a stated reason; finish() reports whatever is left.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/quant_cache.h"
#include "io/safetensors.h"
#include "layers/hub_quant.h"
#include "layers/numerics.h"
#include "layers/quant_mix.h"
#include "ops/matmul.h"
#include "ops/weight_arena.h"

namespace hubzoo {

// A float32 vector that points into the mapped checkpoint when it is stored
// as F32 and used as such (zero-copy), and owns a converted copy otherwise.
class FloatWeights {
 public:
  FloatWeights() = default;
  // Owns `values` (a layer built without a checkpoint, e.g. in tests).
  explicit FloatWeights(std::vector<float> values)
      : size_(static_cast<int64_t>(values.size())), owned_(std::move(values)) {
    data_ = owned_.data();
  }
  // A copy of an owning FloatWeights points at its own copy of the values.
  FloatWeights(const FloatWeights& o) : data_(o.data_), size_(o.size_), owned_(o.owned_) {
    if (!owned_.empty()) data_ = owned_.data();
  }
  FloatWeights& operator=(const FloatWeights& o) {
    if (this != &o) *this = FloatWeights(o);
    return *this;
  }
  FloatWeights(FloatWeights&&) noexcept = default;
  FloatWeights& operator=(FloatWeights&&) noexcept = default;
  const float* data() const { return data_; }
  int64_t size() const { return size_; }
  float operator[](int64_t i) const { return data_[i]; }

 private:
  friend class WeightLoader;
  const float* data_ = nullptr;
  int64_t size_ = 0;
  std::vector<float> owned_;
};

class WeightLoader {
 public:
  // With numerics.bf16 every weight is rounded to bf16 (matrices are packed as
  // bf16; vectors hold bf16 values in float32), as transformers' .to(bfloat16).
  explicit WeightLoader(std::shared_ptr<const Checkpoint> checkpoint, Numerics numerics = {});
  const Numerics& numerics() const { return numerics_; }

  bool contains(const std::string& name) const;
  // The checkpoint's quantization_config (GPTQ, AWQ, compressed-tensors): its
  // quantized linears are taken as Q4_G/Q8_G matrices by take_packed.
  void set_hub_quant(std::optional<HubQuant> hub) { hub_ = std::move(hub); }
  // Whether take_packed(name) gives a block-quantized matrix (stored so, or --quantize).
  bool quantized(const std::string& name) const;
  // Takes a tensor of exactly `shape` (F32, BF16 or F16) as float32.
  FloatWeights take(const std::string& name, const Shape& shape);
  // Takes a [n, k] linear weight and packs it for matmul; the mapped pages of
  // the original are released afterwards.
  PackedMatrix take_packed(const std::string& name, int64_t n, int64_t k);
  // The same for a table only read a row at a time (an untied embedding):
  // never kept as panels for the int8 kernels, which it never meets.
  PackedMatrix take_lookup_table(const std::string& name, int64_t n, int64_t k);
  // Takes [ns[i], k] linear weights and packs them as one matrix, their rows
  // stacked in order (a fused projection); see pack_weights_concat.
  PackedMatrix take_packed_concat(const std::vector<std::string>& names,
                                  const std::vector<int64_t>& ns, int64_t k);
  // As take_packed, but float32 even under bf16 numerics: the stored values,
  // unrounded (a small matrix whose precision decides something discrete, e.g.
  // an MoE router in fused mode).
  PackedMatrix take_packed_fp32(const std::string& name, int64_t n, int64_t k);
  // Takes a stacked [count, n, k] tensor (fused MoE experts) and packs each of
  // its matrices cut into `parts` equal row blocks (torch.chunk over n):
  // count * parts matrices of [n / parts, k], matrix by matrix.
  std::vector<PackedMatrix> take_packed_stack(const std::string& name, int64_t count, int64_t n,
                                              int64_t k, int64_t parts = 1);
  // `p` with bf16_activations set where this loader's numerics multiply it by
  // bf16 activations (eager bf16 and bf16dot; ops/matmul.h), and laid out for
  // the tile chain where matmul_bf16_tiles(). take_packed* mark what they
  // return; a matrix packed outside the loader is marked with this.
  PackedMatrix mark_activations(PackedMatrix p) const;
  // Whether bf16 matrices multiplying bf16 activations take the tile layout here.
  bool tiles_wanted() const;
  // Marks a tensor as deliberately unused.
  void ignore(const std::string& name, const std::string& reason);
  // Throws TensorMappingError naming every tensor neither taken nor ignored.
  void finish() const;
  // Once every weight is taken: asks for the panels made so far to be backed
  // by huge pages, on a thread of its own (WeightArena::collapse); returns
  // at once. Panels made later start new chunks.
  void request_huge_pages() { arena_.collapse(); }

  const std::map<std::string, std::string>& ignored() const { return ignored_; }
  // Matrices taken block-quantized (from the file or quantized on load).
  int64_t quantized_matrices() const { return quantized_; }
  // Of their parts, those also kept as panels for the int8 kernels (ops/quant.h).
  int64_t panel_matrices() const { return panels_; }
  // Bytes of every weight taken, as kept for compute (packed, quantized or float32).
  int64_t bytes() const { return bytes_; }
  // --quantize results (and the Hub's int4/int8 matrices in int8 mode) read
  // from the quantize-on-load cache, and written to it (io/quant_cache.h;
  // QuantCache::from_env() unless set_quant_cache says otherwise).
  int64_t quant_cache_hits() const { return cache_hits_; }
  int64_t quant_cache_stores() const { return cache_stores_; }
  void set_quant_cache(QuantCache cache) { quant_cache_ = std::move(cache); }

 private:
  const TensorInfo& claim(const std::string& name, const Shape& shape);
  PackedMatrix take_packed_as(const std::string& name, int64_t n, int64_t k, bool bf16);
  static bool transformed(const TensorInfo& info);
  // Whether `name` ("<prefix>.weight") is a linear the hub quantization stores packed.
  bool hub_quantized(const std::string& name) const;
  // A Hub-quantized matrix (hub_quant.h), its tensors marked used; packed as
  // blocks, or dense in the dtype under --quantize dequantize (bf16: whether
  // its floats are rounded to bf16).
  std::shared_ptr<QuantMatrix> take_hub_matrix(const std::string& name, int64_t n, int64_t k);
  PackedMatrix take_hub_quantized(const std::string& name, int64_t n, int64_t k, bool bf16);
  // The tensor as float32 with its transforms applied (quantized: dequantized rows).
  std::vector<float> read_f32(const std::string& name, const TensorInfo& info) const;
  std::shared_ptr<const QuantMatrix> quant_view(const std::string& name, const TensorInfo& info,
                                                int64_t n, int64_t k, int64_t first_row) const;
  PackedMatrix pack_quant(std::vector<std::shared_ptr<const QuantMatrix>> parts) const;
  // Rows [r0, r1) of the tensor as float32 with its transforms applied, into out.
  void read_f32_rows(const std::string& name, const TensorInfo& info, int64_t r0, int64_t r1,
                     float* out) const;
  // read(r0, r1, out): rows [r0, r1) of a matrix as floats.
  using RowReader = std::function<void(int64_t r0, int64_t r1, float* out)>;
  // The [n, k] matrix `name`, stored as `source` and read as floats a chunk of
  // rows at a time by `read` (only where the quantize-on-load cache misses),
  // quantized to the type --quantize gives it (layers/quant_mix.h).
  PackedMatrix quantize(const std::string& name, int64_t n, int64_t k,
                        const QuantCacheSource& source, const RowReader& read) const;
  // Owned rows q (quantized on load, or converted from the Hub's format)
  // stored as the quantize-on-load cache's entry `key` (io/quant_cache.h)
  // and read from the file's pages from then on. nullopt where the store
  // fails: q keeps its rows then. Counts the store.
  std::optional<QuantCacheEntry> store_rows(QuantMatrix& q, const QuantCacheKey& key) const;
  // Whether matrices of type t get panels here: int8 numerics, a CPU whose
  // int8 kernels read them (quant_reads_panels), not a lookup table.
  bool makes_panels(QuantType t) const;
  // q's panels where makes_panels, in the loader's arena; the pages of
  // `cached` (q's rows in the cache) dropped as they are read.
  void attach_loader_panels(QuantMatrix& q, const std::optional<QuantCacheEntry>& cached) const;
  std::shared_ptr<const Checkpoint> ckpt_;
  Numerics numerics_;
  mutable int64_t quantized_ = 0;
  mutable int64_t panels_ = 0;
  bool panels_allowed_ = true;  // false inside take_lookup_table
  // Where the panels go: a load's chunks, huge pages after request_huge_pages.
  // mutable: quant_view (const) allocates in it.
  mutable WeightArena arena_;
  int64_t bytes_ = 0;
  bool bf16_fp32_only_ = false;
  QuantMixModel mix_model_;
  QuantCache quant_cache_ = QuantCache::from_env();
  mutable int64_t cache_hits_ = 0, cache_stores_ = 0;
  std::optional<HubQuant> hub_;
  std::map<std::string, bool> used_;
  std::map<std::string, std::string> ignored_;
};

}  // namespace hubzoo
