// Operators, attribute/item access under the immutable sandbox, Python
// methods of str/dict/list, and transformers' template globals.
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "tokenizer/jinja_builtins.h"

namespace hubzoo::jinja {
namespace {

std::string object_name(const Value& v) {
  return v.is_none() ? "None" : "'" + type_name(v) + " object'";
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
}

Value unsafe_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(
      "access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
}

bool is_mutating(const Value& obj, const std::string& name) {
  static const char* list_ops[] = {"append", "clear",  "extend",  "insert",
                                   "pop",    "remove", "reverse", "sort"};
  static const char* dict_ops[] = {"clear", "pop", "popitem", "setdefault", "update"};
  if (obj.is_sequence()) {
    for (const char* op : list_ops) {
      if (name == op) return obj.kind == Kind::List;
    }
  }
  if (obj.kind == Kind::Dict) {
    for (const char* op : dict_ops) {
      if (name == op) return true;
    }
  }
  return false;
}

const std::vector<std::string>& str_methods() {
  static const std::vector<std::string> m = {
      "strip",      "lstrip",     "rstrip",   "split",    "rsplit",       "splitlines",
      "startswith", "endswith",   "upper",    "lower",    "title",        "capitalize",
      "replace",    "find",       "rfind",    "index",    "count",        "join",
      "format",     "isdigit",    "isalpha",  "isalnum",  "isspace",      "isupper",
      "islower",    "zfill",      "swapcase", "casefold", "removeprefix", "removesuffix",
      "partition",  "rpartition", "center",   "ljust",    "rjust"};
  return m;
}

bool has_method(const Value& obj, const std::string& name) {
  if (obj.kind == Kind::String) {
    return std::find(str_methods().begin(), str_methods().end(), name) != str_methods().end();
  }
  if (obj.kind == Kind::Dict) {
    return name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy";
  }
  if (obj.is_sequence())
    return name == "index" || name == "count" || (name == "copy" && obj.kind == Kind::List);
  return false;
}

Value call_method(const Value& self, const std::string& name, const CallArgs& a);

Value bound_method(const Value& obj, const std::string& name) {
  return Value::callable(name, [obj, name](CallArgs& a) { return call_method(obj, name, a); });
}

size_t cp_count(const std::string& s, size_t bytes) {
  size_t n = 0;
  for (size_t k = 0; k < bytes && k < s.size(); ++k)
    n += (static_cast<unsigned char>(s[k]) & 0xC0) != 0x80;
  return n;
}

const std::string& arg_str(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.get(i, name);
  if (!v || v->kind != Kind::String) {
    throw TemplateError(std::string("TypeError: ") + method + "() argument must be str");
  }
  return v->str();
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
        size_t e = cps.size();
        while (e > k && is_py_space(cps[e - 1])) --e;
        out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + k, cps.begin() + e)));
        break;
      }
      size_t j = k;
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
      out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + k, cps.begin() + j)));
      k = j;
    }
    return out;
  }
  if (sep.kind != Kind::String) throw TemplateError("TypeError: must be str or None");
  const std::string& d = sep.str();
  if (d.empty()) throw TemplateError("ValueError: empty separator");
  size_t start = 0;
  while (true) {
    size_t p = s.find(d, start);
    if (p == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, p - start));
    start = p + d.size();
  }
}

bool all_cps(const std::string& s, bool (*pred)(char32_t)) {
  auto cps = utf8_decode(s);
  if (cps.empty()) return false;
  for (char32_t c : cps) {
    if (!pred(c)) return false;
  }
  return true;
}

int category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
bool is_cased(char32_t c) {
  int k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    if (is_cased(c)) {
      c = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
    utf8_append(out, c);
  }
  return out;
}

