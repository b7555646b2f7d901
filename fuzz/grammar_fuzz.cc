// Structured generation: compile a JSON schema (or, when the input starts
// with 'R', a regex) and run the automaton over a text.
// Input: `<schema or R+regex>\0<text>` (fuzz_util.h). A schema or regex that
// cannot be compiled ends with a GrammarError (an InvalidArgument), which is
// a clean error; anything else, a crash, a hang or unbounded memory is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "fuzz_util.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [spec, text] = hubzoo::fuzz::split_at_nul(data, size);
  hubzoo::grammar::GrammarLimits limits;
  limits.max_nodes = 20000;  // milliseconds per input
  limits.max_repeat = 64;
  try {
    auto g = !spec.empty() && spec[0] == 'R'
                 ? hubzoo::grammar::Grammar::from_regex(std::string(spec.substr(1)), limits)
                 : hubzoo::grammar::Grammar::from_json_schema_text(spec, limits);
    (void)g->matches(text);
  } catch (const hubzoo::Error&) {
  }
  return 0;
}
