// Structured-output fields of chat and completion requests, compiled into a
// grammar (grammar/grammar.h):
//   response_format: {"type": "text"} | {"type": "json_object"} |
//     {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
//   vLLM's extensions: structured_outputs {"json", "regex", "choice",
//     "json_object"} (current vLLM) and the older guided_json, guided_regex,
//     guided_choice.
// At most one constraint per request. An unsupported keyword, a malformed
// schema or regex, or an unsupported vLLM option is a 400 naming the field.
#pragma once

#include <memory>

#include "grammar/grammar.h"
#include "server/openai_json.h"

namespace hubzoo::server {

// The request's constraint, or kNone. Throws ApiError 400.
grammar::ConstraintSpec structured_output_spec(const Json& body);
// The compiled grammar (null when unconstrained). Throws ApiError 400 naming
// the field for a GrammarError.
std::shared_ptr<const grammar::Grammar> structured_output(const Json& body);

}  // namespace hubzoo::server
