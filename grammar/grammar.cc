#include "grammar/grammar.h"

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "io/json.h"

namespace hubzoo::grammar {

namespace {
// Epsilon closures are stored per node; their total is bounded so a grammar
// with long chains of optional parts cannot take quadratic memory.
constexpr int64_t kMaxClosureEntries = int64_t{1} << 23;
}  // namespace

Grammar::Grammar(Automaton a) : a_(std::move(a)) {
  const auto& nodes = a_.nodes();
  const auto n = static_cast<int32_t>(nodes.size());
  items_begin_.assign(static_cast<size_t>(n) + 1, 0);
  std::vector<int32_t> stamp(static_cast<size_t>(n), -1), stack;
  for (int32_t s = 0; s < n; ++s) {
    items_begin_[s] = static_cast<int64_t>(items_.size());
    stack.assign(1, s);
    stamp[s] = s;
    while (!stack.empty()) {
      const int32_t v = stack.back();
      stack.pop_back();
      const Node& node = nodes[v];
      if (!node.bytes.empty() || node.call_rule >= 0 || node.ends_rule >= 0) items_.push_back(v);
      for (int32_t t : node.eps) {
        if (stamp[t] != s) stamp[t] = s, stack.push_back(t);
      }
    }
    if (static_cast<int64_t>(items_.size()) > kMaxClosureEntries) {
      throw GrammarError("the grammar is too large (epsilon closures above " +
                         std::to_string(kMaxClosureEntries) + " entries)");
    }
  }
  items_begin_[n] = static_cast<int64_t>(items_.size());
}

std::shared_ptr<const Grammar> Grammar::from_json_schema(const nlohmann::ordered_json& schema,
                                                         const GrammarLimits& limits) {
  Automaton a(limits);
  compile_json_schema_into(a, schema);
  return std::make_shared<const Grammar>(std::move(a));
}

std::shared_ptr<const Grammar> Grammar::from_json_schema_text(std::string_view text,
                                                              const GrammarLimits& limits) {
  nlohmann::ordered_json schema;
  try {
    schema = parse_ordered_json(text, "json schema", JsonLimits{64, uint64_t{16} << 20});
  } catch (const Error& e) {
    throw GrammarError(std::string("invalid json schema: ") + e.what());
  }
  return from_json_schema(schema, limits);
}

std::shared_ptr<const Grammar> Grammar::json_object(const GrammarLimits& limits) {
  Automaton a(limits);
  compile_json_object_into(a);
  return std::make_shared<const Grammar>(std::move(a));
}

std::shared_ptr<const Grammar> Grammar::from_regex(std::string_view pattern,
                                                   const GrammarLimits& limits) {
  Automaton a(limits);
  const int32_t r = a.new_rule("root");
  a.set_body(r, compile_regex(a, pattern, RegexOptions{}));
  a.set_root(r);
  return std::make_shared<const Grammar>(std::move(a));
}

std::shared_ptr<const Grammar> Grammar::from_choices(const std::vector<std::string>& choices,
                                                     const GrammarLimits& limits) {
  if (choices.empty()) throw GrammarError("choice: the list is empty");
  if (static_cast<int64_t>(choices.size()) > limits.max_enum) {
    throw GrammarError("choice: " + std::to_string(choices.size()) + " choices; the limit is " +
                       std::to_string(limits.max_enum));
  }
  Automaton a(limits);
  const int32_t r = a.new_rule("root");
  std::vector<Frag> options;
  for (const std::string& c : choices) options.push_back(a.literal(c));
  a.set_body(r, a.alt(options));
  a.set_root(r);
  return std::make_shared<const Grammar>(std::move(a));
}

std::shared_ptr<const Grammar> Grammar::from_spec(const ConstraintSpec& spec,
                                                  const GrammarLimits& limits) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::kNone:
      return nullptr;
    case ConstraintSpec::Kind::kJsonObject:
      return json_object(limits);
    case ConstraintSpec::Kind::kJsonSchema:
      return from_json_schema_text(spec.text, limits);
    case ConstraintSpec::Kind::kRegex:
      return from_regex(spec.text, limits);
    case ConstraintSpec::Kind::kChoice:
      return from_choices(spec.choices, limits);
  }
  return nullptr;
}

bool Grammar::matches(std::string_view text) const {
  // A matcher over an empty vocabulary walks bytes only.
  static const auto kNoTokens = TokenVocabulary::from_bytes({});
  GrammarMatcher m(std::shared_ptr<const Grammar>(std::shared_ptr<const Grammar>{}, this),
                   kNoTokens, {});
  return m.accept_bytes(text) && m.is_accepting();
}

}  // namespace hubzoo::grammar
