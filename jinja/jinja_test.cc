// Unit tests of the Jinja engine's pieces: lexer, parser, values, evaluator,
// errors and sandbox limits. Parity with jinja2 itself is in
// python/tests/test_chat_template.py.
#include <gtest/gtest.h>

#include "base/error.h"
#include "jinja/eval.h"

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
  // Plain runs beside escapes, multi-byte characters (ASCII around them) and
  // invalid bytes (U+FFFD, as the whole string decodes them); expected
  // strings from Python's json.dumps.
  const Value mixed = Value::string("ab \"q\" \\ \n\t\x01 é 中文 😀 end");
  EXPECT_EQ(to_json(mixed, {}), "\"ab \\\"q\\\" \\\\ \\n\\t\\u0001 é 中文 😀 end\"");
  EXPECT_EQ(to_json(mixed, ascii),
            "\"ab \\\"q\\\" \\\\ \\n\\t\\u0001 \\u00e9 \\u4e2d\\u6587 \\ud83d\\ude00 end\"");
  EXPECT_EQ(to_json(Value::string("a\x80\x80"
                                  "b\xe2\x80"
                                  "c\xff"),
                    ascii),
            "\"a\\ufffd\\ufffdb\\ufffd\\ufffdc\\ufffd\"");
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
  EXPECT_THROW(render("{% if x is nosuchtest %}{% endif %}"), TemplateError);
  EXPECT_THROW(render("{{ x is nosuchtest }}"), FormatError);  // outside an if: at compile time
  EXPECT_THROW(render("{% for a, b in [1] %}{% endfor %}"), TemplateError);
}

