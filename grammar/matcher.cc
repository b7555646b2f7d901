#include "grammar/matcher.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace hubzoo::grammar {

namespace {
// Masks kept per matcher; a state not among them costs one trie walk.
constexpr size_t kMaxCachedMasks = 64;
// Call/return moves one expand() follows before giving up on the rest.
constexpr size_t kMaxExpandWork = 1 << 14;
// Interned states: reset before a walk above kResetStates; an error above kMaxStates
// (a grammar whose parses never repeat; 1 KiB of transitions each).
constexpr size_t kResetStates = 4096;
constexpr size_t kMaxStates = 16384;
constexpr int32_t kUnknown = -2;
}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenVocabulary> vocab,
                               std::vector<int64_t> end_tokens)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      end_tokens_(std::move(end_tokens)),
      max_depth_(grammar_->automaton().limits().max_stack_depth),
      max_configs_(grammar_->automaton().limits().max_configurations) {
  frames_.push_back({-1, -1, 0});  // 0: the empty stack
  const Automaton& a = grammar_->automaton();
  State start;
  expand(a.rules()[a.root()].start, 0, start.configs, 0, start.accepting);
  cur_ = intern(std::move(start));
}

int32_t GrammarMatcher::intern(State s) {
  std::string key(s.configs.size() * sizeof(Config) + 1, '\0');
  std::copy_n(reinterpret_cast<const char*>(s.configs.data()), s.configs.size() * sizeof(Config),
              key.data());
  key.back() = s.accepting ? '1' : '0';
  if (auto it = set_index_.find(key); it != set_index_.end()) return it->second;
  if (sets_.size() >= kMaxStates) {
    throw GrammarError("structured generation: more than " + std::to_string(kMaxStates) +
                       " distinct parse states in one step");
  }
  const auto id = static_cast<int32_t>(sets_.size());
  sets_.push_back(std::move(s));
  trans_.resize(sets_.size() * 256, kUnknown);
  set_index_.emplace(std::move(key), id);
  return id;
}

int32_t GrammarMatcher::next_set(int32_t sid, uint8_t b) {
  int32_t& known = trans_[static_cast<size_t>(sid) * 256 + b];
  if (known != kUnknown) return known;
  State next;
  step(sets_[sid].configs, 0, sets_[sid].configs.size(), b, next.configs, next.accepting);
  const int32_t id = next.configs.empty() && !next.accepting ? -1 : intern(std::move(next));
  trans_[static_cast<size_t>(sid) * 256 + b] = id;  // `known` may dangle after intern()
  return id;
}

void GrammarMatcher::reset_memo() {
  State current = sets_[cur_];
  sets_.clear();
  set_index_.clear();
  trans_.clear();
  cache_.clear();
  cur_ = intern(std::move(current));
}

int32_t GrammarMatcher::push(int32_t parent, int32_t ret) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(ret);
  auto it = frame_index_.find(key);
  if (it != frame_index_.end()) return it->second;
  const int32_t depth = frames_[parent].depth + 1;
  if (depth > max_depth_) return -1;
  if (frames_.size() >= (size_t{1} << 24)) {
    throw GrammarError("structured generation: too many distinct parse stacks");
  }
  frames_.push_back({parent, ret, depth});
  const auto id = static_cast<int32_t>(frames_.size() - 1);
  frame_index_.emplace(key, id);
  return id;
}

void GrammarMatcher::expand(int32_t node, int32_t stack, std::vector<Config>& out, size_t from,
                            bool& accepting) {
  const std::vector<Node>& nodes = grammar_->automaton().nodes();
  const std::vector<Rule>& rules = grammar_->automaton().rules();
  work_.clear();
  seen_.clear();
  work_.emplace_back(node, stack);
  size_t done = 0;
  while (!work_.empty() && done++ < kMaxExpandWork) {
    const auto [n, s] = work_.back();
    work_.pop_back();
    auto [first, last] = grammar_->items(n);
    for (const int32_t* it = first; it != last; ++it) {
      const Node& v = nodes[*it];
      if (!v.bytes.empty()) {
        const Config c{*it, s};
        if (std::find(out.begin() + static_cast<ptrdiff_t>(from), out.end(), c) == out.end()) {
          if (static_cast<int64_t>(out.size() - from) >= max_configs_) {
            throw GrammarError("structured generation: more than " + std::to_string(max_configs_) +
                               " parses alive at once");
          }
          out.push_back(c);
        }
      }
      std::pair<int32_t, int32_t> next{-1, -1};
      if (v.call_rule >= 0) {
        const int32_t pushed = push(s, v.call_ret);
        if (pushed >= 0) next = {rules[v.call_rule].start, pushed};
      } else if (v.ends_rule >= 0) {
        if (s == 0) {
          accepting = true;
        } else {
          next = {frames_[s].ret, frames_[s].parent};
        }
      }
      if (next.first >= 0 && std::find(seen_.begin(), seen_.end(), next) == seen_.end()) {
        seen_.push_back(next);
        work_.push_back(next);
      }
    }
  }
}

