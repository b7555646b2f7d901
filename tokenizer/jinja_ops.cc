// Arithmetic with Python semantics, and transformers' template globals.
#include <cmath>
#include <cstdio>
#include <ctime>

#include "tokenizer/jinja_builtins.h"

namespace hubzoo::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("TypeError: unsupported operand type(s) for " + op + ": '" + type_name(a) +
                      "' and '" + type_name(b) + "'");
}

int64_t as_int(const Value& v) { return v.kind == Kind::Bool ? v.b : v.i; }
bool is_intlike(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Bool; }

void check_overflow(bool overflow) {
  if (overflow) {
    throw TemplateError("OverflowError: integer result out of the engine's 64-bit range");
  }
}

Value repeat(const Value& seq, int64_t n, const RenderLimits& limits) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (seq.str().size() * static_cast<uint64_t>(n) > limits.max_output_bytes) {
      throw LimitError("string repetition exceeds max_output_bytes");
    }
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.str();
    return Value::string(std::move(out));
  }
  if (seq.list->size() * static_cast<uint64_t>(n) >
      static_cast<uint64_t>(limits.max_loop_iterations)) {
    throw LimitError("list repetition exceeds max_loop_iterations");
  }
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return seq.kind == Kind::Tuple ? Value::tuple(std::move(out)) : Value::make_list(std::move(out));
}

// printf-style `str % args` for the conversions templates use.
std::string percent_format(const std::string& fmt, const Value& arg) {
  List args = arg.kind == Kind::Tuple ? *arg.list : List{arg};
  size_t next = 0;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    size_t j = k + 1;
    std::string spec = "%";
    while (j < fmt.size() && std::string("-+ 0#.0123456789").find(fmt[j]) != std::string::npos) {
      spec += fmt[j++];
    }
    if (j >= fmt.size()) throw TemplateError("ValueError: incomplete format");
    char conv = fmt[j];
    k = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size())
      throw TemplateError("TypeError: not enough arguments for format string");
    const Value& v = args[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? to_str(v) : repr(v);
      std::snprintf(buf, sizeof buf, (spec + "s").c_str(), s.c_str());
      out += spec.size() == 1 ? s : std::string(buf);
    } else if (conv == 'd' || conv == 'i') {
      if (!v.is_numeric()) throw TemplateError("TypeError: %d format: a real number is required");
      long long x = v.kind == Kind::Float ? static_cast<long long>(v.f) : as_int(v);
      std::snprintf(buf, sizeof buf, (spec + "lld").c_str(), x);
      out += buf;
    } else if (conv == 'f' || conv == 'e' || conv == 'g') {
      std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_double());
      out += buf;
    } else {
      throw TemplateError(std::string("ValueError: unsupported format character '") + conv + "'");
    }
  }
  if (next < args.size() && arg.kind == Kind::Tuple) {
    throw TemplateError("TypeError: not all arguments converted during string formatting");
  }
  return out;
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b, const RenderLimits& limits) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::string(a.str() + b.str());
    if (a.is_sequence() && a.kind == b.kind) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return a.kind == Kind::Tuple ? Value::tuple(std::move(out))
                                   : Value::make_list(std::move(out));
    }
    if (a.is_string() && !b.is_string()) {
      throw TemplateError("TypeError: can only concatenate str (not \"" + type_name(b) +
                          "\") to str");
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && is_intlike(b)) return repeat(a, as_int(b), limits);
    if ((b.is_string() || b.is_sequence()) && is_intlike(a)) return repeat(b, as_int(a), limits);
  }
  if (op == "%" && a.is_string()) return Value::string(percent_format(a.str(), b));
  if (!a.is_numeric() || !b.is_numeric()) unsupported(op, a, b);

  if (is_intlike(a) && is_intlike(b) && op != "/") {
    int64_t x = as_int(a), y = as_int(b), r = 0;
    if (op == "+" || op == "-" || op == "*") {
      check_overflow(op == "+"   ? __builtin_add_overflow(x, y, &r)
                     : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                 : __builtin_mul_overflow(x, y, &r));
      return Value::integer(r);
    }
    if (op == "//" || op == "%") {
      if (y == 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t acc = 1;
      for (int64_t k = 0; k < y; ++k) {
        check_overflow(__builtin_mul_overflow(acc, x, &r));
        acc = r;
        if (acc == 0 || acc == 1) break;
      }
      if (acc == 1 && x == -1) acc = (y % 2) ? -1 : 1;
      return Value::integer(acc);
    }
  }
  double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0) throw TemplateError("ZeroDivisionError: division by zero");
    return Value::number(x / y);
  }
  if (op == "//") {
    if (y == 0) throw TemplateError("ZeroDivisionError: float floor division by zero");
    // CPython's float_floor_div.
    double mod = std::fmod(x, y), div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
    if (div == 0) return Value::number(std::copysign(0.0, x / y));
    double fl = std::floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return Value::number(fl);
  }
  if (op == "%") {
    if (y == 0) throw TemplateError("ZeroDivisionError: float modulo");
    return Value::number(py_fmod(x, y));
  }
  if (op == "**") return Value::number(std::pow(x, y));
  unsupported(op, a, b);
}

