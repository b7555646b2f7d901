#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "base/error.h"

namespace hubzoo::tok {

char32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  const size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t c = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  *len = n;
  return c;
}

size_t utf8_len(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0, n = 0; i < s.size(); i += n) out.push_back(decode_utf8(s, i, &n));
  return out;
}

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<uint8_t>(ch) & 0xC0) != 0x80;
  return n;
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 with `*bad` set to the
// length of the maximal invalid subpart (WHATWG / Rust from_utf8_lossy).
size_t valid_sequence(std::string_view s, size_t i, size_t* bad) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return 1;
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *bad = 1;
    return 0;
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) break;
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (b < lo || b > hi) break;
    lo = 0x80, hi = 0xBF;
  }
  if (k == need + 1) return k;
  *bad = k;
  return 0;
}

}  // namespace

void validate_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    const size_t n = valid_sequence(s, i, &bad);
    if (n == 0) throw InvalidArgument("text is not valid UTF-8 at byte " + std::to_string(i));
    i += n;
  }
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    const size_t n = valid_sequence(s, i, &bad);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

namespace {

int category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

}  // namespace

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const int k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t c) {
  const int k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

bool is_other(char32_t c) {
  const int k = category(c);
  return k == UTF8PROC_CATEGORY_CN || k >= UTF8PROC_CATEGORY_CC;
}

bool is_mark_nonspacing(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

bool is_combining_mark(char32_t c) {
  const int k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

// Rust regex \w: Alphabetic | M | Nd | Pc | Join_Control (Alphabetic approximated by L | Nl).
bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  const int k = category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ND) || k == UTF8PROC_CATEGORY_NL ||
         k == UTF8PROC_CATEGORY_PC;
}

void to_lowercase(char32_t c, std::vector<char32_t>& out) {
  if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
    out.push_back('i');
    out.push_back(0x307);
    return;
  }
  out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

namespace {

int ccc(char32_t c) {
  return c < 0x300 ? 0 : utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

// The primary composite of a + b, or 0 (NFC of the pair is one character).
char32_t compose_pair(char32_t a, char32_t b) {
  std::string pair;
  append_utf8(pair, a);
  append_utf8(pair, b);
  utf8proc_uint8_t* dst = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(pair.data()),
                              static_cast<utf8proc_ssize_t>(pair.size()), &dst,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(dst, &std::free);
  if (n <= 0) return 0;
  const std::string_view out(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  size_t len = 0;
  const char32_t c = decode_utf8(out, 0, &len);
  return len == out.size() ? c : 0;
}

}  // namespace

// Decompose each character (its first piece replaces it, the rest are
// inserted), reorder marks by combining class carrying their edits along, then
// (NFC/NFKC) compose: an absorbed character's edit folds into its starter.
// This is how unicode-normalization-alignments reports edits to HF.
std::vector<CharChange> normalize_changes(std::string_view s, NormForm form) {
  const bool compat = form == NormForm::NFKC || form == NormForm::NFKD;
  const bool compose = form == NormForm::NFC || form == NormForm::NFKC;
  std::vector<CharChange> buf;
  buf.reserve(s.size());
  utf8proc_int32_t pieces[32];
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const char32_t c = decode_utf8(s, i, &n);
    if (c < 0x80) {
      buf.push_back({c, 0});
      continue;
    }
    int boundclass = 0;
    const auto options =
        static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
    const auto k =
        utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), pieces, 32, options, &boundclass);
    if (k <= 0 || k > 32) {
      buf.push_back({c, 0});
      continue;
    }
    for (utf8proc_ssize_t j = 0; j < k; ++j)
      buf.push_back({static_cast<char32_t>(pieces[j]), j > 0 ? 1 : 0});
  }
  // Canonical ordering: stable sort of each run of non-starters by class.
  for (size_t i = 0; i < buf.size();) {
    if (ccc(buf[i].c) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < buf.size() && ccc(buf[j].c) != 0) ++j;
    std::stable_sort(buf.begin() + static_cast<std::ptrdiff_t>(i),
                     buf.begin() + static_cast<std::ptrdiff_t>(j),
                     [](const CharChange& a, const CharChange& b) { return ccc(a.c) < ccc(b.c); });
    i = j;
  }
  if (!compose) return buf;
  std::vector<CharChange> out;
  out.reserve(buf.size());
  int64_t starter = -1;
  int last_class = 0;
  for (const CharChange& ch : buf) {
    const int cc = ccc(ch.c);
    if (starter >= 0 && ch.c >= 0x300 && (last_class < cc || last_class == 0)) {
      CharChange& st = out[static_cast<size_t>(starter)];
      if (const char32_t composite = compose_pair(st.c, ch.c)) {
        st.c = composite;
        st.change += ch.change - 1;
        continue;
      }
    }
    if (cc == 0) starter = static_cast<int64_t>(out.size());
    last_class = cc;
    out.push_back(ch);
  }
  return out;
}

namespace {

struct ByteTables {
  char32_t to_char[256];
  int16_t to_byte[512];
  ByteTables() {
    for (auto& b : to_byte) b = -1;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool visible = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = visible ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return byte_tables().to_char[b]; }

int char_to_byte(char32_t c) { return c < 512 ? byte_tables().to_byte[c] : -1; }

}  // namespace hubzoo::tok
