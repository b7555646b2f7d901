// Unit tests of the Jinja engine's pieces: lexer, parser, values, evaluator,
// errors and sandbox limits. Parity with jinja2 itself is in
// python/tests/test_chat_template.py.
#include <gtest/gtest.h>

#include "base/error.h"
#include "tokenizer/jinja_eval.h"

namespace hubzoo::jinja {
namespace {

std::string render(const std::string& src,
                   const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                   const RenderLimits& limits = {}) {
  return Template(src).render(from_json(ctx), limits);
}

TEST(JinjaLexer, TokensAndStrings) {
  auto toks = tokenize("a{{ x.y + 'q\\n\\u00e9' }}b");
  ASSERT_EQ(toks.size(), 10u);
  EXPECT_EQ(toks[0].type, Tok::Text);
  EXPECT_EQ(toks[1].type, Tok::VarBegin);
  EXPECT_EQ(toks[2].text, "x");
  EXPECT_EQ(toks[3].text, ".");
  EXPECT_EQ(toks[5].text, "+");
  EXPECT_EQ(toks[6].type, Tok::String);
  EXPECT_EQ(toks[6].text, "q\n\xc3\xa9");
  EXPECT_EQ(toks[7].type, Tok::VarEnd);
  EXPECT_EQ(toks[8].type, Tok::Text);
}

TEST(JinjaLexer, NumbersAndLines) {
  auto toks = tokenize("\n\n{{ 1_000 + 2.5e1 }}");
  EXPECT_EQ(toks[1].line, 3);
  EXPECT_EQ(toks[2].type, Tok::Int);
  EXPECT_EQ(toks[2].ival, 1000);
  EXPECT_EQ(toks[4].type, Tok::Float);
  EXPECT_DOUBLE_EQ(toks[4].fval, 25.0);
}

TEST(JinjaLexer, WhitespaceControlAsJinja2) {
  // trim_blocks eats the newline after %}, lstrip_blocks the indent before {%.
  EXPECT_EQ(render("a\n  {% if true %}\nb\n  {% endif %}\nc"), "a\nb\nc");
  EXPECT_EQ(render("a  {{- 'x' -}}  b"), "axb");
  EXPECT_EQ(render("a\n  {%+ if true %}x{% endif +%}\nb"), "a\n  x\nb");
  EXPECT_EQ(render("  {{ 'v' }}\n"),
            "  v");  // variable tags are not lstripped; trailing \n dropped
  EXPECT_EQ(render("a {# c #} b\n{# c #}\nd"), "a  b\nd");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
}

TEST(JinjaParser, MalformedTemplatesNameTheLine) {
  auto line_of = [](const std::string& src) -> std::string {
    try {
      Template t(src);
    } catch (const FormatError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(line_of("{% if x %}").find("line 1"), std::string::npos);
  EXPECT_NE(line_of("\n\n{{ 1 + }}").find("line 3"), std::string::npos);
  EXPECT_NE(line_of("{% frobnicate %}").find("unknown tag 'frobnicate'"), std::string::npos);
  EXPECT_NE(line_of("{{ x | nope }}").find("no filter named 'nope'"), std::string::npos);
  EXPECT_NE(line_of("{% for x in y %}{% endif %}").find("line 1"), std::string::npos);
  EXPECT_NE(line_of("{{ 'abc }}").find("unterminated"), std::string::npos);
  EXPECT_NE(line_of("{% break %}").find("outside of a loop"), std::string::npos);
  EXPECT_NE(line_of("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}")
                .find("nested too deeply"),
            std::string::npos);
}

TEST(JinjaParser, Precedence) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }}"), "7");
  EXPECT_EQ(render("{{ -2 ** 2 }}"), "4");  // jinja2: unary minus binds tighter than **
  EXPECT_EQ(render("{{ 'a' ~ 2 * 3 }}"), "a6");
  EXPECT_THROW(render("{{ 'a' ~ 1 + 2 }}"), TemplateError);  // ~ binds tighter than +, as jinja2
  EXPECT_EQ(render("{{ not 1 == 2 }}"), "True");
  EXPECT_EQ(render("{{ 1 if false else 2 if true else 3 }}"), "2");
  EXPECT_EQ(render("{{ [1, 2, 3] | length > 2 and 'x' in 'xy' }}"), "True");
}

TEST(JinjaValue, PythonPrinting) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(123456.5), "123456.5");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
  EXPECT_EQ(string_repr("it's"), "\"it's\"");
  EXPECT_EQ(string_repr("a\nb"), "'a\\nb'");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, {'k': (1,)}] }}"),
            "[1, 'a', None, True, 1.5, {'k': (1,)}]");
}

