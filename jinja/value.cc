#include "jinja/value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

#include "jinja/sandbox.h"

namespace hubzoo::jinja {

Value Value::undefined(std::string message, bool unsafe) {
  Value v;
  v.s = std::make_shared<const std::string>(std::move(message));
  v.unsafe = unsafe;
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = new_string(std::move(x));
  return v;
}
Value Value::make_list(List x) {
  Value v;
  v.kind = Kind::List;
  v.list = new_list(std::move(x));
  return v;
}
Value Value::tuple(List x) {
  Value v = make_list(std::move(x));
  v.kind = Kind::Tuple;
  return v;
}
Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = new_dict();
  return v;
}
Value Value::make_namespace() {
  Value v = make_dict();
  v.kind = Kind::Namespace;
  if (Sandbox* sb = Sandbox::current()) sb->track_mutable(v.dict);  // it may come to hold itself
  return v;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind = Kind::Callable;
  Callable c;
  c.name = std::move(name);
  c.fn = std::move(fn);
  v.fn = new_callable(std::move(c));
  return v;
}
Value Value::object(std::string type, std::string display, std::shared_ptr<Dict> attrs,
                    NativeFn fn) {
  Value v;
  v.kind = Kind::Callable;
  Callable c;
  c.name = type;
  c.fn = std::move(fn);
  c.type = std::move(type);
  c.display = std::move(display);
  c.attrs = std::move(attrs);
  v.fn = new_callable(std::move(c));
  return v;
}

double Value::as_double() const {
  switch (kind) {
    case Kind::Int:
      return static_cast<double>(i);
    case Kind::Float:
      return f;
    case Kind::Bool:
      return b ? 1.0 : 0.0;
    default:
      throw TemplateError("expected a number, got " + type_name(*this));
  }
}

void Value::raise_undefined() const {
  const std::string msg = s ? *s : std::string("value is undefined");
  if (unsafe) throw SecurityError(msg);
  throw TemplateError("UndefinedError: " + msg);
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}
const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k.kind == Kind::String && *k.s == key) return &v;
  }
  return nullptr;
}
void Dict::set(const Value& key, Value v) {
  for (auto& kv : items) {
    if (equals(kv.first, key)) {
      kv.second = std::move(v);
      return;
    }
  }
  if (Sandbox* sb = Sandbox::current()) {  // credited when the dict is freed
    sb->charge(kDictEntryBytes, "a dict entry");
    charged_bytes += kDictEntryBytes;
  }
  items.emplace_back(key, std::move(v));
}

const Value* CallArgs::get(size_t index, const std::string& name) const {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return index < pos.size() ? &pos[index] : nullptr;
}
Value CallArgs::get_or(size_t index, const std::string& name, Value fallback) const {
  const Value* v = get(index, name);
  return v ? *v : fallback;
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return "list";
    case Kind::Tuple:
      return "tuple";
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Callable:
      return v.fn->type;
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:  // an unsafe Undefined, too, is falsy without raising
    case Kind::None:
      return false;
    case Kind::Bool:
      return v.b;
    case Kind::Int:
      return v.i != 0;
    case Kind::Float:
      return v.f != 0;
    case Kind::String:
      return !v.s->empty();
    case Kind::List:
    case Kind::Tuple:
      return !v.list->empty();
    case Kind::Dict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_numeric() && b.is_numeric()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return (a.kind == Kind::Bool ? a.b : a.i) == (b.kind == Kind::Bool ? b.b : b.i);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return *a.s == *b.s;
    case Kind::List:
    case Kind::Tuple: {
      if (a.list == b.list) return true;
      if (a.list->size() != b.list->size()) return false;
      DepthGuard guard("comparing values");
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    }
    case Kind::Dict: {
      if (a.dict == b.dict) return true;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      DepthGuard guard("comparing values");
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Kind::Namespace:
      return a.dict == b.dict;
    case Kind::Callable:
      return a.fn == b.fn;
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_numeric() && b.is_numeric()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return (a.kind == Kind::Bool ? a.b : a.i) < (b.kind == Kind::Bool ? b.b : b.i);
  }
  if (a.kind == Kind::String && b.kind == Kind::String)
    return *a.s < *b.s;  // UTF-8 = code point order
  if (a.is_sequence() && a.kind == b.kind) {
    DepthGuard guard("comparing values");
    const List &x = *a.list, &y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!equals(x[k], y[k])) return less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  throw TemplateError("TypeError: '<' not supported between instances of '" + type_name(a) +
                      "' and '" + type_name(b) + "'");
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02", shortest round-trip digits
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t k = 0; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {  // Python repr: fixed for -4 <= exp < 16
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + eb;
}

// The code point at p (before end), p moved past it; an invalid byte is
// U+FFFD, one byte long, rather than a failure.
static char32_t next_codepoint(const utf8proc_uint8_t*& p, const char* end) {
  utf8proc_int32_t cp;
  utf8proc_ssize_t len =
      utf8proc_iterate(p, reinterpret_cast<const utf8proc_uint8_t*>(end) - p, &cp);
  if (len <= 0) {
    cp = 0xFFFD;
    len = 1;
  }
  p += len;
  return static_cast<char32_t>(cp);
}

std::vector<char32_t> utf8_decode(const std::string& s) {
  check_bytes(s.size() * sizeof(char32_t), "a string's code points");
  std::vector<char32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  const char* const end = s.data() + s.size();
  while (p < reinterpret_cast<const utf8proc_uint8_t*>(end)) out.push_back(next_codepoint(p, end));
  return out;
}

void py_escape_codepoint(std::string& out, char32_t cp) {
  char buf[16];
  const auto c = static_cast<unsigned>(cp);
  if (c < 0x100) {
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
  } else if (c < 0x10000) {
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08x", c);
  }
  out += buf;
}

void utf8_append(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps) utf8_append(out, c);
  return out;
}

