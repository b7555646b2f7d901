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
  expand(a.rules()[a.root()].start, 0, state_.configs, 0, state_.accepting);
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

GrammarMatcher::State GrammarMatcher::step_state(const State& s, uint8_t b) {
  State next;
  step(s.configs, 0, s.configs.size(), b, next.configs, next.accepting);
  return next;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  State s = state_;
  for (char c : bytes) {
    s = step_state(s, static_cast<uint8_t>(c));
    if (s.configs.empty() && !s.accepting) return false;
  }
  state_ = std::move(s);
  mask_valid_ = false;
  return true;
}

bool GrammarMatcher::accept(int64_t id) {
  if (ended_) return false;
  if (std::find(end_tokens_.begin(), end_tokens_.end(), id) != end_tokens_.end()) {
    if (!state_.accepting) return false;
    ended_ = true;
    return true;
  }
  const std::string* b = vocab_->bytes(id);
  return b && accept_bytes(*b);
}

std::string GrammarMatcher::state_key() const {
  std::string key(state_.configs.size() * sizeof(Config) + 1, '\0');
  std::copy_n(reinterpret_cast<const char*>(state_.configs.data()),
              state_.configs.size() * sizeof(Config), key.data());
  key.back() = state_.accepting ? '1' : '0';
  return key;
}

void GrammarMatcher::compute_mask(std::vector<uint32_t>& words) {
  const TokenVocabulary::Trie& t = vocab_->trie();
  words.assign(static_cast<size_t>((vocab_->size() + 31) / 32), 0);
  buf_.assign(state_.configs.begin(), state_.configs.end());
  level_begin_.assign({0, buf_.size()});  // level d: buf_[level_begin_[d], level_begin_[d+1])
  const auto n = static_cast<int32_t>(t.byte.size());
  int64_t visited = 0;
  for (int32_t i = 1; i < n;) {
    const auto d = static_cast<size_t>(t.depth[i]);
    level_begin_.resize(d + 1);
    buf_.resize(level_begin_[d]);
    ++visited;
    bool accepting = false;
    step(buf_, level_begin_[d - 1], level_begin_[d], t.byte[i], buf_, accepting);
    if (buf_.size() == level_begin_[d] && !accepting) {
      i = t.end[i];  // no token under this prefix
      continue;
    }
    level_begin_.push_back(buf_.size());
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
  std::string key = state_key();
  if (auto it = cache_.find(key); it != cache_.end()) {
    ++stats_.cache_hits;
    mask_ = it->second;
  } else {
    compute_mask(mask_);
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    cache_.emplace(std::move(key), mask_);
  }
  mask_valid_ = true;
  stats_.mask_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return mask_;
}

bool GrammarMatcher::is_allowed(int64_t id) {
  if (std::find(end_tokens_.begin(), end_tokens_.end(), id) != end_tokens_.end()) {
    return state_.accepting && !ended_;
  }
  const auto& words = allowed_bitmask();
  return !ended_ && id >= 0 && id < vocab_->size() && ((words[id >> 5] >> (id & 31)) & 1);
}

int64_t GrammarMatcher::mask_logits(float* logits, int64_t n) {
  const auto& words = allowed_bitmask();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // End tokens: allowed exactly when the output is a complete match, whatever bytes they have.
  const bool end_ok = state_.accepting && !ended_;
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
