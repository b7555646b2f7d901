// Python string formatting as templates use it: `fmt % args` (printf style,
// also the `format` filter) and str.format with the format-spec
// mini-language, whose fields resolve under the sandbox's attribute rules.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/builtins.h"

namespace hubzoo::jinja {
namespace {

int64_t cp_len(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string repeat(const std::string& fill, int64_t n) {
  if (n > (1 << 20)) throw LimitError("format width too large");
  check_bytes(mul_sat(static_cast<size_t>(n), fill.size()), "a format width");
  std::string out;
  for (int64_t k = 0; k < n; ++k) out += fill;
  return out;
}

// Pads `s` to `width` code points; align is '<', '>' or '^'.
std::string pad(const std::string& s, int64_t width, char align, const std::string& fill) {
  int64_t n = width - cp_len(s);
  if (n <= 0) return s;
  if (align == '<') return s + repeat(fill, n);
  if (align == '^') return repeat(fill, n / 2) + s + repeat(fill, n - n / 2);
  return repeat(fill, n) + s;
}

std::string c_format(const char* spec, double d) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, spec, d);
  if (n < 0 || n >= static_cast<int>(sizeof buf)) throw TemplateError("formatted number too long");
  return buf;
}

std::string with_precision(const char* flags, int64_t prec, char type, double d) {
  std::string spec =
      std::string("%") + flags + "." + std::to_string(std::min<int64_t>(prec, 300)) + type;
  return c_format(spec.c_str(), d);
}

std::string digits_in_base(uint64_t x, int base, bool upper) {
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), digits[x % base]);
    x /= base;
  } while (x);
  return out;
}

// Inserts `sep` every `every` digits from the right of a run of digits.
std::string group(const std::string& digits, char sep, int every) {
  std::string out;
  int n = static_cast<int>(digits.size());
  for (int k = 0; k < n; ++k) {
    if (k > 0 && (n - k) % every == 0) out += sep;
    out += digits[k];
  }
  return out;
}

std::string ascii_of(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      py_escape_codepoint(out, c);
    }
  }
  return out;
}

bool is_int(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Bool; }
int64_t int_of(const Value& v) { return v.kind == Kind::Bool ? v.b : v.i; }

// A float in one of Python's presentation types (e E f F g G %, or 0 for none).
std::string float_text(double d, char type, int64_t prec, bool alt) {
  const char* flags = alt ? "#" : "";
  if (type == 0 && prec < 0) return float_repr(std::fabs(d));
  d = std::fabs(d);
  if (std::isnan(d) || std::isinf(d)) {
    std::string s = std::isnan(d) ? "nan" : "inf";
    if (type == 'E' || type == 'F' || type == 'G') s = std::isnan(d) ? "NAN" : "INF";
    return type == '%' ? s + "%" : s;
  }
  if (type == '%') return with_precision(flags, prec < 0 ? 6 : prec, 'f', d * 100) + "%";
  if (type == 0) {  // 'g', but fixed notation keeps a digit after the point
    std::string s = with_precision(flags, prec == 0 ? 1 : prec, 'g', d);
    if (s.find_first_of("e.") == std::string::npos) s += ".0";
    return s;
  }
  if (type == 'n') type = 'g';
  return with_precision(flags, prec < 0 ? 6 : prec, type, d);
}

struct Spec {
  std::string fill = " ";
  char align = 0;  // < > ^ =
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int64_t width = 0;
  char grouping = 0;
  int64_t precision = -1;
  char type = 0;
};

Spec parse_spec(const std::string& s) {
  Spec sp;
  auto cps = utf8_decode(s);
  size_t k = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    sp.fill = utf8_encode({cps[0]});
    sp.align = static_cast<char>(cps[1]);
    k = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    sp.align = static_cast<char>(cps[0]);
    k = 1;
  }
  if (k < cps.size() && (cps[k] == '+' || cps[k] == '-' || cps[k] == ' ')) {
    sp.sign = static_cast<char>(cps[k++]);
  }
  if (k < cps.size() && cps[k] == 'z') ++k;
  if (k < cps.size() && cps[k] == '#') {
    sp.alt = true;
    ++k;
  }
  if (k < cps.size() && cps[k] == '0') {
    sp.zero = true;
    ++k;
  }
  auto number = [&]() {
    int64_t n = 0;
    while (k < cps.size() && cps[k] >= '0' && cps[k] <= '9') {
      n = n * 10 + (cps[k++] - '0');
      if (n > (1 << 20)) throw LimitError("format width too large");
    }
    return n;
  };
  sp.width = number();
  if (k < cps.size() && (cps[k] == ',' || cps[k] == '_')) sp.grouping = static_cast<char>(cps[k++]);
  if (k < cps.size() && cps[k] == '.') {
    ++k;
    if (k >= cps.size() || cps[k] < '0' || cps[k] > '9')
      throw TemplateError("ValueError: Format specifier missing precision");
    sp.precision = number();
  }
  if (k < cps.size()) sp.type = static_cast<char>(cps[k++]);
  if (k < cps.size()) throw TemplateError("ValueError: Invalid format specifier");
  return sp;
}

