// Regular expressions (the ECMA-262 subset JSON Schema's `pattern` and vLLM's
// guided_regex use) compiled into automaton fragments.
//
// Supported: literals and escapes (\d \w \s \D \W \S, \n \r \t \f \v \0,
// \xHH, \uHHHH, \u{H...}, escaped punctuation), classes [...] with ranges and
// negation, `.` (any code point except \n and \r), groups (...), (?:...),
// (?<name>...), alternation, quantifiers * + ? {m} {m,} {m,n} (lazy forms
// match the same strings), and ^ / $ at the ends of the pattern. The match
// is always of the whole string (a pattern is anchored: what it generates
// also satisfies an unanchored search). Backreferences, lookaround, word
// boundaries and other assertions are a GrammarError naming them.
#pragma once

#include <string_view>

#include "grammar/automaton.h"

namespace hubzoo::grammar {

struct RegexOptions {
  // Emit the matched text as the inside of a JSON string: '"', '\\' and
  // control characters become their JSON escapes.
  bool json_string = false;
  // Prefix of error messages, e.g. "pattern of #/properties/x".
  std::string_view what = "regex";
};

// Throws GrammarError naming the construct and its byte offset.
Frag compile_regex(Automaton& a, std::string_view pattern, const RegexOptions& options);

// One code point (or its JSON escape when json_string) as a fragment; used for
// enum and const strings too.
Frag json_char_set(Automaton& a, const std::vector<std::pair<char32_t, char32_t>>& ranges,
                   bool json_string);

}  // namespace hubzoo::grammar
