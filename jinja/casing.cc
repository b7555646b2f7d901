// Python's str case conversions: utf8proc's simple mappings plus the full
// (multi-character) mappings of SpecialCasing.txt that Python applies, e.g.
// 'ß'.upper() == 'SS', and the final-sigma rule of str.lower().
#include <utf8proc.h>

#include <algorithm>

#include "jinja/builtins.h"

namespace hubzoo::jinja {
namespace {

struct FullCase {
  char32_t cp;
  const char* upper;
  const char* title;
};

// Generated from CPython's unicodedata (14.0): every code point whose
// upper() or title() is longer than one character.
constexpr FullCase kFullCase[] = {
    {0x00DF, "SS", "Ss"},
    {0x0149, "\u02bc\u004e", "\u02bc\u004e"},
    {0x01F0, "\u004a\u030c", "\u004a\u030c"},
    {0x0390, "\u0399\u0308\u0301", "\u0399\u0308\u0301"},
    {0x03B0, "\u03a5\u0308\u0301", "\u03a5\u0308\u0301"},
    {0x0587, "\u0535\u0552", "\u0535\u0582"},
    {0x1E96, "\u0048\u0331", "\u0048\u0331"},
    {0x1E97, "\u0054\u0308", "\u0054\u0308"},
    {0x1E98, "\u0057\u030a", "\u0057\u030a"},
    {0x1E99, "\u0059\u030a", "\u0059\u030a"},
    {0x1E9A, "\u0041\u02be", "\u0041\u02be"},
    {0x1F50, "\u03a5\u0313", "\u03a5\u0313"},
    {0x1F52, "\u03a5\u0313\u0300", "\u03a5\u0313\u0300"},
    {0x1F54, "\u03a5\u0313\u0301", "\u03a5\u0313\u0301"},
    {0x1F56, "\u03a5\u0313\u0342", "\u03a5\u0313\u0342"},
    {0x1F80, "\u1f08\u0399", "\u1f88"},
    {0x1F81, "\u1f09\u0399", "\u1f89"},
    {0x1F82, "\u1f0a\u0399", "\u1f8a"},
    {0x1F83, "\u1f0b\u0399", "\u1f8b"},
    {0x1F84, "\u1f0c\u0399", "\u1f8c"},
    {0x1F85, "\u1f0d\u0399", "\u1f8d"},
    {0x1F86, "\u1f0e\u0399", "\u1f8e"},
    {0x1F87, "\u1f0f\u0399", "\u1f8f"},
    {0x1F88, "\u1f08\u0399", "\u1f88"},
    {0x1F89, "\u1f09\u0399", "\u1f89"},
    {0x1F8A, "\u1f0a\u0399", "\u1f8a"},
    {0x1F8B, "\u1f0b\u0399", "\u1f8b"},
    {0x1F8C, "\u1f0c\u0399", "\u1f8c"},
    {0x1F8D, "\u1f0d\u0399", "\u1f8d"},
    {0x1F8E, "\u1f0e\u0399", "\u1f8e"},
    {0x1F8F, "\u1f0f\u0399", "\u1f8f"},
    {0x1F90, "\u1f28\u0399", "\u1f98"},
    {0x1F91, "\u1f29\u0399", "\u1f99"},
    {0x1F92, "\u1f2a\u0399", "\u1f9a"},
    {0x1F93, "\u1f2b\u0399", "\u1f9b"},
    {0x1F94, "\u1f2c\u0399", "\u1f9c"},
    {0x1F95, "\u1f2d\u0399", "\u1f9d"},
    {0x1F96, "\u1f2e\u0399", "\u1f9e"},
    {0x1F97, "\u1f2f\u0399", "\u1f9f"},
    {0x1F98, "\u1f28\u0399", "\u1f98"},
    {0x1F99, "\u1f29\u0399", "\u1f99"},
    {0x1F9A, "\u1f2a\u0399", "\u1f9a"},
    {0x1F9B, "\u1f2b\u0399", "\u1f9b"},
    {0x1F9C, "\u1f2c\u0399", "\u1f9c"},
    {0x1F9D, "\u1f2d\u0399", "\u1f9d"},
    {0x1F9E, "\u1f2e\u0399", "\u1f9e"},
    {0x1F9F, "\u1f2f\u0399", "\u1f9f"},
    {0x1FA0, "\u1f68\u0399", "\u1fa8"},
    {0x1FA1, "\u1f69\u0399", "\u1fa9"},
    {0x1FA2, "\u1f6a\u0399", "\u1faa"},
    {0x1FA3, "\u1f6b\u0399", "\u1fab"},
    {0x1FA4, "\u1f6c\u0399", "\u1fac"},
    {0x1FA5, "\u1f6d\u0399", "\u1fad"},
    {0x1FA6, "\u1f6e\u0399", "\u1fae"},
    {0x1FA7, "\u1f6f\u0399", "\u1faf"},
    {0x1FA8, "\u1f68\u0399", "\u1fa8"},
    {0x1FA9, "\u1f69\u0399", "\u1fa9"},
    {0x1FAA, "\u1f6a\u0399", "\u1faa"},
    {0x1FAB, "\u1f6b\u0399", "\u1fab"},
    {0x1FAC, "\u1f6c\u0399", "\u1fac"},
    {0x1FAD, "\u1f6d\u0399", "\u1fad"},
    {0x1FAE, "\u1f6e\u0399", "\u1fae"},
    {0x1FAF, "\u1f6f\u0399", "\u1faf"},
    {0x1FB2, "\u1fba\u0399", "\u1fba\u0345"},
    {0x1FB3, "\u0391\u0399", "\u1fbc"},
    {0x1FB4, "\u0386\u0399", "\u0386\u0345"},
    {0x1FB6, "\u0391\u0342", "\u0391\u0342"},
    {0x1FB7, "\u0391\u0342\u0399", "\u0391\u0342\u0345"},
    {0x1FBC, "\u0391\u0399", "\u1fbc"},
    {0x1FC2, "\u1fca\u0399", "\u1fca\u0345"},
    {0x1FC3, "\u0397\u0399", "\u1fcc"},
    {0x1FC4, "\u0389\u0399", "\u0389\u0345"},
    {0x1FC6, "\u0397\u0342", "\u0397\u0342"},
    {0x1FC7, "\u0397\u0342\u0399", "\u0397\u0342\u0345"},
    {0x1FCC, "\u0397\u0399", "\u1fcc"},
    {0x1FD2, "\u0399\u0308\u0300", "\u0399\u0308\u0300"},
    {0x1FD3, "\u0399\u0308\u0301", "\u0399\u0308\u0301"},
    {0x1FD6, "\u0399\u0342", "\u0399\u0342"},
    {0x1FD7, "\u0399\u0308\u0342", "\u0399\u0308\u0342"},
    {0x1FE2, "\u03a5\u0308\u0300", "\u03a5\u0308\u0300"},
    {0x1FE3, "\u03a5\u0308\u0301", "\u03a5\u0308\u0301"},
    {0x1FE4, "\u03a1\u0313", "\u03a1\u0313"},
    {0x1FE6, "\u03a5\u0342", "\u03a5\u0342"},
    {0x1FE7, "\u03a5\u0308\u0342", "\u03a5\u0308\u0342"},
    {0x1FF2, "\u1ffa\u0399", "\u1ffa\u0345"},
    {0x1FF3, "\u03a9\u0399", "\u1ffc"},
    {0x1FF4, "\u038f\u0399", "\u038f\u0345"},
    {0x1FF6, "\u03a9\u0342", "\u03a9\u0342"},
    {0x1FF7, "\u03a9\u0342\u0399", "\u03a9\u0342\u0345"},
    {0x1FFC, "\u03a9\u0399", "\u1ffc"},
    {0xFB00, "FF", "Ff"},
    {0xFB01, "FI", "Fi"},
    {0xFB02, "FL", "Fl"},
    {0xFB03, "FFI", "Ffi"},
    {0xFB04, "FFL", "Ffl"},
    {0xFB05, "ST", "St"},
    {0xFB06, "ST", "St"},
    {0xFB13, "\u0544\u0546", "\u0544\u0576"},
    {0xFB14, "\u0544\u0535", "\u0544\u0565"},
    {0xFB15, "\u0544\u053b", "\u0544\u056b"},
    {0xFB16, "\u054e\u0546", "\u054e\u0576"},
    {0xFB17, "\u0544\u053d", "\u0544\u056d"},
};

const FullCase* full_case(char32_t c) {
  if (c < 0xDF) return nullptr;
  auto it = std::lower_bound(std::begin(kFullCase), std::end(kFullCase), c,
                             [](const FullCase& f, char32_t x) { return f.cp < x; });
  return it != std::end(kFullCase) && it->cp == c ? it : nullptr;
}

int category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

bool case_ignorable(char32_t c) {
  int k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK || c == '\'' || c == '.' ||
         c == ':' || c == 0xB7 || c == 0x2019;
}

void append_upper(std::string& out, char32_t c) {
  if (const FullCase* f = full_case(c)) {
    out += f->upper;
  } else {
    utf8_append(out, utf8proc_toupper(c));
  }
}

void append_title(std::string& out, char32_t c) {
  if (const FullCase* f = full_case(c)) {
    out += f->title;
  } else {
    utf8_append(out, utf8proc_totitle(c));
  }
}

// Lowercase of cps[k]: 'İ' becomes 'i̇', and a capital sigma ending a word 'ς'.
void append_lower(std::string& out, const std::vector<char32_t>& cps, size_t k) {
  char32_t c = cps[k];
  if (c == 0x130) {
    out += "i\u0307";
    return;
  }
  if (c == 0x3A3) {
    size_t j = k;
    while (j > 0 && case_ignorable(cps[j - 1])) --j;
    bool after_cased = j > 0 && is_cased(cps[j - 1]);
    j = k + 1;
    while (j < cps.size() && case_ignorable(cps[j])) ++j;
    bool before_cased = j < cps.size() && is_cased(cps[j]);
    if (after_cased && !before_cased) {
      out += "\u03c2";
      return;
    }
  }
  utf8_append(out, utf8proc_tolower(c));
}

}  // namespace

bool is_cased(char32_t c) {
  int k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

std::string py_upper(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) append_upper(out, c);
  return out;
}

std::string py_lower(const std::string& s) {
  auto cps = utf8_decode(s);
  std::string out;
  for (size_t k = 0; k < cps.size(); ++k) append_lower(out, cps, k);
  return out;
}

std::string py_capitalize(const std::string& s) {
  auto cps = utf8_decode(s);
  std::string out;
  for (size_t k = 0; k < cps.size(); ++k) {
    if (k == 0) {
      append_title(out, cps[k]);
    } else {
      append_lower(out, cps, k);
    }
  }
  return out;
}

std::string py_title(const std::string& s) {
  auto cps = utf8_decode(s);
  std::string out;
  bool prev_cased = false;
  for (size_t k = 0; k < cps.size(); ++k) {
    if (prev_cased) {
      append_lower(out, cps, k);
    } else {
      append_title(out, cps[k]);
    }
    prev_cased = is_cased(cps[k]);
  }
  return out;
}

std::string py_swapcase(const std::string& s) {
  auto cps = utf8_decode(s);
  std::string out;
  for (size_t k = 0; k < cps.size(); ++k) {
    if (utf8proc_isupper(cps[k])) {
      append_lower(out, cps, k);
    } else if (utf8proc_islower(cps[k])) {
      append_upper(out, cps[k]);
    } else {
      utf8_append(out, cps[k]);
    }
  }
  return out;
}

}  // namespace hubzoo::jinja
