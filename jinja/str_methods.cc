// Python's str methods as templates call them (`s.split('</think>')`,
// `s.startswith(('a', 'b'))`, `'{:>5}'.format(x)`). Indices count code points.
#include <utf8proc.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>

#include "jinja/builtins.h"

namespace hubzoo::jinja {
namespace {

using CPs = std::vector<char32_t>;

int category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
bool is_alpha(char32_t c) {
  return category(c) >= UTF8PROC_CATEGORY_LU && category(c) <= UTF8PROC_CATEGORY_LO;
}
bool is_decimal(char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; }
bool is_digit(char32_t c) {  // Nd plus superscripts and the like (numeric type Digit)
  return is_decimal(c) || c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0x2070 && c <= 0x2079) ||
         (c >= 0x2080 && c <= 0x2089) || (c >= 0x2460 && c <= 0x2468) ||
         (c >= 0x2474 && c <= 0x247C) || (c >= 0x2488 && c <= 0x2490) || c == 0x24EA ||
         (c >= 0x24F5 && c <= 0x24FD) || c == 0x24FF || (c >= 0x2776 && c <= 0x277E) ||
         (c >= 0x2780 && c <= 0x2788) || (c >= 0x278A && c <= 0x2792);
}
bool is_numeric(char32_t c) {
  int k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO ||
         is_digit(c) || c == 0x4E00 || c == 0x4E8C || c == 0x4E09 || c == 0x56DB || c == 0x4E94 ||
         c == 0x516D || c == 0x4E03 || c == 0x516B || c == 0x4E5D || c == 0x5341 || c == 0x767E ||
         c == 0x5343 || c == 0x4E07 || c == 0x5104 || c == 0x5146 || c == 0x96F6;
}
bool is_printable(char32_t c) {
  if (c == ' ') return true;
  int k = category(c);
  return !(k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
           k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_ZL ||
           k == UTF8PROC_CATEGORY_ZP || k == UTF8PROC_CATEGORY_ZS);
}
bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool all_of(const CPs& cps, bool (*pred)(char32_t)) {
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

const std::string& str_arg(const CallArgs& a, size_t i, const char* name, const std::string& m) {
  const Value* v = a.get(i, name);
  if (!v) throw TemplateError("TypeError: " + m + "() missing required argument '" + name + "'");
  if (!v->is_string()) {
    throw TemplateError("TypeError: " + m + "() argument must be str, not " + type_name(*v));
  }
  return v->str();
}

int64_t int_arg(const CallArgs& a, size_t i, const char* name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (v->kind == Kind::Int) return v->i;
  if (v->kind == Kind::Bool) return v->b;
  throw TemplateError("TypeError: '" + type_name(*v) +
                      "' object cannot be interpreted as an integer");
}

// The [start:end] window of optional slice-style arguments at positions i, i+1.
std::pair<int64_t, int64_t> window(const CallArgs& a, size_t i, int64_t n) {
  auto adjust = [n](int64_t v) { return v < 0 ? std::max<int64_t>(0, v + n) : std::min(v, n); };
  return {adjust(int_arg(a, i, "start", 0)), adjust(int_arg(a, i + 1, "end", n))};
}

std::string sub(const CPs& cps, int64_t b, int64_t e) {
  return b >= e ? std::string() : utf8_encode(CPs(cps.begin() + b, cps.begin() + e));
}

int64_t cp_index(const std::string& s, size_t byte) {
  int64_t n = 0;
  for (size_t k = 0; k < byte; ++k) n += (static_cast<unsigned char>(s[k]) & 0xC0) != 0x80;
  return n;
}

// Checks that `parts` pieces of `s` fit the budget once they are list items.
void check_parts(const std::vector<std::string>& parts, const std::string& s) {
  check_bytes(s.size() + mul_sat(parts.size() + 1, kPieceBytes), "split's parts");
}

Value list_of(std::vector<std::string> parts) {
  List out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::make_list(std::move(out));
}

std::vector<std::string> py_rsplit(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {
    CPs cps = utf8_decode(s);
    int64_t e = static_cast<int64_t>(cps.size());
    while (e > 0) {
      while (e > 0 && is_py_space(cps[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(sub(cps, 0, e));  // the rest keeps its leading whitespace
        break;
      }
      int64_t b = e;
      while (b > 0 && !is_py_space(cps[b - 1])) --b;
      check_parts(out, s);
      out.push_back(sub(cps, b, e));
      e = b;
    }
  } else {
    if (!sep.is_string())
      throw TemplateError("TypeError: must be str or None, not " + type_name(sep));
    const std::string& d = sep.str();
    if (d.empty()) throw TemplateError("ValueError: empty separator");
    size_t end = s.size();
    while (true) {
      size_t p = end >= d.size() ? py_rfind(s, d, end - d.size()) : std::string::npos;
      if (p == std::string::npos ||
          (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
        out.push_back(s.substr(0, end));
        break;
      }
      check_parts(out, s);
      out.push_back(s.substr(p + d.size(), end - p - d.size()));
      end = p;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string expand_tabs(const CPs& cps, int64_t tabsize) {
  std::string out;
  int64_t col = 0;
  for (char32_t c : cps) {
    if (c == '\t') {
      if (tabsize > 0) {
        int64_t n = tabsize - col % tabsize;
        check_bytes(out.size() + static_cast<size_t>(n), "expandtabs' result");
        out.append(static_cast<size_t>(n), ' ');
        col += n;
      }
    } else {
      utf8_append(out, c);
      col = (c == '\n' || c == '\r') ? 0 : col + 1;
    }
  }
  return out;
}

bool is_title(const CPs& cps) {
  bool cased = false, prev_cased = false;
  for (char32_t c : cps) {
    if (utf8proc_isupper(c) || category(c) == UTF8PROC_CATEGORY_LT) {
      if (prev_cased) return false;
      prev_cased = cased = true;
    } else if (utf8proc_islower(c)) {
      if (!prev_cased) return false;
      prev_cased = cased = true;
    } else {
      prev_cased = false;
    }
  }
  return cased;
}

bool is_identifier(const CPs& cps) {
  if (cps.empty()) return false;
  for (size_t k = 0; k < cps.size(); ++k) {
    char32_t c = cps[k];
    int cat = category(c);
    bool start = c == '_' || is_alpha(c) || cat == UTF8PROC_CATEGORY_NL;
    bool cont = start || cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
                cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_PC;
    if (!(k == 0 ? start : cont)) return false;
  }
  return true;
}

// ---- the methods: each (s, name, args) -> result; `name` tells apart the
// methods that share a handler (strip/lstrip/rstrip, find/rfind, ...) ----
using StrMethod = Value (*)(const std::string& s, const std::string& name, const CallArgs& a);

Value strip_method(const std::string& s, const std::string& name, const CallArgs& a) {
  Value chars = a.get_or(0, "chars", Value::none());
  return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
}

Value split_method(const std::string& s, const std::string& name, const CallArgs& a) {
  Value sep = a.get_or(0, "sep", Value::none());
  int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
  return list_of(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
}

Value splitlines_method(const std::string& s, const std::string&, const CallArgs& a) {
  return list_of(py_splitlines(s, truthy(a.get_or(0, "keepends", Value::boolean(false)))));
}

std::string py_casefold(const std::string& s) {
  return py_replace(py_lower(s), "\u00df", "ss", -1);
}

// upper, lower, casefold, title, capitalize, swapcase: no arguments.
template <std::string (*Convert)(const std::string&)>
Value case_method(const std::string& s, const std::string&, const CallArgs&) {
  return Value::string(Convert(s));
}

Value replace_method(const std::string& s, const std::string& name, const CallArgs& a) {
  return Value::string(py_replace(s, str_arg(a, 0, "old", name), str_arg(a, 1, "new", name),
                                  int_arg(a, 2, "count", -1)));
}

Value format_method(const std::string& s, const std::string&, const CallArgs& a) {
  return Value::string(str_format(s, a));
}

Value format_map_method(const std::string& s, const std::string&, const CallArgs& a) {
  const Value* m = a.get(0, "mapping");
  if (!m || m->kind != Kind::Dict) throw TemplateError("TypeError: format_map() needs a mapping");
  CallArgs kw;
  for (const auto& [k, v] : m->dict->items) {
    if (k.is_string()) kw.kw.emplace_back(k.str(), v);
  }
  return Value::string(str_format(s, kw));
}

Value join_method(const std::string& s, const std::string&, const CallArgs& a) {
  const Value* items = a.get(0, "iterable");
  if (!items) throw TemplateError("TypeError: join() takes exactly one argument");
  std::string out;
  bool first = true;
  for (const Value& v : iterate(*items)) {
    if (v.kind != Kind::String) {
      throw TemplateError("TypeError: sequence item: expected str instance, " + type_name(v) +
                          " found");
    }
    check_bytes(out.size() + s.size() + v.str().size(), "str.join's result");
    if (!first) out += s;
    first = false;
    out += v.str();
  }
  return Value::string(out);
}

// startswith, endswith: a str or a tuple of str, within an optional [start:end].
Value affix_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const Value* p = a.get(0, "prefix");
  if (!p) throw TemplateError("TypeError: " + name + "() takes at least 1 argument");
  List options = p->kind == Kind::Tuple ? *p->list : List{*p};
  CPs cps = utf8_decode(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  auto [b, e] = window(a, 1, n);
  std::string part = sub(cps, b, e);
  if (b > n) return Value::boolean(false);
  for (const Value& o : options) {
    if (o.kind != Kind::String) {
      throw TemplateError("TypeError: " + name + " first arg must be str or a tuple of str, not " +
                          type_name(o));
    }
    const std::string& x = o.str();
    bool hit = x.size() <= part.size() &&
               (name == "startswith" ? part.compare(0, x.size(), x) == 0
                                     : part.compare(part.size() - x.size(), x.size(), x) == 0);
    if (hit) return Value::boolean(true);
  }
  return Value::boolean(false);
}

// find, rfind, index, rindex: the code-point index of `sub` within [start:end].
Value find_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const std::string& needle = str_arg(a, 0, "sub", name);
  CPs cps = utf8_decode(s);
  auto [b, e] = window(a, 1, static_cast<int64_t>(cps.size()));
  std::string part = sub(cps, b, e);
  size_t p = b > e            ? std::string::npos
             : name[0] == 'r' ? py_rfind(part, needle)
                              : py_find(part, needle);
  if (p == std::string::npos) {
    if (name == "index" || name == "rindex") throw TemplateError("ValueError: substring not found");
    return Value::integer(-1);
  }
  return Value::integer(b + cp_index(part, p));
}

// count: non-overlapping occurrences of `sub` within [start:end].
Value count_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const std::string& needle = str_arg(a, 0, "sub", name);
  CPs cps = utf8_decode(s);
  auto [b, e] = window(a, 1, static_cast<int64_t>(cps.size()));
  std::string part = sub(cps, b, e);
  if (b > e) return Value::integer(0);
  if (needle.empty()) return Value::integer(e - b + 1);
  int64_t c = 0;
  for (size_t p = py_find(part, needle); p != std::string::npos;
       p = py_find(part, needle, p + needle.size()))
    ++c;
  return Value::integer(c);
}

// removeprefix, removesuffix.
Value remove_affix_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const std::string& x = str_arg(a, 0, name == "removeprefix" ? "prefix" : "suffix", name);
  if (name == "removeprefix" && s.compare(0, x.size(), x) == 0)
    return Value::string(s.substr(x.size()));
  if (name == "removesuffix" && x.size() <= s.size() && !x.empty() &&
      s.compare(s.size() - x.size(), x.size(), x) == 0) {
    return Value::string(s.substr(0, s.size() - x.size()));
  }
  return Value::string(s);
}

// partition, rpartition: a 3-tuple (head, sep, tail).
Value partition_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const std::string& sep = str_arg(a, 0, "sep", name);
  if (sep.empty()) throw TemplateError("ValueError: empty separator");
  size_t p = name == "partition" ? py_find(s, sep) : py_rfind(s, sep);
  if (p == std::string::npos) {
    return name == "partition"
               ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
               : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
  }
  return Value::tuple(
      {Value::string(s.substr(0, p)), Value::string(sep), Value::string(s.substr(p + sep.size()))});
}

Value expandtabs_method(const std::string& s, const std::string&, const CallArgs& a) {
  return Value::string(expand_tabs(utf8_decode(s), int_arg(a, 0, "tabsize", 8)));
}

bool is_alnum(char32_t c) { return is_alpha(c) || is_numeric(c); }
bool is_ascii(char32_t c) { return c < 0x80; }

// isdigit, isdecimal, isnumeric, isalpha, isalnum, isspace: every code point
// passes, and there is at least one.
template <bool (*Pred)(char32_t)>
Value nonempty_all_method(const std::string& s, const std::string&, const CallArgs&) {
  return Value::boolean(all_of(utf8_decode(s), Pred));
}

// isascii, isprintable: every code point passes (true for "").
template <bool (*Pred)(char32_t)>
Value all_method(const std::string& s, const std::string&, const CallArgs&) {
  CPs cps = utf8_decode(s);
  return Value::boolean(std::all_of(cps.begin(), cps.end(), Pred));
}

// istitle, isidentifier: a property of the whole string.
template <bool (*Pred)(const CPs&)>
Value whole_method(const std::string& s, const std::string&, const CallArgs&) {
  return Value::boolean(Pred(utf8_decode(s)));
}

// isupper, islower: some cased code point, none of the other case.
Value case_test_method(const std::string& s, const std::string& name, const CallArgs&) {
  bool any = false;
  for (char32_t c : utf8_decode(s)) {
    if (!is_cased(c)) continue;
    any = true;
    if (name == "isupper" ? utf8proc_islower(c) : utf8proc_isupper(c)) return Value::boolean(false);
  }
  return Value::boolean(any);
}

// zfill, center, ljust, rjust.
Value pad_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const Value* w = a.get(0, "width");
  if (!w || (w->kind != Kind::Int && w->kind != Kind::Bool))
    throw TemplateError("TypeError: " + name + "() needs an integer width");
  int64_t width = w->kind == Kind::Bool ? w->b : w->i;
  int64_t len = static_cast<int64_t>(utf8_decode(s).size());
  int64_t pad = std::max<int64_t>(0, width - len);
  if (pad > (1 << 20)) throw LimitError("string padding too large");
  check_bytes(s.size() + static_cast<size_t>(pad) * 4, "a padded string");
  std::string fill = " ";
  if (const Value* f = a.get(1, "fillchar")) {
    if (!f->is_string() || utf8_decode(f->str()).size() != 1) {
      throw TemplateError("TypeError: The fill character must be exactly one character long");
    }
    fill = f->str();
  }
  auto rep = [&](int64_t n) {
    std::string r;
    for (int64_t k = 0; k < n; ++k) r += fill;
    return r;
  };
  if (name == "zfill") {
    if (!s.empty() && (s[0] == '-' || s[0] == '+'))
      return Value::string(s.substr(0, 1) + std::string(pad, '0') + s.substr(1));
    return Value::string(std::string(pad, '0') + s);
  }
  if (name == "ljust") return Value::string(s + rep(pad));
  if (name == "rjust") return Value::string(rep(pad) + s);
  int64_t left = pad / 2 + (pad & width & 1);  // CPython's center rounding
  return Value::string(rep(left) + s + rep(pad - left));
}

// Every str method a template may call, by name.
const std::map<std::string, StrMethod>& str_methods() {
  static const std::map<std::string, StrMethod> table = {
      {"strip", strip_method},
      {"lstrip", strip_method},
      {"rstrip", strip_method},
      {"split", split_method},
      {"rsplit", split_method},
      {"splitlines", splitlines_method},
      {"upper", case_method<py_upper>},
      {"lower", case_method<py_lower>},
      {"casefold", case_method<py_casefold>},
      {"title", case_method<py_title>},
      {"capitalize", case_method<py_capitalize>},
      {"swapcase", case_method<py_swapcase>},
      {"replace", replace_method},
      {"format", format_method},
      {"format_map", format_map_method},
      {"join", join_method},
      {"startswith", affix_method},
      {"endswith", affix_method},
      {"find", find_method},
      {"rfind", find_method},
      {"index", find_method},
      {"rindex", find_method},
      {"count", count_method},
      {"removeprefix", remove_affix_method},
      {"removesuffix", remove_affix_method},
      {"partition", partition_method},
      {"rpartition", partition_method},
      {"expandtabs", expandtabs_method},
      {"isdigit", nonempty_all_method<is_digit>},
      {"isdecimal", nonempty_all_method<is_decimal>},
      {"isnumeric", nonempty_all_method<is_numeric>},
      {"isalpha", nonempty_all_method<is_alpha>},
      {"isalnum", nonempty_all_method<is_alnum>},
      {"isspace", nonempty_all_method<is_py_space>},
      {"isascii", all_method<is_ascii>},
      {"isprintable", all_method<is_printable>},
      {"istitle", whole_method<is_title>},
      {"isidentifier", whole_method<is_identifier>},
      {"isupper", case_test_method},
      {"islower", case_test_method},
      {"zfill", pad_method},
      {"center", pad_method},
      {"ljust", pad_method},
      {"rjust", pad_method},
  };
  return table;
}

}  // namespace

bool has_str_method(const std::string& name) { return str_methods().count(name) > 0; }

Value call_str_method(const std::string& s, const std::string& name, const CallArgs& a) {
  auto it = str_methods().find(name);
  if (it == str_methods().end()) {
    throw TemplateError("AttributeError: 'str' object has no attribute '" + name + "'");
  }
  return it->second(s, name, a);
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<char32_t> set;
  bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) {
    if (chars.kind != Kind::String) throw TemplateError("TypeError: strip arg must be None or str");
    set = utf8_decode(chars.str());
  }
  auto strip_it = [&](char32_t c) {
    return ws ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  return utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {
    auto cps = utf8_decode(s);
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && is_py_space(cps[k])) ++k;
      if (k >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + k, cps.end())));
        break;  // the rest keeps its trailing whitespace
      }
      size_t j = k;
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
      check_parts(out, s);
      out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + k, cps.begin() + j)));
      k = j;
    }
    return out;
  }
  if (sep.kind != Kind::String)
    throw TemplateError("TypeError: must be str or None, not " + type_name(sep));
  const std::string& d = sep.str();
  if (d.empty()) throw TemplateError("ValueError: empty separator");
  size_t start = 0;
  while (true) {
    size_t p = py_find(s, d, start);
    if (p == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(s.substr(start));
      return out;
    }
    check_parts(out, s);
    out.push_back(s.substr(start, p - start));
    start = p + d.size();
  }
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  CPs cps = utf8_decode(s);
  size_t start = 0;
  for (size_t k = 0; k < cps.size(); ++k) {
    if (!is_line_break(cps[k])) continue;
    size_t brk = k;
    if (cps[k] == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ++k;
    check_parts(out, s);
    out.push_back(utf8_encode(CPs(cps.begin() + start, cps.begin() + (keepends ? k + 1 : brk))));
    start = k + 1;
  }
  if (start < cps.size()) out.push_back(utf8_encode(CPs(cps.begin() + start, cps.end())));
  return out;
}