void GrammarMatcher::step(const std::vector<Config>& in, size_t begin, size_t end, uint8_t b,
                          std::vector<Config>& out, bool& accepting) {
  const std::vector<Node>& nodes = grammar_->automaton().nodes();
  const size_t from = out.size();
  for (size_t k = begin; k < end; ++k) {
    const Config c = in[k];  // copy: `out` may be `in` and grow
    for (const ByteEdge& e : nodes[c.node].bytes) {
      if (b >= e.lo && b <= e.hi) expand(e.to, c.stack, out, from, accepting);
    }
  }
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  int32_t sid = cur_;
  for (char c : bytes) {
    sid = next_set(sid, static_cast<uint8_t>(c));
    if (sid < 0) return false;
  }
  cur_ = sid;
  mask_valid_ = false;
  return true;
}

bool GrammarMatcher::accept(int64_t id) {
  if (ended_) return false;
  if (std::find(end_tokens_.begin(), end_tokens_.end(), id) != end_tokens_.end()) {
    if (!is_accepting()) return false;
    ended_ = true;
    return true;
  }
  const std::string* b = vocab_->bytes(id);
  return b && accept_bytes(*b);
}

void GrammarMatcher::compute_mask(std::vector<uint32_t>& words) {
  const TokenVocabulary::Trie& t = vocab_->trie();
  words.assign(static_cast<size_t>((vocab_->size() + 31) / 32), 0);
  level_.assign(1, cur_);
  const auto n = static_cast<int32_t>(t.byte.size());
  int64_t visited = 0;
  for (int32_t i = 1; i < n;) {
    const auto d = static_cast<size_t>(t.depth[i]);
    ++visited;
    const int32_t sid = next_set(level_[d - 1], t.byte[i]);
    if (sid < 0) {
      i = t.end[i];  // no token under this prefix
      continue;
    }
    level_.resize(d + 1);
    level_[d] = sid;
    for (int32_t k = t.first_token[i]; k < t.first_token[i + 1]; ++k) {
      const int32_t id = t.token_ids[k];
      words[id >> 5] |= uint32_t{1} << (id & 31);
    }
    ++i;
  }
  stats_.trie_nodes_visited += visited;
}

const std::vector<uint32_t>& GrammarMatcher::allowed_bitmask() {
  if (mask_valid_) return mask_;
  const auto t0 = std::chrono::steady_clock::now();
  ++stats_.masks;
  if (auto it = cache_.find(cur_); it != cache_.end()) {
    ++stats_.cache_hits;
    mask_ = it->second;
  } else {
    if (sets_.size() > kResetStates) reset_memo();
    compute_mask(mask_);
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    cache_.emplace(cur_, mask_);
  }
  mask_valid_ = true;
  stats_.mask_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return mask_;
}

bool GrammarMatcher::is_allowed(int64_t id) {
  if (std::find(end_tokens_.begin(), end_tokens_.end(), id) != end_tokens_.end()) {
    return is_accepting() && !ended_;
  }
  const auto& words = allowed_bitmask();
  return !ended_ && id >= 0 && id < vocab_->size() && ((words[id >> 5] >> (id & 31)) & 1);
}

int64_t GrammarMatcher::mask_logits(float* logits, int64_t n) {
  const auto& words = allowed_bitmask();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // End tokens: allowed exactly when the output is a complete match, whatever bytes they have.
  const bool end_ok = is_accepting() && !ended_;
  saved_.clear();
  for (int64_t id : end_tokens_) {
    if (id >= 0 && id < n) saved_.emplace_back(id, end_ok ? logits[id] : neg_inf);
  }
  const int64_t vocab = std::min<int64_t>(n, vocab_->size());
  int64_t allowed = 0;
  for (int64_t id = 0; id < vocab; ++id) {
    if (!ended_ && ((words[id >> 5] >> (id & 31)) & 1)) {
      ++allowed;
    } else {
      logits[id] = neg_inf;
    }
  }
  for (int64_t id = vocab; id < n; ++id) logits[id] = neg_inf;
  for (auto [id, value] : saved_) {
    if (id < vocab && !ended_ && ((words[id >> 5] >> (id & 31)) & 1)) --allowed;  // counted as text
    logits[id] = value;
    allowed += end_ok ? 1 : 0;
  }
  return allowed;
}

}  // namespace hubzoo::grammar
