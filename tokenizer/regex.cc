#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <cctype>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace hubzoo::tok {

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw FormatError("invalid regex '" + pattern + "' at offset " + std::to_string(err_offset) +
                      ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  code_ =
      std::shared_ptr<void>(code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); });
}

Regex Regex::literal(std::string_view literal) {
  std::string pattern;
  for (char ch : literal) {
    const auto b = static_cast<unsigned char>(ch);
    if (b < 0x80 && !std::isalnum(b)) pattern += '\\';
    pattern += ch;
  }
  return Regex(pattern);
}

namespace {

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
};

// The leftmost match at or after `start`, or false.
bool match_from(const pcre2_code* code, MatchData& md, std::string_view text, size_t start,
                Offsets* out) {
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             PCRE2_NO_UTF_CHECK, md.data, nullptr);
  if (rc < 0) return false;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
  *out = {ov[0], ov[1]};
  return true;
}

}  // namespace

std::vector<Offsets> Regex::find_all(std::string_view text) const {
  const auto* code = static_cast<const pcre2_code*>(code_.get());
  MatchData md(code);
  std::vector<Offsets> out;
  size_t pos = 0;
  bool has_last = false;
  size_t last_end = 0;
  while (pos <= text.size()) {
    Offsets m;
    if (!match_from(code, md, text, pos, &m)) break;
    if (m.first == m.second && has_last && last_end == m.second) {
      if (pos >= text.size()) break;
      size_t n = 0;
      decode_utf8(text, pos, &n);
      pos += n;
      continue;
    }
    out.push_back(m);
    pos = m.second;
    has_last = true;
    last_end = m.second;
  }
  return out;
}

bool Regex::search(std::string_view text, Offsets* match) const {
  const auto* code = static_cast<const pcre2_code*>(code_.get());
  MatchData md(code);
  return match_from(code, md, text, 0, match);
}

Matches find_matches(const Regex& re, std::string_view text) {
  if (text.empty()) return {{{0, 0}, false}};
  Matches out;
  size_t prev = 0;
  for (const auto& [s, e] : re.find_all(text)) {
    if (prev != s) out.push_back({{prev, s}, false});
    out.push_back({{s, e}, true});
    prev = e;
  }
  if (prev != text.size()) out.push_back({{prev, text.size()}, false});
  return out;
}

Matches find_matches(const std::function<bool(char32_t)>& pred, std::string_view text) {
  if (text.empty()) return {{{0, 0}, false}};
  Matches out;
  size_t last_offset = 0, last_seen = 0;
  for (size_t i = 0, n = 0; i < text.size(); i += n) {
    const char32_t c = decode_utf8(text, i, &n);
    last_seen = i + n;
    if (pred(c)) {
      if (last_offset < i) out.push_back({{last_offset, i}, false});
      out.push_back({{i, i + n}, true});
      last_offset = i + n;
    }
  }
  if (last_seen > last_offset) out.push_back({{last_offset, last_seen}, false});
  return out;
}

Matches invert(Matches m) {
  for (auto& [offsets, flag] : m) flag = !flag;
  return m;
}

}  // namespace hubzoo::tok
