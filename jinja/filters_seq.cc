// jinja2's filters over sequences and mappings (sort, groupby, map, select,
// batch, ...), each following jinja2/filters.py. Where jinja2 returns a lazy
// generator this returns the list it would produce.
#include <algorithm>
#include <random>

#include "jinja/builtins.h"

namespace hubzoo::jinja {
namespace {

int64_t int_arg(const Value& v, const char* what) {
  if (v.kind == Kind::Int) return v.i;
  if (v.kind == Kind::Bool) return v.b;
  if (v.kind == Kind::Float) return static_cast<int64_t>(v.f);
  throw TemplateError(std::string("TypeError: ") + what + " must be an integer, not " +
                      type_name(v));
}

const Value* kwarg(const CallArgs& a, const std::string& name) {
  for (const auto& [k, v] : a.kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

// select/reject/selectattr/rejectattr: an optional attribute, then a test name
// and its arguments; without a test, the value's truthiness.
List select_items(const Value& seq, const CallArgs& a, bool by_attr, bool keep) {
  size_t first = 0;
  Value attr;
  if (by_attr) {
    if (a.pos.empty())
      throw TemplateError("FilterArgumentError: Missing parameter for attribute name");
    attr = a.pos[0];
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

Value f_join(const Value& v, const CallArgs& a, const RenderLimits&) {
  std::string sep = to_str(a.get_or(0, "d", Value::string("")));
  Value attr = a.get_or(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    std::string piece = to_str(attr.is_none() ? item : attr_path(item, attr));
    check_bytes(out.size() + sep.size() + piece.size(), "join's result");
    if (!first) out += sep;
    first = false;
    out += piece;
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
Value f_random(const Value& v, const CallArgs&, const RenderLimits&) {
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No random item, sequence was empty.");
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return items[std::uniform_int_distribution<size_t>(0, items.size() - 1)(rng)];
}
Value f_length(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::integer(py_len(v));
}
Value f_list(const Value& v, const CallArgs&, const RenderLimits&) {
  return Value::make_list(iterate(v));
}

Value f_items(const Value& v, const CallArgs&, const RenderLimits&) {
  if (v.is_undefined()) return Value::make_list({});
  if (v.kind != Kind::Dict)
    throw TemplateError("TypeError: Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : v.dict->items) out.push_back(Value::tuple({k, x}));
  return Value::make_list(std::move(out));
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
  const Value* attr = kwarg(a, "attribute");
  if (a.pos.empty() && attr) {
    const Value* dflt = nullptr;
    for (const auto& [k, x] : a.kw) {
      if (k == "default") {
        dflt = x.is_none() ? nullptr : &x;
      } else if (k != "attribute") {
        throw TemplateError("FilterArgumentError: Unexpected keyword argument '" + k + "'");
      }
    }
    for (const Value& item : iterate(v)) out.push_back(attr_path(item, *attr, dflt));
    return Value::make_list(std::move(out));
  }
  if (a.pos.empty()) throw TemplateError("FilterArgumentError: map requires a filter argument");
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
  // make_multi_attrgetter: "age,name" sorts by a list of keys.
  std::vector<Value> paths;
  if (attr.is_string()) {
    for (auto& p : py_split(attr.str(), Value::string(","), -1)) paths.push_back(Value::string(p));
  } else if (!attr.is_none()) {
    paths.push_back(attr);
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& x : iterate(v)) {
    Value key;
    if (paths.empty()) {
      key = fold_case(x, cs);
    } else {
      List parts;
      for (const Value& p : paths) parts.push_back(fold_case(attr_path(x, p), cs));
      key = paths.size() == 1 && !attr.is_string() ? parts[0] : Value::make_list(std::move(parts));
    }
    keyed.emplace_back(std::move(key), x);
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
  if (by != "key" && by != "value") {
    throw TemplateError("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  }
  if (v.kind != Kind::Dict) {
    throw TemplateError("AttributeError: '" + type_name(v) + "' object has no attribute 'items'");
  }
  List items;
  for (const auto& [k, x] : v.dict->items) items.push_back(Value::tuple({k, x}));
  const size_t pos = by == "value" ? 1 : 0;
  std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
    Value x = fold_case((*p.list)[pos], cs), y = fold_case((*q.list)[pos], cs);
    return reverse ? less(y, x) : less(x, y);
  });
  return Value::make_list(std::move(items));
}

Value f_unique(const Value& v, const CallArgs& a, const RenderLimits&) {
  bool cs = truthy(a.get_or(0, "case_sensitive", Value::boolean(false)));
  Value attr = a.get_or(1, "attribute", Value::none());
  List seen, out;
  for (const Value& x : iterate(v)) {
    Value key = fold_case(attr.is_none() ? x : attr_path(x, attr), cs);
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
  List keys;
  for (const Value& x : items)
    keys.push_back(fold_case(attr.is_none() ? x : attr_path(x, attr), cs));
  size_t best = 0;  // the first of equal extremes, as Python's min/max
  for (size_t k = 1; k < items.size(); ++k) {
    if (want_max ? less(keys[best], keys[k]) : less(keys[k], keys[best])) best = k;
  }
  return items[best];
}
Value f_min(const Value& v, const CallArgs& a, const RenderLimits&) { return min_max(v, a, false); }
Value f_max(const Value& v, const CallArgs& a, const RenderLimits&) { return min_max(v, a, true); }

Value f_sum(const Value& v, const CallArgs& a, const RenderLimits& limits) {
  Value attr = a.get_or(0, "attribute", Value::none());
  Value total = a.get_or(1, "start", Value::integer(0));
  if (total.is_string()) throw TemplateError("TypeError: sum() can't sum strings");
  for (const Value& x : iterate(v))
    total = binary_op("+", total, attr.is_none() ? x : attr_path(x, attr), limits);
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
  int64_t n = int_arg(*a.get(0, "linecount"), "linecount");
  if (n <= 0) throw TemplateError("ValueError: batch size must be positive");
  Value fill = a.get_or(1, "fill_with", Value::none());
  List out, cur;
  for (const Value& x : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::make_list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(x);
  }
  if (!cur.empty()) {
    if (!fill.is_none()) check_bytes(mul_sat(static_cast<size_t>(n), sizeof(Value)), "batch");
    while (!fill.is_none() && static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::make_list(std::move(cur)));
  }
  return Value::make_list(std::move(out));
}

Value f_slice(const Value& v, const CallArgs& a, const RenderLimits& limits) {
  int64_t slices = int_arg(*a.get(0, "slices"), "slices");
  if (slices <= 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
  if (slices > limits.max_loop_iterations) throw LimitError("slice count too large");
  Value fill = a.get_or(1, "fill_with", Value::none());
  List seq = iterate(v);
  const int64_t length = static_cast<int64_t>(seq.size());
  const int64_t per = length / slices, with_extra = length % slices;
  int64_t offset = 0;
  List out;
  for (int64_t k = 0; k < slices; ++k) {
    int64_t start = offset + k * per;
    if (k < with_extra) ++offset;
    int64_t end = offset + (k + 1) * per;
    List part(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && k >= with_extra) part.push_back(fill);
    out.push_back(Value::make_list(std::move(part)));
  }
  return Value::make_list(std::move(out));
}

// groupby(attribute, default, case_sensitive): sorted, then grouped; each group
// a (grouper, list) tuple whose fields are also named.
Value f_groupby(const Value& v, const CallArgs& a, const RenderLimits&) {
  Value attr = *a.get(0, "attribute");
  Value dflt = a.get_or(1, "default", Value::none());
  bool cs = truthy(a.get_or(2, "case_sensitive", Value::boolean(false)));
  const Value* d = dflt.is_none() ? nullptr : &dflt;
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& x : iterate(v)) keyed.emplace_back(fold_case(attr_path(x, attr, d), cs), x);
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& p, const auto& q) { return less(p.first, q.first); });
  List out;
  for (size_t k = 0; k < keyed.size();) {
    size_t j = k;
    List members;
    while (j < keyed.size() && equals(keyed[j].first, keyed[k].first))
      members.push_back(keyed[j++].second);
    Value grouper = attr_path(members[0], attr, d);  // the first member's own case
    Value group = Value::tuple({grouper, Value::make_list(std::move(members))});
    group.dict = std::make_shared<Dict>();
    group.dict->set(Value::string("grouper"), (*group.list)[0]);
    group.dict->set(Value::string("list"), (*group.list)[1]);
    out.push_back(std::move(group));
    k = j;
  }
  return Value::make_list(std::move(out));
}

}  // namespace

Value attr_path(const Value& item, const Value& path, const Value* dflt) {
  std::vector<Value> parts;
  if (path.is_string()) {
    for (auto& p : py_split(path.str(), Value::string("."), -1)) {
      bool digits = !p.empty() && std::all_of(p.begin(), p.end(), ::isdigit);
      parts.push_back(digits ? Value::integer(std::atoll(p.c_str())) : Value::string(p));
    }
  } else if (!path.is_none()) {
    parts.push_back(path);
  }
  Value cur = item;
  for (const Value& part : parts) {
    cur = get_item(cur, part);
    if (dflt && cur.is_undefined()) cur = *dflt;
  }
  return cur;
}

Value fold_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.str()));
  return v;
}

const std::vector<Builtin<FilterFn>>& sequence_filters() {
  static const std::vector<Builtin<FilterFn>> list = {
      {"join", f_join, "d? attribute?"},
      {"first", f_first, ""},
      {"last", f_last, ""},
      {"random", f_random, ""},
      {"length", f_length, ""},
      {"count", f_length, ""},
      {"list", f_list, ""},
      {"items", f_items, ""},
      {"select", f_select, "*"},
      {"reject", f_reject, "*"},
      {"selectattr", f_selectattr, "*"},
      {"rejectattr", f_rejectattr, "*"},
      {"map", f_map, "*"},
      {"sort", f_sort, "reverse? case_sensitive? attribute?"},
      {"dictsort", f_dictsort, "case_sensitive? by? reverse?"},
      {"unique", f_unique, "case_sensitive? attribute?"},
      {"min", f_min, "case_sensitive? attribute?"},
      {"max", f_max, "case_sensitive? attribute?"},
      {"sum", f_sum, "attribute? start?"},
      {"reverse", f_reverse, ""},
      {"batch", f_batch, "linecount fill_with?"},
      {"slice", f_slice, "slices fill_with?"},
      {"groupby", f_groupby, "attribute default? case_sensitive?"},
  };
  return list;
}

}  // namespace hubzoo::jinja
