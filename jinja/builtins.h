// Internal to the Jinja engine: operators, attribute/item access with the
// sandbox's rules, Python string/dict/list methods, string formatting,
// filters, tests and globals.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "jinja/eval.h"
#include "jinja/sandbox.h"
#include "jinja/value.h"

namespace hubzoo::jinja {

// obj.name: a method first (mutating ones are unsafe), then an item; else Undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: an item first, then a method by that name; else Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for lists, tuples and strings (null Values = omitted).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// + - * / // % ** ~ with Python semantics.
Value binary_op(const std::string& op, const Value& a, const Value& b, const RenderLimits& limits);
// `item in container`.
bool contains(const Value& container, const Value& item);

// ---- filters and tests ----
using FilterFn = Value (*)(const Value&, const CallArgs&, const RenderLimits&);
using TestFn = bool (*)(const Value&, const CallArgs&);
// A filter or test with its Python signature after the input value: parameter
// names separated by spaces, a trailing '?' marking an optional one; "*"
// accepts any arguments (the function checks them itself).
template <class Fn>
struct Builtin {
  const char* name;
  Fn fn;
  const char* signature;
};
// Raises TypeError, as Python would, when `args` don't fit `signature`.
void check_signature(const char* kind, const std::string& name, const char* signature,
                     const CallArgs& args);
// The collection filters of filters_seq.cc (sort, groupby, map, ...).
const std::vector<Builtin<FilterFn>>& sequence_filters();

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args,
                   const RenderLimits& limits);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// jinja2's make_attrgetter: a dotted path ("a.0.b"; digits index), each step
// an item-then-attribute lookup; `dflt` replaces an undefined step when given.
Value attr_path(const Value& item, const Value& path, const Value* dflt = nullptr);
// ignore_case: strings lowercased for case-insensitive comparison.
Value fold_case(const Value& v, bool case_sensitive);

// range, namespace, dict, cycler, joiner, raise_exception, strftime_now.
void add_globals(Dict& globals, const RenderLimits& limits);

// ---- Python str behaviour ----
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
std::string py_swapcase(const std::string& s);
bool is_cased(char32_t c);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count);
// str.splitlines at Python's line boundaries (\n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029).
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
// str.split(sep, maxsplit); sep None/Undefined splits on whitespace runs.
std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit);
int64_t py_len(const Value& v);
// s.find(sub, from) and s.rfind(sub, pos) as std::string's, but in linear
// time for long needles (std::string searches in O(n*m): a template could
// stall a render inside one call, where the CPU limit cannot stop it).
size_t py_find(const std::string& s, const std::string& sub, size_t from = 0);
size_t py_rfind(const std::string& s, const std::string& sub, size_t pos = std::string::npos);
// The str methods templates may call (a table, name -> handler, in
// str_methods.cc), and the call itself.
bool has_str_method(const std::string& name);
Value call_str_method(const std::string& s, const std::string& name, const CallArgs& args);
// Python's `fmt % arg` (arg a tuple of values, a mapping, or one value).
std::string percent_format(const std::string& fmt, const Value& arg);
// str.format(*args, **kwargs); fields read attributes and items as the sandbox does.
std::string str_format(const std::string& fmt, const CallArgs& args, int depth = 0);

}  // namespace hubzoo::jinja