// Sign, prefix and digits placed in the width per the spec's alignment.
std::string place_number(bool negative, const std::string& prefix, const std::string& body,
                         const Spec& sp) {
  std::string sign = negative ? "-" : sp.sign == '+' ? "+" : sp.sign == ' ' ? " " : "";
  if (sp.align == '=') {
    int64_t n = sp.width - cp_len(sign + prefix + body);
    return sign + prefix + (n > 0 ? repeat(sp.fill, n) : "") + body;
  }
  return pad(sign + prefix + body, sp.width, sp.align ? sp.align : '>', sp.fill);
}

std::string format_value(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return to_str(v);
  Spec sp = parse_spec(spec_text);
  if (sp.zero && !sp.align) {  // `0` pads numbers after the sign, strings on the right
    sp.fill = "0";
    sp.align = v.is_string() ? '<' : '=';
  }
  const std::string tname = type_name(v);
  if (v.is_string()) {
    if (sp.type && sp.type != 's') {
      throw TemplateError(std::string("ValueError: Unknown format code '") + sp.type +
                          "' for object of type 'str'");
    }
    if (sp.sign != '-')
      throw TemplateError("ValueError: Sign not allowed in string format specifier");
    if (sp.align == '=') {
      throw TemplateError("ValueError: '=' alignment not allowed in string format specifier");
    }
    std::string s = v.str();
    if (sp.precision >= 0) {
      auto cps = utf8_decode(s);
      if (static_cast<int64_t>(cps.size()) > sp.precision) cps.resize(sp.precision);
      s = utf8_encode(cps);
    }
    return pad(s, sp.width, sp.align ? sp.align : '<', sp.fill);
  }
  if (is_int(v) && std::string("bcdoxXn").find(sp.type ? sp.type : 'd') != std::string::npos) {
    if (sp.precision >= 0)
      throw TemplateError("ValueError: Precision not allowed in integer format specifier");
    int64_t x = int_of(v);
    uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    char t = sp.type ? sp.type : 'd';
    if (t == 'c') {
      std::string ch;
      utf8_append(ch, static_cast<char32_t>(x));
      return pad(ch, sp.width, sp.align ? sp.align : '>', sp.fill);
    }
    int base = t == 'b' ? 2 : t == 'o' ? 8 : (t == 'x' || t == 'X') ? 16 : 10;
    std::string body = digits_in_base(mag, base, t == 'X');
    if (sp.grouping) body = group(body, sp.grouping, base == 10 ? 3 : 4);
    std::string prefix;
    if (sp.alt && base != 10) prefix = base == 2 ? "0b" : base == 8 ? "0o" : t == 'X' ? "0X" : "0x";
    return place_number(x < 0, prefix, body, sp);
  }
  if (v.is_numeric()) {
    if (sp.type && std::string("eEfFgGn%").find(sp.type) == std::string::npos) {
      throw TemplateError(std::string("ValueError: Unknown format code '") + sp.type +
                          "' for object of type '" + tname + "'");
    }
    double d = v.as_double();
    std::string body = float_text(d, sp.type, sp.precision, sp.alt);
    if (is_int(v) && !sp.type) body = std::to_string(std::llabs(int_of(v)));
    if (sp.grouping) {
      size_t end = body.find_first_not_of("0123456789");
      body = group(body.substr(0, end), sp.grouping, 3) +
             (end == std::string::npos ? "" : body.substr(end));
    }
    return place_number(std::signbit(d) && !std::isnan(d), "", body, sp);
  }
  throw TemplateError("TypeError: unsupported format string passed to " + tname + ".__format__");
}