TEST(JinjaValue, JsonKeepsKeyOrderAndPythonFormat) {
  auto v = from_json(nlohmann::ordered_json::parse(R"({"z": 1, "a": [1.5, null, "é"]})"));
  EXPECT_EQ(to_json(v, {}), "{\"z\": 1, \"a\": [1.5, null, \"é\"]}");
  JsonStyle indented;
  indented.has_indent = true;
  indented.indent = "  ";
  indented.item_sep = ",";
  EXPECT_EQ(to_json(v, indented),
            "{\n  \"z\": 1,\n  \"a\": [\n    1.5,\n    null,\n    \"é\"\n  ]\n}");
  JsonStyle ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(to_json(Value::string("é\x01"), ascii), "\"\\u00e9\\u0001\"");
}

TEST(JinjaEval, LoopsScopesAndNamespaces) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ x }}{{ loop.last }} {% endfor %}"),
            "1aFalse 2bFalse 3cTrue ");
  EXPECT_EQ(render("{% set x = 0 %}{% for i in range(3) %}{% set x = i %}{% endfor %}{{ x }}"),
            "0");
  EXPECT_EQ(render("{% set ns = namespace(x=0) %}{% for i in range(3) %}{% set ns.x = i %}{% "
                   "endfor %}{{ ns.x }}"),
            "2");
  EXPECT_EQ(render("{% for i in range(10) if i is even %}{% if i > 5 %}{% break %}{% endif %}{{ i "
                   "}}{% endfor %}"),
            "024");
  EXPECT_EQ(render("{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}",
                   {{"d", {{"b", 2}, {"a", 1}}}}),
            "a1b2");
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a + b }}{% endmacro %}{{ m(1) }}{{ m(1, b=5) }}"),
            "36");
  EXPECT_EQ(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"),
            "[in]");
  EXPECT_EQ(render("{% filter upper %}ab{% endfilter %}"), "AB");
}

TEST(JinjaEval, UndefinedSemantics) {
  EXPECT_EQ(
      render(
          "[{{ nope }}]{{ nope is defined }}{{ nope | length }}{% for x in nope %}x{% endfor %}"),
      "[]False0");
  EXPECT_EQ(render("{{ d.missing is defined }}{{ d.missing | default('z') }}",
                   {{"d", nlohmann::ordered_json::object()}}),
            "Falsez");
  EXPECT_THROW(render("{{ nope.attr }}"), TemplateError);
  EXPECT_THROW(render("{{ nope + 1 }}"), TemplateError);
}

TEST(JinjaEval, SandboxRefusesMutation) {
  EXPECT_THROW(render("{% set l = [] %}{{ l.append(1) }}"), SecurityError);
  EXPECT_THROW(render("{% set d = {} %}{{ d.update({'a': 1}) }}"), SecurityError);
  EXPECT_EQ(render("{{ [].append is defined }}"), "False");
}

TEST(JinjaEval, RaiseExceptionCarriesMessage) {
  try {
    render("\n{{ raise_exception('roles must alternate') }}");
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("roles must alternate"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos);
  }
}

TEST(JinjaEval, TypeErrorsAreErrorsNotCrashes) {
  EXPECT_THROW(render("{{ 'a' + 1 }}"), TemplateError);
  EXPECT_THROW(render("{{ 1 // 0 }}"), TemplateError);
  EXPECT_THROW(render("{{ 5 is divisibleby 0 }}"), TemplateError);
  EXPECT_THROW(render("{{ 9223372036854775807 + 1 }}"), TemplateError);
  EXPECT_THROW(render("{{ 'x'() }}"), TemplateError);
  EXPECT_THROW(render("{{ x is nosuchtest }}"), TemplateError);
  EXPECT_THROW(render("{% for a, b in [1] %}{% endfor %}"), TemplateError);
}

TEST(JinjaLimits, RecursionBound) {
  RenderLimits limits;
  limits.max_call_depth = 50;
  EXPECT_THROW(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, limits),
               LimitError);
  EXPECT_EQ(render("{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{% else %}{{ n }}{% endif %}{% "
                   "endmacro %}{{ f(0) }}",
                   {}, limits),
            "40");
}

TEST(JinjaLimits, LoopBound) {
  RenderLimits limits;
  limits.max_loop_iterations = 1000;
  EXPECT_THROW(render("{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}",
                      {}, limits),
               LimitError);
  EXPECT_THROW(render("{{ range(5000) | length }}", {}, limits), LimitError);
  EXPECT_EQ(render("{% for i in range(30) %}{% for j in range(30) %}{% endfor %}{% endfor %}ok", {},
                   limits),
            "ok");
}

TEST(JinjaLimits, OutputBound) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  EXPECT_THROW(render("{% for i in range(200) %}0123456789{% endfor %}", {}, limits), LimitError);
  EXPECT_THROW(render("{{ 'ab' * 100000 }}", {}, limits), LimitError);
  EXPECT_THROW(
      render("{% set s %}{% for i in range(200) %}0123456789{% endfor %}{% endset %}", {}, limits),
      LimitError);
  EXPECT_EQ(render("{% for i in range(50) %}0123456789{% endfor %}", {}, limits).size(), 500u);
}

}  // namespace
}  // namespace hubzoo::jinja
