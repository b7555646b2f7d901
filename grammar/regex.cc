#include "grammar/regex.h"

#include <algorithm>
#include <memory>
#include <utility>

namespace hubzoo::grammar {

namespace {

using Ranges = std::vector<std::pair<char32_t, char32_t>>;

struct Ast {
  enum Kind { kChars, kConcat, kAlt, kRepeat } kind = kConcat;
  Ranges chars;
  std::vector<std::unique_ptr<Ast>> kids;
  int64_t min = 0, max = 0;  // kRepeat; max -1: unbounded
};
using AstPtr = std::unique_ptr<Ast>;

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges negate(const Ranges& r) {
  Ranges out;
  char32_t next = 0;
  for (auto [lo, hi] : normalize(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}};

class Parser {
 public:
  Parser(std::string_view p, const RegexOptions& o, int64_t max_repeat)
      : p_(p), o_(o), max_repeat_(max_repeat) {}

  AstPtr parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    AstPtr a = alternation(0);
    if (i_ < p_.size()) fail("unbalanced ')'");
    return a;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError(std::string(o_.what) + ": " + what + " at offset " + std::to_string(i_) +
                       " of '" + std::string(p_.substr(0, 200)) + "'");
  }
  bool at_end() const { return i_ >= p_.size(); }

  AstPtr alternation(int depth) {
    if (depth > 64) fail("groups nested too deeply");
    auto alt = std::make_unique<Ast>();
    alt->kind = Ast::kAlt;
    alt->kids.push_back(concat(depth));
    while (!at_end() && p_[i_] == '|') {
      ++i_;
      alt->kids.push_back(concat(depth));
    }
    if (alt->kids.size() == 1) return std::move(alt->kids[0]);
    return alt;
  }

  AstPtr concat(int depth) {
    auto c = std::make_unique<Ast>();
    c->kind = Ast::kConcat;
    while (!at_end() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' && i_ + 1 == p_.size()) {
        ++i_;
        break;
      }
      AstPtr atom_ast = atom(depth);
      c->kids.push_back(quantified(std::move(atom_ast)));
    }
    return c;
  }

  int64_t number() {
    int64_t v = 0;
    size_t start = i_;
    while (!at_end() && p_[i_] >= '0' && p_[i_] <= '9') {
      v = v * 10 + (p_[i_] - '0');
      if (v > max_repeat_) fail("repetition count above " + std::to_string(max_repeat_));
      ++i_;
    }
    if (i_ == start) fail("expected a number in {}");
    return v;
  }

  AstPtr quantified(AstPtr a) {
    while (!at_end()) {
      int64_t lo = 0, hi = 0;
      const char q = p_[i_];
      if (q == '*') {
        lo = 0, hi = -1, ++i_;
      } else if (q == '+') {
        lo = 1, hi = -1, ++i_;
      } else if (q == '?') {
        lo = 0, hi = 1, ++i_;
      } else if (q == '{' && i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9') {
        ++i_;
        lo = number();
        hi = lo;
        if (!at_end() && p_[i_] == ',') {
          ++i_;
          hi = (!at_end() && p_[i_] == '}') ? -1 : number();
        }
        if (at_end() || p_[i_] != '}') fail("unterminated {m,n}");
        ++i_;
        if (hi >= 0 && hi < lo) fail("{m,n} with n < m");
      } else {
        return a;
      }
      if (!at_end() && p_[i_] == '?') ++i_;  // lazy: the same strings
      if (!at_end() && p_[i_] == '+') fail("possessive quantifiers are not supported");
      auto r = std::make_unique<Ast>();
      r->kind = Ast::kRepeat;
      r->min = lo;
      r->max = hi;
      r->kids.push_back(std::move(a));
      a = std::move(r);
    }
    return a;
  }

  static AstPtr chars(Ranges r) {
    auto a = std::make_unique<Ast>();
    a->kind = Ast::kChars;
    a->chars = normalize(std::move(r));
    return a;
  }

