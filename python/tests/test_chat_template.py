"""Chat templates: hubzoo's C++ Jinja engine against transformers' own renderer.

Every template in data/chat_templates (model-style templates and one template per Jinja
feature) is rendered over many conversations and option sets by both
`transformers.utils.chat_template_utils.render_jinja_template` (jinja2's sandbox, as
`apply_chat_template` uses it) and `hubzoo._hubzoo.render_chat_template`; the strings
must be identical, and where transformers raises, hubzoo must raise too.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import jinja2
import pytest
from transformers.utils.chat_template_utils import render_jinja_template

import _util

DATA = Path(__file__).parent / "data" / "chat_templates"
MODEL_TEMPLATES = sorted(DATA.glob("*.jinja"))
FEATURE_TEMPLATES = sorted((DATA / "features").glob("*.jinja"))

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city — «unicode» too",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {"name": "search", "description": "Search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
}


def _call(name, args, call_id="call_1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "  Be kind.\n"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\n\n"},
        {"role": "assistant", "content": " Why did the chicken cross the road? "},
        {"role": "user", "content": "Another"},
    ],
    "unicode": [
        {"role": "user", "content": "日本語 😀👍🏽 «ß» \"quotes\" 'single' \\backslash\\ tab\there"},
        {"role": "assistant", "content": "Ответ: ok — ✓ {{ not a template }} {% raw %}"},
        {"role": "user", "content": "مرحبا नमस्ते ไทย\r\nline2"},
    ],
    "tool_calls": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("get_weather", {"city": "Paris", "unit": "celsius"})],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "22 degrees"},
        {"role": "assistant", "content": "It is 22 degrees in Paris."},
        {"role": "user", "content": "Thanks"},
    ],
    "parallel_tool_calls": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                _call("get_weather", {"city": "Paris"}, "a"),
                _call("get_weather", {"city": "Rome", "unit": "fahrenheit"}, "b"),
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "{\"temp\": 22}"},
        {"role": "tool", "tool_call_id": "b", "content": "{\"temp\": 75}"},
    ],
    "string_arguments": [
        {"role": "user", "content": "search cats"},
        {"role": "assistant", "tool_calls": [_call("search", "{\"q\": \"cats\"}")]},
        {"role": "tool", "content": "<tool_response>many cats</tool_response>"},
    ],
    "reasoning": [
        {"role": "user", "content": "Think first: 3*7?"},
        {"role": "assistant", "content": "21", "reasoning_content": "3 times 7 is 21."},
        {"role": "user", "content": "And 4*5?"},
        {"role": "assistant", "content": "<think>\n4*5=20\n</think>\n\n20"},
    ],
    "alternation_broken": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
    "assistant_first": [
        {"role": "assistant", "content": "I start."},
        {"role": "user", "content": "ok"},
    ],
}

OPTION_SETS = [
    dict(zip(("add_generation_prompt", "tools", "enable_thinking"), combo))
    for combo in itertools.product(
        (False, True), (None, [WEATHER_TOOL, SEARCH_TOOL]), ("absent", True, False)
    )
]
for o in OPTION_SETS:
    if o["enable_thinking"] == "absent":
        del o["enable_thinking"]
DOCUMENTS = [
    {"title": "Paris", "text": "Paris is the capital of France."},
    {"title": "Rome", "text": "Rome is in Italy.", "source": "wiki"},
]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

FEATURE_CONTEXT = {
    "data": {"name": "Widget", "nested": {"list": [1, 2, 3]}, "price": 9.5, "tags": ["a", "b"], "Zeta": 0},
    "nums": [3, 1, 4, 1, 5, 9, 2, 6],
    "words": ["alpha", "beta", "gamma", "delta"],
    "text": "Hello World!",
    "ws": "  \t padded text \n ",
    "num": 7,
    "people": [
        {"name": "Ann", "age": 31, "admin": True},
        {"name": "bob", "age": 25, "admin": False},
        {"name": "Cy", "age": 47},
    ],
}


def reference(source, messages, options):
    """transformers' rendering, with apply_chat_template's dropping of None-valued keys."""
    options = copy.deepcopy(options)
    conv = [{k: v for k, v in m.items() if v is not None} for m in copy.deepcopy(messages)]
    gen = options.pop("add_generation_prompt", False)
    tools = options.pop("tools", None)
    documents = options.pop("documents", None)
    out, _ = render_jinja_template(
        conversations=[conv], tools=tools, documents=documents, chat_template=source,
        add_generation_prompt=gen, **options,
    )
    return out[0]


def compare(hz, source, messages, options):
    """Returns 'same' or the error kind; fails on any difference."""
    try:
        want = reference(source, messages, options)
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError) as e:
        with pytest.raises(hz.Error) as got:
            hz._hubzoo.render_chat_template(source, json.dumps(messages), json.dumps(options))
        if type(e) is jinja2.TemplateError:  # raise_exception(): its message must come through
            assert str(e) in str(got.value)
        return "error"
    got = hz._hubzoo.render_chat_template(source, json.dumps(messages), json.dumps(options))
    assert got == want, f"render differs\n--- transformers:\n{want!r}\n--- hubzoo:\n{got!r}"
    return "same"


@pytest.mark.parametrize("path", MODEL_TEMPLATES, ids=lambda p: p.stem)
def test_model_template_parity(hz, path):
    source = path.read_text(encoding="utf-8")
    outcomes = []
    for (name, messages), options in itertools.product(CONVERSATIONS.items(), OPTION_SETS):
        outcomes.append(compare(hz, source, messages, {**SPECIAL, **options}))
    outcomes.append(compare(hz, source, CONVERSATIONS["system_user"], {**SPECIAL, "documents": DOCUMENTS}))
    # Each model template renders many conversations; an all-error run would prove nothing.
    assert outcomes.count("same") >= 20, outcomes


@pytest.mark.parametrize("path", FEATURE_TEMPLATES, ids=lambda p: p.stem)
def test_feature_template_parity(hz, path):
    source = path.read_text(encoding="utf-8")
    for messages in (CONVERSATIONS["multi_turn"], CONVERSATIONS["tool_calls"]):
        for gen in (False, True):
            opts = {**SPECIAL, **FEATURE_CONTEXT, "add_generation_prompt": gen, "tools": [WEATHER_TOOL]}
            assert compare(hz, source, messages, opts) == "same"


def test_parity_count(hz):
    """The corpus is as large as the report claims."""
    assert len(MODEL_TEMPLATES) >= 16
    assert len(FEATURE_TEMPLATES) >= 43


def test_snapshot_matches_apply_chat_template(hz, tmp_path):
    """from_snapshot on the real SmolLM2 checkpoint equals tokenizer.apply_chat_template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(_util.SMOLLM2))
    for name in ("user", "system_user", "multi_turn", "unicode"):
        messages = CONVERSATIONS[name]
        for gen in (False, True):
            want = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
            got = hz._hubzoo.render_chat_template_from_snapshot(
                str(_util.SMOLLM2), json.dumps(messages), json.dumps({"add_generation_prompt": gen})
            )
            assert got == want


