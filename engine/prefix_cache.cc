#include "engine/prefix_cache.h"

#include <algorithm>
#include <string>

namespace hubzoo {
namespace {

// splitmix64's finaliser: a well-mixed 64-bit step of the chain.
uint64_t mix(uint64_t h, uint64_t x) {
  uint64_t z = h ^ (x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t model_seed(const std::string& architecture, const std::string& snapshot,
                    const std::string& gguf_file, const std::string& numerics) {
  uint64_t h = 0x6875627a6f6full;  // "hubzoo"
  for (const std::string* s : {&architecture, &snapshot, &gguf_file, &numerics}) {
    h = mix(h, s->size());
    for (unsigned char c : *s) h = mix(h, c);
  }
  return h;
}

PrefixCache::PrefixCache(KvCache& cache, uint64_t seed) : cache_(cache), seed_(seed) {}

PrefixCache::~PrefixCache() {
  for (auto& [hash, e] : entries_) {
    for (int32_t id : e.ids) cache_.release_page(id);
  }
}

bool PrefixCache::supported(const KvCache& cache) {
  if (cache.keeps_token_ids()) return false;
  for (int64_t layer = 0; layer < cache.num_layers(); ++layer) {
    if (cache.window(layer) > 0) return false;
  }
  return cache.num_layers() > 0;
}

uint64_t PrefixCache::block_hash(uint64_t parent, const int64_t* tokens) const {
  uint64_t h = mix(seed_, parent);
  for (int64_t i = 0; i < kKvPage; ++i) h = mix(h, static_cast<uint64_t>(tokens[i]));
  return h;
}

void PrefixCache::touch(uint64_t hash, Entry& e) {
  lru_.erase(e.last_used);
  e.last_used = ++clock_;
  lru_[e.last_used] = hash;
}

int64_t PrefixCache::adopt(int64_t slot, const std::vector<int64_t>& tokens, int64_t limit) {
  uint64_t parent = seed_;
  int64_t b = 0;
  for (; (b + 1) * kKvPage <= limit; ++b) {
    const int64_t* block = tokens.data() + b * kKvPage;
    const uint64_t hash = block_hash(parent, block);
    auto it = entries_.find(hash);
    if (it == entries_.end() || it->second.parent != parent ||
        !std::equal(block, block + kKvPage, it->second.tokens.begin())) {
      break;
    }
    cache_.adopt_pages(slot, b, it->second.ids);
    touch(hash, it->second);
    parent = hash;
  }
  return b * kKvPage;
}

void PrefixCache::insert(int64_t slot, const std::vector<int64_t>& tokens, int64_t n) {
  uint64_t parent = seed_;
  for (int64_t b = 0; (b + 1) * kKvPage <= n; ++b) {
    const int64_t* block = tokens.data() + b * kKvPage;
    const uint64_t hash = block_hash(parent, block);
    auto it = entries_.find(hash);
    if (it != entries_.end()) {
      // Indexed already (this slot's own adopted page, or another request's
      // with the same tokens); a colliding entry of other tokens ends the chain.
      if (it->second.parent != parent ||
          !std::equal(block, block + kKvPage, it->second.tokens.begin())) {
        return;
      }
      touch(hash, it->second);
      parent = hash;
      continue;
    }
    Entry e;
    e.parent = parent;
    std::copy(block, block + kKvPage, e.tokens.begin());
    for (int64_t layer = 0; layer < cache_.num_layers(); ++layer) {
      const int32_t id = cache_.page_id(layer, slot, b);
      if (id < 0) return;  // not held (cannot happen for window-0 layers)
      e.ids.push_back(id);
    }
    for (int32_t id : e.ids) cache_.retain_page(id);
    if (b > 0) ++entries_.at(parent).children;
    pages_ += static_cast<int64_t>(e.ids.size());
    auto [at, fresh] = entries_.emplace(hash, std::move(e));
    touch(hash, at->second);
    parent = hash;
  }
}

bool PrefixCache::evict_one() { return evict_lru_leaf() > 0; }

void PrefixCache::trim(int64_t max_idle_bytes) {
  int64_t idle = idle_bytes();
  while (idle > max_idle_bytes) {
    const int64_t freed = evict_lru_leaf();
    if (freed == 0) return;
    idle -= freed;
  }
}

int64_t PrefixCache::evict_lru_leaf() {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    auto found = entries_.find(it->second);
    Entry& e = found->second;
    if (e.children > 0) continue;
    bool idle = true;
    for (int32_t id : e.ids) idle = idle && cache_.page_refs(id) == 1;
    if (!idle) continue;
    int64_t freed = 0;
    for (size_t layer = 0; layer < e.ids.size(); ++layer) {
      freed += cache_.page_bytes(static_cast<int64_t>(layer));
      cache_.release_page(e.ids[layer]);
    }
    pages_ -= static_cast<int64_t>(e.ids.size());
    evicted_pages_ += e.ids.size();
    if (e.parent != seed_) {
      auto parent = entries_.find(e.parent);
      if (parent != entries_.end()) --parent->second.children;
    }
    lru_.erase(it);
    entries_.erase(found);
    return freed;
  }
  return 0;
}

int64_t PrefixCache::idle_bytes() const {
  int64_t total = 0;
  for (const auto& [hash, e] : entries_) {
    for (size_t layer = 0; layer < e.ids.size(); ++layer) {
      if (cache_.page_refs(e.ids[layer]) == 1) total += cache_.page_bytes(layer);
    }
  }
  return total;
}

}  // namespace hubzoo
