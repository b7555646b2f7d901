// tool_choice 'required' and named functions enforced while sampling: the
// answer is constrained (grammar/grammar.h) to calls in the served format,
// each naming one of the candidate tools and carrying arguments valid against
// that tool's `parameters`, as vLLM and OpenAI's strict mode do.
//
// A call is compact JSON, {"<name_key>":"name","<args_key>":{..}}, framed as
// the format writes it:
//   Hermes   <tool_call>\n{..}\n</tool_call>, calls separated by "\n"
//   Llama 3  {..}, one call
//   Mistral  [TOOL_CALLS][{..},{..}]
// Several calls only where the requirement allows them (parallel_tool_calls
// and tool_choice 'required'). FunctionGemma's calls are not JSON: its
// requirement is refused (a 400) rather than left unenforced.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/token_vocabulary.h"
#include "server/tools.h"

namespace hubzoo::server {

// The schema of one call object: anyOf over the candidates, each
// {"type":"object","properties":{name_key:{"const":name},args_key:params},
// "required":[name_key,args_key]} (a tool without parameters takes only {}).
nlohmann::ordered_json tool_call_schema(const ToolCallRequirement& r);
// How the format frames the call objects.
grammar::JsonFraming tool_call_framing(const ToolCallRequirement& r);

class GrammarToolCallConstraint : public ToolCallConstraint {
 public:
  // `vocabulary`: token bytes in which the format's markers are text (null:
  // the scheduler's, where the markers are ordinary tokens).
  explicit GrammarToolCallConstraint(std::shared_ptr<const grammar::TokenVocabulary> vocabulary)
      : vocabulary_(std::move(vocabulary)) {}
  // Throws ApiError 400 (param "tools") naming the tool whose parameters the
  // grammar engine cannot compile, or (param "tool_choice") for a format
  // without JSON calls or a request that also sets response_format.
  void apply(const ToolCallRequirement& r, GenerationRequest& request) const override;

 private:
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary_;
};

}  // namespace hubzoo::server
