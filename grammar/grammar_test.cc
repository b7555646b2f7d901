#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "grammar/token_vocabulary.h"

namespace hubzoo::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> schema(const std::string& text) {
  return Grammar::from_json_schema_text(text);
}

// The GrammarError message for a schema that must be refused.
std::string refusal(const std::string& text) {
  try {
    schema(text);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(Regex, MatchesWholeStrings) {
  auto g = Grammar::from_regex("[a-c]+\\d{2,3}(x|yz)?");
  EXPECT_TRUE(g->matches("ab12"));
  EXPECT_TRUE(g->matches("c123yz"));
  EXPECT_TRUE(g->matches("a999x"));
  EXPECT_FALSE(g->matches("ab1"));
  EXPECT_FALSE(g->matches("ab1234"));
  EXPECT_FALSE(g->matches("d12"));
  EXPECT_FALSE(g->matches("a12y"));
}

TEST(Regex, UnicodeClassesAndDot) {
  auto g = Grammar::from_regex("[α-ω]{2}.[^a]");
  EXPECT_TRUE(g->matches("αβ€b"));
  EXPECT_FALSE(g->matches("αβ€a"));
  EXPECT_FALSE(g->matches("ab€b"));
  EXPECT_FALSE(g->matches("αβ\nb"));
  // Invalid UTF-8 never matches a class of code points.
  EXPECT_FALSE(
      g->matches("αβ\xFF"
                 "b"));
}

TEST(Regex, ErrorsNameTheConstruct) {
  auto err = [](const std::string& p) {
    try {
      Grammar::from_regex(p);
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err("(a)\\1").find("backreferences"), std::string::npos);
  EXPECT_NE(err("(?=a)").find("lookaround"), std::string::npos);
  EXPECT_NE(err("a\\b").find("word boundaries"), std::string::npos);
  EXPECT_NE(err("[a-").find("unterminated"), std::string::npos);
  EXPECT_NE(err("(ab").find("missing ')'"), std::string::npos);
  EXPECT_NE(err("a{5,2}").find("n < m"), std::string::npos);
  EXPECT_NE(err("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(err("a{99999}").find("repetition count"), std::string::npos);
  // Exponential blow-up is bounded by the automaton's size.
  EXPECT_NE(err("((a{1000}){1000}){1000}").find("automaton states"), std::string::npos);
  EXPECT_NE(err(std::string(5000, 'a')).find("limit is 4096"), std::string::npos);
  // Deep group nesting is an error, not a stack overflow.
  EXPECT_NE(err(std::string(2000, '(') + std::string(2000, ')')).find("nested too deeply"),
            std::string::npos);
}

TEST(JsonSchema, ObjectRequiredOptionalOrder) {
  auto g = schema(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["a", "c"]})");
  EXPECT_TRUE(g->matches(R"({"a":1,"c":true})"));
  EXPECT_TRUE(g->matches(R"({"a":-12,"b":"x\"y","c":false})"));
  EXPECT_FALSE(g->matches(R"({"a":1})"));                 // c required
  EXPECT_FALSE(g->matches(R"({"c":true,"a":1})"));        // schema order
  EXPECT_FALSE(g->matches(R"({"a":01,"c":true})"));       // no leading zero
  EXPECT_FALSE(g->matches(R"({"a":1,"c":true,"d":1})"));  // additionalProperties absent: none
  EXPECT_FALSE(g->matches(R"({ "a":1,"c":true})"));       // compact: no whitespace
}

TEST(JsonSchema, AdditionalPropertiesNeverRepeatADeclaredKey) {
  auto g = schema(R"({"type": "object", "properties": {"ab": {"type": "null"}},
      "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(g->matches(R"({"ab":null,"x":1,"abc":2,"a":3})"));
  EXPECT_TRUE(g->matches(R"({"x":1})"));
  EXPECT_FALSE(g->matches(R"({"ab":null,"ab":1})"));
  EXPECT_FALSE(g->matches(R"({"x":"s"})"));
  EXPECT_FALSE(g->matches(R"({"":1})"));
}

TEST(JsonSchema, ArraysWithBounds) {
  auto g = schema(R"({"type": "array", "items": {"enum": ["a", 1, null]}, "minItems": 2,
      "maxItems": 3})");
  EXPECT_TRUE(g->matches(R"(["a",1])"));
  EXPECT_TRUE(g->matches(R"([null,null,"a"])"));
  EXPECT_FALSE(g->matches(R"(["a"])"));
  EXPECT_FALSE(g->matches(R"(["a",1,1,1])"));
  EXPECT_FALSE(g->matches(R"(["b",1])"));
  auto empty_ok = schema(R"({"type": "array", "maxItems": 1})");
  EXPECT_TRUE(empty_ok->matches("[]"));
  EXPECT_TRUE(empty_ok->matches(R"([{"k":[1,2.5e3]}])"));
  EXPECT_FALSE(empty_ok->matches("[1,2]"));
}

TEST(JsonSchema, IntegerBoundsAreExact) {
  auto g = schema(R"({"type": "integer", "minimum": -15, "exclusiveMaximum": 120})");
  for (int v = -200; v <= 300; ++v) {
    EXPECT_EQ(g->matches(std::to_string(v)), v >= -15 && v < 120) << v;
  }
  EXPECT_FALSE(g->matches("-0"));
  auto big = schema(R"({"type": "integer", "minimum": 1000})");
  EXPECT_TRUE(big->matches("123456789012345678901234"));
  EXPECT_FALSE(big->matches("999"));
}

TEST(JsonSchema, NumberBoundsAdmitOnlyValuesInside) {
  auto g = schema(R"({"type": "number", "minimum": -2.5, "maximum": 3})");
  for (const char* ok : {"-2", "0", "3", "2.999", "-1.5", "0.25"})
    EXPECT_TRUE(g->matches(ok)) << ok;
  for (const char* bad : {"-3", "4", "3.5", "-2.7", "1e5"}) EXPECT_FALSE(g->matches(bad)) << bad;
  auto narrow = schema(R"({"type": "number", "exclusiveMinimum": 0.1, "exclusiveMaximum": 0.2})");
  EXPECT_TRUE(narrow->matches("0.15000000000000002") || narrow->matches("0.15"));
}

TEST(JsonSchema, StringsLengthPatternFormat) {
  auto g = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(g->matches(R"("ab")"));
  EXPECT_TRUE(g->matches(R"("a\nb")"));  // an escape is one character
  EXPECT_TRUE(g->matches("\"\xC3\xA9\xC3\xA9\""));
  EXPECT_FALSE(g->matches(R"("a")"));
  EXPECT_FALSE(g->matches(R"("abcd")"));
  auto p = schema(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d+$"})");
  EXPECT_TRUE(p->matches(R"("AB-12")"));
  EXPECT_FALSE(p->matches(R"("Ab-12")"));
  auto quote = schema(R"({"type": "string", "pattern": "a\"b"})");
  EXPECT_TRUE(quote->matches(R"("a\"b")"));
  EXPECT_FALSE(quote->matches(R"("a"b")"));
  auto date = schema(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(date->matches(R"("2024-02-28")"));
  EXPECT_FALSE(date->matches(R"("2024-02-30")"));
  EXPECT_FALSE(date->matches(R"("2024-13-01")"));
  auto uuid = schema(R"({"format": "uuid"})");
  EXPECT_TRUE(uuid->matches(R"("123e4567-e89b-12d3-a456-426614174000")"));
  auto dt = schema(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(dt->matches(R"("2020-01-31T23:59:59.123+02:00")"));
  EXPECT_TRUE(schema(R"({"format": "email"})")->matches(R"("a.b@c-d.org")"));
}

TEST(JsonSchema, RecursiveRefsAnyOfConstTypeArrays) {
  auto g = schema(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": ["integer", "null"]}, "kids": {"type": "array",
      "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}})");
  EXPECT_TRUE(g->matches(R"({"v":1,"kids":[{"v":null},{"v":2,"kids":[]}]})"));
  EXPECT_FALSE(g->matches(R"({"kids":[]})"));
  // The stack bound ends recursion: 64 open calls, never unbounded.
  std::string deep = R"({"v":1,"kids":[)";
  std::string text;
  for (int i = 0; i < 100; ++i) text += deep;
  text += R"({"v":1})";
  for (int i = 0; i < 100; ++i) text += "]}";
  EXPECT_FALSE(g->matches(text));
  auto any = schema(R"({"anyOf": [{"const": "x"}, {"type": "integer"}], "title": "t"})");
  EXPECT_TRUE(any->matches(R"("x")"));
  EXPECT_TRUE(any->matches("7"));
  EXPECT_FALSE(any->matches(R"("y")"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_NE(refusal(R"({"type": "string", "contentEncoding": "base64"})").find("'contentEncoding'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type": "array", "uniqueItems": true})").find("uniqueItems"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type": "number", "multipleOf": 2})").find("'multipleOf'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"properties": {"a": {"not": {}}}})").find("#/properties/a"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "#/nowhere"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "http://x/y.json"})").find("only local"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "strin"})").find("unknown type"), std::string::npos);
  EXPECT_NE(refusal(R"({"format": "hostnam"})").find("unsupported format"), std::string::npos);
  EXPECT_NE(refusal("{").find("invalid json schema"), std::string::npos);
}

TEST(JsonSchema, HostileSizesAreBounded) {
  // Deep nesting past the schema depth limit.
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}";
  for (int i = 0; i < 40; ++i) deep += "}";
  EXPECT_NE(refusal(deep).find("nest deeper"), std::string::npos);
  // A huge enum.
  Json big = {{"enum", Json::array()}};
  for (int i = 0; i < 5000; ++i) big["enum"].push_back(i);
  EXPECT_THROW(Grammar::from_json_schema(big), GrammarError);
  // maxLength beyond the repeat bound.
  EXPECT_NE(refusal(R"({"type": "string", "maxLength": 100000})").find("limit is 1000"),
            std::string::npos);
  // Self-reference without progress terminates (call depth bound).
  auto loop = schema(R"({"$ref": "#/$defs/a", "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"},
      {"type": "null"}]}}})");
  EXPECT_TRUE(loop->matches("null"));
  // A reference that never ends: no value at all is an error, not a dead end at run time.
  EXPECT_NE(refusal(R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})")
                .find("allows no value"),
            std::string::npos);
  // A branch that never ends is cut: the other one still works, and no token leads into it.
  auto branch = schema(R"({"anyOf": [{"$ref": "#/$defs/a"}, {"const": 1}],
      "$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}}})");
  EXPECT_TRUE(branch->matches("1"));
  GrammarMatcher m(branch, TokenVocabulary::from_bytes({"[", "1"}), {});
  EXPECT_FALSE(m.is_allowed(0));
  EXPECT_TRUE(m.is_allowed(1));
}

