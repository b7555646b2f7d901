// Precompiled normalizer: sentencepiece's precompiled_charsmap, with the exact
// semantics of HF tokenizers (crate spm_precompiled + normalizers/precompiled.rs),
// which are not sentencepiece's own (that one does a longest match over the
// whole string; HF looks up grapheme clusters and takes the shortest match).
//
// precompiled_charsmap = base64( [u32 LE trie_bytes] [trie: trie_bytes/4 u32 LE units]
//                                [replacements: UTF-8, each ended by NUL] )
// The trie is a Darts double array over UTF-8 bytes; a leaf holds the byte
// offset of a replacement in the blob.
#include <utf8proc.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "tokenizer/components.h"

namespace hubzoo::tok {

namespace {

int base64_value(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+') return 62;
  if (ch == '/') return 63;
  return -1;
}

// Standard alphabet with canonical padding and zero trailing bits, as the
// Rust base64 crate's BASE64_STANDARD engine decodes it. Returns an error message or "".
std::string decode_base64(std::string_view s, std::string& out) {
  if (s.size() % 4 != 0) return "length " + std::to_string(s.size()) + " is not a multiple of 4";
  size_t data = s.size();
  if (data > 0 && s[data - 1] == '=') --data;
  if (data > 0 && s[data - 1] == '=') --data;
  out.reserve(data * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < data; ++i) {
    const int v = base64_value(s[i]);
    if (v < 0) return "invalid character at byte " + std::to_string(i);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  // 2 or 4 bits left over from a padded group must be zero; 6 means a lone symbol.
  if (bits == 6 || (acc & ((1u << bits) - 1)) != 0) return "invalid last symbol";
  return "";
}

uint32_t read_u32_le(std::string_view b, size_t at) {
  return static_cast<uint32_t>(static_cast<uint8_t>(b[at])) |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 3])) << 24;
}

// Darts-clone double array unit accessors.
bool has_leaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t value(uint32_t unit) { return unit & 0x7FFFFFFFu; }
uint32_t label(uint32_t unit) { return unit & 0x800000FFu; }
size_t offset(uint32_t unit) { return size_t{unit >> 10} << ((unit & (1u << 9)) >> 6); }

class Precompiled : public Normalizer {
 public:
  Precompiled(std::vector<uint32_t> trie, std::string replacements, std::string file)
      : trie_(std::move(trie)), replacements_(std::move(replacements)), file_(std::move(file)) {}

