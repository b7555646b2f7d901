// Byte-pair encoding (HF models/bpe): characters of a word are merged pair by
// pair, lowest merge rank first, leftmost first among equal ranks.
#include <cstdio>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/json.h"
#include "tokenizer/token_models.h"

namespace hubzoo::tok {

VocabMap parse_vocab_object(const Json& j, const Source& src);

namespace {

struct Symbol {
  uint32_t id;
  int64_t prev, next;
  size_t len;  // bytes; 0 once merged into its left neighbour
};

struct Merge {
  size_t pos;
  uint32_t rank, new_id;
  bool operator<(const Merge& o) const {  // priority_queue pops the greatest
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

// Merges: pair_key -> (rank, new id), an open-addressing hash table with
// linear probing (one cache line per lookup, where a node-based map takes two
// or three dependent misses). Inserting an existing key overwrites it.
class MergeTable {
 public:
  struct Entry {
    uint64_t key;
    uint32_t rank, new_id;
  };

  explicit MergeTable(size_t expected = 0) { resize(2 * expected); }

  void insert(uint64_t key, uint32_t rank, uint32_t new_id) {
    if (2 * (size_ + 1) > slots_.size()) resize(2 * slots_.size());
    Entry& e = slots_[index(key)];
    if (e.key == kEmpty) ++size_;
    e = {key, rank, new_id};
  }
  const Entry* find(uint64_t key) const {
    const Entry& e = slots_[index(key)];
    return e.key == kEmpty ? nullptr : &e;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair of 32-bit ids is all ones

  // The slot holding `key`, or the empty slot where it belongs.
  size_t index(uint64_t key) const {
    const size_t mask = slots_.size() - 1;
    size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
    return i;
  }
  // At least `min_slots` slots (a power of two, 16 or more), entries kept.
  void resize(size_t min_slots) {
    size_t slots = 16;
    int bits = 4;
    while (slots < min_slots) slots *= 2, ++bits;
    std::vector<Entry> old = std::move(slots_);
    slots_.assign(slots, Entry{kEmpty, 0, 0});
    shift_ = 64 - bits;
    size_ = 0;
    for (const Entry& e : old) {
      if (e.key != kEmpty) insert(e.key, e.rank, e.new_id);
    }
  }

  std::vector<Entry> slots_;
  int shift_ = 60;
  size_t size_ = 0;
};

std::string optional_string(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

class BPE : public Model {
 public:
  BPE(const Json& j, const Source& src) {
    set_options(j, src);
    set_vocab(parse_vocab_object(field(j, "vocab", src), src));
    index_ids();
    const Json& merges = field(j, "merges", src);
    merges_ = MergeTable(merges.size());
    uint32_t rank = 0;
    std::string merged;  // reused: no allocation per merge
    for (const Json& m : merges) {
      std::string_view a, b;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          throw FormatError(src.file + ": BPE merge '" + s + "' is not two tokens");
        }
        a = std::string_view(s).substr(0, sp), b = std::string_view(s).substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get_ref<const std::string&>(), b = m[1].get_ref<const std::string&>();
      } else {
        throw FormatError(src.file + ": BPE merge " + json_excerpt(m) + " is not a pair");
      }
      merged.assign(a);
      merged.append(b.substr(std::min(prefix_.size(), b.size())));
      auto ia = token_to_id(a), ib = token_to_id(b), im = token_to_id(merged);
      if (!ia || !ib || !im) {
        throw FormatError(src.file + ": BPE merge '" + std::string(a) + " " + std::string(b) +
                          "' uses a token missing from the vocab");
      }
      merges_.insert(pair_key(*ia, *ib), rank++, *im);
    }
  }

  // The same model from tables (make_bpe's second form).
  BPE(const Json& options, VocabMap vocab, const std::vector<BpeMerge>& merges, const Source& src) {
    set_options(options, src);
    set_vocab(std::move(vocab));
    index_ids();
    merges_ = MergeTable(merges.size());
    uint32_t rank = 0;
    for (const BpeMerge& m : merges) {
      for (const uint32_t id : {m.left, m.right, m.merged}) {
        if (id >= id_to_token_.size()) {
          throw FormatError(src.file + ": BPE merge " + std::to_string(rank) + " uses id " +
                            std::to_string(id) + ", which is not in the vocab");
        }
      }
      merges_.insert(pair_key(m.left, m.right), rank++, m.merged);
    }
  }

  std::vector<Token> tokenize(std::string_view word) const override {
    if (word.empty()) return {};
    if (ignore_merges_) {
      if (auto id = token_to_id(word)) return {{*id, std::string(word), {0, word.size()}}};
    }
    const bool cacheable = word.size() < 256;
    if (cacheable) {
      std::shared_lock lock(cache_mutex_);
      auto it = cache_.find(word);
      if (it != cache_.end()) return it->second;
    }
    std::vector<Token> tokens = to_tokens(merge_word(word));
    if (cacheable) {
      std::unique_lock lock(cache_mutex_);
      if (cache_.size() < 10000) cache_.emplace(std::string(word), tokens);
    }
    return tokens;
  }

 private:
  void set_options(const Json& j, const Source& src) {
    if (j.contains("dropout") && j["dropout"].is_number() && j["dropout"].get<double>() != 0.0) {
      throw FormatError(src.file + ": BPE dropout is not supported (it makes encoding random)");
    }
    if (j.contains("unk_token") && j["unk_token"].is_string())
      unk_ = j["unk_token"].get<std::string>();
    prefix_ = optional_string(j, "continuing_subword_prefix");
    suffix_ = optional_string(j, "end_of_word_suffix");
    fuse_unk_ = j.value("fuse_unk", false);
    byte_fallback_ = j.value("byte_fallback", false);
    ignore_merges_ = j.value("ignore_merges", false);
  }
  void index_ids() {
    for (const auto& [token, id] : vocab_) {
      if (id >= id_to_token_.size()) id_to_token_.resize(id + 1);
      id_to_token_[id] = token;
    }
  }

  std::vector<Symbol> merge_word(std::string_view w) const {
    std::vector<Symbol> word;
    word.reserve(w.size());
    auto add = [&](uint32_t id, size_t len) {
      const auto n = static_cast<int64_t>(word.size());
      if (!word.empty()) word.back().next = n;
      word.push_back({id, n - 1, -1, len});
    };
    bool has_unk = false;  // a pending unk token of `unk_len` bytes
    uint32_t pending_unk = 0;
    size_t unk_len = 0;
    auto unk_id = [&]() {
      auto id = token_to_id(unk_);
      if (!id) throw InvalidArgument("BPE: unk token '" + unk_ + "' is not in the vocabulary");
      return *id;
    };
    for (size_t i = 0, n = 0; i < w.size(); i += n) {
      decode_utf8(w, i, &n);
      std::string s(w.substr(i, n));
      if (i > 0) s = prefix_ + s;
      if (i + n == w.size()) s += suffix_;
      if (auto id = token_to_id(s)) {
        if (has_unk) add(pending_unk, unk_len), has_unk = false;
        add(*id, n);
        continue;
      }
      if (byte_fallback_) {
        if (auto bytes = byte_fallback_ids(s)) {
          for (uint32_t id : *bytes) add(id, 1);
          continue;
        }
      }
      if (!unk_.empty()) {
        if (has_unk && fuse_unk_) {
          unk_len += n;
        } else {
          if (has_unk) add(pending_unk, unk_len);
          has_unk = true, pending_unk = unk_id(), unk_len = n;
        }
      }
    }
    if (has_unk) add(pending_unk, unk_len);
    merge_all(word);
    return word;
  }

  void merge_all(std::vector<Symbol>& word) const {
    std::priority_queue<Merge> queue;
    auto find = [&](uint32_t a, uint32_t b) { return merges_.find(pair_key(a, b)); };
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      if (auto m = find(word[i].id, word[i + 1].id)) queue.push({i, m->rank, m->new_id});
    }
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Symbol& cur = word[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const size_t next_pos = static_cast<size_t>(cur.next);
      const Symbol right = word[next_pos];
      auto m = find(cur.id, right.id);
      if (!m || m->new_id != top.new_id) continue;  // stale queue entry
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      word[next_pos].len = 0;
      if (right.next > -1 && static_cast<size_t>(right.next) < word.size()) {
        word[static_cast<size_t>(right.next)].prev = static_cast<int64_t>(top.pos);
      }
      if (cur.prev >= 0) {
        const auto prev = static_cast<size_t>(cur.prev);
        if (auto pm = find(word[prev].id, cur.id)) queue.push({prev, pm->rank, pm->new_id});
      }
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < word.size()) {
        if (auto nm = find(cur.id, word[static_cast<size_t>(cur.next)].id)) {
          queue.push({top.pos, nm->rank, nm->new_id});
        }
      }
    }
  }

  std::vector<Token> to_tokens(const std::vector<Symbol>& word) const {
    std::vector<Token> out;
    size_t offset = 0;
    for (const Symbol& s : word) {
      if (s.len == 0) continue;
      if (s.id >= id_to_token_.size()) throw std::out_of_range("BPE: id without a token");
      out.push_back({s.id, id_to_token_[s.id], {offset, offset + s.len}});
      offset += s.len;
    }
    return out;
  }

  MergeTable merges_;
  std::vector<std::string> id_to_token_;  // vocab_r_ as a dense array
  std::string unk_, prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<Token>, StringHash, std::equal_to<>> cache_;
};

}  // namespace

std::unique_ptr<Model> make_bpe(const Json& j, const Source& src) {
  return std::make_unique<BPE>(j, src);
}

std::unique_ptr<Model> make_bpe(const Json& options, VocabMap vocab,
                                const std::vector<BpeMerge>& merges, const Source& src) {
  return std::make_unique<BPE>(options, std::move(vocab), merges, src);
}

}  // namespace hubzoo::tok
