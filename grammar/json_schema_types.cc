// The typed parts of the JSON Schema compiler: strings, numbers, objects, arrays.
#include <cstdio>
#include <limits>

#include "grammar/json_schema_impl.h"

namespace hubzoo::grammar::detail {

namespace {
constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

// The regex of each supported format (the inside of the string). date: every
// month's valid days (February to the 28th, so every output is a real date).
const std::map<std::string, std::string>& formats() {
  static const std::map<std::string, std::string> kFormats = [] {
    const std::string date =
        "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-"
        "9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))";
    const std::string time =
        "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):"
        "[0-5][0-9])";
    return std::map<std::string, std::string>{
        {"date", date},
        {"time", time},
        {"date-time", date + "T" + time},
        {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
        {"email",
         "[A-Za-z0-9_+-]+(?:\\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\\.[A-"
         "Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\\.[A-Za-z]{2,}"},
        {"ipv4",
         "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-"
         "9]|[1-9]?[0-9])"},
    };
  }();
  return kFormats;
}

std::string digits_of(uint64_t v) { return std::to_string(v); }
uint64_t pow10(int n) {
  uint64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}
}  // namespace

Frag SchemaCompiler::format_string(const std::string& format, const std::string& path) {
  auto it = formats().find(format);
  if (it == formats().end()) {
    std::string names;
    for (const auto& [k, v] : formats()) names += (names.empty() ? "" : ", ") + k;
    fail(path + "/format",
         "unsupported format '" + format.substr(0, 100) + "' (supported: " + names + ")");
  }
  RegexOptions o;
  o.json_string = true;
  return compile_regex(a_, it->second, o);
}

Frag SchemaCompiler::string_schema(const Json& s, const std::string& path) {
  const bool has_len = s.contains("minLength") || s.contains("maxLength");
  const int64_t min = count(s, "minLength", 0, path);
  const int64_t max = count(s, "maxLength", -1, path);
  if (max >= 0 && max < min) fail(path, "maxLength is below minLength");
  Frag body;
  if (auto p = s.find("pattern"); p != s.end()) {
    if (!p->is_string()) fail(path + "/pattern", "must be a string");
    if (has_len || s.contains("format")) {
      fail(path, "pattern together with minLength/maxLength/format is not supported");
    }
    RegexOptions o;
    o.json_string = true;
    const std::string what = "pattern of " + path;
    o.what = what;
    body = compile_regex(a_, p->get<std::string>(), o);
  } else if (auto f = s.find("format"); f != s.end()) {
    if (!f->is_string()) fail(path + "/format", "must be a string");
    if (has_len) fail(path, "format together with minLength/maxLength is not supported");
    body = format_string(f->get<std::string>(), path);
  } else if (!has_len) {
    return a_.call(string_rule());
  } else {
    body = a_.empty();
    for (int64_t k = 0; k < min; ++k) body = a_.seq(body, json_char());
    if (max < 0) {
      body = a_.seq(body, a_.star(json_char()));
    } else {
      Frag tail = a_.empty();
      for (int64_t k = min; k < max; ++k) tail = a_.optional(a_.seq(json_char(), tail));
      body = a_.seq(body, tail);
    }
  }
  return a_.seq(a_.seq(a_.literal("\""), body), a_.literal("\""));
}

// Canonical decimals of [lo, hi], both of `lo.size()` digits.
Frag SchemaCompiler::same_length(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return a_.empty();
  if (lo.find_first_not_of('0') == std::string::npos &&
      hi.find_first_not_of('9') == std::string::npos) {
    Frag any = a_.empty();  // [0-9]{n}: keeps the recursion linear in the digits
    for (size_t k = 0; k < lo.size(); ++k) any = a_.seq(any, a_.byte_range('0', '9'));
    return any;
  }
  if (lo[0] == hi[0]) {
    return a_.seq(a_.literal(lo.substr(0, 1)), same_length(lo.substr(1), hi.substr(1)));
  }
  const size_t rest = lo.size() - 1;
  std::vector<Frag> options;
  options.push_back(
      a_.seq(a_.literal(lo.substr(0, 1)), same_length(lo.substr(1), std::string(rest, '9'))));
  if (hi[0] - lo[0] > 1) {
    Frag mid = a_.byte_range(static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1));
    for (size_t k = 0; k < rest; ++k) mid = a_.seq(mid, a_.byte_range('0', '9'));
    options.push_back(mid);
  }
  options.push_back(
      a_.seq(a_.literal(hi.substr(0, 1)), same_length(std::string(rest, '0'), hi.substr(1))));
  return a_.alt(options);
}

// Canonical decimals (no leading zeros) of the integers in [lo, hi].
Frag SchemaCompiler::uint_range(uint64_t lo, uint64_t hi) {
  std::vector<Frag> options;
  const int lo_digits = static_cast<int>(digits_of(lo).size());
  const int hi_digits = hi == kUnbounded ? 19 : static_cast<int>(digits_of(hi).size());
  for (int d = lo_digits; d <= hi_digits; ++d) {
    const uint64_t first = std::max(lo, d == 1 ? 0 : pow10(d - 1));
    const uint64_t last = std::min(hi, pow10(d) - 1);
    if (first > last) continue;
    options.push_back(same_length(digits_of(first), digits_of(last)));
  }
  if (hi == kUnbounded) {
    // 20 digits and more: [1-9][0-9]{19,}.
    Frag f = a_.byte_range('1', '9');
    for (int k = 0; k < 19; ++k) f = a_.seq(f, a_.byte_range('0', '9'));
    options.push_back(a_.seq(f, a_.star(a_.byte_range('0', '9'))));
  }
  return a_.alt(options);
}

// Integers in [lo, hi] (rounded bounds; +-inf unbounded).
Frag SchemaCompiler::int_range(double lo, double hi) {
  std::vector<Frag> options;
  if (lo < 0) {  // negative: "-" and a magnitude in [max(1, -hi), -lo]
    const uint64_t mag_lo = hi >= -1 ? 1 : static_cast<uint64_t>(-hi);
    const uint64_t mag_hi = std::isinf(lo) ? kUnbounded : static_cast<uint64_t>(-lo);
    if (mag_lo <= mag_hi) options.push_back(a_.seq(a_.literal("-"), uint_range(mag_lo, mag_hi)));
  }
  if (hi >= 0) {
    const uint64_t from = lo > 0 ? static_cast<uint64_t>(lo) : 0;
    const uint64_t to = std::isinf(hi) ? kUnbounded : static_cast<uint64_t>(hi);
    if (from <= to) options.push_back(uint_range(from, to));
  }
  if (options.empty()) throw GrammarError("empty integer range");
  return a_.alt(options);
}

Frag SchemaCompiler::number_schema(const Json& s, const std::string& path, bool integer) {
  double lo = -INFINITY, hi = INFINITY;
  bool lo_excl = false, hi_excl = false;
  auto bound = [&](const char* key) -> std::optional<double> {
    auto it = s.find(key);
    if (it == s.end() || it->is_boolean()) return std::nullopt;
    if (!it->is_number()) fail(path + "/" + key, "must be a number");
    return it->get<double>();
  };
  auto flag = [&](const char* key) {
    auto it = s.find(key);
    return it != s.end() && it->is_boolean() && it->get<bool>();  // draft 4
  };
  if (auto v = bound("minimum")) lo = *v, lo_excl = flag("exclusiveMinimum");
  if (auto v = bound("maximum")) hi = *v, hi_excl = flag("exclusiveMaximum");
  if (auto v = bound("exclusiveMinimum"); v && (*v > lo || (*v == lo && !lo_excl)))
    lo = *v, lo_excl = true;
  if (auto v = bound("exclusiveMaximum"); v && (*v < hi || (*v == hi && !hi_excl)))
    hi = *v, hi_excl = true;
  if (std::isinf(lo) && std::isinf(hi)) return a_.call(integer ? integer_rule() : number_rule());
  // Integer bounds, clamped to +-1e18 (a clamp only narrows the range).
  double ilo = std::ceil(lo), ihi = std::floor(hi);
  if (lo_excl && ilo == lo) ilo += 1;
  if (hi_excl && ihi == hi) ihi -= 1;
  ilo = std::isinf(ilo) ? ilo : std::clamp(ilo, -kIntClamp + 1, kIntClamp - 1);
  ihi = std::isinf(ihi) ? ihi : std::clamp(ihi, -kIntClamp + 1, kIntClamp - 1);
  std::vector<Frag> options;
  if (ilo <= ihi) options.push_back(int_range(ilo, ihi));
  if (!integer) {
    // I.f with the whole of [I, I+1) (or (-(I+1), -I]) inside the bounds.
    // Nonnegative I: lo <= I (I < lo... strict when exclusive, as I.0 == I), I + 1 <= hi.
    double flo = std::ceil(lo), fhi = std::floor(hi) - 1;
    if (lo_excl && flo == lo) flo += 1;
    // Negative -I.f: -I <= hi (strict when exclusive), -(I + 1) >= lo.
    double nlo = -std::floor(hi);
    if (hi_excl && std::floor(hi) == hi) nlo += 1;
    nlo = std::max(nlo, 0.0);
    const double nhi = std::floor(-lo) - 1;  // -(I+1) >= lo
    Frag frac = a_.seq(a_.literal("."), digits());
    if (std::max(flo, 0.0) <= std::min(fhi, kIntClamp - 1)) {
      options.push_back(a_.seq(int_range(std::max(flo, 0.0), std::min(fhi, kIntClamp - 1)), frac));
    }
    if (nlo <= std::min(nhi, kIntClamp - 1) && lo < 0) {
      Frag f2 = a_.seq(a_.literal("."), digits());
      options.push_back(
          a_.seq(a_.seq(a_.literal("-"), int_range(nlo, std::min(nhi, kIntClamp - 1))), f2));
    }
    if (options.empty()) {
      const double mid = std::isinf(lo) ? hi - 1 : std::isinf(hi) ? lo + 1 : (lo + hi) / 2;
      if (!(mid > lo || (!lo_excl && mid == lo)) || !(mid < hi || (!hi_excl && mid == hi))) {
        fail(path, "the number range is empty");
      }
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", mid);
      std::string text = buf;
      if (text.find_first_of("einn") != std::string::npos)
        fail(path, "the number range is too narrow");
      options.push_back(a_.literal(text));
    }
  }
  if (options.empty()) fail(path, "the integer range is empty");
  return a_.alt(options);
}

// A key outside `names`: ASCII without '"', '\\' or escapes, at least one character.
Frag SchemaCompiler::extra_key(const std::vector<std::string>& names) {
  const Ranges key_chars = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}};
  Frag f{a_.new_node(), a_.new_node()};  // in: before the opening quote; out: after ':'
  const int32_t root = a_.new_node();
  const int32_t free_state = a_.new_node();  // left every name behind
  const int32_t close = a_.new_node();       // after the closing quote
  a_.add_bytes(f.in, '"', '"', root);
  Frag colon = a_.literal(":");
  // Trie of the ASCII names; a node that ends a name may not close the key.
  std::vector<std::map<uint8_t, int32_t>> kids(1);
  std::vector<int32_t> node_of(1, root);
  std::vector<bool> ends(1, false);
  for (const std::string& name : names) {
    if (!std::all_of(name.begin(), name.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7E && c != '"' && c != '\\'; }))
      continue;
    size_t t = 0;
    for (char c : name) {
      const auto b = static_cast<uint8_t>(c);
      auto it = kids[t].find(b);
      if (it == kids[t].end()) {
        kids.emplace_back();
        node_of.push_back(a_.new_node());
        ends.push_back(false);
        it = kids[t].emplace(b, static_cast<int32_t>(kids.size() - 1)).first;
      }
      t = static_cast<size_t>(it->second);
    }
    ends[t] = true;
  }
  for (size_t t = 0; t < kids.size(); ++t) {
    uint32_t next = 0;  // bytes below `next` are wired
    for (auto [lo, hi] : key_chars) {
      for (uint32_t b = std::max<uint32_t>(lo, next); b <= hi; ++b) {
        auto it = kids[t].find(static_cast<uint8_t>(b));
        if (it != kids[t].end()) {
          a_.add_bytes(node_of[t], static_cast<uint8_t>(b), static_cast<uint8_t>(b),
                       node_of[it->second]);
          continue;
        }
        uint32_t e = b;  // a run of bytes with no child
        while (e + 1 <= hi && !kids[t].count(static_cast<uint8_t>(e + 1))) ++e;
        a_.add_bytes(node_of[t], static_cast<uint8_t>(b), static_cast<uint8_t>(e), free_state);
        b = e;
      }
    }
    if (t != 0 && !ends[t]) a_.add_bytes(node_of[t], '"', '"', close);
  }
  for (auto [lo, hi] : key_chars)
    a_.add_bytes(free_state, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), free_state);
  a_.add_bytes(free_state, '"', '"', close);
  a_.add_eps(close, colon.in);
  a_.add_eps(colon.out, f.out);
  return f;
}