def test_snapshot_config_forms(hz, tmp_path):
    """tokenizer_config.json: template list with tool_use, AddedToken dicts; chat_template.jinja wins."""
    config = {
        "bos_token": {"content": "<BOS>", "lstrip": False, "special": True},
        "eos_token": "<EOS>",
        "chat_template": [
            {"name": "default", "template": "D{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"},
            {"name": "tool_use", "template": "T{{ tools | length }}{{ bos_token }}"},
        ],
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    msgs = json.dumps([{"role": "user", "content": "x"}])
    render = hz._hubzoo.render_chat_template_from_snapshot
    assert render(str(tmp_path), msgs, "{}") == "D<BOS>x<EOS>"
    assert render(str(tmp_path), msgs, json.dumps({"tools": [WEATHER_TOOL]})) == "T1<BOS>"
    assert render(str(tmp_path), msgs, json.dumps({"eos_token": "!"})) == "D<BOS>x!"
    (tmp_path / "chat_template.jinja").write_text("J{{ messages | length }}{{ bos_token }}\n")
    assert render(str(tmp_path), msgs, "{}") == "J1<BOS>"
    with pytest.raises(hz.Error, match="no chat template"):
        render(str(tmp_path / "missing"), msgs, "{}")


@pytest.mark.parametrize(
    "source, line",
    [
        ("{% if x %}never closed", 1),
        ("line\n{{ 1 + }}", 2),
        ("a\nb\n{% for %}{% endfor %}", 3),
        ("{{ x | no_such_filter }}", 1),
        ("{% endfor %}", 1),
        ("{{ 'unterminated }}", 1),
        ("\n\n\n{% set %}", 4),
        ("\n{% macro m(a=1, b) %}{% endmacro %}", 2),
        ("{% for x in y %}\n{% set loop = 1 %}{% endfor %}", 2),
        ("\n\n{% macro m(caller) %}{{ caller() }}{% endmacro %}", 3),
        ("{{ f(**kw, x) }}", 1),
        ("{{ 0x }}", 1),
        ("{% for x in y %}{% endfor %}\n{{ x is no_such_test }}", 2),
    ],
)
def test_syntax_errors(hz, source, line):
    with pytest.raises(jinja2.TemplateSyntaxError):  # jinja2 rejects it too
        render_jinja_template(conversations=[[{"role": "user", "content": "x"}]], chat_template=source)
    with pytest.raises(hz.FormatError, match=f"line {line}"):
        hz._hubzoo.render_chat_template(source, json.dumps([{"role": "user", "content": "x"}]), "{}")


@pytest.mark.parametrize(
    "source, fragment",
    [
        ("{{ raise_exception('Roles must alternate!') }}", "Roles must alternate!"),
        ("{{ missing.attr }}", "'missing' is undefined"),
        ("{{ messages[0].nope.deeper }}", "has no attribute 'nope'"),
        ("{% set l = [1] %}{{ l.append(2) }}", "unsafe"),
        ("{{ 'a' + 1 }}", "concatenate"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{% set ns = namespace() %}{% set ns._x = 1 %}", "underscore"),
        ("{{ range(1000000) | length }}", "range"),
        ("{% if x is no_such_test %}{% endif %}", "no test named 'no_such_test'"),
        ("{% include 'other.jinja' %}", "include"),  # no template loading in the sandbox
        ("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "takes not more than 1 argument"),
        ("{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}", "no keyword argument 'a'"),
        ("{% macro m() %}{% endmacro %}{% call m() %}{% endcall %}", "special caller argument"),
        ("{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}", "No caller defined"),
        ("{% for x in [1] %}{{ loop([2]) }}{% endfor %}", "'recursive' marker"),
        ("{{ cycler(1)() }}", "not callable"),
        ("{{ 'a' | upper(1) }}", "filter 'upper' takes 0 argument"),
        ("{{ '{} {0}'.format(1) }}", "field numbering"),
        ("{{ '%d' % 'x' }}", "real number is required"),
        ("{% if true %}{{ 1 | no_such_filter }}{% endif %}", "no filter named 'no_such_filter'"),
        ("{{ x | int }}", "'x' is undefined"),
    ],
)
def test_runtime_errors(hz, source, fragment):
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(Exception):  # transformers fails as well
        render_jinja_template(conversations=[msgs], chat_template=source)
    with pytest.raises(hz.Error, match=fragment.replace("(", r"\(").replace("[", r"\[")):
        hz._hubzoo.render_chat_template(source, json.dumps(msgs), "{}")


def test_bad_inputs(hz):
    render = hz._hubzoo.render_chat_template
    with pytest.raises(hz.InvalidArgument):
        render("x", "[]", "{}")  # empty conversation, as transformers
    with pytest.raises(hz.InvalidArgument):
        render("x", "not json", "{}")
    with pytest.raises(hz.InvalidArgument):
        render("x", json.dumps(["not a message"]), "{}")
