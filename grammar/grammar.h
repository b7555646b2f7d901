// Structured generation: what a request's output must match, compiled once
// into a byte-level pushdown automaton (grammar/automaton.h), and the public
// entry points to build one. A Grammar knows nothing of tokens; a
// GrammarMatcher (grammar/matcher.h) runs it against a TokenVocabulary.
//
//   auto g = grammar::Grammar::from_json_schema(schema_json_text);
//   auto vocab = grammar::TokenVocabulary::from_tokenizer(tokenizer);  // once per tokenizer
//   grammar::GrammarMatcher m(g, vocab, /*end_tokens=*/{eos_id});
//   m.mask_logits(logits, vocab_size);  ...  m.accept(token);
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/json_schema.h"

namespace hubzoo::grammar {

// What a request asks its output to match (the server's response_format and
// vLLM's guided_* / structured_outputs fields, the Python and CLI options).
struct ConstraintSpec {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice };
  Kind kind = Kind::kNone;
  std::string text;                  // kJsonSchema: the schema's JSON text; kRegex: the pattern
  std::vector<std::string> choices;  // kChoice
};

class Grammar {
 public:
  // Each throws GrammarError naming what is not supported or malformed.
  static std::shared_ptr<const Grammar> from_json_schema(const nlohmann::ordered_json& schema,
                                                         const GrammarLimits& limits = {});
  // `schema_text` is parsed with io/json's bounded parser (depth 64).
  static std::shared_ptr<const Grammar> from_json_schema_text(std::string_view schema_text,
                                                              const GrammarLimits& limits = {});
  // JSON values matching `schema` inside literal text (grammar/json_schema.h).
  static std::shared_ptr<const Grammar> from_framed_json_schema(
      const nlohmann::ordered_json& schema, const JsonFraming& framing,
      const GrammarLimits& limits = {});
  static std::shared_ptr<const Grammar> json_object(const GrammarLimits& limits = {});
  static std::shared_ptr<const Grammar> from_regex(std::string_view pattern,
                                                   const GrammarLimits& limits = {});
  // Exactly one of `choices` (1..max_enum strings), as raw text.
  static std::shared_ptr<const Grammar> from_choices(const std::vector<std::string>& choices,
                                                     const GrammarLimits& limits = {});
  // nullptr for kNone.
  static std::shared_ptr<const Grammar> from_spec(const ConstraintSpec& spec,
                                                  const GrammarLimits& limits = {});

  explicit Grammar(Automaton a);
  const Automaton& automaton() const { return a_; }
  // The nodes reachable from `node` through epsilon edges (itself included)
  // that read a byte, call a rule or end one: [first, last).
  std::pair<const int32_t*, const int32_t*> items(int32_t node) const {
    return {items_.data() + items_begin_[node], items_.data() + items_begin_[node + 1]};
  }
  size_t num_nodes() const { return a_.nodes().size(); }

  // Whether `text` is a complete match (for tests and the CLI's own check).
  bool matches(std::string_view text) const;

 private:
  void cut_unproductive_calls();

  Automaton a_;
  std::vector<int64_t> items_begin_;
  std::vector<int32_t> items_;
};

}  // namespace hubzoo::grammar