Frag SchemaCompiler::object_schema(const Json& s, const std::string& path, int depth) {
  std::vector<std::pair<std::string, const Json*>> props;
  static const Json kAny = true;
  if (auto p = s.find("properties"); p != s.end()) {
    if (!p->is_object()) fail(path + "/properties", "must be an object");
    for (auto it = p->begin(); it != p->end(); ++it) props.emplace_back(it.key(), &it.value());
  }
  std::set<std::string> required;
  if (auto r = s.find("required"); r != s.end()) {
    if (!r->is_array()) fail(path + "/required", "must be an array");
    for (const Json& name : *r) {
      if (!name.is_string()) fail(path + "/required", "must hold strings");
      required.insert(name.get<std::string>());
      if (std::none_of(props.begin(), props.end(),
                       [&](const auto& p) { return p.first == name; })) {
        props.emplace_back(name.get<std::string>(), &kAny);
      }
    }
  }
  const Json* extra = nullptr;
  if (auto ap = s.find("additionalProperties"); ap != s.end()) {
    if (!(ap->is_boolean() && !ap->get<bool>())) extra = &*ap;
  }
  // none[i] / some[i]: before property i, with no member / some member written.
  const size_t n = props.size();
  std::vector<int32_t> none(n + 1), some(n + 1);
  for (size_t i = 0; i <= n; ++i) none[i] = a_.new_node(), some[i] = a_.new_node();
  for (size_t i = 0; i < n; ++i) {
    const auto& [name, sub] = props[i];
    const std::string sub_path = path + "/properties/" + name;
    const int32_t value = schema_rule(*sub, sub_path, depth + 1);
    const std::string key = Json(name).dump(-1, ' ', false, Json::error_handler_t::replace) + ":";
    Frag first = a_.seq(a_.literal(key), a_.call(value));
    Frag later = a_.seq(a_.literal("," + key), a_.call(value));
    a_.add_eps(none[i], first.in), a_.add_eps(first.out, some[i + 1]);
    a_.add_eps(some[i], later.in), a_.add_eps(later.out, some[i + 1]);
    if (!required.count(name)) a_.add_eps(none[i], none[i + 1]), a_.add_eps(some[i], some[i + 1]);
  }
  Frag f{a_.new_node(), a_.new_node()};
  Frag open = a_.literal("{");
  a_.add_eps(f.in, open.in);
  a_.add_eps(open.out, none[0]);
  Frag close = a_.literal("}");
  a_.add_eps(none[n], close.in);
  a_.add_eps(some[n], close.in);
  a_.add_eps(close.out, f.out);
  if (extra) {
    std::vector<std::string> names;
    for (const auto& p : props) names.push_back(p.first);
    const int32_t value = schema_rule(*extra, path + "/additionalProperties", depth + 1);
    Frag first = a_.seq(extra_key(names), a_.call(value));
    Frag later = a_.seq(a_.seq(a_.literal(","), extra_key(names)), a_.call(value));
    a_.add_eps(none[n], first.in), a_.add_eps(first.out, some[n]);
    a_.add_eps(some[n], later.in), a_.add_eps(later.out, some[n]);
  }
  return f;
}

