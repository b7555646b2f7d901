"""Tool calling through `hubzoo serve` (issue 19), with the real Qwen2.5-Coder-0.5B-Instruct
GGUF (scripts/prepare_models.py) answering greedily, one server for the module:

- the official `openai` client: a tool call plain and streamed (the same call; the stream
  in OpenAI's shape: a first delta with index, id, type, name and empty arguments, then
  the arguments), a two-tool loop (calls, tool results, a final answer), tool_choice none /
  auto / required / a named function, parallel_tool_calls false; required and named choices
  enforced by a grammar where the model alone would write text or call another tool;
- conversations with tool calls rendered as transformers' apply_chat_template renders them
  (arguments given as JSON strings on the wire, as objects to the template);
- request shapes refused with a 400 naming the field;
- a LangChain agent (ChatOpenAI.bind_tools) calling a tool and answering end to end.

The parser itself (every format, streaming in any chunking, malformed and hostile output)
is tested in C++ (server/tool_parser_test.cc) and fuzzed (fuzz/tool_parser_fuzz.cc).
"""

from __future__ import annotations

import json

import openai
import pytest

import _util
from test_server import KEY, Served

QWEN = _util.REPO / "models" / "gguf" / "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"
MODEL = "qwen2.5-coder-0.5b-instruct"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK_WEATHER = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


@pytest.fixture(scope="module")
def server(hubzoo_bin, tmp_path_factory):
    if not QWEN.is_file():
        pytest.fail(f"{QWEN} missing: run scripts/prepare_models.py", pytrace=False)
    s = Served(tmp_path_factory.mktemp("tools"), "--max-concurrency", "2", "--max-context", "2048",
               "--served-model-name", MODEL, model=QWEN)
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-3000:]


@pytest.fixture(scope="module")
def client(server):
    # A 0.5B model on two shared cores: a turn can take over a minute under load.
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=600)


def chat(client, messages, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 96)
    return client.chat.completions.create(model=MODEL, messages=messages, **kw)


def test_served_format_is_detected(server):
    assert "tool calls: hermes" in server.log_path.read_text()


