// jinja2's built-in tests (`x is defined`, `n is divisibleby 3`), following
// jinja2/tests.py, plus the argument checking that filters and tests share.
#include <algorithm>
#include <map>

#include "jinja/builtins.h"

namespace hubzoo::jinja {
namespace {

// The one argument of a test taking one (check_signature made sure it is there).
const Value& arg(const CallArgs& a) { return a.pos.empty() ? a.kw.at(0).second : a.pos[0]; }

// Python's `a % b == r` for numbers, as tests.py's odd/even/divisibleby compute it.
bool mod_equals(const Value& v, const Value& m, int64_t r) {
  RenderLimits limits;
  return equals(binary_op("%", v, m, limits), Value::integer(r));
}

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
bool t_callable(const Value& v, const CallArgs&) {
  return v.kind == Kind::Callable && static_cast<bool>(v.fn->fn);
}
bool t_even(const Value& v, const CallArgs&) { return mod_equals(v, Value::integer(2), 0); }
bool t_odd(const Value& v, const CallArgs&) { return mod_equals(v, Value::integer(2), 1); }
bool t_divisibleby(const Value& v, const CallArgs& a) { return mod_equals(v, arg(a), 0); }
bool t_eq(const Value& v, const CallArgs& a) { return equals(v, arg(a)); }
bool t_ne(const Value& v, const CallArgs& a) { return !equals(v, arg(a)); }
bool t_lt(const Value& v, const CallArgs& a) { return less(v, arg(a)); }
bool t_gt(const Value& v, const CallArgs& a) { return less(arg(a), v); }
bool t_le(const Value& v, const CallArgs& a) { return less(v, arg(a)) || equals(v, arg(a)); }
bool t_ge(const Value& v, const CallArgs& a) { return less(arg(a), v) || equals(v, arg(a)); }
bool t_in(const Value& v, const CallArgs& a) { return contains(arg(a), v); }
bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& o = arg(a);
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
    case Kind::Callable:
      return v.fn == o.fn;
    default:
      return false;
  }
}
// str(value).islower() / .isupper(): any value, printed first.
bool t_lower(const Value& v, const CallArgs&) {
  bool any = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    if (!is_cased(c)) continue;
    if (py_lower(utf8_encode({c})) != utf8_encode({c})) return false;
    any = true;
  }
  return any;
}
bool t_upper(const Value& v, const CallArgs&) {
  bool any = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    if (!is_cased(c)) continue;
    if (py_upper(utf8_encode({c})) != utf8_encode({c})) return false;
    any = true;
  }
  return any;
}
bool t_escaped(const Value&, const CallArgs&) { return false; }  // no Markup values here
bool t_filter(const Value& v, const CallArgs&) { return v.is_string() && has_filter(v.str()); }
bool t_test(const Value& v, const CallArgs&) { return v.is_string() && has_test(v.str()); }

const std::map<std::string, Builtin<TestFn>>& tests() {
  static const std::map<std::string, Builtin<TestFn>> m = [] {
    const Builtin<TestFn> list[] = {
        {"defined", t_defined, ""},
        {"undefined", t_undefined, ""},
        {"none", t_none, ""},
        {"boolean", t_boolean, ""},
        {"true", t_true, ""},
        {"false", t_false, ""},
        {"integer", t_integer, ""},
        {"float", t_float, ""},
        {"number", t_number, ""},
        {"string", t_string, ""},
        {"mapping", t_mapping, ""},
        {"iterable", t_iterable, ""},
        {"sequence", t_sequence, ""},
        {"callable", t_callable, ""},
        {"even", t_even, ""},
        {"odd", t_odd, ""},
        {"divisibleby", t_divisibleby, "num"},
        {"eq", t_eq, "b"},
        {"equalto", t_eq, "b"},
        {"==", t_eq, "b"},
        {"ne", t_ne, "b"},
        {"!=", t_ne, "b"},
        {"lt", t_lt, "b"},
        {"lessthan", t_lt, "b"},
        {"<", t_lt, "b"},
        {"gt", t_gt, "b"},
        {"greaterthan", t_gt, "b"},
        {">", t_gt, "b"},
        {"le", t_le, "b"},
        {"<=", t_le, "b"},
        {"ge", t_ge, "b"},
        {">=", t_ge, "b"},
        {"in", t_in, "seq"},
        {"sameas", t_sameas, "other"},
        {"lower", t_lower, ""},
        {"upper", t_upper, ""},
        {"escaped", t_escaped, ""},
        {"filter", t_filter, ""},
        {"test", t_test, ""},
    };
    std::map<std::string, Builtin<TestFn>> out;
    for (const auto& b : list) out.emplace(b.name, b);
    return out;
  }();
  return m;
}

}  // namespace

void check_signature(const char* kind, const std::string& name, const char* signature,
                     const CallArgs& args) {
  std::string sig = signature;
  if (sig == "*") return;
  std::vector<std::pair<std::string, bool>> params;  // name, optional
  for (size_t k = 0; k < sig.size();) {
    size_t e = sig.find(' ', k);
    std::string p = sig.substr(k, e == std::string::npos ? e : e - k);
    bool optional = !p.empty() && p.back() == '?';
    if (optional) p.pop_back();
    if (!p.empty()) params.emplace_back(p, optional);
    k = e == std::string::npos ? sig.size() : e + 1;
  }
  const std::string what = std::string("TypeError: ") + kind + " '" + name + "'";
  if (args.pos.size() > params.size()) {
    throw TemplateError(what + " takes " + std::to_string(params.size()) + " argument(s) but " +
                        std::to_string(args.pos.size()) + " were given");
  }
  for (const auto& kw : args.kw) {
    const std::string& key = kw.first;  // not a structured binding: lambdas capture it (C++17)
    auto it =
        std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == key; });
    if (it == params.end()) {
      throw TemplateError(what + " got an unexpected keyword argument '" + key + "'");
    }
    if (static_cast<size_t>(it - params.begin()) < args.pos.size()) {
      throw TemplateError(what + " got multiple values for argument '" + key + "'");
    }
  }
  for (size_t k = args.pos.size(); k < params.size(); ++k) {
    if (params[k].second) continue;
    bool given = std::any_of(args.kw.begin(), args.kw.end(),
                             [&](const auto& kv) { return kv.first == params[k].first; });
    if (!given) {
      throw TemplateError(what + " missing required argument '" + params[k].first + "'");
    }
  }
}

bool has_test(const std::string& name) { return tests().count(name) > 0; }

bool apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError("no test named '" + name + "'");
  check_signature("test", name, it->second.signature, args);
  return it->second.fn(input, args);
}

}  // namespace hubzoo::jinja
