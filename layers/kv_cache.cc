#include "layers/kv_cache.h"

#include <algorithm>
#include <string>

#include "base/heap.h"
#include "ops/attend_online.h"
#include "ops/bf16.h"
#include "ops/f16.h"

namespace hubzoo {

static_assert(kKvPage == kKeyBlock, "a page is one attention key block");

KvCache::KvCache(int64_t num_layers, int64_t num_slots, int64_t row_size)
    : KvCache(std::vector<KvLayerSpec>(num_layers, KvLayerSpec{row_size, 0}), num_slots) {}

KvCache::KvCache(std::vector<KvLayerSpec> layers, int64_t num_slots)
    : layers_(std::move(layers)),
      num_slots_(num_slots),
      tables_(layers_.size() * num_slots),
      lengths_(num_slots, 0) {
  for (const auto& s : layers_) {
    if (s.row_size <= 0 || s.window < 0) {
      throw InvalidArgument("KvCache: a layer needs row_size > 0 and window >= 0");
    }
  }
}

namespace {

// Pages are small heap blocks; freed ones in the middle of the heap stay
// resident, and a later cache built on another thread (the scheduler's) cannot
// reuse them. Once this much is freed, the free memory goes back to the OS.
constexpr int64_t kTrimBytes = int64_t{8} << 20;

}  // namespace

KvCache::~KvCache() {
  const int64_t held = pages_.empty() ? 0 : bytes_;  // a moved-from cache holds nothing
  pages_.clear();
  if (freed_since_trim_ + held >= kTrimBytes) release_free_heap();
}

void KvCache::throw_not_held(int64_t pos) {
  throw InvalidArgument("KvCache: position " + std::to_string(pos) + " is not held");
}

int64_t KvCache::page_bytes(int64_t layer) const {
  return 2 * kKvPage * layers_[layer].row_size * element_bytes(layer);
}

int64_t KvCache::first_page(int64_t layer, int64_t n) const {
  const int64_t w = layers_[layer].window;
  return w > 0 ? std::max<int64_t>(0, n - w) / kKvPage : 0;
}

int64_t KvCache::missing_bytes(int64_t slot, int64_t n) const {
  int64_t need = 0;
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    const PageTable& t = tables_[index(layer, slot)];
    const int64_t held = static_cast<int64_t>(t.ids.size());
    for (int64_t b = first_page(layer, n); b * kKvPage < n; ++b) {
      if (b >= held || t.ids[b] < 0) need += page_bytes(layer);
    }
  }
  return need;
}

void KvCache::reserve(int64_t slot, int64_t n) {
  const int64_t need = missing_bytes(slot, n);
  if (need == 0) return;
  while (budget_bytes_ > 0 && bytes_ + need > budget_bytes_ && make_room_ && make_room_()) {
  }
  if (budget_bytes_ > 0 && bytes_ + need > budget_bytes_) {
    throw KvCacheFull("KV cache: " + std::to_string(need) + " more bytes for slot " +
                      std::to_string(slot) + " exceed the budget of " +
                      std::to_string(budget_bytes_) + " bytes (" + std::to_string(bytes_) +
                      " held)");
  }
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    PageTable& t = tables_[index(layer, slot)];
    const int64_t pages = (n + kKvPage - 1) / kKvPage;
    const int64_t floats = page_bytes(layer) / static_cast<int64_t>(sizeof(float));
    if (static_cast<int64_t>(t.ids.size()) < pages) {
      t.ids.resize(pages, -1);
      t.keys.resize(pages, nullptr);
      t.values.resize(pages, nullptr);
    }
    for (int64_t b = first_page(layer, n); b < pages; ++b) {
      if (t.ids[b] >= 0) continue;
      int32_t id;
      if (free_ids_.empty()) {
        id = static_cast<int32_t>(pages_.size());
        pages_.emplace_back();
        refs_.push_back(0);
        layer_of_.push_back(0);
      } else {
        id = free_ids_.back();
        free_ids_.pop_back();
      }
      // Zeroed: a blocked page's lanes past the last position are read (and masked).
      pages_[id].reset(new float[floats]());
      refs_[id] = 1;
      layer_of_[id] = static_cast<int32_t>(layer);
      t.ids[b] = id;
      t.keys[b] = pages_[id].get();
      t.values[b] = reinterpret_cast<const char*>(pages_[id].get()) + page_bytes(layer) / 2;
      bytes_ += page_bytes(layer);
      ++pages_held_;
    }
  }
}

void KvCache::free_page(int32_t id) {
  pages_[id].reset();
  free_ids_.push_back(id);
  bytes_ -= page_bytes(layer_of_[id]);
  --pages_held_;
  freed_since_trim_ += page_bytes(layer_of_[id]);
  if (freed_since_trim_ >= kTrimBytes) {
    release_free_heap();
    freed_since_trim_ = 0;
  }
}

