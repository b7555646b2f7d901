// jinja2's built-in string and number filters, plus transformers' tojson,
// each following jinja2/filters.py; the registry of all filters and the
// argument check every filter call goes through.
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>

#include "jinja/builtins.h"

namespace hubzoo::jinja {
namespace {

std::string soft_str(const Value& v) { return to_str(v); }

Value f_tojson(const Value& v, const CallArgs& a, const RenderLimits&) {
  JsonStyle st;
  st.ensure_ascii = truthy(a.get_or(0, "ensure_ascii", Value::boolean(false)));
  Value indent = a.get_or(1, "indent", Value::none());
  if (indent.kind == Kind::Int || indent.kind == Kind::Bool) {
    int64_t n = indent.kind == Kind::Bool ? indent.b : indent.i;
    st.has_indent = true;
    st.indent = std::string(std::max<int64_t>(0, std::min<int64_t>(n, 1024)), ' ');
  } else if (indent.is_string()) {
    st.has_indent = true;
    st.indent = indent.str();
  } else if (!indent.is_none()) {
    throw TemplateError("TypeError: tojson indent must be an int, a string or None");
  }
  if (st.has_indent) st.item_sep = ",";
  Value sep = a.get_or(2, "separators", Value::none());
  if (sep.is_sequence() && sep.list->size() == 2 && (*sep.list)[0].is_string() &&
      (*sep.list)[1].is_string()) {
    st.item_sep = (*sep.list)[0].str();
    st.key_sep = (*sep.list)[1].str();
  } else if (!sep.is_none()) {
    throw TemplateError("tojson separators must be a pair of strings");
  }
  st.sort_keys = truthy(a.get_or(3, "sort_keys", Value::boolean(false)));
  return Value::string(to_json(v, st));
}

Value f_default(const Value& v, const CallArgs& a, const RenderLimits&) {
  Value dflt = a.get_or(0, "default_value", Value::string(""));
  bool boolean = truthy(a.get_or(1, "boolean", Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt;
  return v;
}

Value f_string(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::string(soft_str(v));
}
Value f_safe(const Value& v, const CallArgs&, const RenderLimits&) {
  return v.is_string() ? v : Value::string(soft_str(v));
}

Value f_trim(const Value& v, const CallArgs& a, const RenderLimits&) {
  return Value::string(py_strip(soft_str(v), a.get_or(0, "chars", Value::none()), true, true));
}
Value f_upper(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::string(py_upper(soft_str(v)));
}
Value f_lower(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::string(py_lower(soft_str(v)));
}
Value f_capitalize(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::string(py_capitalize(soft_str(v)));
}
Value f_title(const Value& v, const CallArgs&, const RenderLimits&) {
  // Words start after runs of [-\s({\[<]; each word is item[0].upper() + item[1:].lower().
  auto cps = utf8_decode(soft_str(v));
  std::string out;
  auto is_sep = [](char32_t c) {
    return is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  size_t k = 0;
  while (k < cps.size()) {
    size_t j = k;
    bool sep = is_sep(cps[k]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    std::vector<char32_t> part(cps.begin() + k, cps.begin() + j);
    if (sep) {
      out += utf8_encode(part);
    } else {
      out += py_upper(utf8_encode({part[0]}));
      out += py_lower(utf8_encode(std::vector<char32_t>(part.begin() + 1, part.end())));
    }
    k = j;
  }
  return Value::string(out);
}

Value f_replace(const Value& v, const CallArgs& a, const RenderLimits&) {
  Value count = a.get_or(2, "count", Value::none());
  return Value::string(py_replace(soft_str(v), soft_str(*a.get(0, "old")),
                                  soft_str(*a.get(1, "new")),
                                  count.kind == Kind::Int ? count.i : -1));
}

// Python's int(str, base): a sign, a 0x/0o/0b prefix matching the base (any
// with base 0), '_' between digits; base 0 refuses other leading zeros.
bool parse_int(std::string s, int64_t base, int64_t& out) {
  s = py_strip(s, Value::none(), true, true);
  if (base != 0 && (base < 2 || base > 36)) return false;
  size_t k = 0;
  bool neg = false;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
  if (k + 1 < s.size() && s[k] == '0') {
    char p = static_cast<char>(std::tolower(s[k + 1]));
    int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb && (base == 0 || base == pb)) {
      base = pb;
      k += 2;
      if (k < s.size() && s[k] == '_') ++k;
    }
  }
  std::string digits;
  for (; k < s.size(); ++k) {
    if (s[k] == '_' && !digits.empty() && k + 1 < s.size() && s[k + 1] != '_') continue;
    if (!std::isalnum(static_cast<unsigned char>(s[k]))) return false;
    digits += s[k];
  }
  if (digits.empty()) return false;
  if (base == 0) {
    if (digits.size() > 1 && digits[0] == '0' && digits.find_first_not_of('0') != std::string::npos)
      return false;
    base = 10;
  }
  char* end = nullptr;
  errno = 0;
  long long r = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
  if (errno || *end) return false;
  out = neg ? -r : r;
  return true;
}

// Python's float(str): decimal or inf/nan spellings, '_' only between digits.
bool parse_float(const std::string& raw, double& out) {
  std::string s = py_strip(raw, Value::none(), true, true), t;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_') {
      if (k == 0 || k + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[k - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[k + 1]))) {
        return false;
      }
      continue;
    }
    if (s[k] == 'x' || s[k] == 'X' || s[k] == 'p' || s[k] == 'P' || s[k] == '(') return false;
    t += s[k];
  }
  if (t.empty()) return false;
  char* end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return *end == 0;
}

Value f_int(const Value& v, const CallArgs& a, const RenderLimits&) {
  if (v.is_undefined()) v.raise_undefined();  // int()/+/splitlines fail on Undefined
  Value dflt = a.get_or(0, "default", Value::integer(0));
  int64_t base = a.get_or(1, "base", Value::integer(10)).i;
  int64_t r;
  double d;
  if (v.is_string()) {
    if (parse_int(v.str(), base, r)) return Value::integer(r);
    if (parse_float(v.str(), d) && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
    return dflt;
  }
  if (v.kind == Kind::Int || v.kind == Kind::Bool)
    return Value::integer(v.kind == Kind::Bool ? v.b : v.i);
  if (v.kind == Kind::Float && std::isfinite(v.f)) return Value::integer(static_cast<int64_t>(v.f));
  return dflt;
}

Value f_float(const Value& v, const CallArgs& a, const RenderLimits&) {
  if (v.is_undefined()) v.raise_undefined();  // int()/+/splitlines fail on Undefined
  Value dflt = a.get_or(0, "default", Value::number(0.0));
  double d;
  if (v.is_numeric()) return Value::number(v.as_double());
  if (v.is_string() && parse_float(v.str(), d)) return Value::number(d);
  return dflt;
}

Value f_abs(const Value& v, const CallArgs&, const RenderLimits&) {
  if (v.kind == Kind::Int || v.kind == Kind::Bool) {
    int64_t x = v.kind == Kind::Bool ? v.b : v.i;
    return Value::integer(x < 0 ? -x : x);
  }
  if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
  throw TemplateError("TypeError: bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(const Value& v, const CallArgs& a, const RenderLimits&) {
  int64_t precision = a.get_or(0, "precision", Value::integer(0)).i;
  std::string method = to_str(a.get_or(1, "method", Value::string("common")));
  if (method != "common" && method != "ceil" && method != "floor") {
    throw TemplateError("FilterArgumentError: method must be common, ceil or floor");
  }
  if (!v.is_numeric())
    throw TemplateError("TypeError: round() needs a number, got " + type_name(v));
  if (method == "common" && v.kind != Kind::Float)
    return Value::integer(v.kind == Kind::Bool ? v.b : v.i);
  double x = v.as_double();
  if (method != "common") {
    double scale = std::pow(10.0, static_cast<double>(precision));
    return Value::number((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (precision < 0 || !std::isfinite(x)) {
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::number(std::nearbyint(x / scale) * scale);
  }
  // printf rounds the exact binary value half-to-even, as Python's round() does.
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
  return Value::number(std::strtod(buf, nullptr));
}

Value f_indent(const Value& v, const CallArgs& a, const RenderLimits&) {
  if (v.is_undefined()) v.raise_undefined();  // int()/+/splitlines fail on Undefined
  Value width = a.get_or(0, "width", Value::integer(4));
  std::string ind = width.is_string()
                        ? width.str()
                        : std::string(std::max<int64_t>(0, std::min<int64_t>(width.i, 1024)), ' ');
  bool first = truthy(a.get_or(1, "first", Value::boolean(false)));
  bool blank = truthy(a.get_or(2, "blank", Value::boolean(false)));
  std::string s = soft_str(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  check_bytes(s.size() + mul_sat(lines.size() + 1, ind.size()), "indent's result");
  std::string rv;
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string& line = lines[k];
    if (k > 0) rv += "\n";
    if (k > 0 && (blank || !line.empty())) rv += ind;
    rv += line;
  }
  return Value::string(first ? ind + rv : rv);
}

Value f_wordcount(const Value& v, const CallArgs&, const RenderLimits&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(soft_str(v))) {
    int cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));  // regex \w: letters, numbers, _
    bool w = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
             (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_escape(const Value& v, const CallArgs&, const RenderLimits&) {
  const std::string s = soft_str(v);
  check_bytes(s.size() * 5, "escape's result");  // '&#34;' is the longest
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value::string(out);
}

Value f_center(const Value& v, const CallArgs& a, const RenderLimits&) {
  CallArgs args;
  args.pos.push_back(a.get_or(0, "width", Value::integer(80)));
  return get_attr(Value::string(soft_str(v)), "center").fn->fn(args);
}

Value f_format(const Value& v, const CallArgs& a, const RenderLimits&) {
  if (!a.pos.empty() && !a.kw.empty()) {
    throw TemplateError(
        "FilterArgumentError: can't handle positional and keyword arguments at the same time");
  }
  if (a.kw.empty()) return Value::string(percent_format(soft_str(v), Value::tuple(a.pos)));
  Value mapping = Value::make_dict();
  for (const auto& [k, x] : a.kw) mapping.dict->set(Value::string(k), x);
  return Value::string(percent_format(soft_str(v), mapping));
}

Value f_attr(const Value& v, const CallArgs& a, const RenderLimits&) {
  // jinja2's attr filter uses Python getattr only: dict keys are not attributes.
  std::string name = to_str(*a.get(0, "name"));
  if (v.kind == Kind::Dict && v.dict->find(name)) {
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  return get_attr(v, name);
}

Value f_striptags(const Value& v, const CallArgs&, const RenderLimits&) {
  std::string s = soft_str(v), out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '<' && s.find('>', k) != std::string::npos) {
      k = s.find('>', k);
      out += ' ';
    } else {
      out += s[k];
    }
  }
  CallArgs no_args;
  List words = *get_attr(Value::string(out), "split").fn->fn(no_args).list;
  std::string joined;
  for (size_t k = 0; k < words.size(); ++k) joined += (k ? " " : "") + words[k].str();
  return Value::string(joined);
}

Value f_truncate(const Value& v, const CallArgs& a, const RenderLimits&) {
  auto cps = utf8_decode(soft_str(v));
  int64_t length = a.get_or(0, "length", Value::integer(255)).i;
  bool killwords = truthy(a.get_or(1, "killwords", Value::boolean(false)));
  std::string end = soft_str(a.get_or(2, "end", Value::string("...")));
  Value leeway_v = a.get_or(3, "leeway", Value::none());
  int64_t leeway = leeway_v.is_none() ? 5 : leeway_v.i;  // jinja2's truncate.leeway policy
  const int64_t end_len = static_cast<int64_t>(utf8_decode(end).size());
  if (length < end_len) {
    throw TemplateError("AssertionError: expected length >= " + std::to_string(end_len) + ", got " +
                        std::to_string(length));
  }
  if (leeway < 0) throw TemplateError("AssertionError: expected leeway >= 0");
  const int64_t n = static_cast<int64_t>(cps.size());
  if (n <= length + leeway) return Value::string(utf8_encode(cps));
  std::string head =
      utf8_encode(std::vector<char32_t>(cps.begin(), cps.begin() + std::min(n, length - end_len)));
  if (!killwords) {
    size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return Value::string(head + end);
}

// textwrap.wrap(line, width, expand_tabs=False, replace_whitespace=False):
// chunks are whitespace runs and words (split after hyphens inside words).
std::vector<std::string> wrap_line(const std::vector<char32_t>& s, int64_t width, bool break_long,
                                   bool break_hyphens) {
  auto is_letter = [](char32_t c) {
    int k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
  };
  // Chunks are views into `s`: breaking a long word drops a prefix in O(1).
  std::vector<std::u32string_view> chunks;
  for (size_t k = 0; k < s.size();) {
    size_t j = k;
    bool ws = is_py_space(s[k]);
    while (j < s.size() && is_py_space(s[j]) == ws) {
      ++j;
      // "well-known": break after the hyphen between letters.
      if (!ws && break_hyphens && s[j - 1] == '-' && j >= 3 && is_letter(s[j - 2]) &&
          is_letter(s[j - 3]) && j + 1 < s.size() && is_letter(s[j]) && is_letter(s[j + 1])) {
        break;
      }
    }
    check_bytes((chunks.size() + 1) * sizeof(std::u32string_view), "wordwrap's chunks");
    chunks.emplace_back(s.data() + k, j - k);
    k = j;
  }
  auto blank = [](std::u32string_view c) { return std::all_of(c.begin(), c.end(), is_py_space); };
  std::vector<std::string> lines;
  size_t line_bytes = 0;
  std::reverse(chunks.begin(), chunks.end());
  while (!chunks.empty()) {
    std::vector<std::u32string_view> line;
    int64_t len = 0;
    if (blank(chunks.back()) && !lines.empty()) chunks.pop_back();
    while (!chunks.empty() && len + static_cast<int64_t>(chunks.back().size()) <= width) {
      len += static_cast<int64_t>(chunks.back().size());
      line.push_back(chunks.back());
      chunks.pop_back();
    }
    if (!chunks.empty() && static_cast<int64_t>(chunks.back().size()) > width) {
      int64_t space_left = width < 1 ? 1 : width - len;
      auto& chunk = chunks.back();
      if (break_long) {
        int64_t end = space_left;
        if (break_hyphens && static_cast<int64_t>(chunk.size()) > space_left) {
          for (int64_t h = space_left - 1; h > 0; --h) {
            if (chunk[h] != '-') continue;
            if (std::any_of(chunk.begin(), chunk.begin() + h, [](char32_t c) { return c != '-'; }))
              end = h + 1;
            break;
          }
        }
        line.push_back(chunk.substr(0, end));
        chunk.remove_prefix(end);
      } else if (line.empty()) {
        line.push_back(chunk);
        chunks.pop_back();
      }
    }
    if (!line.empty() && blank(line.back())) line.pop_back();
    if (!line.empty()) {
      std::string text;
      for (std::u32string_view c : line) {
        for (char32_t cp : c) utf8_append(text, cp);
      }
      line_bytes += text.size() + sizeof(std::string);
      check_bytes(line_bytes, "wordwrap's lines");
      lines.push_back(std::move(text));
    }
  }
  return lines;
}

Value f_wordwrap(const Value& v, const CallArgs& a, const RenderLimits&) {
  if (v.is_undefined()) v.raise_undefined();  // int()/+/splitlines fail on Undefined
  int64_t width = a.get_or(0, "width", Value::integer(79)).i;
  if (width <= 0) throw TemplateError("ValueError: invalid width " + std::to_string(width));
  bool break_long = truthy(a.get_or(1, "break_long_words", Value::boolean(true)));
  Value wrap = a.get_or(2, "wrapstring", Value::none());
  std::string sep = wrap.is_none() ? "\n" : soft_str(wrap);
  bool hyphens = truthy(a.get_or(3, "break_on_hyphens", Value::boolean(true)));
  std::string out;
  bool first = true;
  for (const std::string& para : py_splitlines(soft_str(v), false)) {
    if (!first) out += sep;
    first = false;
    auto lines = wrap_line(utf8_decode(para), width, break_long, hyphens);
    for (size_t k = 0; k < lines.size(); ++k) {
      check_bytes(out.size() + sep.size() + lines[k].size(), "wordwrap's result");
      out += (k ? sep : "") + lines[k];
    }
  }
  return Value::string(out);
}

// urllib.parse.quote: unreserved characters and `safe` pass, other bytes %XX.
std::string url_quote(const std::string& s, bool for_qs) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_qs && c == '/')) {
      out += static_cast<char>(c);
    } else if (for_qs && c == ' ') {
      out += '+';
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

Value f_urlencode(const Value& v, const CallArgs&, const RenderLimits&) {
  if (v.is_string() || !(v.is_sequence() || v.kind == Kind::Dict)) {
    return Value::string(url_quote(soft_str(v), false));
  }
  std::string out;
  List items = v.kind == Kind::Dict ? List{} : *v.list;
  if (v.kind == Kind::Dict) {
    for (const auto& [k, x] : v.dict->items) items.push_back(Value::tuple({k, x}));
  }
  for (const Value& kv : items) {
    List pair = iterate(kv);
    if (pair.size() != 2) throw TemplateError("ValueError: urlencode needs (key, value) pairs");
    if (!out.empty()) out += '&';
    out += url_quote(soft_str(pair[0]), true) + "=" + url_quote(soft_str(pair[1]), true);
  }
  return Value::string(out);
}

Value f_filesizeformat(const Value& v, const CallArgs& a, const RenderLimits&) {
  bool binary = truthy(a.get_or(0, "binary", Value::boolean(false)));
  double bytes;
  if (v.is_numeric()) {
    bytes = v.as_double();
  } else if (!v.is_string() || !parse_float(v.str(), bytes)) {
    throw TemplateError("ValueError: could not convert " + repr(v) + " to float");
  }
  const double base = binary ? 1024 : 1000;
  static const char* const dec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const bin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1) return Value::string("1 Byte");
  if (bytes < base) return Value::string(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
  double unit = base;
  int k = 0;
  for (; k < 8; ++k) {
    unit *= base;
    if (bytes < unit) break;
  }
  k = std::min(k, 7);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, binary ? bin[k] : dec[k]);
  return Value::string(buf);
}

Value f_xmlattr(const Value& v, const CallArgs& a, const RenderLimits& limits) {
  if (v.kind != Kind::Dict) {
    throw TemplateError("AttributeError: '" + type_name(v) + "' object has no attribute 'items'");
  }
  bool autospace = truthy(a.get_or(0, "autospace", Value::boolean(true)));
  std::string out;
  CallArgs none;
  for (const auto& [k, x] : v.dict->items) {
    if (x.is_none() || x.is_undefined()) continue;
    std::string key = soft_str(k);
    for (char32_t c : utf8_decode(key)) {
      if (is_py_space(c) || c == '/' || c == '>' || c == '=') {
        throw TemplateError("ValueError: Invalid character in attribute name: " + repr(k));
      }
    }
    if (!out.empty()) out += ' ';
    out += f_escape(Value::string(key), none, limits).str() + "=\"" +
           f_escape(x, none, limits).str() + "\"";
  }
  return Value::string(autospace && !out.empty() ? " " + out : out);
}

// pprint.pformat(value): width 80, dicts sorted, containers broken one item
// per line when their repr does not fit, long strings split at whitespace.
class PrettyPrinter {
 public:
  std::string format(const Value& v) {
    write(v, 0, 0, 0);
    return out_;
  }

 private:
  static int64_t width_of(const std::string& s) {
    return static_cast<int64_t>(utf8_decode(s).size());
  }

  static std::vector<std::pair<Value, Value>> sorted_items(const Dict& d) {
    auto items = d.items;
    std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) {
      try {
        return less(x.first, y.first);
      } catch (const TemplateError&) {  // pprint's _safe_key: unorderable keys by type name
        return type_name(x.first) < type_name(y.first);
      }
    });
    return items;
  }

  static std::string safe_repr(const Value& v) {
    if (v.kind == Kind::Dict) {
      DepthGuard guard("pprint");
      std::string r = "{";
      bool first = true;
      for (const auto& [k, x] : sorted_items(*v.dict)) {
        r += (first ? "" : ", ") + safe_repr(k) + ": " + safe_repr(x);
        check_bytes(r.size(), "pprint's result");
        first = false;
      }
      return r + "}";
    }
    if (v.is_sequence()) {
      DepthGuard guard("pprint");
      std::string r = v.kind == Kind::List ? "[" : "(";
      for (size_t k = 0; k < v.list->size(); ++k) {
        r += (k ? ", " : "") + safe_repr((*v.list)[k]);
        check_bytes(r.size(), "pprint's result");
      }
      if (v.kind == Kind::Tuple && v.list->size() == 1) r += ",";
      return r + (v.kind == Kind::List ? "]" : ")");
    }
    return repr(v);
  }

  void write(const Value& v, int64_t indent, int64_t allowance, int level) {
    DepthGuard guard("pprint");
    check_bytes(out_.size() + static_cast<size_t>(indent) * 2, "pprint's result");
    std::string rep = safe_repr(v);
    if (width_of(rep) <= 80 - indent - allowance) {
      out_ += rep;
      return;
    }
    if (v.kind == Kind::Dict && !v.dict->items.empty()) {
      out_ += "{";
      auto items = sorted_items(*v.dict);
      for (size_t k = 0; k < items.size(); ++k) {
        bool last = k + 1 == items.size();
        std::string key = safe_repr(items[k].first);
        out_ += key + ": ";
        write(items[k].second, indent + 1 + width_of(key) + 2, last ? allowance + 1 : 1, level + 1);
        if (!last) out_ += ",\n" + std::string(indent + 1, ' ');
      }
      out_ += "}";
    } else if (v.is_sequence() && !v.list->empty()) {
      const bool tuple = v.kind == Kind::Tuple;
      const std::string end = tuple ? (v.list->size() == 1 ? ",)" : ")") : "]";
      out_ += tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        bool last = k + 1 == v.list->size();
        if (k) out_ += ",\n" + std::string(indent + 1, ' ');
        write((*v.list)[k], indent + 1, last ? allowance + width_of(end) : 1, level + 1);
      }
      out_ += end;
    } else if (v.is_string() && !v.str().empty()) {
      write_string(v.str(), indent, allowance, level + 1);
    } else {
      out_ += rep;
    }
  }

  void write_string(const std::string& s, int64_t indent, int64_t allowance, int level) {
    std::vector<std::string> chunks;
    std::vector<std::string> lines = py_splitlines(s, true);
    if (level == 1) {
      ++indent;
      ++allowance;
    }
    const int64_t max_width = 80 - indent;
    int64_t max_width1 = max_width;
    for (size_t i = 0; i < lines.size(); ++i) {
      const bool last_line = i + 1 == lines.size();
      if (last_line) max_width1 -= allowance;
      if (width_of(string_repr(lines[i])) <= max_width1) {
        chunks.push_back(string_repr(lines[i]));
        continue;
      }
      std::vector<std::string> parts;  // re.findall(r'\S*\s*', line) without the empty tail
      auto cps = utf8_decode(lines[i]);
      for (size_t k = 0; k < cps.size();) {
        size_t j = k;
        while (j < cps.size() && !is_py_space(cps[j])) ++j;
        while (j < cps.size() && is_py_space(cps[j])) ++j;
        parts.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + k, cps.begin() + j)));
        k = j;
      }
      int64_t max_width2 = max_width;
      std::string current;
      for (size_t j = 0; j < parts.size(); ++j) {
        std::string candidate = current + parts[j];
        if (j + 1 == parts.size() && last_line) max_width2 -= allowance;
        if (width_of(string_repr(candidate)) > max_width2) {
          if (!current.empty()) chunks.push_back(string_repr(current));
          current = parts[j];
        } else {
          current = candidate;
        }
      }
      if (!current.empty()) chunks.push_back(string_repr(current));
    }
    if (chunks.size() == 1) {
      out_ += string_repr(lines.back());
      return;
    }
    if (level == 1) out_ += "(";
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (i) out_ += "\n" + std::string(indent, ' ');
      out_ += chunks[i];
    }
    if (level == 1) out_ += ")";
  }

  std::string out_;
};

