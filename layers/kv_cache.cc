#include "layers/kv_cache.h"

#include <algorithm>
#include <string>

#include "ops/attend_online.h"

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
    if (s.blocked_keys && s.window > 0) {
      throw InvalidArgument("KvCache: a windowed layer cannot keep blocked keys");
    }
  }
}

void KvCache::throw_not_held(int64_t pos) {
  throw InvalidArgument("KvCache: position " + std::to_string(pos) + " is not held");
}

int64_t KvCache::page_bytes(int64_t layer) const {
  return 2 * kKvPage * layers_[layer].row_size * static_cast<int64_t>(sizeof(float));
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
  if (budget_bytes_ > 0 && bytes_ + need > budget_bytes_) {
    throw KvCacheFull("KV cache: " + std::to_string(need) + " more bytes for slot " +
                      std::to_string(slot) + " exceed the budget of " +
                      std::to_string(budget_bytes_) + " bytes (" + std::to_string(bytes_) +
                      " held)");
  }
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    PageTable& t = tables_[index(layer, slot)];
    const int64_t pages = (n + kKvPage - 1) / kKvPage, rows = kKvPage * row_size(layer);
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
      } else {
        id = free_ids_.back();
        free_ids_.pop_back();
      }
      // Zeroed: a blocked page's lanes past the last position are read (and masked).
      pages_[id].reset(new float[2 * rows]());
      t.ids[b] = id;
      t.keys[b] = pages_[id].get();
      t.values[b] = pages_[id].get() + rows;
      bytes_ += page_bytes(layer);
      ++pages_held_;
    }
  }
}

void KvCache::release_page(PageTable& t, int64_t b, int64_t layer) {
  if (t.ids[b] < 0) return;
  pages_[t.ids[b]].reset();
  free_ids_.push_back(t.ids[b]);
  t.ids[b] = -1;
  t.keys[b] = t.values[b] = nullptr;
  bytes_ -= page_bytes(layer);
  --pages_held_;
}

void KvCache::set_length(int64_t slot, int64_t n) {
  lengths_[slot] = n;
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    if (layers_[layer].window == 0) continue;
    PageTable& t = tables_[index(layer, slot)];
    const int64_t first = std::min<int64_t>(first_page(layer, n), t.ids.size());
    for (int64_t b = 0; b < first; ++b) release_page(t, b, layer);
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
    for (int64_t b = 0; b < static_cast<int64_t>(t.ids.size()); ++b) release_page(t, b, layer);
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

void KvCache::store_key(int64_t layer, int64_t slot, int64_t pos, const float* key_row) {
  const KvLayerSpec& s = layers_[layer];
  if (!s.blocked_keys) {
    std::copy_n(key_row, s.row_size, key(layer, slot, pos));
    return;
  }
  float* block = page_of(tables_[index(layer, slot)].keys, pos) + pos % kKvPage;
  for (int64_t c = 0; c < s.row_size; ++c) block[c * kKvPage] = key_row[c];
}

}  // namespace hubzoo