// The message of the error `src` raises when compiled and rendered, or "no error".
std::string error_of(const std::string& src, const RenderLimits& limits = {}) {
  try {
    render(src, nlohmann::ordered_json::object(), limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  EXPECT_TRUE(has(error_of("a\nb\n{% for x in y %}\n{% endif %}"), "line 4"));
  EXPECT_TRUE(has(error_of("{% macro m(a=1, b) %}{% endmacro %}"), "non-default argument"));
  EXPECT_TRUE(has(error_of("{% macro m(a, a) %}{% endmacro %}"), "duplicate argument 'a'"));
  EXPECT_TRUE(has(error_of("\n{% macro m(caller) %}{{ caller() }}{% endmacro %}"), "line 2"));
  EXPECT_TRUE(has(error_of("{% for x in y %}\n{% set loop = 1 %}{% endfor %}"),
                  "line 2: can't assign to special loop variable"));
  EXPECT_TRUE(has(error_of("{{ f(a=1, a=2) }}"), "keyword argument repeated"));
  EXPECT_TRUE(has(error_of("{{ f(**d, x) }}"), "invalid argument syntax"));
  EXPECT_TRUE(has(error_of("\n\n{{ x is nope }}"), "line 3: no test named 'nope'"));
  EXPECT_TRUE(has(error_of("{% for x in y recursive %}{% break %}{% endfor %}"), "no error"));
  EXPECT_TRUE(has(error_of("{% call m() %}{% break %}{% endcall %}"), "outside of a loop"));
  EXPECT_THROW(Template("{{ 0x }}"), FormatError);
  EXPECT_THROW(Template("{{ 99999999999999999999 }}"), FormatError);
}

TEST(JinjaErrors, UnknownNamesInSoftFramesFailOnlyWhenRun) {
  // jinja2 checks filters and tests inside if statements and inline ifs at render time.
  EXPECT_EQ(render("{% if false %}{{ x | nope }}{% endif %}ok"), "ok");
  EXPECT_EQ(render("{{ (x | nope) if false else 'ok' }}"), "ok");
  EXPECT_TRUE(
      has(error_of("\n{% if true %}{{ x | nope }}{% endif %}"), "line 2: no filter named 'nope'"));
  EXPECT_THROW(Template("{% if false %}{% for i in x %}{{ i | nope }}{% endfor %}{% endif %}"),
               FormatError);  // a loop body is not a soft frame
}

TEST(JinjaErrors, UndefinedAndUncallable) {
  EXPECT_TRUE(has(error_of("{{ nope() }}"), "'nope' is undefined"));
  EXPECT_TRUE(has(error_of("{{ {}.nope() }}"), "has no attribute 'nope'"));
  EXPECT_TRUE(has(error_of("{{ 'x'.nope('a') }}"), "'str object' has no attribute 'nope'"));
  EXPECT_TRUE(has(error_of("{{ cycler(1)() }}"), "'Cycler' object is not callable"));
  EXPECT_TRUE(has(error_of("{{ (1)() }}"), "'int' object is not callable"));
  EXPECT_TRUE(has(error_of("{% for x in [1] %}{{ loop([2]) }}{% endfor %}"), "recursive"));
  EXPECT_TRUE(
      has(error_of("{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}"), "No caller defined"));
  EXPECT_THROW(render("{% set l = [] %}{{ l.append(1) }}"), SecurityError);
  // Unsafe attributes print as '' until used, as jinja2's unsafe Undefined.
  EXPECT_EQ(render("[{{ ''.__class__ }}][{{ [].pop }}]{{ [].pop is defined }}"), "[][]False");
}

TEST(JinjaErrors, MacroArgumentBinding) {
  EXPECT_TRUE(has(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
                  "takes not more than 1 argument"));
  EXPECT_TRUE(
      has(error_of("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}"), "takes no keyword argument 'b'"));
  EXPECT_TRUE(has(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}"),
                  "takes no keyword argument 'a'"));
  EXPECT_TRUE(has(error_of("{% macro m() %}{% endmacro %}{% call m() %}{% endcall %}"),
                  "two values for the special caller argument"));
  EXPECT_EQ(render("{% macro m(a, b=a * 2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}"
                   "{{ m(1) }} {{ m(1, 3, 4, k=5) }} {{ m(*[7], **{'b': 8}) }}"),
            "12(){} 13(4,){'k': 5} 78(){}");
  EXPECT_EQ(render("{% macro m() %}{{ caller(1, 2) }}{% endmacro %}"
                   "{% call(a, b=0, c=9) m() %}{{ a + b + c }}{% endcall %}"),
            "12");
  EXPECT_EQ(render("{% macro m(x) %}{% endmacro %}{{ m }} {{ m.name }} {{ m.arguments }}"),
            "<Macro 'm'> m ('x',)");
}

TEST(JinjaErrors, FilterAndTestSignatures) {
  EXPECT_TRUE(has(error_of("{{ 'a' | upper(1) }}"), "filter 'upper' takes 0 argument"));
  EXPECT_TRUE(has(error_of("{{ 'a' | replace('a') }}"), "missing required argument 'new'"));
  EXPECT_TRUE(has(error_of("{{ x | default(nope=1) }}"), "unexpected keyword argument 'nope'"));
  EXPECT_TRUE(has(error_of("{{ x | default(1, default_value=2) }}"), "multiple values"));
  EXPECT_TRUE(has(error_of("{{ 1 is odd(2) }}"), "test 'odd' takes 0 argument"));
  EXPECT_TRUE(has(error_of("{{ '%s' | format(1, a=2) }}"), "positional and keyword"));
}

TEST(JinjaErrors, RaiseExceptionSurfacesEverywhere) {
  auto message_of = [](const std::string& src) -> std::string {
    try {
      render(src);
    } catch (const TemplateError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_TRUE(has(message_of("{% macro m() %}\n{{ raise_exception('in macro') }}{% endmacro %}"
                             "{{ m() }}"),
                  "in macro"));
  EXPECT_TRUE(has(message_of("{% macro m() %}{{ caller() }}{% endmacro %}"
                             "{% call m() %}{{ raise_exception('in caller') }}{% endcall %}"),
                  "in caller"));
  EXPECT_TRUE(has(message_of("{% for x in [[1]] recursive %}{% if x is number %}"
                             "{{ raise_exception('depth ' ~ loop.depth) }}{% else %}"
                             "{{ loop(x) }}{% endif %}{% endfor %}"),
                  "depth 2"));
  EXPECT_TRUE(has(message_of("{{ raise_exception('%s/%d' % ('a', 1)) }}"), "a/1"));
}

TEST(JinjaEval, RecursiveLoopsAndLoopHelpers) {
  EXPECT_EQ(render("{% for x in [1, [2, [3]]] recursive %}{% if x is iterable %}({{ loop(x) }})"
                   "{% else %}{{ x }}@{{ loop.depth0 }}{% endif %}{% endfor %}"),
            "1@0(2@1(3@2))");
  EXPECT_EQ(render("{% for x in [[]] recursive %}[{{ loop(x) }}]{% else %}empty{% endfor %}"),
            "[empty]");
  // break/continue in a for-else leave the enclosing loop.
  EXPECT_EQ(render("{% for a in [1, 2, 3] %}{% for b in [] %}{% else %}{% if a == 2 %}{% break %}"
                   "{% endif %}{% endfor %}{{ a }}{% endfor %}"),
            "1");
  EXPECT_EQ(render("{% for x in [1, 1, 2, 1] %}{{ loop.changed(x) }} {% endfor %}"),
            "True False True True ");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop }}{{ loop.cycle(1, 2, 3) }}{% endfor %}"),
            "<LoopContext 1/2>1<LoopContext 2/2>2");
  RenderLimits limits;
  limits.max_call_depth = 20;
  EXPECT_THROW(render("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}", {}, limits),
               LimitError);
}

TEST(JinjaEval, PythonStringFormatting) {
  EXPECT_EQ(render("{{ '%-4s|%05.1f|%x' % ('ab', 3.14159, 255) }}"), "ab  |003.1|ff");
  EXPECT_EQ(render("{{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }}"), "x-2");
  EXPECT_EQ(render("{{ '{:>6.2f}|{:^5}|{:,}|{!r}'.format(3.14159, 'é', 12345, 'q') }}"),
            "  3.14|  é  |12,345|'q'");
  EXPECT_EQ(render("{{ '{0[1]}{x.a}'.format([1, 2], x={'a': 3}) }}"), "23");
  EXPECT_THROW(render("{{ '{} {0}'.format(1) }}"), TemplateError);
  EXPECT_THROW(render("{{ '%d' % 'x' }}"), TemplateError);
}

TEST(JinjaEval, StringCasingIsPythons) {
  EXPECT_EQ(render("{{ 'straße' | upper }} {{ 'ΟΔΟΣ' | lower }} {{ 'ﬁne' | capitalize }}"),
            "STRASSE οδος Fine");
}

TEST(JinjaValue, SelfContainingNamespacePrints) {
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
            "<Namespace {'me': <Namespace {...}>}>");
}

TEST(JinjaLexer, CrLfLineEndingsAsJinja2) {
  // jinja2 normalizes line endings first, so trim_blocks eats "\r\n" too.
  EXPECT_EQ(render("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n"), "a\nb\nc");
  EXPECT_EQ(render("{{ 0x1f }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }}"), "31 15 5 1000");
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
