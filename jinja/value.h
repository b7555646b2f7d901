// Values of the Jinja2-compatible template engine, with Python semantics:
// printing (str/repr), truthiness, equality, ordering and JSON conversion are
// those of the Python objects jinja2 would hold, so rendered text matches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace hubzoo::jinja {

// A template failed while rendering: raise_exception(), a type error, an
// undefined value used where a value is needed. The message says which.
struct TemplateError : Error {
  using Error::Error;
};
// The sandbox refused an operation (a mutating method, an unsafe attribute).
struct SecurityError : TemplateError {
  using TemplateError::TemplateError;
};
// A configured bound (recursion depth, loop iterations, output size) was hit.
struct LimitError : TemplateError {
  using TemplateError::TemplateError;
};

struct Value;
using List = std::vector<Value>;
struct Dict;
struct CallArgs;
using NativeFn = std::function<Value(CallArgs&)>;
inline constexpr size_t kDictEntryBytes = 256;  // what one entry is charged (sandbox.h)

// A function, or a Python object templates can only read attributes of and
// maybe call: a macro, a loop context, a cycler. Printing shows `display`.
struct Callable {
  std::string name;
  NativeFn fn;                    // empty: not callable (a cycler)
  std::string type = "function";  // Python type name, for messages
  std::string display;            // str(); empty = "<function name>"
  std::shared_ptr<Dict> attrs;    // readable attributes (loop.index, macro.name)
};

enum class Kind {
  Undefined,
  None,
  Bool,
  Int,
  Float,
  String,
  List,
  Tuple,
  Dict,
  Namespace,
  Callable
};

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // String; for Undefined: the error message
  std::shared_ptr<List> list;            // List, Tuple
  std::shared_ptr<Dict> dict;            // Dict, Namespace (mutable); a Tuple's named fields
  std::shared_ptr<const Callable> fn;    // Callable
  bool unsafe = false;                   // Undefined that raises SecurityError when used

  Value() = default;
  static Value undefined(std::string message, bool unsafe = false);
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List v);
  static Value tuple(List v);
  static Value make_dict();
  static Value make_namespace();
  static Value callable(std::string name, NativeFn fn);
  // An object with attributes (and a call operator when `fn` is set).
  static Value object(std::string type, std::string display, std::shared_ptr<Dict> attrs,
                      NativeFn fn = {});

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_numeric() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
  const std::string& str() const { return *s; }
  double as_double() const;
  // Throws the error an undefined value carries (UndefinedError in jinja2).
  [[noreturn]] void raise_undefined() const;
};

// Ordered like a Python dict (insertion order); small, so lookups are linear.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  int64_t charged_bytes = 0;  // entries set() charged to a render (sandbox.h)
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value v);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Positional index `index` or keyword `name`; nullptr if absent.
  const Value* get(size_t index, const std::string& name) const;
  Value get_or(size_t index, const std::string& name, Value fallback) const;
};

// Python's type name for messages: 'str', 'int', 'dict', 'NoneType'.
std::string type_name(const Value& v);
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
// Python ordering (a < b); throws TemplateError for unorderable types.
bool less(const Value& a, const Value& b);
// str(v) as Python prints it; repr(v).
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string float_repr(double d);
std::string string_repr(const std::string& s);

Value from_json(const nlohmann::ordered_json& j);

struct JsonStyle {
  std::string indent;  // used when has_indent
  bool has_indent = false;
  std::string item_sep = ", ";  // Python json.dumps defaults
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(v, ...) as transformers' tojson filter calls it.
std::string to_json(const Value& v, const JsonStyle& style);

// Items of an iterable (list, tuple, string chars, dict keys); undefined -> empty.
List iterate(const Value& v);

// UTF-8 helpers: code points in, code points out.
std::vector<char32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<char32_t>& cps);
void utf8_append(std::string& out, char32_t cp);
// Python's escape of a code point in repr()/ascii(): \xhh, \uhhhh or \Uhhhhhhhh.
void py_escape_codepoint(std::string& out, char32_t cp);
bool is_py_space(char32_t c);

}  // namespace hubzoo::jinja