void KvCache::release_page(int32_t id) {
  if (id < 0 || id >= static_cast<int32_t>(refs_.size()) || refs_[id] <= 0) {
    throw InvalidArgument("KvCache: page " + std::to_string(id) + " is not held");
  }
  if (--refs_[id] == 0) free_page(id);
}

void KvCache::retain_page(int32_t id) {
  if (id < 0 || id >= static_cast<int32_t>(refs_.size()) || refs_[id] <= 0) {
    throw InvalidArgument("KvCache: page " + std::to_string(id) + " is not held");
  }
  ++refs_[id];
}

void KvCache::drop_page(PageTable& t, int64_t b) {
  if (t.ids[b] < 0) return;
  const int32_t id = t.ids[b];
  t.ids[b] = -1;
  t.keys[b] = t.values[b] = nullptr;
  release_page(id);
}

int32_t KvCache::page_id(int64_t layer, int64_t slot, int64_t b) const {
  const PageTable& t = tables_[index(layer, slot)];
  return b >= 0 && b < static_cast<int64_t>(t.ids.size()) ? t.ids[b] : -1;
}

void KvCache::adopt_pages(int64_t slot, int64_t b, const std::vector<int32_t>& ids) {
  if (static_cast<int64_t>(ids.size()) != num_layers()) {
    throw InvalidArgument("KvCache: adopt_pages needs one page per layer");
  }
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    if (layers_[layer].window > 0) throw InvalidArgument("KvCache: windowed layers share no pages");
    if (page_id(layer, slot, b) >= 0) throw InvalidArgument("KvCache: the slot holds that page");
    if (layer_of_.at(ids[layer]) != layer || refs_[ids[layer]] <= 0) {
      throw InvalidArgument("KvCache: adopt_pages given a page of another layer or none");
    }
  }
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    PageTable& t = tables_[index(layer, slot)];
    if (static_cast<int64_t>(t.ids.size()) <= b) {
      t.ids.resize(b + 1, -1);
      t.keys.resize(b + 1, nullptr);
      t.values.resize(b + 1, nullptr);
    }
    const int32_t id = ids[layer];
    retain_page(id);
    t.ids[b] = id;
    t.keys[b] = pages_[id].get();
    t.values[b] = reinterpret_cast<const char*>(pages_[id].get()) + page_bytes(layer) / 2;
  }
}

void KvCache::set_length(int64_t slot, int64_t n) {
  lengths_[slot] = n;
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    if (layers_[layer].window == 0) continue;
    PageTable& t = tables_[index(layer, slot)];
    const int64_t first = std::min<int64_t>(first_page(layer, n), t.ids.size());
    for (int64_t b = 0; b < first; ++b) drop_page(t, b);
  }
}

void KvCache::set_token_id(int64_t slot, int64_t pos, int32_t id) {
  auto& ids = token_ids_.at(slot);
  if (pos < 0 || pos > static_cast<int64_t>(ids.size())) {
    throw InvalidArgument("KvCache: token id at position " + std::to_string(pos) + " of slot " +
                          std::to_string(slot) + " does not continue its ids");
  }
  if (pos == static_cast<int64_t>(ids.size())) {
    ids.push_back(id);
  } else {
    ids[pos] = id;
  }
}

void KvCache::clear(int64_t slot) {
  lengths_[slot] = 0;
  if (keeps_token_ids()) std::vector<int32_t>().swap(token_ids_[slot]);
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    PageTable& t = tables_[index(layer, slot)];
    for (int64_t b = 0; b < static_cast<int64_t>(t.ids.size()); ++b) drop_page(t, b);
    t = PageTable{};
  }
}

int64_t KvCache::bytes(int64_t layer, int64_t slot) const {
  const PageTable& t = tables_[index(layer, slot)];
  return static_cast<int64_t>(
             std::count_if(t.ids.begin(), t.ids.end(), [](int32_t id) { return id >= 0; })) *
         page_bytes(layer);
}

int64_t KvCache::slot_bytes_at(int64_t n) const {
  int64_t total = 0;
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    int64_t pages = (n + kKvPage - 1) / kKvPage;
    const int64_t w = layers_[layer].window;
    // One window spans at most ceil(w / 16) + 1 pages; within a step the old
    // window's pages are held beside the new one's.
    if (w > 0) pages = std::min(pages, 2 * ((w + kKvPage - 1) / kKvPage + 1));
    total += pages * page_bytes(layer);
  }
  return total;
}

