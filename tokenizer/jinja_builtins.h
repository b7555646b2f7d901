// Internal to the Jinja engine: operators, attribute/item access with the
// sandbox's rules, Python string/dict/list methods, filters, tests, globals.
#pragma once

#include <string>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_value.h"

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

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args,
                   const RenderLimits& limits);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// range, namespace, dict, raise_exception, strftime_now.
void add_globals(Dict& globals, const RenderLimits& limits);

// Python str methods used by both `s.method()` and filters.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count);
int64_t py_len(const Value& v);

}  // namespace hubzoo::jinja