Value f_pprint(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::string(PrettyPrinter().format(v));
}

const std::map<std::string, Builtin<FilterFn>>& filter_table() {
  static const std::map<std::string, Builtin<FilterFn>> m = [] {
    const Builtin<FilterFn> list[] = {
        {"tojson", f_tojson, "ensure_ascii? indent? separators? sort_keys?"},
        {"default", f_default, "default_value? boolean?"},
        {"d", f_default, "default_value? boolean?"},
        {"string", f_string, ""},
        {"safe", f_safe, ""},
        {"trim", f_trim, "chars?"},
        {"upper", f_upper, ""},
        {"lower", f_lower, ""},
        {"capitalize", f_capitalize, ""},
        {"title", f_title, ""},
        {"replace", f_replace, "old new count?"},
        {"int", f_int, "default? base?"},
        {"float", f_float, "default?"},
        {"abs", f_abs, ""},
        {"round", f_round, "precision? method?"},
        {"indent", f_indent, "width? first? blank?"},
        {"wordcount", f_wordcount, ""},
        {"escape", f_escape, ""},
        {"e", f_escape, ""},
        {"forceescape", f_escape, ""},
        {"center", f_center, "width?"},
        {"format", f_format, "*"},
        {"attr", f_attr, "name"},
        {"striptags", f_striptags, ""},
        {"truncate", f_truncate, "length? killwords? end? leeway?"},
        {"wordwrap", f_wordwrap, "width? break_long_words? wrapstring? break_on_hyphens?"},
        {"urlencode", f_urlencode, ""},
        {"filesizeformat", f_filesizeformat, "binary?"},
        {"xmlattr", f_xmlattr, "autospace?"},
        {"pprint", f_pprint, ""},
    };
    std::map<std::string, Builtin<FilterFn>> out;
    for (const auto& b : list) out.emplace(b.name, b);
    for (const auto& b : sequence_filters()) out.emplace(b.name, b);
    return out;
  }();
  return m;
}

}  // namespace

bool has_filter(const std::string& name) { return filter_table().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args,
                   const RenderLimits& limits) {
  auto it = filter_table().find(name);
  if (it == filter_table().end()) throw TemplateError("no filter named '" + name + "'");
  check_signature("filter", name, it->second.signature, args);
  return it->second.fn(input, args, limits);
}

}  // namespace hubzoo::jinja