void add_globals(Dict& g, const RenderLimits& limits) {
  auto def = [&](const char* name, NativeFn fn) {
    g.items.emplace_back(Value::string(name), Value::callable(name, std::move(fn)));
  };
  const int64_t max_range = std::min<int64_t>(100000, limits.max_loop_iterations);
  def("range", [max_range](CallArgs& a) -> Value {
    if (a.pos.empty() || a.pos.size() > 3)
      throw TemplateError("TypeError: range expected 1 to 3 arguments");
    for (const Value& v : a.pos) {
      if (!is_intlike(v)) {
        throw TemplateError("TypeError: '" + type_name(v) +
                            "' object cannot be interpreted as an integer");
      }
    }
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = as_int(a.pos[0]);
    } else {
      start = as_int(a.pos[0]);
      stop = as_int(a.pos[1]);
      if (a.pos.size() == 3) step = as_int(a.pos[2]);
    }
    if (step == 0) throw TemplateError("ValueError: range() arg 3 must not be zero");
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (static_cast<int64_t>(out.size()) >= max_range) {
        throw LimitError("range too big: the sandbox allows at most " + std::to_string(max_range) +
                         " items");
      }
      out.push_back(Value::integer(k));
    }
    return Value::make_list(std::move(out));
  });
  auto make_mapping = [](CallArgs& a, Value d) -> Value {
    if (!a.pos.empty()) {
      if (a.pos.size() > 1 || (a.pos[0].kind != Kind::Dict && a.pos[0].kind != Kind::Namespace)) {
        throw TemplateError("TypeError: expected at most one mapping argument");
      }
      for (const auto& kv : a.pos[0].dict->items) d.dict->set(kv.first, kv.second);
    }
    for (const auto& [k, v] : a.kw) d.dict->set(Value::string(k), v);
    return d;
  };
  def("namespace", [make_mapping](CallArgs& a) -> Value {
    Value ns = make_mapping(a, Value::make_namespace());
    for (const auto& kv : ns.dict->items) {
      if (kv.first.is_string() && !kv.first.str().empty() && kv.first.str()[0] == '_') {
        throw SecurityError(
            "chat templates cannot store underscore-prefixed attributes on a namespace, but got " +
            repr(kv.first));
      }
    }
    return ns;
  });
  def("dict", [make_mapping](CallArgs& a) -> Value { return make_mapping(a, Value::make_dict()); });
  def("raise_exception", [](CallArgs& a) -> Value {
    throw TemplateError(a.pos.empty() ? std::string() : to_str(a.pos[0]));
  });
  def("strftime_now", [](CallArgs& a) -> Value {
    if (a.pos.empty() || !a.pos[0].is_string())
      throw TemplateError("strftime_now(format) needs a format string");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = std::strftime(buf, sizeof buf, a.pos[0].str().c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
}

}  // namespace hubzoo::jinja
