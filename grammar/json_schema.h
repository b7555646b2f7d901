// JSON Schema -> automaton (grammar/automaton.h).
//
// Output policy (documented in docs/features.md):
// - Compact JSON: no whitespace anywhere, separators "," and ":" (xgrammar's
//   any_whitespace=False with separators (",", ":")).
// - Object properties come in the schema's order; required ones always,
//   optional ones may be left out. Extra properties only where
//   additionalProperties is true or a schema (absent means false, as in
//   OpenAI's strict mode and xgrammar's strict_mode); their keys are ASCII
//   without escapes and never one of the declared names.
// - Integers obey minimum/maximum/exclusive* exactly (bounds beyond +-1e18 are
//   clamped to it). Bounded numbers: an integer part in range, a fraction only
//   where the whole unit interval is in range, no exponent; a range holding no
//   such value yields its midpoint.
// - oneOf is compiled as anyOf (branches that overlap can yield a value that
//   matches several). allOf takes one subschema only.
// - Unsupported keywords are a GrammarError naming the keyword and its path.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/automaton.h"

namespace hubzoo::grammar {

// Literal text around JSON values: open + item (separator item)* + close,
// where item = item_prefix + a value matching the schema + item_suffix, and
// one item only unless `repeat`. Tool calls are written this way, e.g. Hermes
// `<tool_call>\n{..}\n</tool_call>` per call, Mistral `[TOOL_CALLS][{..},{..}]`.
struct JsonFraming {
  std::string open, item_prefix, item_suffix, separator, close;
  bool repeat = false;
};

// Compiles `schema` into `a` and sets the root rule.
void compile_json_schema_into(Automaton& a, const nlohmann::ordered_json& schema);
// The same, each value framed by `framing`.
void compile_framed_json_schema_into(Automaton& a, const nlohmann::ordered_json& schema,
                                     const JsonFraming& framing);
// Any JSON value whose top level is an object (response_format json_object).
void compile_json_object_into(Automaton& a);

}  // namespace hubzoo::grammar