bool is_py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

static bool py_printable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

// Python's repr of a str. Runs of printable ASCII other than the quote and the
// backslash are copied whole; anything else goes code point by code point (a valid
// UTF-8 sequence never contains an ASCII byte, so splitting at ASCII bytes keeps
// every sequence whole). The result is checked against the value budget as it grows.
std::string string_repr(const std::string& s) {
  const char quote =
      (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  const auto plain = [quote](unsigned char b) {
    return b >= 0x20 && b < 0x7f && b != static_cast<unsigned char>(quote) && b != '\\';
  };
  std::string out(1, quote);
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    size_t end = i;
    while (end < s.size() && plain(static_cast<unsigned char>(s[end]))) ++end;
    if (end > i) {
      check_bytes(out.size() + (end - i), "a string's repr");
      out.append(s, i, end - i);
      i = end;
      continue;
    }
    end = i + 1;  // one special ASCII byte, or a run of non-ASCII bytes
    if (static_cast<unsigned char>(s[i]) >= 0x80) {
      while (end < s.size() && static_cast<unsigned char>(s[end]) >= 0x80) ++end;
    }
    for (char32_t c : utf8_decode(s.substr(i, end - i))) {
      if ((++n & 4095) == 0) check_bytes(out.size(), "a string's repr");
      if (c == static_cast<char32_t>(quote) || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (!py_printable(c)) {
        py_escape_codepoint(out, c);
      } else {
        utf8_append(out, c);
      }
    }
    i = end;
  }
  out += quote;
  return out;
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::String:
      return string_repr(*v.s);
    case Kind::Undefined:
      return "Undefined";
    default:
      return to_str(v);
  }
}

namespace {
// Containers being printed: a namespace can hold itself, and Python prints the
// inner occurrence as [...] / {...} (reprlib's recursion guard).
struct ReprGuard {
  static std::vector<const void*>& active() {
    static thread_local std::vector<const void*> stack;
    return stack;
  }
  const void* p;
  bool cycle;
  std::optional<DepthGuard> depth;
  explicit ReprGuard(const void* ptr) : p(ptr) {
    auto& st = active();
    cycle = std::find(st.begin(), st.end(), p) != st.end();
    if (!cycle) {
      depth.emplace("printing a value");
      st.push_back(p);
    }
  }
  ~ReprGuard() {
    if (!cycle) active().pop_back();
  }
};
}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:  // prints as '' even when unsafe, as jinja2's Undefined
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return v.b ? "True" : "False";
    case Kind::Int:
      return std::to_string(v.i);
    case Kind::Float:
      return float_repr(v.f);
    case Kind::String:
      return *v.s;
    case Kind::List:
    case Kind::Tuple: {
      ReprGuard guard(v.list.get());
      if (guard.cycle) return v.kind == Kind::List ? "[...]" : "(...)";
      std::string out = v.kind == Kind::List ? "[" : "(";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr((*v.list)[k]);
        check_bytes(out.size(), "a printed list");
      }
      if (v.kind == Kind::Tuple && v.list->size() == 1) out += ",";
      return out + (v.kind == Kind::List ? "]" : ")");
    }
    case Kind::Dict:
    case Kind::Namespace: {
      ReprGuard guard(v.dict.get());
      if (guard.cycle) return v.kind == Kind::Dict ? "{...}" : "<Namespace {...}>";
      std::string out = v.kind == Kind::Dict ? "{" : "<Namespace {";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(x);
        check_bytes(out.size(), "a printed dict");
      }
      return out + (v.kind == Kind::Dict ? "}" : "}>");
    }
    case Kind::Callable:
      return v.fn->display.empty() ? "<function " + v.fn->name + ">" : v.fn->display;
  }
  return "";
}

