// jinja2's built-in filters and tests (the ones chat templates use), plus
// transformers' tojson, each following jinja2/filters.py and jinja2/tests.py.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "tokenizer/jinja_builtins.h"

namespace hubzoo::jinja {
namespace {

using FilterFn = Value (*)(const Value&, const CallArgs&, const RenderLimits&);
using TestFn = bool (*)(const Value&, const CallArgs&);

std::string soft_str(const Value& v) { return to_str(v); }

const Value& need(const CallArgs& a, size_t i, const char* name, const char* filter) {
  const Value* v = a.get(i, name);
  if (!v)
    throw TemplateError(std::string("TypeError: filter '") + filter + "' missing argument '" +
                        name + "'");
  return *v;
}

// environment.getitem over a dotted path, digits as indexes (jinja2's make_attrgetter).
Value attr_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    if (cur.is_undefined()) return cur;
    cur = get_item(cur, digits ? Value::integer(std::atoll(part.c_str())) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.str()));
  return v;
}

// select/reject/selectattr/rejectattr: a test name and its arguments from args[first...].
List select_items(const Value& seq, const CallArgs& a, bool by_attr, bool keep) {
  size_t first = 0;
  std::string attr;
  if (by_attr) {
    attr = to_str(need(a, 0, "attribute", "selectattr"));
    first = 1;
  }
  std::string test;
  CallArgs targs;
  if (a.pos.size() > first) {
    test = to_str(a.pos[first]);
    targs.pos.assign(a.pos.begin() + first + 1, a.pos.end());
    targs.kw = a.kw;
  }
  List out;
  for (const Value& item : iterate(seq)) {
    Value v = by_attr ? attr_path(item, attr) : item;
    bool ok = test.empty() ? truthy(v) : apply_test(test, v, targs);
    if (ok == keep) out.push_back(item);
  }
  return out;
}

