// UTF-8 and Unicode helpers for the tokenizer pipeline: code point iteration,
// the character classes Rust's `char` methods define (HF tokenizers is Rust),
// normalization forms as per-character edits, and the GPT-2 byte<->char map.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hubzoo::tok {

// One edit of NormalizedString::transform: `c` replaces one input character
// (change 0), is inserted after the previous one (change > 0), or replaces one
// input character and removes the -change characters that follow (change < 0).
struct CharChange {
  char32_t c;
  int64_t change;
};

// Decodes the code point at s[i]; sets `len` to its byte length. `s` must be valid UTF-8.
char32_t decode_utf8(std::string_view s, size_t i, size_t* len);
void append_utf8(std::string& out, char32_t c);
size_t utf8_len(char32_t c);
// Code points of a valid UTF-8 string.
std::vector<char32_t> code_points(std::string_view s);
size_t count_chars(std::string_view s);
// Throws InvalidArgument naming the byte offset when `s` is not valid UTF-8.
void validate_utf8(std::string_view s);
// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Rust char predicates (Unicode properties via utf8proc).
bool is_whitespace(char32_t c);   // White_Space
bool is_numeric(char32_t c);      // Nd | Nl | No
bool is_punctuation(char32_t c);  // P*
bool is_ascii_punctuation(char32_t c);
bool is_other(char32_t c);            // C*
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_combining_mark(char32_t c);   // Mn | Mc | Me
bool is_word_char(char32_t c);        // regex \w

// Full lowercase mapping of one character (Rust char::to_lowercase).
void to_lowercase(char32_t c, std::vector<char32_t>& out);

enum class NormForm { NFC, NFD, NFKC, NFKD };
// The normalization of `s` as edits over its characters.
std::vector<CharChange> normalize_changes(std::string_view s, NormForm form);

// GPT-2 byte-level alphabet: byte -> visible code point and back (-1 if none).
char32_t byte_to_char(uint8_t b);
int char_to_byte(char32_t c);

}  // namespace hubzoo::tok
