// jinja/: a Jinja2-compatible template engine, its own component. It
// renders Hugging Face chat templates as transformers does (jinja2's
// ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks), and knows
// nothing of tokenizers: tokenizer/chat_template.* sits on top of it.
// It depends on base/ only (plus utf8proc and nlohmann/json); keep it so.
//   lexer.h    source -> tokens, whitespace control
//   parser.h   tokens -> syntax tree (Body)
//   eval.h     Template: compile once, render many (this header is the entry)
//   value.h    Values with Python semantics; from_json/to_json
//   builtins.h internal: operators, attribute access, str/dict/list methods,
//              %-formatting and str.format, filters, tests, globals
//
// A compiled Jinja2 template and its sandboxed renderer. Rendering follows
// jinja2's ImmutableSandboxedEnvironment as transformers configures it: no
// mutating methods, no template loading, default Undefined semantics, and
// the globals raise_exception, strftime_now, namespace, dict, range,
// cycler and joiner.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/value.h"

namespace hubzoo::jinja {

// Bounds that keep a hostile template from running away; each breach throws
// LimitError naming the bound.
// The defaults fit any chat template we know with room to spare: rendering
// a long conversation takes milliseconds and a few MiB (sandbox.h says how
// each bound is counted).
struct RenderLimits {
  int max_call_depth = 200;                 // nested macro / caller() / loop() calls
  int64_t max_loop_iterations = 1'000'000;  // all for-loop iterations together, and range() size
  size_t max_output_bytes = 64u << 20;      // any rendered string, including block sets
  size_t max_value_bytes = 64u << 20;       // strings, lists and dict entries the render holds
  int max_value_depth = 256;                // lists/dicts/namespaces nested in a printed,
                                            // compared or serialised value
  double max_cpu_seconds = 5;               // CPU time of one render
};

class Template {
 public:
  // Lexes and parses; throws hubzoo::FormatError (with the line) if malformed,
  // including an unknown filter name (jinja2 rejects those at compile time).
  explicit Template(const std::string& source, const LexOptions& lex = {},
                    const ParseOptions& parse = {});

  // `context` maps variable names to values (a Dict). Throws TemplateError
  // (or a subclass) when the template fails while rendering.
  std::string render(const Value& context, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

// Filter and test names the engine knows (for the compile-time check).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

}  // namespace hubzoo::jinja
