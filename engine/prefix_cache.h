// Prefix reuse across requests: whole KV pages (kKvPage positions of every
// layer) indexed by a hash chain of the tokens before and in them, so that a
// request whose prompt starts with an earlier request's tokens adopts those
// pages instead of prefilling them again.
//
// Bit-identity: a position's keys and values depend only on the tokens up to
// it (every kernel computes a row as it would alone, layers/batch.h), so a
// page computed for one request holds exactly what another request with the
// same tokens would compute. The chain's seed also names everything else that
// changes keys and values: the model (architecture, snapshot, GGUF file), its
// dtype and numerics mode; one index serves one model.
//
// Only whole pages are indexed, and a request reuses at most the whole pages
// before its last prompt token (which must run to give logits). A cached
// prefix that ends mid-page is recomputed from the last whole page: the
// partial page is prefilled again (at most 15 positions) rather than copied,
// so shared pages are never written and no page is copied.
//
// Each entry (one block of 16 tokens) holds a reference to its page in every
// layer; a slot that adopts it holds its own. An entry no slot holds and no
// other entry continues (a leaf) is evicted least recently used first when
// the cache needs room (KvCache::set_make_room). Hash collisions: an entry
// keeps its tokens and its parent's hash, both compared on lookup.
//
// Not for caches with windowed layers (their pages are released as the
// window moves) or that keep token ids (Phi-3's LongRoPE recomputes a
// sequence's keys when it grows long): supported() says.
//
// Engine thread only, like the KvCache it indexes.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "layers/kv_cache.h"

namespace hubzoo {

class PrefixCache {
 public:
  // seed: a hash of the model's identity and numerics (model_seed).
  PrefixCache(KvCache& cache, uint64_t seed);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  static bool supported(const KvCache& cache);

  // Makes the longest indexed run of whole blocks of tokens[0, limit) pages
  // of `slot` (which holds none) and returns the positions it covers (a
  // multiple of kKvPage).
  int64_t adopt(int64_t slot, const std::vector<int64_t>& tokens, int64_t limit);
  // Indexes the whole pages of `slot` over positions [0, n), tokens[0, n)
  // their tokens (pages already indexed are skipped).
  void insert(int64_t slot, const std::vector<int64_t>& tokens, int64_t n);
  // Evicts the least recently used leaf no slot holds; false when none.
  bool evict_one();
  // Evicts least recently used leaves until the pages only the index holds
  // take at most max_idle_bytes (or none is left to evict).
  void trim(int64_t max_idle_bytes);

  int64_t cached_pages() const { return pages_; }
  uint64_t evicted_pages() const { return evicted_pages_; }
  // Bytes of indexed pages no slot holds (what evictions could free).
  int64_t idle_bytes() const;

 private:
  struct Entry {
    uint64_t parent = 0;  // the previous block's hash (the seed for block 0)
    std::array<int64_t, kKvPage> tokens{};
    std::vector<int32_t> ids;  // its page in each layer
    uint64_t last_used = 0;
    int64_t children = 0;  // entries continuing it
  };
  uint64_t block_hash(uint64_t parent, const int64_t* tokens) const;
  // evict_one(): the bytes it freed, 0 when nothing could be evicted.
  int64_t evict_lru_leaf();
  void touch(uint64_t hash, Entry& e);

  KvCache& cache_;
  uint64_t seed_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::map<uint64_t, uint64_t> lru_;  // last_used -> hash
  uint64_t clock_ = 0;
  int64_t pages_ = 0;
  uint64_t evicted_pages_ = 0;
};

// A hash of what makes a model's keys and values what they are: architecture,
// snapshot, GGUF file, dtype and numerics mode.
uint64_t model_seed(const std::string& architecture, const std::string& snapshot,
                    const std::string& gguf_file, const std::string& numerics);

}  // namespace hubzoo