Value from_json(const nlohmann::ordered_json& j) {
  std::optional<DepthGuard> guard;
  if (j.is_structured()) guard.emplace("template input");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.dict->items.emplace_back(Value::string(it.key()), from_json(it.value()));
      }
      return d;
    }
    default:
      throw TemplateError("unsupported JSON value in template input");
  }
}

static void json_codepoint(std::string& out, char32_t c, bool ensure_ascii) {
  char buf[16];
  switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
        if (c >= 0x10000) {
          char32_t v = c - 0x10000;
          std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x",
                        static_cast<unsigned>(0xd800 + (v >> 10)),
                        static_cast<unsigned>(0xdc00 + (v & 0x3ff)));
        } else {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        }
        out += buf;
      } else {
        utf8_append(out, c);
      }
  }
}

// Printable ASCII that JSON keeps as it is.
static bool json_plain(char b) { return b >= 0x20 && b < 0x7f && b != '"' && b != '\\'; }

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  // Runs of plain bytes are appended whole (a long string at memcpy speed:
  // escaping 64 MB one code point at a time took over the CPU budget under
  // ASan); the runs between are decoded and escaped a code point at a time.
  // A plain byte is never part of a multi-byte sequence, so the pieces decode
  // as the whole string does (an invalid byte as U+FFFD).
  size_t i = 0;
  while (i < s.size()) {
    size_t end = i;
    while (end < s.size() && json_plain(s[end])) ++end;
    if (end > i) {
      check_bytes(out.size() + (end - i), "tojson's result");
      out.append(s, i, end - i);
      i = end;
      continue;
    }
    while (end < s.size() && !json_plain(s[end])) ++end;
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i);
    for (size_t n = 0; p < reinterpret_cast<const utf8proc_uint8_t*>(s.data() + end); ++n) {
      if ((n & 4095) == 0) check_bytes(out.size(), "tojson's result");
      json_codepoint(out, next_codepoint(p, s.data() + end), ensure_ascii);
    }
    i = end;
  }
  out += '"';
}

static std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

// A dict key as json.dumps writes it: str, int, float, bool and None keys become strings.
static std::string json_key(const Value& k) {
  switch (k.kind) {
    case Kind::String:
      return *k.s;
    case Kind::Int:
      return std::to_string(k.i);
    case Kind::Float:
      return json_float(k.f);
    case Kind::Bool:
      return k.b ? "true" : "false";
    case Kind::None:
      return "null";
    default:
      throw TemplateError("TypeError: keys must be str, int, float, bool or None, not " +
                          type_name(k));
  }
}

static void json_value(std::string& out, const Value& v, const JsonStyle& st, int depth) {
  std::optional<DepthGuard> guard;
  if (v.kind == Kind::List || v.kind == Kind::Tuple || v.kind == Kind::Dict)
    guard.emplace("tojson");
  check_bytes(out.size(), "tojson's result");
  auto newline = [&](int level) {
    if (!st.has_indent) return;
    out += '\n';
    for (int k = 0; k < level; ++k) out += st.indent;
  };
  switch (v.kind) {
    case Kind::None:
      out += "null";
      return;
    case Kind::Bool:
      out += v.b ? "true" : "false";
      return;
    case Kind::Int:
      out += std::to_string(v.i);
      return;
    case Kind::Float:
      out += json_float(v.f);
      return;
    case Kind::String:
      json_string(out, *v.s, st.ensure_ascii);
      return;
    case Kind::List:
    case Kind::Tuple: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += st.item_sep;
        newline(depth + 1);
        json_value(out, (*v.list)[k], st, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, x] : v.dict->items) items.emplace_back(json_key(k), &x);
      if (st.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(depth + 1);
        json_string(out, items[k].first, st.ensure_ascii);
        out += st.key_sep;
        json_value(out, *items[k].second, st, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      if (v.is_undefined() && v.unsafe) v.raise_undefined();
      throw TemplateError("TypeError: Object of type " + type_name(v) +
                          " is not JSON serializable");
  }
}

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(out, v, style, 0);
  return out;
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:  // iterates as empty, even when unsafe
      return {};
    case Kind::List:
    case Kind::Tuple:
      return *v.list;
    case Kind::String: {
      check_bytes(v.s->size() * (sizeof(Value) + kValueOverhead + 4), "a string's characters");
      List out;
      for (char32_t c : utf8_decode(*v.s)) {
        std::string ch;
        utf8_append(ch, c);
        out.push_back(Value::string(std::move(ch)));
      }
      return out;
    }
    case Kind::Dict: {
      List out;
      for (const auto& kv : v.dict->items) out.push_back(kv.first);
      return out;
    }
    default:
      throw TemplateError("TypeError: '" + type_name(v) + "' object is not iterable");
  }
}

}  // namespace hubzoo::jinja
