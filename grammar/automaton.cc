#include "grammar/automaton.h"

#include "tokenizer/unicode.h"

namespace hubzoo::grammar {

int32_t Automaton::new_node() {
  if (static_cast<int64_t>(nodes_.size()) >= limits_.max_nodes) {
    throw GrammarError("the grammar needs more than " + std::to_string(limits_.max_nodes) +
                       " automaton states (schema, pattern or enum too large)");
  }
  nodes_.emplace_back();
  return static_cast<int32_t>(nodes_.size() - 1);
}

int32_t Automaton::new_rule(std::string name) {
  Rule r;
  r.start = new_node();
  r.end = new_node();
  r.name = std::move(name);
  const auto id = static_cast<int32_t>(rules_.size());
  nodes_[r.end].ends_rule = id;
  rules_.push_back(std::move(r));
  return id;
}

void Automaton::set_body(int32_t r, Frag body) {
  add_eps(rules_[r].start, body.in);
  add_eps(body.out, rules_[r].end);
}

Frag Automaton::empty() {
  const int32_t n = new_node();
  return {n, n};
}

Frag Automaton::literal(std::string_view bytes) {
  Frag f = empty();
  for (char c : bytes) {
    const int32_t next = new_node();
    const auto b = static_cast<uint8_t>(c);
    add_bytes(f.out, b, b, next);
    f.out = next;
  }
  return f;
}

Frag Automaton::byte_range(uint8_t lo, uint8_t hi) {
  Frag f{new_node(), new_node()};
  add_bytes(f.in, lo, hi, f.out);
  return f;
}

Frag Automaton::call(int32_t rule) {
  Frag f{new_node(), new_node()};
  nodes_[f.in].call_rule = rule;
  nodes_[f.in].call_ret = f.out;
  return f;
}

Frag Automaton::seq(Frag a, Frag b) {
  add_eps(a.out, b.in);
  return {a.in, b.out};
}

Frag Automaton::alt(const std::vector<Frag>& options) {
  Frag f{new_node(), new_node()};
  for (const Frag& o : options) {
    add_eps(f.in, o.in);
    add_eps(o.out, f.out);
  }
  return f;
}

Frag Automaton::optional(Frag f) {
  Frag g{new_node(), new_node()};
  add_eps(g.in, f.in);
  add_eps(f.out, g.out);
  add_eps(g.in, g.out);
  return g;
}

Frag Automaton::star(Frag f) {
  // in -> f -> back to in; in -> out. A loop node keeps f's end from reaching out directly twice.
  Frag g{new_node(), new_node()};
  add_eps(g.in, f.in);
  add_eps(f.out, g.in);
  add_eps(g.in, g.out);
  return g;
}

Frag Automaton::code_points(char32_t lo, char32_t hi) {
  Frag f{new_node(), new_node()};
  if (hi > 0x10FFFF) hi = 0x10FFFF;
  utf8_range(lo, hi, f.in, f.out);
  return f;
}

Frag Automaton::code_point_set(const std::vector<std::pair<char32_t, char32_t>>& ranges) {
  Frag f{new_node(), new_node()};
  for (auto [lo, hi] : ranges) utf8_range(lo, std::min<char32_t>(hi, 0x10FFFF), f.in, f.out);
  return f;
}

// Code points [lo, hi] as byte-range chains from `in` to `out` (RE2's split:
// first by encoded length and around the surrogates, then until each byte
// position's range is independent of the others).
void Automaton::utf8_range(char32_t lo, char32_t hi, int32_t in, int32_t out) {
  if (lo > hi) return;
  for (char32_t b : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
    if (lo <= b && hi > b) {
      utf8_range(lo, b, in, out);
      utf8_range(b + 1, hi, in, out);
      return;
    }
  }
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) utf8_range(lo, 0xD7FF, in, out);
    if (hi > 0xDFFF) utf8_range(0xE000, hi, in, out);
    return;
  }
  if (hi < 0x80) {
    add_bytes(in, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), out);
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_range(lo, lo | m, in, out);
        utf8_range((lo | m) + 1, hi, in, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_range(lo, (hi & ~m) - 1, in, out);
        utf8_range(hi & ~m, hi, in, out);
        return;
      }
    }
  }
  std::string a, b;
  tok::append_utf8(a, lo);
  tok::append_utf8(b, hi);
  int32_t at = in;
  for (size_t j = 0; j < a.size(); ++j) {
    const int32_t next = j + 1 == a.size() ? out : new_node();
    add_bytes(at, static_cast<uint8_t>(a[j]), static_cast<uint8_t>(b[j]), next);
    at = next;
  }
}

}  // namespace hubzoo::grammar