std::string simple_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '{' && k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{';
      ++k;
    } else if (c == '}' && k + 1 < fmt.size() && fmt[k + 1] == '}') {
      out += '}';
      ++k;
    } else if (c == '{') {
      size_t e = fmt.find('}', k);
      if (e == std::string::npos) throw TemplateError("ValueError: single '{' in format string");
      std::string field = fmt.substr(k + 1, e - k - 1);
      if (field.find_first_of(":!") != std::string::npos) {
        throw TemplateError("str.format with conversions or format specs is not supported");
      }
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_idx < a.pos.size() ? &a.pos[auto_idx++] : nullptr;
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        size_t i = std::stoul(field);
        v = i < a.pos.size() ? &a.pos[i] : nullptr;
      } else {
        for (const auto& [key, x] : a.kw) {
          if (key == field) v = &x;
        }
      }
      if (!v) throw TemplateError("IndexError: replacement field {" + field + "} has no argument");
      out += to_str(*v);
      k = e;
    } else {
      out += c;
    }
  }
  return out;
}

Value call_method(const Value& self, const std::string& name, const CallArgs& a) {
  if (self.kind == Kind::Dict) {
    const Dict& d = *self.dict;
    if (name == "get") {
      if (a.pos.empty()) throw TemplateError("TypeError: get expected at least 1 argument");
      const Value* v = d.find(a.pos[0]);
      return v ? *v : (a.pos.size() > 1 ? a.pos[1] : Value::none());
    }
    if (name == "copy") {
      Value c = Value::make_dict();
      c.dict->items = d.items;
      return c;
    }
    List out;
    for (const auto& [k, v] : d.items) {
      if (name == "items")
        out.push_back(Value::tuple({k, v}));
      else
        out.push_back(name == "keys" ? k : v);
    }
    return Value::make_list(std::move(out));
  }
  if (self.is_sequence()) {
    const List& l = *self.list;
    if (name == "copy") return Value::make_list(l);
    if (a.pos.empty()) throw TemplateError("TypeError: " + name + "() takes exactly one argument");
    int64_t n = 0;
    for (size_t k = 0; k < l.size(); ++k) {
      if (equals(l[k], a.pos[0])) {
        if (name == "index") return Value::integer(static_cast<int64_t>(k));
        ++n;
      }
    }
    if (name == "index") throw TemplateError("ValueError: " + repr(a.pos[0]) + " is not in list");
    return Value::integer(n);
  }
  const std::string& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Value chars = a.get_or(0, "chars", Value::none());
    return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Value sep = a.get_or(0, "sep", Value::none());
    Value maxsplit = a.get_or(1, "maxsplit", Value::integer(-1));
    if (name == "rsplit" && maxsplit.i >= 0) {
      throw TemplateError("str.rsplit with maxsplit is not supported");
    }
    List out;
    for (auto& part : py_split(s, sep, maxsplit.i)) out.push_back(Value::string(std::move(part)));
    return Value::make_list(std::move(out));
  }
  if (name == "splitlines") {
    List out;
    size_t start = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      if (s[k] == '\n' || s[k] == '\r') {
        out.push_back(Value::string(s.substr(start, k - start)));
        if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
        start = k + 1;
      }
    }
    if (start < s.size()) out.push_back(Value::string(s.substr(start)));
    return Value::make_list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.get(0, "prefix");
    if (!p) throw TemplateError("TypeError: " + name + "() takes at least 1 argument");
    List options = p->is_sequence() ? *p->list : List{*p};
    for (const Value& o : options) {
      if (o.kind != Kind::String) {
        throw TemplateError("TypeError: " + name + " first arg must be str or a tuple of str");
      }
      const std::string& x = o.str();
      bool hit = x.size() <= s.size() &&
                 (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                       : s.compare(s.size() - x.size(), x.size(), x) == 0);
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower" || name == "casefold") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "swapcase") {
    std::string out;
    for (char32_t c : utf8_decode(s)) {
      utf8_append(out, utf8proc_isupper(c) ? utf8proc_tolower(c) : utf8proc_toupper(c));
    }
    return Value::string(out);
  }
  if (name == "replace") {
    const std::string& old = arg_str(a, 0, "old", "replace");
    const std::string& repl = arg_str(a, 1, "new", "replace");
    return Value::string(py_replace(s, old, repl, a.get_or(2, "count", Value::integer(-1)).i));
  }
  if (name == "find" || name == "rfind" || name == "index") {
    const std::string& sub = arg_str(a, 0, "sub", name.c_str());
    size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index") throw TemplateError("ValueError: substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(cp_count(s, p)));
  }
  if (name == "count") {
    const std::string& sub = arg_str(a, 0, "sub", "count");
    if (sub.empty()) return Value::integer(static_cast<int64_t>(cp_count(s, s.size()) + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    if (!items) throw TemplateError("TypeError: join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(*items)) {
      if (v.kind != Kind::String) {
        throw TemplateError("TypeError: sequence item: expected str instance, " + type_name(v) +
                            " found");
      }
      if (!first) out += s;
      first = false;
      out += v.str();
    }
    return Value::string(out);
  }
  if (name == "format") return Value::string(simple_format(s, a));
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& x = arg_str(a, 0, "prefix", name.c_str());
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0)
      return Value::string(s.substr(x.size()));
    if (name == "removesuffix" && x.size() <= s.size() && !x.empty() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::string(s.substr(0, s.size() - x.size()));
    }
    return Value::string(s);
  }
  if (name == "partition" || name == "rpartition") {
    const std::string& sep = arg_str(a, 0, "sep", name.c_str());
    if (sep.empty()) throw TemplateError("ValueError: empty separator");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      return name == "partition"
                 ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                 : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    }
    return Value::tuple({Value::string(s.substr(0, p)), Value::string(sep),
                         Value::string(s.substr(p + sep.size()))});
  }
  if (name == "isdigit")
    return Value::boolean(all_cps(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") {
    return Value::boolean(all_cps(s, [](char32_t c) {
      return category(c) >= UTF8PROC_CATEGORY_LU && category(c) <= UTF8PROC_CATEGORY_LO;
    }));
  }
  if (name == "isalnum") {
    return Value::boolean(all_cps(s, [](char32_t c) {
      int k = category(c);
      return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || k == UTF8PROC_CATEGORY_ND;
    }));
  }
  if (name == "isspace") return Value::boolean(all_cps(s, is_py_space));
  if (name == "isupper" || name == "islower") {
    bool any = false;
    for (char32_t c : utf8_decode(s)) {
      if (!is_cased(c)) continue;
      any = true;
      if (name == "isupper" ? utf8proc_islower(c) : utf8proc_isupper(c))
        return Value::boolean(false);
    }
    return Value::boolean(any);
  }
  // zfill, center, ljust, rjust: width-based padding.
  const Value* w = a.get(0, "width");
  if (!w || w->kind != Kind::Int)
    throw TemplateError("TypeError: " + name + "() needs an integer width");
  int64_t len = static_cast<int64_t>(cp_count(s, s.size()));
  int64_t pad = std::max<int64_t>(0, w->i - len);
  if (pad > (1 << 20)) throw LimitError("string padding too large");
  std::string fill = a.pos.size() > 1 && a.pos[1].is_string() ? a.pos[1].str() : " ";
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
  int64_t left = pad / 2 + (pad & w->i & 1);  // CPython's center rounding
  return Value::string(rep(left) + s + rep(pad - left));
}

}  // namespace

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