// A tiny vocabulary: every single byte of a JSON text and a few longer tokens.
std::shared_ptr<const TokenVocabulary> tiny_vocab() {
  std::vector<std::optional<std::string>> v;
  for (const char* t :
       {"{", "}", "\"", "a", ":", "1", "12", "{\"a\":", "\"a\"", ",", "true", "x", " ", "}}"}) {
    v.emplace_back(t);
  }
  v.emplace_back(std::nullopt);  // 14: a special token (EOS)
  return TokenVocabulary::from_bytes(std::move(v));
}

TEST(Matcher, MaskFollowsTheGrammarAndEndsOnlyWhenComplete) {
  auto g = schema(R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["a"]})");
  GrammarMatcher m(g, tiny_vocab(), {14});
  auto allowed = [&] {
    std::vector<int64_t> ids;
    for (int64_t id = 0; id < 15; ++id) {
      if (m.is_allowed(id)) ids.push_back(id);
    }
    return ids;
  };
  EXPECT_EQ(allowed(), (std::vector<int64_t>{0, 7}));  // "{" and "{\"a\":"
  EXPECT_TRUE(m.accept(7));
  EXPECT_EQ(allowed(), (std::vector<int64_t>{5, 6}));  // digits
  EXPECT_FALSE(m.accept(12));                          // " " refused, state kept
  EXPECT_TRUE(m.accept(6));
  EXPECT_EQ(allowed(), (std::vector<int64_t>{1, 5, 6}));
  EXPECT_TRUE(m.accept(1));
  EXPECT_TRUE(m.is_accepting());
  EXPECT_TRUE(m.is_complete());
  EXPECT_EQ(allowed(), (std::vector<int64_t>{14}));
  std::vector<float> logits(20, 1.0f);
  EXPECT_EQ(m.mask_logits(logits.data(), 20), 1);
  EXPECT_EQ(logits[14], 1.0f);
  EXPECT_TRUE(std::isinf(logits[0]) && std::isinf(logits[19]));
  EXPECT_TRUE(m.accept(14));
  EXPECT_TRUE(m.ended());
}