  char32_t hex(size_t n) {
    char32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (at_end() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) fail("bad hex escape");
      const char c = p_[i_++];
      v = v * 16 +
          static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(c))
                                    ? c - '0'
                                    : (std::tolower(static_cast<unsigned char>(c)) - 'a' + 10));
    }
    return v;
  }

  // After a backslash: a class (\d ...) or one code point.
  Ranges escape(bool in_class) {
    if (at_end()) fail("trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return kDigit;
      case 'D':
        return negate(kDigit);
      case 'w':
        return kWord;
      case 'W':
        return negate(kWord);
      case 's':
        return kSpace;
      case 'S':
        return negate(kSpace);
      case 'n':
        return {{'\n', '\n'}};
      case 'r':
        return {{'\r', '\r'}};
      case 't':
        return {{'\t', '\t'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case '0':
        return {{0, 0}};
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        fail("word boundaries (\\b) are not supported");
      case 'x': {
        const char32_t v = hex(2);
        return {{v, v}};
      }
      case 'u': {
        char32_t v = 0;
        if (!at_end() && p_[i_] == '{') {
          ++i_;
          size_t start = i_;
          while (!at_end() && p_[i_] != '}') ++i_;
          if (at_end() || i_ - start == 0 || i_ - start > 6) fail("bad \\u{...} escape");
          i_ = start;
          v = hex(p_.find('}', start) - start);
          ++i_;
        } else {
          v = hex(4);
        }
        if (v > 0x10FFFF) fail("code point above U+10FFFF");
        return {{v, v}};
      }
      default:
        break;
    }
    if ((c >= '1' && c <= '9') || c == 'k') fail("backreferences are not supported");
    if (c == 'B' || c == 'A' || c == 'Z' || c == 'z' || c == 'G') {
      fail(std::string("the assertion \\") + c + " is not supported");
    }
    if (c == 'p' || c == 'P') fail("unicode property escapes (\\p) are not supported");
    if (std::isalnum(static_cast<unsigned char>(c))) fail(std::string("unknown escape \\") + c);
    i_ -= 1;
    const char32_t cp = code_point();
    return {{cp, cp}};
  }

  // One UTF-8 code point of the pattern.
  char32_t code_point() {
    const auto b0 = static_cast<unsigned char>(p_[i_]);
    int n = b0 < 0x80 ? 1 : b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
    if (n == 0 || i_ + n > p_.size()) fail("invalid UTF-8");
    char32_t v = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(p_[i_ + k]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
      v = (v << 6) | (b & 0x3F);
    }
    i_ += n;
    return v;
  }

  AstPtr char_class() {
    bool negated = false;
    if (!at_end() && p_[i_] == '^') negated = true, ++i_;
    Ranges r;
    bool first = true;
    while (true) {
      if (at_end()) fail("unterminated character class");
      if (p_[i_] == ']' && !first) break;
      first = false;
      Ranges lo_set;
      if (p_[i_] == '\\') {
        ++i_;
        lo_set = escape(true);
      } else {
        const char32_t cp = code_point();
        lo_set = {{cp, cp}};
      }
      if (lo_set.size() == 1 && lo_set[0].first == lo_set[0].second && i_ + 1 < p_.size() &&
          p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        Ranges hi_set;
        if (p_[i_] == '\\') {
          ++i_;
          hi_set = escape(true);
        } else {
          const char32_t cp = code_point();
          hi_set = {{cp, cp}};
        }
        if (hi_set.size() != 1 || hi_set[0].first != hi_set[0].second) fail("bad class range");
        if (hi_set[0].first < lo_set[0].first) fail("class range out of order");
        r.emplace_back(lo_set[0].first, hi_set[0].first);
      } else {
        r.insert(r.end(), lo_set.begin(), lo_set.end());
      }
    }
    ++i_;  // ']'
    return chars(negated ? negate(r) : r);
  }

  AstPtr atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (!at_end() && p_[i_] == '?') {
        ++i_;
        if (!at_end() && p_[i_] == ':') {
          ++i_;
        } else if (!at_end() && p_[i_] == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' &&
                   p_[i_ + 1] != '!') {
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos) fail("unterminated group name");
          i_ = close + 1;
        } else {
          fail("lookaround and inline flags ((?...)) are not supported");
        }
      }
      AstPtr inner = alternation(depth + 1);
      if (at_end() || p_[i_] != ')') fail("missing ')'");
      ++i_;
      return inner;
    }
    if (c == '[') {
      ++i_;
      return char_class();
    }
    if (c == '.') {
      ++i_;
      return chars(negate({{'\n', '\n'}, {'\r', '\r'}}));
    }
    if (c == '\\') {
      ++i_;
      return chars(escape(false));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("nothing to repeat");
    if (c == '^' || c == '$') fail("'^' and '$' are supported only at the ends of the pattern");
    const char32_t cp = code_point();
    return chars({{cp, cp}});
  }

  std::string_view p_;
  const RegexOptions& o_;
  int64_t max_repeat_;
  size_t i_ = 0;
};

