// Attribute and item access under ImmutableSandboxedEnvironment's rules:
// methods before items for `.`, items before methods for `[]`, mutating
// list/dict methods unsafe; dict and list methods; slicing and `in`.
#include "jinja/builtins.h"

namespace hubzoo::jinja {
namespace {

std::string object_name(const Value& v) {
  if (v.is_none()) return "None";
  std::string name = "'";  // appended, not operator+ on a literal (GCC 12 -Wrestrict, PR 105329)
  name += type_name(v);
  name += " object'";
  return name;
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

bool has_method(const Value& obj, const std::string& name) {
  if (obj.kind == Kind::String) return has_str_method(name);
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

bool all_ascii(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t cp_count(const std::string& s, size_t bytes) {
  size_t n = 0;
  for (size_t k = 0; k < bytes && k < s.size(); ++k)
    n += (static_cast<unsigned char>(s[k]) & 0xC0) != 0x80;
  return n;
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
      charge_bytes(d.items.size() * kDictEntryBytes, "a dict copy");
      c.dict->charged_bytes += static_cast<int64_t>(d.items.size() * kDictEntryBytes);
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
  return call_str_method(self.str(), name, a);
}

}  // namespace

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
  if (obj.kind == Kind::Dict || obj.kind == Kind::Namespace ||
      (obj.kind == Kind::Tuple && obj.dict)) {  // a named tuple's fields
    if (const Value* v = obj.dict->find(name)) return *v;
  }
  if (obj.kind == Kind::Callable && obj.fn->attrs) {
    if (const Value* v = obj.fn->attrs->find(name)) return *v;
  }
  if (obj.kind == Kind::Int || obj.kind == Kind::Bool || obj.kind == Kind::Float) {
    if (name == "real") return obj.kind == Kind::Bool ? Value::integer(obj.b) : obj;
    if (name == "imag") return obj.kind == Kind::Float ? Value::number(0) : Value::integer(0);
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
    if (obj.is_string() && all_ascii(obj.str())) {  // bytes are code points: no decoding
      int64_t n = static_cast<int64_t>(obj.str().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::string(std::string(1, obj.str()[i]));
    } else if (obj.is_string()) {
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
  const bool ascii = obj.is_string() && all_ascii(obj.str());  // bytes are code points
  if (ascii) {
    n = static_cast<int64_t>(obj.str().size());
  } else if (obj.is_string()) {
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
  const size_t count = static_cast<size_t>(st > 0 ? (e > b ? (e - b + st - 1) / st : 0)
                                                  : (b > e ? (b - e - st - 1) / -st : 0));
  auto each = [&](auto&& fn) {
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st) fn(k);
  };
  if (ascii) {
    check_bytes(count, "a slice");
    std::string out;
    out.reserve(count);
    each([&](int64_t k) { out += obj.str()[k]; });
    return Value::string(std::move(out));
  }
  if (obj.is_string()) {
    check_bytes(count * 2 * sizeof(char32_t), "a slice");
    std::vector<char32_t> out;
    out.reserve(count);
    each([&](int64_t k) { out.push_back(cps[k]); });
    return Value::string(utf8_encode(out));
  }
  check_bytes(count * sizeof(Value), "a slice");
  List out;
  out.reserve(count);
  each([&](int64_t k) { out.push_back((*obj.list)[k]); });
  return obj.kind == Kind::Tuple ? Value::tuple(std::move(out)) : Value::make_list(std::move(out));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined:
      return false;
    case Kind::String:
      if (item.kind != Kind::String) {
        throw TemplateError("TypeError: 'in <string>' requires string as left operand, not " +
                            type_name(item));
      }
      return py_find(container.str(), item.str()) != std::string::npos;
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
