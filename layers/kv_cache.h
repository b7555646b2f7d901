// Keys and values of every attention layer for a fixed number of sequence
// slots, in pages. A page holds kKvPage (16) consecutive positions of one
// layer of one slot, aligned with attention's 16-position key blocks
// (ops/attend_online.h): page b holds positions 16b .. 16b + 15 as keys
// [16][row_size] (or, blocked, [row_size][16]) then values [16][row_size],
// where a layer's row is num_kv_heads * head_dim of that layer (layers may
// differ). Elements are float32, or 2 bytes in a layer kept as bf16 (the
// bf16 modes) or IEEE half (the int8 mode): keys and values are values of
// that type already (Numerics::round_kv), so storing them so loses nothing
// and reading them back gives the same floats. Each (layer, slot) has a page
// table: page b's id and pointers.
// A slot holds only the pages its positions use, allocated as it grows and
// released when it is cleared, so memory follows what requests use rather
// than max_context per slot.
//
// A layer with a window W > 0 (a sliding-window attention layer) keeps only
// the pages that hold its last W positions: once a forward pass completes at
// length n (set_length), pages wholly before n - W are released. Which
// positions attention may read is attention's business (layers/attention.h);
// the cache only guarantees that a windowed layer still holds positions
// [length - W, length). KV-shared layers (Gemma 4) have no cache layer of
// their own: they read their producer's pages.
//
// Memory is budgeted in bytes (set_budget_bytes; 0: unbounded): a page that
// would take the cache past it is refused with KvCacheFull before anything
// is allocated, so the cache never holds more than its budget. The engine
// decides which request owns which slot and admits requests so that pages
// are there when they need them (engine/scheduler.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/error.h"
#include "ops/attend_online.h"
#include "ops/thread_pool.h"

namespace hubzoo {

constexpr int64_t kKvPage = 16;  // positions per page (attention's key block)

// A page the cache's budget cannot hold.
struct KvCacheFull : Error {
  using Error::Error;
};

struct KvLayerSpec {
  int64_t row_size = 0;  // num_kv_heads * head_dim of the layer
  int64_t window = 0;    // > 0: keep only the pages of the last `window` positions
  // Keys of a page kept transposed, [row_size][16]: for each key/value head
  // the [head_dim][16] block ops/attend_online.h reads, so attention never
  // transposes them (read_key() gathers a row from the lanes; read_key_rows()
  // is then not available).
  bool blocked_keys = false;
  KvElement element = KvElement::kF32;  // how keys and values are stored
};

class KvCache {
 public:
  // Every layer alike: rows of `row_size`, every position kept.
  KvCache(int64_t num_layers, int64_t num_slots, int64_t row_size);
  KvCache(std::vector<KvLayerSpec> layers, int64_t num_slots);
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  ~KvCache();

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t num_slots() const { return num_slots_; }
  int64_t row_size(int64_t layer) const { return layers_[layer].row_size; }
  int64_t window(int64_t layer) const { return layers_[layer].window; }
  KvElement element_type(int64_t layer) const { return layers_[layer].element; }
  // Number of positions a slot has seen (all layers hold the same count once a
  // forward pass completes; a windowed layer keeps only its window's pages).
  int64_t length(int64_t slot) const { return lengths_[slot]; }
  // Allocates the pages positions [0, n) of a slot need in every layer (a
  // windowed layer: those of its last min(n, window) positions). Throws
  // KvCacheFull, allocating nothing, when they do not fit the budget.
  void reserve(int64_t slot, int64_t n);
  // Called once per forward pass, after every layer wrote position n - 1;
  // releases the pages windowed layers no longer need.
  void set_length(int64_t slot, int64_t n);
  void clear(int64_t slot);  // releases every page of the slot

  // Page sharing (prefix reuse, engine/prefix_cache.h): a page may sit in
  // several slots' page tables and in a prefix index at once, counted by
  // references; its memory is released with the last one. Shared pages are
  // never written: a slot writes only positions past the pages it adopted.
  // Page b of a (layer, slot): its id, or -1 when not held.
  int32_t page_id(int64_t layer, int64_t slot, int64_t b) const;
  void retain_page(int32_t id);  // one more reference (a prefix index's)
  int32_t page_refs(int32_t id) const { return refs_.at(id); }
  void release_page(int32_t id);  // one less; the last frees the page
  // Makes pages ids[layer] (one per layer) page b of a slot, which must not
  // hold a page b yet; each gains a reference. Window-0 layers only.
  void adopt_pages(int64_t slot, int64_t b, const std::vector<int32_t>& ids);
  // Called by reserve() while the budget has no room for its pages: frees
  // what it can (a prefix index evicting an unused page), false when nothing.
  void set_make_room(std::function<bool()> make_room) { make_room_ = std::move(make_room); }

  // Bytes budget: 0 (the default) for none.
  void set_budget_bytes(int64_t bytes) { budget_bytes_ = bytes; }
  int64_t budget_bytes() const { return budget_bytes_; }
  // Bytes of the pages held, in all and for one (layer, slot).
  int64_t bytes() const { return bytes_; }
  int64_t bytes(int64_t layer, int64_t slot) const;
  int64_t pages_held() const { return pages_held_; }
  // Bytes of one page of a layer: keys and values of kKvPage positions.
  int64_t page_bytes(int64_t layer) const;
  // The most bytes one slot's pages take while it grows to n positions
  // (a windowed layer may hold up to two windows' pages within a step, the
  // old window until the step completes and the new one): what a KV budget
  // must reserve per sequence of that length.
  int64_t slot_bytes_at(int64_t n) const;

