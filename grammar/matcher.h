// Runs a Grammar (grammar/grammar.h) over a request's tokens: per step the
// set of token ids that keep the output a prefix of a match, then advances
// on the accepted token.
//
// State: the set of parses still alive, each an automaton node with a byte
// edge and a call stack (hash-consed frames, depth <= max_stack_depth).
// mask: walk the vocabulary's byte trie depth-first, stepping the set one
// byte per trie edge; a rejected prefix skips its subtree. Masks are cached
// by state (a string's inside, a number's digits repeat the same state
// token after token), so most steps cost a lookup.
// End tokens (EOS, stop ids) are allowed only when the output so far is a
// complete match; when nothing can follow, they are the only ones allowed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_vocabulary.h"

namespace hubzoo::grammar {

struct MatcherStats {
  int64_t masks = 0, cache_hits = 0, trie_nodes_visited = 0;
  double mask_seconds = 0;
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                 std::shared_ptr<const TokenVocabulary> vocab, std::vector<int64_t> end_tokens);

  // Bit id of word id/32 is set when `id` may come next. Valid until the
  // next call on this matcher.
  const std::vector<uint32_t>& allowed_bitmask();
  bool is_allowed(int64_t id);
  // Sets logits of disallowed ids in [0, n) to -inf (ids past the vocabulary too).
  // Returns the number of allowed ids (0: nothing may follow, a dead end).
  int64_t mask_logits(float* logits, int64_t n);
  // Advances on `id`; false (state unchanged) when it is not allowed.
  bool accept(int64_t id);
  // Advances on raw bytes (tests); false (state unchanged) when they leave the language.
  bool accept_bytes(std::string_view bytes);

  bool is_accepting() const { return sets_[cur_].accepting; }
  // No byte can follow (only an end token).
  bool is_complete() const { return sets_[cur_].configs.empty(); }
  bool ended() const { return ended_; }  // an end token was accepted
  const MatcherStats& stats() const { return stats_; }

  struct Config {
    int32_t node, stack;
    bool operator==(const Config&) const = default;
  };
  struct State {
    std::vector<Config> configs;
    bool accepting = false;
  };

 private:
  struct Frame {
    int32_t parent, ret, depth;
  };
  int32_t push(int32_t parent, int32_t ret);
  // Adds every config reachable from (node, stack) without input to out[from..].
  void expand(int32_t node, int32_t stack, std::vector<Config>& out, size_t from, bool& accepting);
  // Configs after reading byte b from in[begin, end) appended to out.
  void step(const std::vector<Config>& in, size_t begin, size_t end, uint8_t b,
            std::vector<Config>& out, bool& accepting);
  // States are interned: the set after byte b from set `sid` is computed once
  // (trans_[sid * 256 + b]; -1: no parse survives), so a trie walk through a
  // string's inside costs one table read per trie node.
  int32_t intern(State s);
  int32_t next_set(int32_t sid, uint8_t b);
  void reset_memo();  // drops every interned state but the current one
  void compute_mask(std::vector<uint32_t>& words);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<int64_t> end_tokens_;
  int64_t max_depth_, max_configs_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_index_;
  std::vector<State> sets_;
  std::unordered_map<std::string, int32_t> set_index_;
  std::vector<int32_t> trans_;
  int32_t cur_ = 0;
  bool ended_ = false;
  // Masks by state id; bounded (cleared when full).
  std::unordered_map<int32_t, std::vector<uint32_t>> cache_;
  std::vector<uint32_t> mask_;
  bool mask_valid_ = false;
  std::vector<int32_t> level_;  // trie walk: the state at each depth
  std::vector<std::pair<int32_t, int32_t>> work_, seen_;
  std::vector<std::pair<int64_t, float>> saved_;
  MatcherStats stats_;
};

}  // namespace hubzoo::grammar