namespace {
constexpr size_t kShortNeedle = 32;  // std::string's search is fine below this: O(32 n)

// Knuth-Morris-Pratt: the first match of [pat, pat_end) in [first, last), or
// `last`; O(n + m) whatever the input (std::boyer_moore_searcher builds its
// tables in O(m^2) for some needles).
template <class It>
It kmp_search(It first, It last, It pat, It pat_end) {
  const size_t m = static_cast<size_t>(pat_end - pat);
  check_bytes(m * sizeof(uint32_t), "a substring search");
  std::vector<uint32_t> fail(m, 0);  // longest proper border of pat[0..i]
  for (size_t i = 1, k = 0; i < m; ++i) {
    while (k && pat[i] != pat[k]) k = fail[k - 1];
    if (pat[i] == pat[k]) ++k;
    fail[i] = static_cast<uint32_t>(k);
  }
  size_t k = 0;
  for (It it = first; it != last; ++it) {
    while (k && *it != pat[k]) k = fail[k - 1];
    if (*it == pat[k]) ++k;
    if (k == m) return it - static_cast<ptrdiff_t>(m - 1);
  }
  return last;
}
}  // namespace

size_t py_find(const std::string& s, const std::string& sub, size_t from) {
  if (sub.size() <= kShortNeedle || from >= s.size()) return s.find(sub, from);
  auto it = kmp_search(s.begin() + static_cast<ptrdiff_t>(from), s.end(), sub.begin(), sub.end());
  return it == s.end() ? std::string::npos : static_cast<size_t>(it - s.begin());
}