std::string py_upper(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) utf8_append(out, utf8proc_toupper(c));
  return out;
}
std::string py_lower(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) utf8_append(out, utf8proc_tolower(c));
  return out;
}
std::string py_capitalize(const std::string& s) {
  auto cps = utf8_decode(s);
  std::string out;
  for (size_t k = 0; k < cps.size(); ++k) {
    utf8_append(out, k == 0 ? utf8proc_totitle(cps[k]) : utf8proc_tolower(cps[k]));
  }
  return out;
}
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts repl between every code point
    auto cps = utf8_decode(s);
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
    size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += repl;
    start = p + old.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

int64_t py_len(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return 0;
    case Kind::String:
      return static_cast<int64_t>(cp_count(v.str(), v.str().size()));
    case Kind::List:
    case Kind::Tuple:
      return static_cast<int64_t>(v.list->size());
    case Kind::Dict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      throw TemplateError("TypeError: object of type '" + type_name(v) + "' has no len()");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.raise_undefined();
  if (is_mutating(obj, name)) return unsafe_attribute(obj, name);
  if (has_method(obj, name)) return bound_method(obj, name);
  if (!name.empty() && name[0] == '_') {
    if (obj.kind == Kind::Namespace) return no_attribute(obj, name);
    if (obj.kind != Kind::Dict) return unsafe_attribute(obj, name);
  }
  if (obj.kind == Kind::Dict || obj.kind == Kind::Namespace) {
    if (const Value* v = obj.dict->find(name)) return *v;
  }
  return no_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.raise_undefined();
  if (obj.kind == Kind::Dict) {
    if (const Value* v = obj.dict->find(key)) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) &&
             (key.kind == Kind::Int || key.kind == Kind::Bool)) {
    int64_t i = key.kind == Kind::Bool ? key.b : key.i;
    if (obj.is_string()) {
      auto cps = utf8_decode(obj.str());
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::string(utf8_encode({cps[i]}));
    } else {
      int64_t n = static_cast<int64_t>(obj.list->size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return (*obj.list)[i];
    }
    return Value::undefined(object_name(obj) + " has no element " + std::to_string(key.i));
  }
  if (key.kind == Kind::String) {
    if (obj.kind == Kind::Namespace) {
      if (const Value* v = obj.dict->find(key)) return *v;
    }
    return get_attr(obj, key.str());
  }
  return Value::undefined(object_name(obj) + " has no element " + repr(key));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  auto as_int = [](const Value& v, int64_t dflt) -> int64_t {
    if (v.is_none()) return dflt;
    if (v.kind == Kind::Int) return v.i;
    if (v.kind == Kind::Bool) return v.b;
    throw TemplateError("TypeError: slice indices must be integers or None");
  };
  int64_t st = as_int(step, 1);
  if (st == 0) throw TemplateError("ValueError: slice step cannot be zero");
  std::vector<char32_t> cps;
  int64_t n;
  if (obj.is_string()) {
    cps = utf8_decode(obj.str());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_sequence()) {
    n = static_cast<int64_t>(obj.list->size());
  } else {
    throw TemplateError("TypeError: '" + type_name(obj) + "' object is not subscriptable");
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](int64_t v, bool is_start) {
    if (v < 0) {
      v += n;
      if (v < 0) v = st < 0 ? -1 : 0;
    } else if (v >= n) {
      v = st < 0 ? n - 1 : n;
    }
    (void)is_start;
    return v;
  };
  int64_t b = start.is_none() ? (st < 0 ? n - 1 : 0) : adjust(as_int(start, 0), true);
  int64_t e = stop.is_none() ? (st < 0 ? -1 : n) : adjust(as_int(stop, 0), false);
  std::vector<int64_t> idx;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) idx.push_back(k);
  if (obj.is_string()) {
    std::vector<char32_t> out;
    for (int64_t k : idx) out.push_back(cps[k]);
    return Value::string(utf8_encode(out));
  }
  List out;
  for (int64_t k : idx) out.push_back((*obj.list)[k]);
  return obj.kind == Kind::Tuple ? Value::tuple(std::move(out)) : Value::make_list(std::move(out));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined:
      if (container.unsafe) container.raise_undefined();
      return false;
    case Kind::String:
      if (item.kind != Kind::String) {
        throw TemplateError("TypeError: 'in <string>' requires string as left operand, not " +
                            type_name(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
      for (const Value& v : *container.list) {
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::Dict:
    case Kind::Namespace:
      return container.dict->find(item) != nullptr;
    default:
      throw TemplateError("TypeError: argument of type '" + type_name(container) +
                          "' is not iterable");
  }
}

}  // namespace hubzoo::jinja