  // The token id of each position of each slot, kept once asked for (a model
  // that may have to recompute a slot's cache from its tokens: Phi-3's
  // LongRoPE when a sequence first grows past its original length). clear()
  // forgets a slot's; they take 4 bytes a position.
  void keep_token_ids() { token_ids_.resize(num_slots_); }
  bool keeps_token_ids() const { return !token_ids_.empty(); }
  void set_token_id(int64_t slot, int64_t pos, int32_t id);
  const std::vector<int32_t>& token_ids(int64_t slot) const { return token_ids_.at(slot); }

  bool blocked_keys(int64_t layer) const { return layers_[layer].blocked_keys; }
  // Write the key or value row of `pos` (row_size floats; a 16-bit layer
  // rounds them to its type as Numerics::round_kv does, exact for the values
  // of that type it is given) in the layer's layout. The position's page
  // must be reserved.
  void store_key(int64_t layer, int64_t slot, int64_t pos, const float* key_row);
  void store_value(int64_t layer, int64_t slot, int64_t pos, const float* value_row);
  // Page b's keys (blocked: [row_size][16]) and values ([16][row_size]) at
  // key_pages()[b] and value_pages()[b], elements of element_type(layer)
  // (uint16_t bits for the 16-bit ones); null for a page a windowed layer released. Valid until the
  // slot's page table changes (reserve, set_length, clear).
  const void* const* key_pages(int64_t layer, int64_t slot) const {
    return tables_[index(layer, slot)].keys.data();
  }
  const void* const* value_pages(int64_t layer, int64_t slot) const {
    return tables_[index(layer, slot)].values.data();
  }

  // The memory of the pages of a (layer, slot) that hold positions
  // [begin, end), appended to `out` in position order (a page's keys, then
  // its values), pages not held left out, up to the first page that would
  // take what it appends past max_bytes: what attention reads first of them,
  // for a thread to fetch ahead (ThreadPool::prefetch_after_next_job).
  // Returns the bytes appended.
  int64_t page_regions(int64_t layer, int64_t slot, int64_t begin, int64_t end, int64_t max_bytes,
                       std::vector<ThreadPool::Region>& out) const;

  // Floats [offset, offset + n) of the key (value) row of `pos`, which the
  // slot must hold: a pointer into the page (float32 rows) or into
  // `scratch` (n floats), converted (16-bit layers) or gathered from the
  // lanes of blocked keys.
  const float* read_key(int64_t layer, int64_t slot, int64_t pos, int64_t offset, int64_t n,
                        float* scratch) const;
  const float* read_value(int64_t layer, int64_t slot, int64_t pos, int64_t offset, int64_t n,
                          float* scratch) const;
  // Key rows [pos, pos + rows) of one page as [rows][row_size] floats (in
  // the page, or converted into `scratch`); layers without blocked keys only.
  const float* read_key_rows(int64_t layer, int64_t slot, int64_t pos, int64_t rows,
                             float* scratch) const;

 private:
  // Page b of a (layer, slot): keys[b], values[b] into pages_[ids[b]]; id -1
  // and null pointers for a page not held.
  struct PageTable {
    std::vector<int32_t> ids;
    std::vector<const void*> keys, values;
  };
  int64_t index(int64_t layer, int64_t slot) const { return layer * num_slots_ + slot; }
  // The page holding `pos` (writable: the cache owns every page it hands
  // out; tables keep them const for readers).
  static void* page_of(const std::vector<const void*>& pages, int64_t pos) {
    const uint64_t b = static_cast<uint64_t>(pos) / kKvPage;
    if (b >= pages.size() || !pages[b]) throw_not_held(pos);
    return const_cast<void*>(pages[b]);
  }
  // Element `at` of the page holding `pos` in table column `pages` of a layer, as bytes.
  const char* element(int64_t layer, const std::vector<const void*>& pages, int64_t pos,
                      int64_t at) const {
    return static_cast<const char*>(page_of(pages, pos)) + at * element_bytes(layer);
  }
  int64_t element_bytes(int64_t layer) const {
    return layers_[layer].element == KvElement::kF32 ? 4 : 2;
  }
  void store_row(int64_t layer, std::vector<const void*>& pages, int64_t pos, const float* row,
                 int64_t lane_stride, int64_t at);
  const float* read_row(int64_t layer, const std::vector<const void*>& pages, int64_t pos,
                        int64_t at, int64_t n, float* scratch) const;
  [[noreturn]] static void throw_not_held(int64_t pos);
  // First page a (layer) must hold at length n.
  int64_t first_page(int64_t layer, int64_t n) const;
  // Pages reserve(slot, n) would add.
  int64_t missing_bytes(int64_t slot, int64_t n) const;
  void drop_page(PageTable& t, int64_t b);  // a table's reference to its page b
  void free_page(int32_t id);

  std::vector<KvLayerSpec> layers_;
  int64_t num_slots_;
  std::vector<PageTable> tables_;  // [layer * num_slots + slot]
  std::vector<std::unique_ptr<float[]>> pages_;
  std::vector<int32_t> refs_;      // [id]: page tables and indexes holding the page
  std::vector<int32_t> layer_of_;  // [id]: the layer whose page it is
  std::vector<int32_t> free_ids_;  // ids in pages_ whose memory was released
  std::vector<int64_t> lengths_;
  std::vector<std::vector<int32_t>> token_ids_;  // [slot][position], when kept
  int64_t budget_bytes_ = 0, bytes_ = 0, pages_held_ = 0;
  int64_t freed_since_trim_ = 0;  // page bytes freed since the heap was last trimmed
  std::function<bool()> make_room_;
};

}  // namespace hubzoo