Value f_tojson(const Value& v, const CallArgs& a, const RenderLimits&) {
  JsonStyle st;
  st.ensure_ascii = truthy(a.get_or(0, "ensure_ascii", Value::boolean(false)));
  Value indent = a.get_or(1, "indent", Value::none());
  if (indent.kind == Kind::Int) {
    st.has_indent = true;
    st.indent = std::string(std::max<int64_t>(0, std::min<int64_t>(indent.i, 1024)), ' ');
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

Value f_join(const Value& v, const CallArgs& a, const RenderLimits&) {
  std::string sep = to_str(a.get_or(0, "d", Value::string("")));
  const Value* attr = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += soft_str(attr && !attr->is_none() ? attr_path(item, to_str(*attr)) : item);
  }
  return Value::string(out);
}

Value f_first(const Value& v, const CallArgs&, const RenderLimits&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(const Value& v, const CallArgs&, const RenderLimits&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}
Value f_length(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::integer(py_len(v));
}
Value f_list(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::make_list(iterate(v));
}
Value f_string(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::string(soft_str(v));
}
Value f_safe(const Value& v, const CallArgs&, const RenderLimits&) {
  return v.is_string() ? v : Value::string(soft_str(v));
}

Value f_items(const Value& v, const CallArgs&, const RenderLimits&) {
  if (v.is_undefined()) return Value::make_list({});
  if (v.kind != Kind::Dict)
    throw TemplateError("TypeError: Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : v.dict->items) out.push_back(Value::tuple({k, x}));
  return Value::make_list(std::move(out));
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
  return Value::string(py_replace(soft_str(v), soft_str(need(a, 0, "old", "replace")),
                                  soft_str(need(a, 1, "new", "replace")),
                                  count.kind == Kind::Int ? count.i : -1));
}

bool parse_int(std::string s, int64_t base, int64_t& out) {
  s = py_strip(s, Value::none(), true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long r = std::strtoll(s.c_str(), &end, static_cast<int>(base));
  if (errno || *end) return false;
  out = r;
  return true;
}

bool parse_float(const std::string& raw, double& out) {
  std::string s = py_strip(raw, Value::none(), true, true);
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return *end == 0;
}

Value f_int(const Value& v, const CallArgs& a, const RenderLimits&) {
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

Value f_select(const Value& v, const CallArgs& a, const RenderLimits&) {
  return Value::make_list(select_items(v, a, false, true));
}
Value f_reject(const Value& v, const CallArgs& a, const RenderLimits&) {
  return Value::make_list(select_items(v, a, false, false));
}
Value f_selectattr(const Value& v, const CallArgs& a, const RenderLimits&) {
  return Value::make_list(select_items(v, a, true, true));
}
Value f_rejectattr(const Value& v, const CallArgs& a, const RenderLimits&) {
  return Value::make_list(select_items(v, a, true, false));
}

Value f_map(const Value& v, const CallArgs& a, const RenderLimits& limits) {
  List out;
  const Value* attr = nullptr;
  for (const auto& [k, x] : a.kw) {
    if (k == "attribute") attr = &x;
  }
  if (attr) {
    Value dflt = a.get_or(99, "default", Value::undefined("map: attribute missing"));
    bool has_default = a.get(99, "default") != nullptr;
    for (const Value& item : iterate(v)) {
      Value x = attr_path(item, to_str(*attr));
      out.push_back(x.is_undefined() && has_default ? dflt : x);
    }
    return Value::make_list(std::move(out));
  }
  if (a.pos.empty()) throw TemplateError("map requires a filter argument");
  std::string filter = to_str(a.pos[0]);
  CallArgs fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, fargs, limits));
  return Value::make_list(std::move(out));
}

Value f_sort(const Value& v, const CallArgs& a, const RenderLimits&) {
  bool reverse = truthy(a.get_or(0, "reverse", Value::boolean(false)));
  bool cs = truthy(a.get_or(1, "case_sensitive", Value::boolean(false)));
  Value attr = a.get_or(2, "attribute", Value::none());
  List items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& x : items) {
    keyed.emplace_back(sort_key(attr.is_none() ? x : attr_path(x, to_str(attr)), cs), x);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
    return reverse ? less(q.first, p.first) : less(p.first, q.first);
  });
  List out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return Value::make_list(std::move(out));
}

Value f_dictsort(const Value& v, const CallArgs& a, const RenderLimits&) {
  bool cs = truthy(a.get_or(0, "case_sensitive", Value::boolean(false)));
  std::string by = to_str(a.get_or(1, "by", Value::string("key")));
  bool reverse = truthy(a.get_or(2, "reverse", Value::boolean(false)));
  if (v.kind != Kind::Dict) throw TemplateError("TypeError: dictsort needs a mapping");
  List items;
  for (const auto& [k, x] : v.dict->items) items.push_back(Value::tuple({k, x}));
  const size_t pos = by == "value" ? 1 : 0;
  std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
    Value x = sort_key((*p.list)[pos], cs), y = sort_key((*q.list)[pos], cs);
    return reverse ? less(y, x) : less(x, y);
  });
  return Value::make_list(std::move(items));
}

Value f_unique(const Value& v, const CallArgs& a, const RenderLimits&) {
  bool cs = truthy(a.get_or(0, "case_sensitive", Value::boolean(false)));
  Value attr = a.get_or(1, "attribute", Value::none());
  List seen, out;
  for (const Value& x : iterate(v)) {
    Value key = sort_key(attr.is_none() ? x : attr_path(x, to_str(attr)), cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(x);
    }
  }
  return Value::make_list(std::move(out));
}

Value min_max(const Value& v, const CallArgs& a, bool want_max) {
  bool cs = truthy(a.get_or(0, "case_sensitive", Value::boolean(false)));
  Value attr = a.get_or(1, "attribute", Value::none());
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t k) {
    return sort_key(attr.is_none() ? items[k] : attr_path(items[k], to_str(attr)), cs);
  };
  for (size_t k = 1; k < items.size(); ++k) {
    if (want_max ? less(key(best), key(k)) : less(key(k), key(best))) best = k;
  }
  return items[best];
}
Value f_min(const Value& v, const CallArgs& a, const RenderLimits&) { return min_max(v, a, false); }
Value f_max(const Value& v, const CallArgs& a, const RenderLimits&) { return min_max(v, a, true); }

