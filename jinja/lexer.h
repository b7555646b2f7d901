// Jinja2 lexer: template source -> tokens, applying whitespace control as
// jinja2 does with trim_blocks=True and lstrip_blocks=True (transformers'
// settings): `{%-`/`-%}` strip all whitespace, `+` disables lstrip/trim, a
// block tag alone on its line is lstripped, the newline after `%}` is eaten,
// raw blocks pass through verbatim, and one trailing newline is dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hubzoo::jinja {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // Text/Name/String value, operator spelling
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws hubzoo::FormatError naming the line on malformed input.
std::vector<Token> tokenize(const std::string& source, const LexOptions& options = {});

}  // namespace hubzoo::jinja