  void normalize(NormalizedString& s) const override {
    if (trie_.empty()) return;  // empty charsmap: identity
    const std::string& text = s.get();
    std::vector<CharChange> dest;
    dest.reserve(text.size());
    bool modified = false;
    utf8proc_int32_t state = 0;
    size_t len = 0;
    for (size_t start = 0, end = 0; start < text.size(); start = end) {
      // The extended grapheme cluster text[start, end), as unicode-segmentation finds it for
      // HF. utf8proc may lag it by a Unicode version; the one rule added since (GB9c, Indic
      // conjuncts) only joins clusters of 9+ bytes, which are mapped per character anyway.
      char32_t prev = decode_utf8(text, start, &len);
      for (end = start + len; end < text.size(); end += len) {
        const char32_t c = decode_utf8(text, end, &len);
        if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                             static_cast<utf8proc_int32_t>(c), &state)) {
          break;
        }
        prev = c;
      }
      const std::string_view grapheme = std::string_view(text).substr(start, end - start);
      if (grapheme.size() < 6) {
        if (const auto norm = transform(grapheme)) {
          modified = true;
          replace(dest, count_chars(grapheme), *norm);
          continue;
        }
      }
      for (size_t i = 0; i < grapheme.size(); i += len) {
        const char32_t c = decode_utf8(grapheme, i, &len);
        if (const auto norm = transform(grapheme.substr(i, len))) {
          modified = true;
          replace(dest, 1, *norm);
        } else {
          dest.push_back({c, 0});
        }
      }
    }
    if (modified) s.transform(dest, 0);
  }

 private:
  // The replacement of the shortest trie key that prefixes `chunk` (HF takes
  // the first common-prefix result, so a whole grapheme can be replaced by
  // the replacement of its first character).
  std::optional<std::string_view> transform(std::string_view chunk) const {
    std::optional<uint32_t> first;
    size_t pos = offset(trie_[0]);
    for (char ch : chunk) {
      const auto c = static_cast<uint8_t>(ch);
      if (c == 0) break;
      pos ^= c;
      const uint32_t unit = at(pos);
      if (label(unit) != c) break;
      pos ^= offset(unit);
      // HF walks on past the first match, so a corrupt trie fails here as it does there.
      if (has_leaf(unit)) {
        const uint32_t v = value(at(pos));
        if (!first) first = v;
      }
    }
    if (!first) return std::nullopt;
    const size_t begin = *first;
    if (begin > replacements_.size() ||
        (begin < replacements_.size() &&
         (static_cast<uint8_t>(replacements_[begin]) & 0xC0) == 0x80)) {
      throw FormatError(file_ + ": precompiled_charsmap: trie value " + std::to_string(begin) +
                        " is not a character boundary in the replacement strings");
    }
    size_t end = begin;
    while (end < replacements_.size() && replacements_[end] != '\0') ++end;
    return std::string_view(replacements_).substr(begin, end - begin);
  }

  uint32_t at(size_t pos) const {
    if (pos >= trie_.size()) {
      throw FormatError(file_ + ": precompiled_charsmap: trie position " + std::to_string(pos) +
                        " is past its " + std::to_string(trie_.size()) + " units");
    }
    return trie_[pos];
  }

  // Appends `norm` as the edits replacing `old_count` characters, as HF's
  // precompiled `replace`: extra characters are insertions at the end, and a
  // shrink is charged to the last edit so far (which may be an earlier one
  // when `norm` is empty).
  static void replace(std::vector<CharChange>& dest, size_t old_count, std::string_view norm) {
    size_t new_count = 0;
    for (size_t i = 0, n = 0; i < norm.size(); i += n, ++new_count) {
      dest.push_back({decode_utf8(norm, i, &n), 0});
    }
    const auto diff = static_cast<int64_t>(new_count) - static_cast<int64_t>(old_count);
    if (diff > 0) {
      for (size_t k = 0; k < static_cast<size_t>(diff); ++k) dest[dest.size() - 1 - k].change = 1;
    } else if (diff < 0 && !dest.empty()) {
      dest.back().change += diff;
    }
  }

  std::vector<uint32_t> trie_;
  std::string replacements_;
  std::string file_;
};

}  // namespace

std::unique_ptr<Normalizer> make_precompiled(const Json& j, const Source& src) {
  const Json& field_json = field(j, "precompiled_charsmap", src);
  const std::string where = src.file + ": Precompiled normalizer: precompiled_charsmap";
  if (!field_json.is_string()) throw FormatError(where + " must be a base64 string");
  std::string blob;
  const std::string error = decode_base64(field_json.get_ref<const std::string&>(), blob);
  if (!error.empty()) throw FormatError(where + " is not valid base64: " + error);
  if (blob.empty()) return std::make_unique<Precompiled>(std::vector<uint32_t>{}, "", src.file);

  if (blob.size() < 4) {
    throw FormatError(where + " is " + std::to_string(blob.size()) +
                      " bytes, too short for its trie size");
  }
  const size_t units = read_u32_le(blob, 0) / 4;
  if (units == 0) throw FormatError(where + " has an empty trie");
  if ((blob.size() - 4) / 4 < units) {
    throw FormatError(where + " is truncated: its trie has " + std::to_string(units) +
                      " units but only " + std::to_string(blob.size() - 4) + " bytes follow");
  }
  std::vector<uint32_t> trie(units);
  for (size_t i = 0; i < units; ++i) trie[i] = read_u32_le(blob, 4 + 4 * i);
  std::string replacements = blob.substr(4 + 4 * units);
  try {
    validate_utf8(replacements);
  } catch (const InvalidArgument&) {
    throw FormatError(where + ": its replacement strings are not valid UTF-8");
  }
  return std::make_unique<Precompiled>(std::move(trie), std::move(replacements), src.file);
}

}  // namespace hubzoo::tok
