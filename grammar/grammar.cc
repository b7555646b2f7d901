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

// Rules that can end (their language is not empty), to a fixpoint: a call to a
// rule that cannot is a dead branch and is cut, so a parse never walks into a
// state it cannot finish. A root that cannot end is an error.
void Grammar::cut_unproductive_calls() {
  const std::vector<Node>& nodes = a_.nodes();
  const std::vector<Rule>& rules = a_.rules();
  std::vector<char> productive(rules.size(), 0), seen(nodes.size(), 0);
  std::vector<int32_t> stack;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (productive[r]) continue;
      std::fill(seen.begin(), seen.end(), 0);
      stack.assign(1, rules[r].start);
      seen[rules[r].start] = 1;
      while (!stack.empty() && !productive[r]) {
        const int32_t v = stack.back();
        stack.pop_back();
        if (v == rules[r].end) productive[r] = 1;
        const Node& n = nodes[v];
        auto visit = [&](int32_t t) {
          if (!seen[t]) seen[t] = 1, stack.push_back(t);
        };
        for (int32_t t : n.eps) visit(t);
        for (const ByteEdge& e : n.bytes) visit(e.to);
        if (n.call_rule >= 0 && productive[n.call_rule]) visit(n.call_ret);
      }
      changed = changed || productive[r];
    }
  }
  if (!productive[a_.root()]) {
    throw GrammarError("the schema allows no value (a reference that never ends?)");
  }
  a_.cut_calls([&](int32_t rule) { return !productive[rule]; });
}

Grammar::Grammar(Automaton a) : a_(std::move(a)) {
  cut_unproductive_calls();
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

std::shared_ptr<const Grammar> Grammar::from_framed_json_schema(
    const nlohmann::ordered_json& schema, const JsonFraming& framing, const GrammarLimits& limits) {
  Automaton a(limits);
  compile_framed_json_schema_into(a, schema, framing);
  return std::make_shared<const Grammar>(std::move(a));
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