Frag emit(Automaton& a, const Ast& n, bool json_string, int depth);

Frag emit_repeat(Automaton& a, const Ast& n, bool json_string, int depth) {
  Frag f = a.empty();
  for (int64_t k = 0; k < n.min; ++k) f = a.seq(f, emit(a, *n.kids[0], json_string, depth + 1));
  if (n.max < 0) return a.seq(f, a.star(emit(a, *n.kids[0], json_string, depth + 1)));
  // (x(x(x)?)?)? for the optional copies: nested, so each copy is a prefix choice.
  Frag tail = a.empty();
  for (int64_t k = n.min; k < n.max; ++k) {
    tail = a.optional(a.seq(emit(a, *n.kids[0], json_string, depth + 1), tail));
  }
  return a.seq(f, tail);
}

Frag emit(Automaton& a, const Ast& n, bool json_string, int depth) {
  switch (n.kind) {
    case Ast::kChars:
      return json_char_set(a, n.chars, json_string);
    case Ast::kConcat: {
      Frag f = a.empty();
      for (const auto& k : n.kids) f = a.seq(f, emit(a, *k, json_string, depth + 1));
      return f;
    }
    case Ast::kAlt: {
      std::vector<Frag> options;
      for (const auto& k : n.kids) options.push_back(emit(a, *k, json_string, depth + 1));
      return a.alt(options);
    }
    case Ast::kRepeat:
      return emit_repeat(a, n, json_string, depth);
  }
  return a.empty();
}

const char* short_escape(char32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      return nullptr;
  }
}

}  // namespace

Frag json_char_set(Automaton& a, const Ranges& ranges, bool json_string) {
  if (!json_string) return a.code_point_set(ranges);
  // Raw: everything but controls, '"' and '\\'; those as escapes.
  Ranges raw;
  std::vector<Frag> escaped;
  for (auto [lo, hi] : ranges) {
    for (char32_t c = lo; c <= hi && c < 0x20; ++c) {
      if (const char* e = short_escape(c)) {
        escaped.push_back(a.literal(e));
      } else {
        static const char* kHex = "0123456789abcdef";
        escaped.push_back(a.literal(std::string("\\u00") + kHex[c >> 4] + kHex[c & 15]));
      }
    }
    char32_t start = std::max<char32_t>(lo, 0x20);
    for (char32_t special : {char32_t{'"'}, char32_t{'\\'}}) {
      if (start <= special && special <= hi) {
        if (start < special) raw.emplace_back(start, special - 1);
        escaped.push_back(a.literal(short_escape(special)));
        start = special + 1;
      }
    }
    if (start <= hi) raw.emplace_back(start, hi);
  }
  if (escaped.empty()) return a.code_point_set(raw);
  if (!raw.empty()) escaped.push_back(a.code_point_set(raw));
  return a.alt(escaped);
}

Frag compile_regex(Automaton& a, std::string_view pattern, const RegexOptions& options) {
  if (static_cast<int64_t>(pattern.size()) > a.limits().max_regex_bytes) {
    throw GrammarError(std::string(options.what) + " is " + std::to_string(pattern.size()) +
                       " bytes; the limit is " + std::to_string(a.limits().max_regex_bytes));
  }
  Parser parser(pattern, options, a.limits().max_repeat);
  AstPtr ast = parser.parse();
  return emit(a, *ast, options.json_string, 0);
}

}  // namespace hubzoo::grammar
