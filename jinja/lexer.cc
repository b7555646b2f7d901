#include "jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "base/error.h"
#include "jinja/value.h"

namespace hubzoo::jinja {
namespace {

[[noreturn]] void fail(int line, const std::string& msg) {
  throw FormatError("chat template syntax error at line " + std::to_string(line) + ": " + msg);
}

int count_newlines(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t k = from; k < to && k < s.size(); ++k) n += s[k] == '\n';
  return n;
}

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python str.rstrip() for the ASCII whitespace that can precede a tag.
std::string rstrip_ws(const std::string& s) {
  size_t e = s.size();
  while (e > 0 && is_ws(s[e - 1])) --e;
  return s.substr(0, e);
}

// \r\n and \r become \n, as jinja2 normalizes a source before lexing it.
std::string normalize_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\r') {
      out += '\n';
      if (k + 1 < s.size() && s[k + 1] == '\n') ++k;
    } else {
      out += s[k];
    }
  }
  return out;
}

// Python's unicode-escape decoding of a string literal body.
std::string unescape(const std::string& body, int line) {
  std::string out;
  for (size_t k = 0; k < body.size(); ++k) {
    char c = body[k];
    if (c != '\\' || k + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++k];
    auto hex = [&](int n) {
      std::string h = body.substr(k + 1, n);
      if (static_cast<int>(h.size()) != n) fail(line, "truncated escape in string literal");
      for (char x : h) {
        if (!std::isxdigit(static_cast<unsigned char>(x)))
          fail(line, "bad escape in string literal");
      }
      k += n;
      unsigned long cp = std::strtoul(h.c_str(), nullptr, 16);
      if (cp > 0x10FFFF) fail(line, "escape out of the Unicode range");
      // A lone surrogate cannot be UTF-8; it becomes U+FFFD (Python would keep it).
      utf8_append(out, (cp >= 0xD800 && cp <= 0xDFFF) ? 0xFFFD : static_cast<char32_t>(cp));
    };
    // Single-character escapes: \<key> -> value; \<newline> is a line continuation.
    static const std::pair<char, const char*> kSimple[] = {
        {'\n', ""},  {'\\', "\\"}, {'\'', "'"}, {'"', "\""}, {'a', "\a"}, {'b', "\b"},
        {'f', "\f"}, {'n', "\n"},  {'r', "\r"}, {'t', "\t"}, {'v', "\v"}};
    const auto simple = std::find_if(std::begin(kSimple), std::end(kSimple),
                                     [e](const auto& kv) { return kv.first == e; });
    if (simple != std::end(kSimple)) {
      out += simple->second;
      continue;
    }
    if (e == 'x' || e == 'u' || e == 'U') {
      hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
    } else if (e >= '0' && e <= '7') {
      unsigned v = e - '0';
      for (int n = 0; n < 2 && k + 1 < body.size() && body[k + 1] >= '0' && body[k + 1] <= '7';
           ++n) {
        v = v * 8 + (body[++k] - '0');
      }
      utf8_append(out, static_cast<char32_t>(v));
    } else {
      out += '\\';
      out += e;
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& src, const LexOptions& opt) : src_(src), opt_(opt) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t open = find_open(pos);
      std::string text = src_.substr(pos, open - pos);
      if (open == src_.size()) {
        emit_text(text);
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      size_t p = open + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool all_ws = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) all_ws = all_ws && is_ws(text[k]);
          if (all_ws) text.resize(l_pos);
        }
      }
      emit_text(text);
      line_ += count_newlines(src_, pos, open);
      if (kind == '#') {
        pos = comment(p, line_starting);
      } else if (kind == '%' && is_raw_begin(p)) {
        pos = raw(p, line_starting);
      } else {
        pos = tag(kind, p, line_starting);
      }
    }
    out_.push_back(Token{Tok::Eof, "", 0, 0, line_});
    return std::move(out_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) {
        return k;
      }
    }
    return src_.size();
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) out_.push_back(Token{Tok::Text, text, 0, 0, line_});
  }

  // After a closing `-%}` all whitespace goes; after `%}` one newline (trim_blocks).
  size_t after_close(size_t p, char sign, bool trim, bool& line_starting) {
    size_t start = p;
    if (sign == '-') {
      while (p < src_.size() && is_ws(src_[p])) ++p;
    } else if (sign != '+' && trim && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_ += count_newlines(src_, start, p);
    line_starting = p > start && src_[p - 1] == '\n';
    return p;
  }

  size_t comment(size_t p, bool& line_starting) {
    size_t end = src_.find("#}", p);
    if (end == std::string::npos) fail(line_, "unclosed comment");
    char sign = end > p && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    line_ += count_newlines(src_, p, end);
    line_starting = false;
    return after_close(end + 2, sign, opt_.trim_blocks, line_starting);
  }

  bool is_raw_begin(size_t p) const {
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  size_t raw(size_t p, bool& line_starting) {
    size_t close = src_.find("%}", p);
    bool minus = src_[close - 1] == '-';
    line_ += count_newlines(src_, p, close);
    p = close + 2;
    if (minus) {  // `{% raw -%}` strips what follows; `%}` does not trim (jinja2's raw rule)
      size_t s = p;
      while (p < src_.size() && is_ws(src_[p])) ++p;
      line_ += count_newlines(src_, s, p);
    }
    // Find `{%[-+]? endraw [-+]?%}`.
    for (size_t k = p; k + 1 < src_.size(); ++k) {
      if (src_[k] != '{' || src_[k + 1] != '%') continue;
      size_t q = k + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      while (q < src_.size() && is_ws(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      char end_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(p, k - p);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0) {
          bool all_ws = l_pos < text.size();
          for (size_t j = l_pos; j < text.size(); ++j) all_ws = all_ws && is_ws(text[j]);
          if (all_ws) text.resize(l_pos);
        }
      }
      emit_text(text);
      line_ += count_newlines(src_, p, q);
      return after_close(q + 2, end_sign, opt_.trim_blocks, line_starting);
    }
    fail(line_, "missing endraw for raw block");
  }

  // Expression tokens up to `}}` or `%}`.
  size_t tag(char kind, size_t p, bool& line_starting) {
    const char close = kind == '{' ? '}' : '%';
    out_.push_back(Token{kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", 0, 0, line_});
    int depth = 0;  // brackets, so `}}` inside a dict literal isn't taken as the end
    while (true) {
      while (p < src_.size() && is_ws(src_[p])) line_ += src_[p++] == '\n';
      if (p >= src_.size()) fail(line_, kind == '{' ? "unclosed '{{'" : "unclosed '{%'");
      char c = src_[p];
      // End markers first, as jinja2 tries them before operators.
      if ((c == '-' || c == '+') && src_.compare(p + 1, 2, std::string(1, close) + "}") == 0 &&
          depth == 0 && !(c == '+' && kind == '{')) {
        out_.push_back(Token{kind == '{' ? Tok::VarEnd : Tok::BlockEnd, "", 0, 0, line_});
        return after_close(p + 3, c, kind == '%' && opt_.trim_blocks, line_starting);
      }
      if (c == close && p + 1 < src_.size() && src_[p + 1] == '}' && depth == 0) {
        out_.push_back(Token{kind == '{' ? Tok::VarEnd : Tok::BlockEnd, "", 0, 0, line_});
        return after_close(p + 2, 0, kind == '%' && opt_.trim_blocks, line_starting);
      }
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
        if (q >= src_.size()) fail(line_, "unterminated string literal");
        std::string body = src_.substr(p + 1, q - p - 1);
        out_.push_back(Token{Tok::String, unescape(body, line_), 0, 0, line_});
        line_ += count_newlines(src_, p, q);
        p = q + 1;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        p = number(p);
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
          ++q;
        out_.push_back(Token{Tok::Name, src_.substr(p, q - p), 0, 0, line_});
        p = q;
        continue;
      }
      static const char* ops3[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op;
      for (const char* o : ops3) {
        if (src_.compare(p, 2, o) == 0) op = o;
      }
      if (op.empty()) {
        if (std::string("+-/%*~[](){}<>=.:|,;").find(c) == std::string::npos) {
          size_t len = 1;  // name the whole UTF-8 character, never a lone byte
          while (p + len < src_.size() &&
                 (static_cast<unsigned char>(src_[p + len]) & 0xC0) == 0x80)
            ++len;
          fail(line_, "unexpected character '" + src_.substr(p, len) + "'");
        }
        op = std::string(1, c);
      }
      if (op == "(" || op == "[" || op == "{") ++depth;
      if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
      out_.push_back(Token{Tok::Op, op, 0, 0, line_});
      p += op.size();
    }
  }

  // 0b101, 0o17, 0x1f (underscores allowed between digits).
  size_t prefixed_integer(size_t p, int base) {
    size_t q = p + 2;
    std::string digits;
    auto ok = [&](char c) {
      int v =
          std::isdigit(static_cast<unsigned char>(c))
              ? c - '0'
              : (std::isxdigit(static_cast<unsigned char>(c)) ? 10 + (std::tolower(c) - 'a') : 99);
      return v < base;
    };
    while (q < src_.size() &&
           (ok(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && ok(src_[q + 1])))) {
      if (src_[q] != '_') digits += src_[q];
      ++q;
    }
    if (digits.empty()) fail(line_, "invalid integer literal");
    errno = 0;
    Token t{Tok::Int, src_.substr(p, q - p), std::strtoll(digits.c_str(), nullptr, base), 0, line_};
    if (errno == ERANGE) fail(line_, "integer literal out of range: " + t.text);
    out_.push_back(t);
    return q;
  }

  size_t number(size_t p) {
    if (src_[p] == '0' && p + 1 < src_.size()) {
      char b = static_cast<char>(std::tolower(src_[p + 1]));
      if (b == 'b' || b == 'o' || b == 'x')
        return prefixed_integer(p, b == 'b' ? 2 : b == 'o' ? 8 : 16);
    }
    size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) ||
                                 (src_[q] == '_' && q + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[q + 1]))))) {
        ++q;
      }
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      ++q;
      digits();
      is_float = true;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        q = r;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = p; k < q; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    Token t{is_float ? Tok::Float : Tok::Int, text, 0, 0, line_};
    if (is_float) {
      t.fval = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.ival = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(line_, "integer literal out of range: " + text);
    }
    out_.push_back(t);
    return q;
  }

  const std::string& src_;
  LexOptions opt_;
  std::vector<Token> out_;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexOptions& options) {
  // jinja2 normalizes every line ending before lexing, so trim_blocks and
  // lstrip_blocks see \r\n as one newline.
  std::string src = normalize_newlines(source);
  if (!options.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(src, options).run();
}

}  // namespace hubzoo::jinja