TEST(Matcher, CachedMasksEqualFreshOnes) {
  auto g = schema(R"({"type": "array", "items": {"type": "string"}})");
  auto vocab = tiny_vocab();
  GrammarMatcher m(g, vocab, {14});
  for (const char* step : {"[", "\"", "a", "x", "a"}) {
    ASSERT_TRUE(m.accept_bytes(step));
    GrammarMatcher fresh(g, vocab, {14});
    (void)fresh;
    const auto mask = m.allowed_bitmask();
    EXPECT_EQ(mask.size(), 1u);
  }
  EXPECT_GT(m.stats().cache_hits, 0);
}

TEST(TokenVocabulary, DecodesByteLevelAndMetaspace) {
  EXPECT_EQ(token_string_bytes("\xC4\xA0"
                               "a",
                               VocabKind::kByteLevel),
            " a");                                                         // "Ġa"
  EXPECT_EQ(token_string_bytes("\xC4\x8A", VocabKind::kByteLevel), "\n");  // "Ċ"
  EXPECT_EQ(token_string_bytes("\xC3\xA2\xC4\xA2", VocabKind::kByteLevel), "\xE2\x80");
  EXPECT_EQ(token_string_bytes("<tool call>", VocabKind::kByteLevel), "<tool call>");
  EXPECT_EQ(token_string_bytes("\xE2\x96\x81hi", VocabKind::kMetaspace), " hi");
  EXPECT_EQ(token_string_bytes("<0x0A>", VocabKind::kMetaspace), "\n");
}

TEST(Choice, ExactlyOneOfTheStrings) {
  auto g = Grammar::from_choices({"yes", "no", "maybe so"});
  EXPECT_TRUE(g->matches("maybe so"));
  EXPECT_FALSE(g->matches("ye"));
  EXPECT_THROW(Grammar::from_choices({}), GrammarError);
}

}  // namespace
}  // namespace hubzoo::grammar