// A replacement field's `name.attr[key]...` resolved against the arguments.
Value resolve_field(const std::string& field, const CallArgs& a, size_t& auto_idx, int& mode) {
  size_t end = field.find_first_of(".[");
  std::string first = field.substr(0, end);
  const Value* v = nullptr;
  if (first.empty() || std::all_of(first.begin(), first.end(), ::isdigit)) {
    int want = first.empty() ? 1 : 2;
    if (mode && mode != want) {
      throw TemplateError(
          "ValueError: cannot switch between automatic field numbering and manual field "
          "specification");
    }
    mode = want;
    size_t i = first.empty() ? auto_idx++ : std::stoul(first);
    if (i >= a.pos.size()) {
      throw TemplateError("IndexError: Replacement index " + std::to_string(i) +
                          " out of range for positional args tuple");
    }
    v = &a.pos[i];
  } else {
    for (const auto& [k, x] : a.kw) {
      if (k == first) v = &x;
    }
    if (!v) throw TemplateError("KeyError: '" + first + "'");
  }
  Value cur = *v;
  size_t k = end;
  while (k != std::string::npos && k < field.size()) {
    if (field[k] == '.') {
      size_t e = field.find_first_of(".[", k + 1);
      std::string name = field.substr(k + 1, e == std::string::npos ? e : e - k - 1);
      if (name.empty()) throw TemplateError("ValueError: Empty attribute in format string");
      cur = get_attr(cur, name);
      k = e;
    } else {
      size_t e = field.find(']', k);
      if (e == std::string::npos) throw TemplateError("ValueError: Missing ']' in format string");
      std::string key = field.substr(k + 1, e - k - 1);
      bool digits = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
      cur = get_item(cur, digits ? Value::integer(std::stoll(key)) : Value::string(key));
      k = e + 1;
      if (k < field.size() && field[k] != '.' && field[k] != '[') {
        throw TemplateError("ValueError: Only '.' or '[' may follow ']' in format field specifier");
      }
    }
  }
  return cur;
}