size_t py_rfind(const std::string& s, const std::string& sub, size_t pos) {
  if (sub.size() <= kShortNeedle) return s.rfind(sub, pos);
  if (sub.size() > s.size()) return std::string::npos;
  const size_t end = std::min(pos, s.size() - sub.size()) + sub.size();  // matches end by here
  const auto first = std::make_reverse_iterator(s.begin() + static_cast<ptrdiff_t>(end));
  const auto last = std::make_reverse_iterator(s.begin());
  auto it = kmp_search(first, last, sub.rbegin(), sub.rend());
  if (it == last) return std::string::npos;
  // The reversed match starts at the forward match's last byte: it ends at it.base().
  return static_cast<size_t>(it.base() - s.begin()) - sub.size();
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts repl between every code point
    auto cps = utf8_decode(s);
    const size_t times = count < 0 ? cps.size() + 1 : std::min<size_t>(count, cps.size() + 1);
    check_bytes(s.size() + mul_sat(times, repl.size()), "replace's result");
    int64_t n = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      if (k < cps.size()) utf8_append(out, cps[k]);
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t p = py_find(s, old, start);
    if (p == std::string::npos) break;
    check_bytes(out.size() + (p - start) + repl.size(), "replace's result");
    out.append(s, start, p - start);
    out += repl;
    start = p + old.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

}  // namespace hubzoo::jinja