def test_tool_call_plain_and_streamed(client):
    r = chat(client, ASK_WEATHER, tools=[WEATHER, TIME])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_") and len(call.id) == len("call_") + 24
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    chunks = list(chat(client, ASK_WEATHER, tools=[WEATHER, TIME], stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    first = deltas[0].tool_calls[0]
    assert (first.index, first.type, first.function.name, first.function.arguments) == (0, "function",
                                                                                          "get_weather", "")
    assert first.id.startswith("call_") and first.id != call.id
    assert all(d.tool_calls[0].index == 0 and d.tool_calls[0].id is None for d in deltas[1:])
    assert "".join(d.tool_calls[0].function.arguments for d in deltas) == call.function.arguments
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def called(r):
    return [(c.function.name, json.loads(c.function.arguments)) for c in r.choices[0].message.tool_calls or []]


def after_weather_result(client):
    """The conversation after the model called get_weather and got its result."""
    r = chat(client, ASK_WEATHER, tools=[WEATHER, TIME])
    (call,) = r.choices[0].message.tool_calls
    return [*ASK_WEATHER, r.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18 degrees Celsius and sunny"}]


def test_two_tool_loop(client):
    """Two tools offered: a call, its result sent back as a tool message, the next turn.
    Qwen2.5-Coder-0.5B-Instruct (greedy) does not answer in text after a tool result: it
    calls again, get_weather and get_time in one turn (measured; the rendered
    conversation is transformers' own, test_conversation_with_calls_renders_like_transformers).
    The turn is parsed into calls of the offered tools; a last turn with tool_choice none
    is the text answer an agent ends on."""
    messages = after_weather_result(client)
    again = chat(client, messages, tools=[WEATHER, TIME])
    assert again.choices[0].finish_reason in ("tool_calls", "length")
    calls = called(again)
    assert calls[:2] == [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Paris"})], calls
    final = chat(client, messages, tools=[WEATHER, TIME], tool_choice="none", max_tokens=32)
    assert final.choices[0].message.tool_calls is None and final.choices[0].message.content


def test_tool_choice_each_way(client, server):
    auto = chat(client, ASK_WEATHER, tools=[WEATHER, TIME], tool_choice="auto")
    assert called(auto) == [("get_weather", {"city": "Paris"})]
    # none: the tools are rendered (as vLLM does), the answer is never parsed for calls.
    none = chat(client, ASK_WEATHER, tools=[WEATHER, TIME], tool_choice="none")
    assert none.usage.prompt_tokens == auto.usage.prompt_tokens
    assert none.choices[0].message.tool_calls is None and none.choices[0].finish_reason == "stop"
    assert json.loads(none.choices[0].message.content)["name"] == "get_weather"  # the call's text, as content
    required = chat(client, ASK_WEATHER, tools=[WEATHER, TIME], tool_choice="required")
    assert called(required) == [("get_weather", {"city": "Paris"})]
    named = chat(client, ASK_WEATHER, tools=[WEATHER, TIME],
                 tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert called(named) == [("get_weather", {"city": "Paris"})]
    # parallel_tool_calls: the turn after a result holds several calls (test_two_tool_loop).
    messages = after_weather_result(client)
    assert len(called(chat(client, messages, tools=[WEATHER, TIME]))) > 1
    assert len(called(chat(client, messages, tools=[WEATHER, TIME], parallel_tool_calls=False))) == 1
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, ASK_WEATHER, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
    assert e.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, ASK_WEATHER, tool_choice="required")
    assert e.value.body["param"] == "tool_choice"


UNITS = {"type": "function", "function": {
    "name": "convert_units", "description": "Convert a quantity between units.",
    "parameters": {"type": "object", "properties": {
        "value": {"type": "number"}, "from_unit": {"type": "string", "enum": ["km", "mi", "m"]},
        "to_unit": {"type": "string", "enum": ["km", "mi", "m"]}},
        "required": ["value", "from_unit", "to_unit"]}}}
GREETING = [{"role": "user", "content": "Write a haiku about the sea."}]


def test_required_and_named_choices_are_enforced(client, server):
    """tool_choice required / a named function constrain sampling (server/tool_grammar.h):
    where the model on its own writes a poem or calls another tool, the answer is a call to
    an allowed tool whose arguments validate against its parameters; streamed alike."""
    import jsonschema

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME, UNITS)}
    free = chat(client, GREETING, tools=[WEATHER, UNITS], tool_choice="auto", max_tokens=48)
    assert not free.choices[0].message.tool_calls and free.choices[0].message.content  # a poem
    one = chat(client, GREETING, tools=[WEATHER, UNITS], tool_choice="required", parallel_tool_calls=False)
    assert one.choices[0].finish_reason == "tool_calls" and one.choices[0].message.content is None
    ((name, args),) = called(one)
    assert name in ("get_weather", "convert_units")
    jsonschema.validate(args, schemas[name])
    # Parallel calls allowed, the forced 0.5B model writes call after call until max_tokens
    # (measured): every whole call is valid; the one cut off comes back as content.
    many = chat(client, GREETING, tools=[WEATHER, UNITS], tool_choice="required")
    calls = called(many)
    assert len(calls) > 1 and all(name in ("get_weather", "convert_units") for name, _ in calls), calls
    for name, args in calls:
        jsonschema.validate(args, schemas[name])
    # Asked about the weather, the model alone calls get_weather (test_tool_choice_each_way).
    named = chat(client, ASK_WEATHER, tools=[WEATHER, TIME, UNITS],
                 tool_choice={"type": "function", "function": {"name": "convert_units"}})
    ((name, args),) = called(named)
    assert name == "convert_units"
    jsonschema.validate(args, schemas["convert_units"])
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK_WEATHER, tools=[WEATHER, TIME, UNITS], temperature=0, max_tokens=96,
        tool_choice={"type": "function", "function": {"name": "convert_units"}}, stream=True)
    parts = {}
    for chunk in stream:
        deltas = chunk.choices[0].delta.tool_calls if chunk.choices else None
        for d in deltas or []:
            parts.setdefault(d.index, [None, ""])
            if d.function.name:
                parts[d.index][0] = d.function.name
            parts[d.index][1] += d.function.arguments or ""
    assert [(n, json.loads(a)) for n, a in parts.values()] == [(name, args)]


def test_enforcement_refusals_name_the_field(server):
    """A tool whose parameters the grammar engine cannot enforce (naming it), and a
    structured output beside a forced call: 400s; under 'auto' the same tool is fine."""
    odd = {"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "patternProperties": {"^x": {"type": "string"}}}}}
    body = {"model": MODEL, "messages": ASK_WEATHER, "max_tokens": 1, "tools": [WEATHER, odd]}
    r = server.http.post("/v1/chat/completions", json={**body, "tool_choice": "required"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text
    assert "'odd'" in r.json()["error"]["message"] and "patternProperties" in r.json()["error"]["message"]
    assert server.http.post("/v1/chat/completions", json={**body, "tool_choice": "auto"}).status_code == 200
    r = server.http.post("/v1/chat/completions", json={
        **body, "tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice", r.text


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
     "tools[0].function.parameters"),
    ({"tools": "x"}, "tools"),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                         "function": {"name": "f", "arguments": "{x"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "18"}]},
     "messages[1].tool_call_id"),
])
def test_bad_shapes_name_the_field(server, body, param):
    body = {"model": MODEL, "messages": ASK_WEATHER, "max_tokens": 1, **body}
    r = server.http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_conversation_with_calls_renders_like_transformers(server):
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(QWEN.parent), gguf_file=QWEN.name)
    args = {"city": "Paris", "units": ["celsius"], "note": "été"}
    wire = [{"role": "system", "content": "Be brief."}, *ASK_WEATHER,
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps(args)}},
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "21:45"}]
    ours = server.http.post("/tokenize", json={"model": MODEL, "messages": wire, "tools": [WEATHER, TIME]})
    assert ours.status_code == 200, ours.text
    as_objects = json.loads(json.dumps(wire))
    as_objects[2]["tool_calls"][0]["function"]["arguments"] = args
    as_objects[2]["tool_calls"][1]["function"]["arguments"] = {}
    text = tok.apply_chat_template(as_objects, tools=[WEATHER, TIME], tokenize=False, add_generation_prompt=True)
    assert '"arguments": {"city": "Paris"' in text and "<tool_response>\n18C" in text
    assert ours.json()["tokens"] == tok(text, add_special_tokens=False)["input_ids"]


def test_langchain_agent(server):
    """LangChain's ChatOpenAI with bind_tools drives the loop: the model's call comes back
    as AIMessage.tool_calls, LangChain runs the tool, its ToolMessage goes back, and the
    model's next turn is parsed again (this 0.5B model calls again rather than answering,
    test_two_tool_loop); the agent stops after two rounds."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    calls = []

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"It is 18 degrees Celsius and sunny in {city}."

    llm = ChatOpenAI(model=MODEL, base_url=server.url + "/v1", api_key=KEY, temperature=0, max_tokens=64,
                     max_retries=0)
    agent = llm.bind_tools([get_weather])
    messages = [HumanMessage("What is the weather like in Paris right now?")]
    for _ in range(2):
        reply = agent.invoke(messages)
        assert isinstance(reply, AIMessage)
        messages.append(reply)
        for call in reply.tool_calls:
            assert call["name"] == "get_weather" and call["id"].startswith("call_")
            messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
        if not reply.tool_calls:
            break
    assert calls[0] == "Paris" and set(calls) == {"Paris"}, calls
    assert isinstance(messages[2], ToolMessage) and "18 degrees" in messages[2].content
