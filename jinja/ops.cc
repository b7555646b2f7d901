// Arithmetic and comparison operators with Python semantics.
#include <cmath>

#include "jinja/builtins.h"

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
    const size_t bytes = mul_sat(seq.str().size(), static_cast<size_t>(n));
    if (bytes > limits.max_output_bytes) {
      throw LimitError("string repetition exceeds max_output_bytes");
    }
    check_bytes(bytes, "a string repetition");
    std::string out;
    out.reserve(bytes);
    for (int64_t k = 0; k < n; ++k) out += seq.str();
    return Value::string(std::move(out));
  }
  if (seq.list->size() * static_cast<uint64_t>(n) >
      static_cast<uint64_t>(limits.max_loop_iterations)) {
    throw LimitError("list repetition exceeds max_loop_iterations");
  }
  check_bytes(mul_sat(seq.list->size() * sizeof(Value), static_cast<size_t>(n)),
              "a list repetition");
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return seq.kind == Kind::Tuple ? Value::tuple(std::move(out)) : Value::make_list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b, const RenderLimits& limits) {
  if (op == "~") {
    std::string x = to_str(a), y = to_str(b);
    check_bytes(x.size() + y.size(), "a ~ concatenation");
    return Value::string(x + y);
  }
  // str.__mod__ formats any right operand, an undefined one as ''.
  if (op == "%" && a.is_string()) return Value::string(percent_format(a.str(), b));
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_bytes(a.str().size() + b.str().size(), "a + concatenation");
      return Value::string(a.str() + b.str());
    }
    if (a.is_sequence() && a.kind == b.kind) {
      check_bytes((a.list->size() + b.list->size()) * sizeof(Value), "a + concatenation");
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

}  // namespace hubzoo::jinja
