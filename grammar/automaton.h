// A grammar as a recursive transition network over bytes: every rule is a
// small NFA whose edges read one byte in a range, move without input
// (epsilon), or call another rule (push a return node, continue at the rule's
// start; the rule's end node pops it). JSON schemas, regexes and choice lists
// all compile to this form (grammar/json_schema.cc, grammar/regex.cc); the
// matcher (grammar/matcher.h) runs it as a pushdown automaton with a bounded
// stack.
//
// Every size is bounded while building: the node count (GrammarLimits::
// max_nodes) is checked at each new node, so a hostile schema or regex ends in
// a GrammarError, never in unbounded memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace hubzoo::grammar {

// A schema, regex or choice list that cannot be compiled: the message names
// the keyword or position (the server answers 400 with it).
struct GrammarError : InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

struct GrammarLimits {
  int64_t max_nodes = 200000;        // automaton nodes of one grammar
  int64_t max_schema_depth = 32;     // nested subschemas (properties, items, anyOf, ...)
  int64_t max_regex_bytes = 4096;    // one pattern
  int64_t max_repeat = 1000;         // {m,n}, minItems/maxItems, minLength/maxLength
  int64_t max_enum = 4096;           // enum values / choices
  int64_t max_stack_depth = 64;      // open rule calls at run time (recursion depth)
  int64_t max_configurations = 512;  // parallel parses the matcher follows at once
};

struct ByteEdge {
  uint8_t lo = 0, hi = 0;
  int32_t to = -1;
};

struct Node {
  std::vector<ByteEdge> bytes;
  std::vector<int32_t> eps;
  int32_t call_rule = -1;  // >= 0: call that rule, returning to call_ret
  int32_t call_ret = -1;
  int32_t ends_rule = -1;  // >= 0: this node is that rule's end
};

struct Rule {
  int32_t start = -1, end = -1;
  std::string name;
};

// A fragment: enter at `in`, leave at `out` (both nodes of the automaton).
struct Frag {
  int32_t in = -1, out = -1;
};

class Automaton {
 public:
  explicit Automaton(const GrammarLimits& limits) : limits_(limits) {}

  int32_t new_node();
  // A rule with fresh start and end nodes; its body is wired by the caller.
  int32_t new_rule(std::string name);
  void add_eps(int32_t from, int32_t to) { nodes_[from].eps.push_back(to); }
  void add_bytes(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
    nodes_[from].bytes.push_back({lo, hi, to});
  }

  // Fragment builders.
  Frag empty();
  Frag literal(std::string_view bytes);
  Frag byte_range(uint8_t lo, uint8_t hi);
  Frag call(int32_t rule);
  Frag seq(Frag a, Frag b);
  Frag alt(const std::vector<Frag>& options);
  Frag optional(Frag f);
  Frag star(Frag f);  // f must not be reused elsewhere
  // Code points in [lo, hi] as UTF-8 byte sequences (surrogates excluded).
  Frag code_points(char32_t lo, char32_t hi);
  // Any of the code point ranges (sorted or not), as UTF-8.
  Frag code_point_set(const std::vector<std::pair<char32_t, char32_t>>& ranges);
  // Wires `body` as rule `r`'s body.
  void set_body(int32_t r, Frag body);
  // Removes every call to a rule for which `dead(rule)` holds (the call node leads nowhere).
  template <class Pred>
  void cut_calls(Pred dead) {
    for (Node& n : nodes_) {
      if (n.call_rule >= 0 && dead(n.call_rule)) n.call_rule = -1, n.call_ret = -1;
    }
  }

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const GrammarLimits& limits() const { return limits_; }
  int32_t root() const { return root_; }
  void set_root(int32_t rule) { root_ = rule; }

 private:
  void utf8_range(char32_t lo, char32_t hi, int32_t in, int32_t out);

  GrammarLimits limits_;
  std::vector<Node> nodes_;
  std::vector<Rule> rules_;
  int32_t root_ = -1;
};

}  // namespace hubzoo::grammar