Value f_sum(const Value& v, const CallArgs& a, const RenderLimits& limits) {
  Value attr = a.get_or(0, "attribute", Value::none());
  Value total = a.get_or(1, "start", Value::integer(0));
  for (const Value& x : iterate(v))
    total = binary_op("+", total, attr.is_none() ? x : attr_path(x, to_str(attr)), limits);
  return total;
}

Value f_reverse(const Value& v, const CallArgs&, const RenderLimits&) {
  if (v.is_string()) {
    auto cps = utf8_decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::string(utf8_encode(cps));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

Value f_batch(const Value& v, const CallArgs& a, const RenderLimits&) {
  int64_t n = need(a, 0, "linecount", "batch").i;
  if (n <= 0) throw TemplateError("batch size must be positive");
  const Value* fill = a.get(1, "fill_with");
  List out, cur;
  for (const Value& x : iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::make_list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    while (fill && !fill->is_none() && static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::make_list(std::move(cur)));
  }
  return Value::make_list(std::move(out));
}

Value f_indent(const Value& v, const CallArgs& a, const RenderLimits&) {
  Value width = a.get_or(0, "width", Value::integer(4));
  std::string ind = width.is_string()
                        ? width.str()
                        : std::string(std::max<int64_t>(0, std::min<int64_t>(width.i, 1024)), ' ');
  bool first = truthy(a.get_or(1, "first", Value::boolean(false)));
  bool blank = truthy(a.get_or(2, "blank", Value::boolean(false)));
  std::string s = soft_str(v) + "\n";
  CallArgs none;
  List lines = *get_attr(Value::string(s), "splitlines").fn->fn(none).list;
  std::string rv;
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string& line = lines[k].str();
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
    bool w = c == '_' || (c < 128 ? std::isalnum(static_cast<int>(c)) != 0 : !is_py_space(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_escape(const Value& v, const CallArgs&, const RenderLimits&) {
  std::string out;
  for (char c : soft_str(v)) {
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

Value f_format(const Value& v, const CallArgs& a, const RenderLimits& limits) {
  if (!a.kw.empty()) throw TemplateError("format filter with keyword arguments is not supported");
  return binary_op("%", Value::string(soft_str(v)), Value::tuple(a.pos), limits);
}

Value f_attr(const Value& v, const CallArgs& a, const RenderLimits&) {
  // jinja2's attr filter uses Python getattr only: dict keys are not attributes.
  std::string name = to_str(need(a, 0, "name", "attr"));
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

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> m = {
      {"tojson", f_tojson},
      {"default", f_default},
      {"d", f_default},
      {"join", f_join},
      {"first", f_first},
      {"last", f_last},
      {"length", f_length},
      {"count", f_length},
      {"list", f_list},
      {"string", f_string},
      {"safe", f_safe},
      {"items", f_items},
      {"trim", f_trim},
      {"upper", f_upper},
      {"lower", f_lower},
      {"capitalize", f_capitalize},
      {"title", f_title},
      {"replace", f_replace},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"round", f_round},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"map", f_map},
      {"sort", f_sort},
      {"dictsort", f_dictsort},
      {"unique", f_unique},
      {"min", f_min},
      {"max", f_max},
      {"sum", f_sum},
      {"reverse", f_reverse},
      {"batch", f_batch},
      {"indent", f_indent},
      {"wordcount", f_wordcount},
      {"escape", f_escape},
      {"e", f_escape},
      {"forceescape", f_escape},
      {"center", f_center},
      {"format", f_format},
      {"attr", f_attr},
      {"striptags", f_striptags},
  };
  return m;
}

// ---- tests ----
bool t_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, const CallArgs&) { return v.kind == Kind::Bool; }
bool t_true(const Value& v, const CallArgs&) { return v.kind == Kind::Bool && v.b; }
bool t_false(const Value& v, const CallArgs&) { return v.kind == Kind::Bool && !v.b; }
bool t_integer(const Value& v, const CallArgs&) { return v.kind == Kind::Int; }
bool t_float(const Value& v, const CallArgs&) { return v.kind == Kind::Float; }
bool t_number(const Value& v, const CallArgs&) { return v.is_numeric(); }
bool t_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, const CallArgs&) { return v.kind == Kind::Dict; }
bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.kind == Kind::Dict;
}
bool t_sequence(const Value& v, const CallArgs&) {
  return v.is_string() || v.is_sequence() || v.kind == Kind::Dict;
}
bool t_callable(const Value& v, const CallArgs&) { return v.kind == Kind::Callable; }
int64_t int_of(const Value& v) {
  if (v.kind == Kind::Int) return v.i;
  if (v.kind == Kind::Bool) return v.b;
  if (v.is_undefined()) v.raise_undefined();
  throw TemplateError("TypeError: expected an integer, got " + type_name(v));
}
bool t_even(const Value& v, const CallArgs&) { return int_of(v) % 2 == 0; }
bool t_odd(const Value& v, const CallArgs&) { return int_of(v) % 2 != 0; }
bool t_divisibleby(const Value& v, const CallArgs& a) {
  int64_t d = int_of(need(a, 0, "num", "divisibleby"));
  if (d == 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
  return int_of(v) % d == 0;
}
bool t_eq(const Value& v, const CallArgs& a) { return equals(v, need(a, 0, "other", "eq")); }
bool t_ne(const Value& v, const CallArgs& a) { return !equals(v, need(a, 0, "other", "ne")); }
bool t_lt(const Value& v, const CallArgs& a) { return less(v, need(a, 0, "other", "lt")); }
bool t_gt(const Value& v, const CallArgs& a) { return less(need(a, 0, "other", "gt"), v); }
bool t_le(const Value& v, const CallArgs& a) { return !less(need(a, 0, "other", "le"), v); }
bool t_ge(const Value& v, const CallArgs& a) { return !less(v, need(a, 0, "other", "ge")); }
bool t_in(const Value& v, const CallArgs& a) { return contains(need(a, 0, "seq", "in"), v); }
bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& o = need(a, 0, "other", "sameas");
  if (v.kind != o.kind) return false;
  switch (v.kind) {
    case Kind::None:
    case Kind::Undefined:
      return true;
    case Kind::Bool:
      return v.b == o.b;
    case Kind::Int:
      return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
    case Kind::List:
    case Kind::Tuple:
      return v.list == o.list;
    case Kind::Dict:
    case Kind::Namespace:
      return v.dict == o.dict;
    case Kind::String:
      return v.s == o.s;
    default:
      return false;
  }
}
bool t_lower(const Value& v, const CallArgs&) {
  CallArgs none;
  return v.is_string() && truthy(get_attr(v, "islower").fn->fn(none));
}
bool t_upper(const Value& v, const CallArgs&) {
  CallArgs none;
  return v.is_string() && truthy(get_attr(v, "isupper").fn->fn(none));
}
bool t_escaped(const Value&, const CallArgs&) { return false; }

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> m = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"even", t_even},
      {"odd", t_odd},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"le", t_le},
      {"<=", t_le},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
      {"escaped", t_escaped},
  };
  return m;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args,
                   const RenderLimits& limits) {
  auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError("no filter named '" + name + "'");
  if (input.is_undefined() && input.unsafe && name != "default" && name != "d")
    input.raise_undefined();
  return it->second(input, args, limits);
}

bool apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError("no test named '" + name + "'");
  return it->second(input, args);
}

}  // namespace hubzoo::jinja