void KvCache::store_row(int64_t layer, std::vector<const void*>& pages, int64_t pos,
                        const float* row, int64_t lane_stride, int64_t at) {
  void* page = page_of(pages, pos);
  const int64_t n = layers_[layer].row_size;
  const KvElement type = layers_[layer].element;
  if (type != KvElement::kF32) {
    // Converted a run at a time (as Numerics::round_kv rounds), then placed.
    uint16_t* out = static_cast<uint16_t*>(page) + at;
    uint16_t bits[256];
    for (int64_t c0 = 0; c0 < n; c0 += std::ssize(bits)) {
      const int64_t cn = std::min<int64_t>(std::ssize(bits), n - c0);
      if (type == KvElement::kBF16) {
        to_bf16(row + c0, cn, bits);
      } else {
        to_f16_saturated(row + c0, cn, bits);
      }
      for (int64_t c = 0; c < cn; ++c) out[(c0 + c) * lane_stride] = bits[c];
    }
  } else {
    float* out = static_cast<float*>(page) + at;
    for (int64_t c = 0; c < n; ++c) out[c * lane_stride] = row[c];
  }
}

void KvCache::store_key(int64_t layer, int64_t slot, int64_t pos, const float* key_row) {
  PageTable& t = tables_[index(layer, slot)];
  if (layers_[layer].blocked_keys) {  // [row_size][16]: lane pos % 16 of each row element
    store_row(layer, t.keys, pos, key_row, kKvPage, pos % kKvPage);
  } else {
    store_row(layer, t.keys, pos, key_row, 1, pos % kKvPage * row_size(layer));
  }
}

void KvCache::store_value(int64_t layer, int64_t slot, int64_t pos, const float* value_row) {
  store_row(layer, tables_[index(layer, slot)].values, pos, value_row, 1,
            pos % kKvPage * row_size(layer));
}

const float* KvCache::read_row(int64_t layer, const std::vector<const void*>& pages, int64_t pos,
                               int64_t at, int64_t n, float* scratch) const {
  const char* p = element(layer, pages, pos, at);
  switch (layers_[layer].element) {
    case KvElement::kBF16:
      from_bf16(reinterpret_cast<const uint16_t*>(p), n, scratch);
      return scratch;
    case KvElement::kF16:
      from_f16(reinterpret_cast<const uint16_t*>(p), n, scratch);
      return scratch;
    default:
      return reinterpret_cast<const float*>(p);
  }
}

const float* KvCache::read_key(int64_t layer, int64_t slot, int64_t pos, int64_t offset, int64_t n,
                               float* scratch) const {
  const std::vector<const void*>& pages = tables_[index(layer, slot)].keys;
  if (!layers_[layer].blocked_keys) {
    return read_row(layer, pages, pos, pos % kKvPage * row_size(layer) + offset, n, scratch);
  }
  // [row_size][16]: element e of the row is lane pos % 16 of the page's row e.
  const char* lane = element(layer, pages, pos, offset * kKvPage + pos % kKvPage);
  const KvElement type = layers_[layer].element;
  if (type != KvElement::kF32) {
    const uint16_t* in = reinterpret_cast<const uint16_t*>(lane);
    for (int64_t e = 0; e < n; ++e) {
      scratch[e] =
          type == KvElement::kBF16 ? bf16_to_float(in[e * kKvPage]) : f16_to_f32(in[e * kKvPage]);
    }
  } else {
    const float* in = reinterpret_cast<const float*>(lane);
    for (int64_t e = 0; e < n; ++e) scratch[e] = in[e * kKvPage];
  }
  return scratch;
}

const float* KvCache::read_value(int64_t layer, int64_t slot, int64_t pos, int64_t offset,
                                 int64_t n, float* scratch) const {
  return read_row(layer, tables_[index(layer, slot)].values, pos,
                  pos % kKvPage * row_size(layer) + offset, n, scratch);
}

int64_t KvCache::page_regions(int64_t layer, int64_t slot, int64_t begin, int64_t end,
                              int64_t max_bytes, std::vector<ThreadPool::Region>& out) const {
  const PageTable& t = tables_[index(layer, slot)];
  const int64_t half = kKvPage * layers_[layer].row_size * element_bytes(layer);
  const int64_t pages = std::min<int64_t>(static_cast<int64_t>(t.keys.size()),
                                          (std::max<int64_t>(0, end) + kKvPage - 1) / kKvPage);
  int64_t bytes = 0;
  for (int64_t b = std::max<int64_t>(0, begin) / kKvPage; b < pages; ++b) {
    const int64_t page = (t.keys[b] ? half : 0) + (t.values[b] ? half : 0);
    if (bytes + page > max_bytes) break;
    if (t.keys[b]) out.push_back({t.keys[b], half});
    if (t.values[b]) out.push_back({t.values[b], half});
    bytes += page;
  }
  return bytes;
}

const float* KvCache::read_key_rows(int64_t layer, int64_t slot, int64_t pos, int64_t rows,
                                    float* scratch) const {
  if (rows < 1 || pos % kKvPage + rows > kKvPage) {
    throw InvalidArgument("KvCache: key rows beyond their page");
  }
  if (layers_[layer].blocked_keys) {
    throw InvalidArgument("KvCache: layer " + std::to_string(layer) + " keeps blocked keys");
  }
  return read_key(layer, slot, pos, 0, rows * row_size(layer), scratch);
}

}  // namespace hubzoo