Frag SchemaCompiler::array_schema(const Json& s, const std::string& path, int depth) {
  const int64_t min = count(s, "minItems", 0, path);
  const int64_t max = count(s, "maxItems", -1, path);
  if (max >= 0 && max < min) fail(path, "maxItems is below minItems");
  static const Json kAny = true;
  const Json* items = &kAny;
  if (auto it = s.find("items"); it != s.end()) {
    if (it->is_array())
      fail(path + "/items", "an array of item schemas (tuple form) is not supported");
    if (it->is_boolean() && !it->get<bool>()) {
      if (min > 0) fail(path, "items false with minItems > 0 allows no value");
      return a_.literal("[]");
    }
    items = &*it;
  }
  const int32_t item = schema_rule(*items, path + "/items", depth + 1);
  // item ("," item){min-1 .. max-1}, optional as a whole when min == 0.
  Frag body = a_.call(item);
  for (int64_t k = 1; k < min; ++k) body = a_.seq(body, a_.seq(a_.literal(","), a_.call(item)));
  const int64_t first_count = std::max<int64_t>(min, 1);
  if (max < 0) {
    body = a_.seq(body, a_.star(a_.seq(a_.literal(","), a_.call(item))));
  } else {
    Frag tail = a_.empty();
    for (int64_t k = first_count; k < max; ++k) {
      tail = a_.optional(a_.seq(a_.seq(a_.literal(","), a_.call(item)), tail));
    }
    body = a_.seq(body, tail);
  }
  if (min == 0) body = max == 0 ? a_.empty() : a_.optional(body);
  return a_.seq(a_.seq(a_.literal("["), body), a_.literal("]"));
}

}  // namespace hubzoo::grammar::detail