// `auto_idx` and `mode` (1 = automatic numbering, 2 = manual) are shared with
// the fields nested in a format spec, as Python numbers them.
std::string format_fields(const std::string& fmt, const CallArgs& a, int depth, size_t& auto_idx,
                          int& mode) {
  if (depth > 2) throw TemplateError("ValueError: Max string recursion exceeded");
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if ((c == '{' || c == '}') && k + 1 < fmt.size() && fmt[k + 1] == c) {
      out += c;
      ++k;
      continue;
    }
    if (c == '}') throw TemplateError("ValueError: Single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    size_t e = k + 1;
    for (int nest = 1; e < fmt.size(); ++e) {
      if (fmt[e] == '{') ++nest;
      if (fmt[e] == '}' && --nest == 0) break;
    }
    if (e >= fmt.size()) throw TemplateError("ValueError: Single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, e - k - 1);
    k = e;
    std::string spec;
    char conv = 0;
    size_t colon = std::string::npos, bang = std::string::npos;
    for (size_t j = 0; j < field.size() && colon == std::string::npos; ++j) {
      if (field[j] == '[') j = std::min(field.find(']', j), field.size());
      if (j < field.size() && field[j] == ':') colon = j;
      if (j < field.size() && field[j] == '!' && bang == std::string::npos) bang = j;
    }
    std::string raw_spec;
    if (colon != std::string::npos) {
      raw_spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (bang != std::string::npos && bang < field.size()) {
      if (bang + 2 != field.size()) {
        throw TemplateError("ValueError: expected ':' after conversion specifier");
      }
      conv = field[bang + 1];
      field.resize(bang);
    }
    Value v = resolve_field(field, a, auto_idx, mode);
    spec = format_fields(raw_spec, a, depth + 1, auto_idx, mode);  // nested {width} fields
    if (conv == 'r' || conv == 'a') {
      std::string r = conv == 'r' ? repr(v) : ascii_of(repr(v));
      v = Value::string(r);
    } else if (conv == 's') {
      v = Value::string(to_str(v));
    } else if (conv) {
      throw TemplateError(std::string("ValueError: Unknown conversion specifier ") + conv);
    }
    std::string piece = format_value(v, spec);
    check_bytes(out.size() + piece.size(), "str.format's result");
    out += piece;
  }
  return out;
}

// ---- printf-style `fmt % arg` ----

// The values a `%` format consumes: `arg` itself, the items of a tuple, or a
// mapping's entries by `%(key)s`.
class PercentArgs {
 public:
  explicit PercentArgs(const Value& arg)
      : arg_(arg), is_tuple_(arg.kind == Kind::Tuple), values_(is_tuple_ ? *arg.list : List{arg}) {}

  // The next positional value (a `*` width or precision, or a conversion's).
  Value take() {
    if (next_ >= values_.size() || (!is_tuple_ && next_ > 0)) {
      throw TemplateError("TypeError: not enough arguments for format string");
    }
    return values_[next_++];
  }

  // The mapping's value for `%(key)s`.
  const Value& keyed(const std::string& key) {
    if (arg_.kind != Kind::Dict) throw TemplateError("TypeError: format requires a mapping");
    const Value* found = arg_.dict->find(key);
    if (!found) throw TemplateError("KeyError: '" + key + "'");
    used_mapping_ = true;
    return *found;
  }

  // Python's error for positional values left over. A dict or list argument
  // may go unused (Python treats both as mappings).
  void check_all_used() const {
    const bool mapping_like = arg_.kind == Kind::Dict || arg_.kind == Kind::List;
    if (!used_mapping_ && !mapping_like && next_ < values_.size() && (is_tuple_ || next_ == 0)) {
      throw TemplateError("TypeError: not all arguments converted during string formatting");
    }
  }

 private:
  const Value& arg_;
  const bool is_tuple_;
  const List values_;
  size_t next_ = 0;
  bool used_mapping_ = false;
};

// One conversion spec `%(key)-#0*.*lx`, parsed.
struct PercentSpec {
  Spec sp;                       // flags, width and precision (align '<' or '>')
  bool left = false;             // the '-' flag or a negative `*` width
  char conv = 0;                 // the conversion character
  const Value* keyed = nullptr;  // the mapping's value for `(key)`, if given
  size_t start = 0, end = 0;     // fmt offsets: after the '%', at the conversion
};

// A width or precision: digits, or `*` taking the next argument.
int64_t percent_number(const std::string& fmt, size_t& j, PercentArgs& args) {
  if (j < fmt.size() && fmt[j] == '*') {
    ++j;
    Value w = args.take();
    if (!is_int(w)) throw TemplateError("TypeError: * wants int");
    return int_of(w);
  }
  int64_t n = 0;
  while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9') {
    n = n * 10 + (fmt[j++] - '0');
    if (n > (1 << 20)) throw LimitError("format width too large");
  }
  return n;
}

// Parses the spec that starts at fmt[start], just after a '%'.
PercentSpec parse_percent_spec(const std::string& fmt, size_t start, PercentArgs& args) {
  PercentSpec ps;
  ps.start = start;
  size_t j = start;
  if (j < fmt.size() && fmt[j] == '(') {
    size_t e = fmt.find(')', j);
    if (e == std::string::npos) throw TemplateError("ValueError: incomplete format key");
    ps.keyed = &args.keyed(fmt.substr(j + 1, e - j - 1));
    j = e + 1;
  }
  Spec& sp = ps.sp;
  for (; j < fmt.size() && std::string("-+ #0").find(fmt[j]) != std::string::npos; ++j) {
    if (fmt[j] == '-') ps.left = true;
    if (fmt[j] == '+' || (fmt[j] == ' ' && sp.sign != '+')) sp.sign = fmt[j];
    if (fmt[j] == '#') sp.alt = true;
    if (fmt[j] == '0') sp.zero = true;
  }
  sp.width = percent_number(fmt, j, args);
  if (sp.width < 0) {
    ps.left = true;
    sp.width = -sp.width;
  }
  if (j < fmt.size() && fmt[j] == '.') {
    ++j;
    sp.precision = percent_number(fmt, j, args);
  }
  while (j < fmt.size() && (fmt[j] == 'h' || fmt[j] == 'l' || fmt[j] == 'L')) ++j;
  if (j >= fmt.size()) throw TemplateError("ValueError: incomplete format");
  ps.conv = fmt[j];
  ps.end = j;
  sp.align = ps.left ? '<' : '>';
  return ps;
}

// %s %r %a: the text, cut to the precision, padded with spaces.
std::string percent_text(const Spec& sp, char conv, const Value& v) {
  std::string text = conv == 's' ? to_str(v) : conv == 'r' ? repr(v) : ascii_of(repr(v));
  if (sp.precision >= 0) {
    auto cps = utf8_decode(text);
    if (static_cast<int64_t>(cps.size()) > sp.precision) cps.resize(sp.precision);
    text = utf8_encode(cps);
  }
  return pad(text, sp.width, sp.align, " ");
}

// %c: a code point given as an int or a one-character string.
std::string percent_char(const Spec& sp, const Value& v) {
  std::string text;
  if (is_int(v)) {
    utf8_append(text, static_cast<char32_t>(int_of(v)));
  } else if (v.is_string() && cp_len(v.str()) == 1) {
    text = v.str();
  } else {
    throw TemplateError("TypeError: %c requires an int or a unicode character");
  }
  return pad(text, sp.width, sp.align, " ");
}

// %d %i %u %o %x %X: the precision is a minimum digit count; floats truncate for d/i/u.
std::string percent_int(const Spec& sp, char conv, const Value& v) {
  const bool decimal = conv == 'd' || conv == 'i' || conv == 'u';
  if (!v.is_numeric() || (v.kind == Kind::Float && !decimal)) {
    throw TemplateError(std::string("TypeError: %") + conv +
                        " format: " + (decimal ? "a real number" : "an integer") +
                        " is required, not " + type_name(v));
  }
  if (v.kind == Kind::Float && !std::isfinite(v.f)) {
    throw TemplateError("OverflowError: cannot convert float infinity or NaN to integer");
  }
  int64_t x = v.kind == Kind::Float ? static_cast<int64_t>(v.f) : int_of(v);
  uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  int base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X') ? 16 : 10;
  std::string body = digits_in_base(mag, base, conv == 'X');
  if (sp.precision > static_cast<int64_t>(body.size())) {
    body = std::string(sp.precision - body.size(), '0') + body;
  }
  // A C string, not a std::string assigned from literals: GCC 12 warns about
  // the latter (-Wmaybe-uninitialized/-Wrestrict false positives, PR 105329).
  const char* prefix = "";
  if (sp.alt && base == 8) prefix = "0o";
  if (sp.alt && base == 16) prefix = conv == 'X' ? "0X" : "0x";
  return place_number(x < 0, prefix, body, sp);
}

// %e %E %f %F %g %G: precision 6 unless given.
std::string percent_float(const Spec& sp, char conv, const Value& v) {
  if (!v.is_numeric()) throw TemplateError("TypeError: must be real number, not " + type_name(v));
  double d = v.as_double();
  return place_number(std::signbit(d) && !std::isnan(d), "",
                      float_text(d, conv, sp.precision < 0 ? 6 : sp.precision, sp.alt), sp);
}

// One conversion of `v` per its spec.
std::string percent_convert(const PercentSpec& ps, const Value& v) {
  const char conv = ps.conv;
  if (conv == 's' || conv == 'r' || conv == 'a') return percent_text(ps.sp, conv, v);
  if (conv == 'c') return percent_char(ps.sp, v);
  Spec sp = ps.sp;
  if (sp.zero && !ps.left) {  // `0` pads numbers after the sign
    sp.fill = "0";
    sp.align = '=';
  }
  if (std::string("diuoxX").find(conv) != std::string::npos) return percent_int(sp, conv, v);
  if (std::string("eEfFgG").find(conv) == std::string::npos) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "ValueError: unsupported format character '%c' (0x%x)", conv,
                  static_cast<unsigned>(static_cast<unsigned char>(conv)));
    throw TemplateError(buf);
  }
  return percent_float(sp, conv, v);
}

}  // namespace

std::string str_format(const std::string& fmt, const CallArgs& a, int depth) {
  size_t auto_idx = 0;
  int mode = 0;
  return format_fields(fmt, a, depth, auto_idx, mode);
}

std::string percent_format(const std::string& fmt, const Value& arg) {
  PercentArgs args(arg);
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    const PercentSpec ps = parse_percent_spec(fmt, k + 1, args);
    k = ps.end;
    if (ps.conv == '%' && ps.end == ps.start) {  // `%%`, nothing between
      out += '%';
      continue;
    }
    if (ps.conv == '%') throw TemplateError("ValueError: unsupported format character '%' (0x25)");
    std::string piece = percent_convert(ps, ps.keyed ? *ps.keyed : args.take());
    check_bytes(out.size() + piece.size(), "%-formatting's result");
    out += piece;
  }
  args.check_all_used();
  return out;
}

}  // namespace hubzoo::jinja
