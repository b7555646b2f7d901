"""Structured generation (grammar/): JSON schema, regex and choice constraints.

- Oracle: for the same JSON schema, tokenizer (SmolLM2's byte-level BPE and Qwen2.5's, from
  the prepared models) and prefix, hubzoo's allowed-token set equals xgrammar's (configured
  to hubzoo's whitespace policy: any_whitespace=False, separators (",", ":"), strict_mode).
  Special added tokens are never text in hubzoo; xgrammar is told so (their strings
  emptied, which is how it marks special tokens). The schemas avoid the places where the two engines' languages differ on purpose (see
  docs/features.md): length-bounded strings (xgrammar allows raw control characters and no
  escapes there), "any value" subschemas (xgrammar's use ", " inside them) and \\u escapes
  (hubzoo refuses lone surrogates).
- The official `openai` client with response_format json_schema over 220 generated schemas
  covering the keywords; every completed answer parses and validates with `jsonschema`. A tiny
  random model with SmolLM2's real tokenizer samples (the randomness exercises the grammar);
  logit_bias on EOS and on closing characters makes answers end.
- 400s naming the unsupported keyword; vLLM's structured_outputs / guided_* fields; a
  constrained request gives the same tokens alone and beside others; Python generate(...,
  json_schema=...) and the CLI's --json-schema / --regex.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import numpy as np
import pytest

import _util

QWEN_GGUF = _util.REPO / "models" / "gguf" / "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"

ORACLE_SCHEMAS = [
    ({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "ok": {"type": "boolean"}, "tag": {"enum": ["red", "green", "blue"]}, "x": {"type": "null"}},
      "required": ["name", "ok"]},
     '{"name":"Ann \\"Bo\\" Li","age":42,"ok":true,"tag":"green","x":null}'),
    ({"type": "array", "items": {"type": "integer", "exclusiveMinimum": -20, "maximum": 999},
      "minItems": 1, "maxItems": 4}, "[-19,0,512,999]"),
    ({"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                                       "c": {"const": "fixed"}},
      "required": ["v", "c"]}, '{"v":-12.5e+3,"c":"fixed"}'),
    ({"$defs": {"node": {"type": "object", "properties": {
        "id": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["id"]}}, "$ref": "#/$defs/node"}, '{"id":1,"kids":[{"id":2},{"id":3,"kids":[]}]}'),
    ({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"},
                                       "n": {"type": ["integer", "null"]}},
      "required": ["code", "n"]}, '{"code":"abc-123","n":null}'),
]


def _xgrammar_info(tokenizer):
    """xgrammar's TokenizerInfo with hubzoo's policy on special tokens: an added token
    marked special is never text (decoding skips it, so it would break the JSON); xgrammar
    treats a token as special when its string is empty, so those strings are emptied."""
    import xgrammar as xgr

    detected = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    encoded = ["" if i in special else t for i, t in enumerate(vocab)]
    return xgr.TokenizerInfo(encoded, vocab_type=detected.vocab_type, vocab_size=len(tokenizer),
                             stop_token_ids=detected.stop_token_ids,
                             add_prefix_space=detected.add_prefix_space)


@pytest.fixture(scope="module", params=["smollm2", "qwen2.5"])
def tokenizers(request, smollm2_path):
    """(hubzoo GrammarVocab, xgrammar TokenizerInfo, stop ids, vocab size) of one tokenizer."""
    import transformers

    from hubzoo import _hubzoo

    if request.param == "smollm2":
        hf = transformers.AutoTokenizer.from_pretrained(str(smollm2_path))
        ours = _hubzoo.GrammarVocab(str(smollm2_path))
    else:
        if not QWEN_GGUF.is_file():
            pytest.fail(f"{QWEN_GGUF} missing (scripts/prepare_models.py)", pytrace=False)
        hf = transformers.AutoTokenizer.from_pretrained(str(QWEN_GGUF.parent), gguf_file=QWEN_GGUF.name)
        ours = _hubzoo.GrammarVocab(str(QWEN_GGUF))
    info = _xgrammar_info(hf)
    assert ours.size() == len(hf)
    return ours, info, list(info.stop_token_ids), len(hf)


def _xgrammar_allowed(compiled, prefix: str, vocab: int) -> set[int]:
    import torch
    import xgrammar as xgr

    m = xgr.GrammarMatcher(compiled)
    assert m.accept_string(prefix), prefix
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    m.fill_next_token_bitmask(bitmask)
    bits = bitmask[0].numpy().view(np.uint32)
    ids = np.nonzero((bits[np.arange(vocab) >> 5] >> (np.arange(vocab) & 31)) & 1)[0]
    del torch
    return set(int(i) for i in ids)


# id() -> (the vocab, its tokens). The vocab is held so that its id cannot be reused by the next
# fixture's vocab once the first is freed (which once handed Qwen the SmolLM2 set).
_SURROGATES: dict[int, tuple[object, set[int]]] = {}


def _surrogate_escape_tokens(ours_vocab, vocab: int) -> set[int]:
    """Tokens that continue a backslash into a \\uD800-\\uDFFF escape."""
    import re

    key = id(ours_vocab)
    if key not in _SURROGATES or _SURROGATES[key][0] is not ours_vocab:
        pattern = re.compile(rb"u[dD][89a-fA-F]")
        tokens = {i for i in range(vocab) if pattern.match(ours_vocab.token_bytes(i))}
        _SURROGATES[key] = (ours_vocab, tokens)
    return _SURROGATES[key][1]


@pytest.mark.parametrize("case", range(len(ORACLE_SCHEMAS)))
def test_allowed_tokens_equal_xgrammars(tokenizers, case):
    import xgrammar as xgr

    from hubzoo import _hubzoo

    ours_vocab, info, stops, vocab = tokenizers
    schema, instance = ORACLE_SCHEMAS[case]
    jsonschema.validate(json.loads(instance), schema)
    compiled = xgr.GrammarCompiler(info).compile_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":"), strict_mode=True)
    grammar = _hubzoo.Grammar.from_json_schema(json.dumps(schema))
    assert grammar.matches(instance.encode())
    for cut in range(len(instance) + 1):
        prefix = instance[:cut]
        m = _hubzoo.GrammarMatcher(grammar, ours_vocab, stops)
        assert m.accept_bytes(prefix.encode())
        ours = set(m.allowed_tokens(stops))
        theirs = _xgrammar_allowed(compiled, prefix, vocab)
        if (len(prefix) - len(prefix.rstrip("\\"))) % 2 == 1:
            # After a string's backslash xgrammar also takes \uD800-\uDFFF (lone surrogates,
            # refused by hubzoo on purpose): exactly those tokens differ.
            theirs -= _surrogate_escape_tokens(ours_vocab, vocab)
        assert ours == theirs, (prefix, sorted(ours - theirs)[:10], sorted(theirs - ours)[:10])


def test_regex_and_choice_equal_xgrammars(tokenizers):
    import xgrammar as xgr

    from hubzoo import _hubzoo

    ours_vocab, info, stops, vocab = tokenizers
    compiler = xgr.GrammarCompiler(info)
    cases = [(_hubzoo.Grammar.from_regex(r"(\+1 )?\(\d{3}\) \d{3}-\d{4}"),
              compiler.compile_regex(r"(\+1 )?\(\d{3}\) \d{3}-\d{4}"), "+1 (555) 123-4567"),
             (_hubzoo.Grammar.from_choices(["yes", "no", "yes please"]),
              compiler.compile_grammar('root ::= "yes" | "no" | "yes please"'), "yes please")]
    for grammar, compiled, text in cases:
        for cut in range(len(text) + 1):
            m = _hubzoo.GrammarMatcher(grammar, ours_vocab, stops)
            assert m.accept_bytes(text[:cut].encode())
            assert set(m.allowed_tokens(stops)) == _xgrammar_allowed(compiled, text[:cut], vocab)


# ---------------------------------------------------------------- generated schemas


class SchemaGen:
    """Deterministic random JSON schemas covering the supported keywords."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.defs: dict = {}

    def scalar(self) -> dict:
        r = self.r
        kind = r.choice(["string", "str_len", "pattern", "format", "integer", "int_bounds",
                         "number", "num_bounds", "boolean", "null", "enum", "const", "types"])
        if kind == "string":
            return {"type": "string"}
        if kind == "str_len":
            lo = r.randint(0, 3)
            return {"type": "string", "minLength": lo, "maxLength": lo + r.randint(0, 6)}
        if kind == "pattern":
            return {"type": "string", "pattern": r.choice(
                ["^[a-z]{1,5}$", "^[A-Z][a-z]*-\\d{2}$", "^(ab|cd)+x?$", "^\\w+@\\w+$", "^[^\"\\\\]{0,4}$"])}
        if kind == "format":
            return {"type": "string", "format": r.choice(["date", "date-time", "uuid", "email", "time", "ipv4"])}
        if kind == "integer":
            return {"type": "integer"}
        if kind == "int_bounds":
            lo = r.randint(-500, 500)
            s = {"type": "integer", r.choice(["minimum", "exclusiveMinimum"]): lo}
            if r.random() < 0.7:
                s[r.choice(["maximum", "exclusiveMaximum"])] = lo + r.randint(2, 2000)
            return s
        if kind == "number":
            return {"type": "number"}
        if kind == "num_bounds":
            lo = round(r.uniform(-100, 100), 2)
            return {"type": "number", "minimum": lo, "exclusiveMaximum": lo + round(r.uniform(0.5, 50), 2)}
        if kind == "boolean":
            return {"type": "boolean"}
        if kind == "null":
            return {"type": "null"}
        if kind == "enum":
            return {"enum": r.sample(["a", "b c", 'q"uote', 1, 2.5, None, True, [1, 2], {"k": "v"}], r.randint(1, 4))}
        if kind == "const":
            return {"const": r.choice(["fixed", 7, False, {"x": [1]}])}
        return {"type": r.sample(["string", "integer", "boolean", "null"], 2)}

    def schema(self, depth: int) -> dict:
        r = self.r
        if depth >= 3:
            return self.scalar()
        kind = r.choice(["scalar", "scalar", "object", "object", "array", "anyOf", "oneOf", "ref"])
        if kind == "scalar":
            return self.scalar()
        if kind == "object":
            n = r.randint(0, 4)
            props = {f"p{i}_{r.randint(0, 99)}": self.schema(depth + 1) for i in range(n)}
            s = {"type": "object", "properties": props,
                 "required": [k for k in props if r.random() < 0.6]}
            extra = r.random()
            if extra < 0.2:
                s["additionalProperties"] = True
            elif extra < 0.35:
                s["additionalProperties"] = self.scalar()
            elif extra < 0.7:
                s["additionalProperties"] = False
            return s
        if kind == "array":
            lo = r.randint(0, 2)
            s = {"type": "array", "items": self.schema(depth + 1), "minItems": lo}
            if r.random() < 0.7:
                s["maxItems"] = lo + r.randint(0, 3)
            return s
        if kind == "anyOf":
            return {"anyOf": [self.schema(depth + 1) for _ in range(r.randint(1, 3))]}
        if kind == "oneOf":  # disjoint branches, so exactly one matches
            return {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "boolean"},
                              {"type": "object", "properties": {"k": self.scalar()}, "required": ["k"]}]}
        name = f"d{len(self.defs)}"
        self.defs[name] = None  # reserved before the body, which may add definitions of its own
        self.defs[name] = self.schema(depth + 1)
        return {"$ref": f"#/$defs/{name}"}

    def root(self) -> dict:
        s = self.schema(0)
        if self.r.random() < 0.15:  # a recursive definition
            self.defs["tree"] = {"type": "object", "properties": {
                "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/tree"},
                                                   "maxItems": 2}}, "required": ["v"]}
            s = {"type": "object", "properties": {"t": {"$ref": "#/$defs/tree"}, "rest": s}, "required": ["t"]}
        if self.defs:
            s = {**s, "$defs": self.defs} if "$ref" not in s else {"$ref": s["$ref"], "$defs": self.defs}
        return s


def generated_schemas(n: int) -> list[dict]:
    return [SchemaGen(seed).root() for seed in range(n)]


@pytest.fixture(scope="module")
def tiny_with_tokenizer(smollm2_path, tmp_path_factory):
    """A tiny random Llama with SmolLM2's vocabulary and tokenizer files."""
    import torch
    import transformers

    from hubzoo.testing import tiny_models

    out = tmp_path_factory.mktemp("tiny_tok")
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, vocab_size=49152,
                                      max_position_embeddings=2048, tie_word_embeddings=True,
                                      bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tiny_models.randomise_(model, 0)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (smollm2_path / name).is_file():
            shutil.copy(smollm2_path / name, out / name)
    return out


@pytest.fixture(scope="module")
def served(tiny_with_tokenizer, tmp_path_factory, hubzoo_bin):
    from test_server import Served

    s = Served(tmp_path_factory.mktemp("serve_so"), "--max-concurrency", "8", "--max-queue", "256",
               "--max-context", "1024", model=tiny_with_tokenizer)
    s.model_id = s.client().models.list().data[0].id
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-3000:]


def _bias(hz, path) -> dict[str, float]:
    tok = hz.Tokenizer.from_pretrained(str(path))
    bias = {"2": 100.0}  # EOS: taken as soon as the output is complete
    for text in ('"', "}", "]"):
        bias[str(tok.token_to_id(text))] = 6.0
    return bias


def test_openai_json_schema_over_220_generated_schemas(served, hz, tiny_with_tokenizer):
    client = served.client()
    bias = _bias(hz, tiny_with_tokenizer)
    schemas = generated_schemas(220)

    def run(i):
        r = client.chat.completions.create(
            model=served.model_id, messages=[{"role": "user", "content": f"item {i}"}], temperature=1.0, seed=i,
            max_tokens=300, logit_bias=bias,
            response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schemas[i],
                                                                     "strict": True}})
        return r.choices[0]

    with ThreadPoolExecutor(8) as pool:
        choices = list(pool.map(run, range(len(schemas))))
    complete = 0
    # The 2020-12 format checker: RFC 3339 times have a zone (draft 3's "time" has none).
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    for i, c in enumerate(choices):
        if c.finish_reason != "stop":
            continue
        complete += 1
        obj = json.loads(c.message.content)
        jsonschema.Draft202012Validator(schemas[i], format_checker=checker).validate(obj)
    assert complete >= 200, complete


def test_unsupported_keywords_are_400s_naming_them(served):
    import openai

    client = served.client()
    msg = [{"role": "user", "content": "hi"}]
    bad = [
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "number", "multipleOf": 3}}}}}},
         "multipleOf"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/none"}}}},
         "does not resolve"),
        ({"extra_body": {"guided_regex": "(a)\\1"}}, "backreferences"),
        ({"extra_body": {"structured_outputs": {"grammar": "root ::= x"}}}, "structured_outputs.grammar"),
        ({"extra_body": {"guided_choice": ["a"], "guided_regex": "a"}}, "Only one"),
        ({"response_format": {"type": "yaml"}}, "yaml"),
    ]
    for kw, needle in bad:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=served.model_id, messages=msg, max_tokens=4, **kw)
        assert needle in str(e.value), (kw, str(e.value))


def test_vllm_fields_and_json_object(served, hz, tiny_with_tokenizer):
    client = served.client()
    bias = _bias(hz, tiny_with_tokenizer)
    msg = [{"role": "user", "content": "pick"}]
    for body in ({"guided_choice": ["alpha", "beta gamma"]}, {"structured_outputs": {"choice": ["alpha", "beta gamma"]}}):
        r = client.chat.completions.create(model=served.model_id, messages=msg, max_tokens=20, temperature=1.0, seed=3,
                                           logit_bias=bias, extra_body=body)
        assert r.choices[0].message.content in ("alpha", "beta gamma")
    for body in ({"guided_regex": "[0-9]{3}-[a-z]{2}"}, {"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2}"}}):
        r = client.completions.create(model=served.model_id, prompt="code:", max_tokens=20, temperature=1.0, seed=4,
                                      logit_bias=bias, extra_body=body)
        text = r.choices[0].text
        assert len(text) == 6 and text[:3].isdigit() and text[3] == "-" and text[4:].isalpha(), text
    r = client.chat.completions.create(model=served.model_id, messages=msg, max_tokens=200, temperature=1.0, seed=5,
                                       logit_bias=bias, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    r = client.chat.completions.create(model=served.model_id, messages=msg, max_tokens=50, temperature=1.0, seed=6,
                                       logit_bias=bias, extra_body={"guided_json": schema})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_constrained_tokens_are_the_same_alone_and_batched(served, hz, tiny_with_tokenizer):
    client = served.client()
    bias = _bias(hz, tiny_with_tokenizer)
    schema = generated_schemas(1)[0]

    def run(i, constrained=True):
        kw = {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}} if constrained else {}
        r = client.chat.completions.create(model=served.model_id, messages=[{"role": "user", "content": f"q{i}"}],
                                           temperature=1.0, seed=11, max_tokens=120, logit_bias=bias,
                                           extra_body={"return_token_ids": True}, **kw)
        return r.choices[0].model_extra["token_ids"]

    alone = run(0)
    with ThreadPoolExecutor(6) as pool:
        batched = list(pool.map(lambda i: run(i % 2, constrained=i % 2 == 0), range(6)))
    assert batched[0] == alone and batched[2] == alone and batched[4] == alone


def test_python_generate_and_cli(hz, tiny_with_tokenizer, hubzoo_bin, tmp_path):
    model = hz.CausalLM.from_pretrained(str(tiny_with_tokenizer))
    tok = hz.Tokenizer.from_pretrained(str(tiny_with_tokenizer))
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 9},
                                               "b": {"enum": ["x", "y"]}}, "required": ["a", "b"]}
    out = model.generate(np.array([[1, 2, 3]]), max_new_tokens=30, temperature=1.0, seed=1, json_schema=schema)
    ids = [t for t in out[0].tolist() if t != 2]
    jsonschema.validate(json.loads(tok.decode(ids)), schema)
    out = model.generate(np.array([[1, 2, 3]]), max_new_tokens=10, choice=["left", "right"])
    assert tok.decode([t for t in out[0].tolist() if t != 2]) in ("left", "right")
    with pytest.raises(hz.InvalidArgument, match="uniqueItems"):
        model.generate(np.array([[1]]), json_schema={"type": "array", "uniqueItems": True})
    (tmp_path / "s.json").write_text(json.dumps(schema))
    r = subprocess.run([str(hubzoo_bin), "generate", "-m", str(tiny_with_tokenizer), "--prompt", "hi",
                        "--json-schema", str(tmp_path / "s.json"), "--max-new-tokens", "30",
                        "--temperature", "1", "--seed", "2", "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    jsonschema.validate(json.loads(json.loads(r.stdout)["text"]), schema)
    r = subprocess.run([str(hubzoo_bin), "generate", "-m", str(tiny_with_tokenizer), "--prompt", "hi",
                        "--regex", "[A-C]{4}", "--max-new-tokens", "10", "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = json.loads(r.stdout)["text"]
    assert len(text) == 4 and set(text) <= set("ABC"), text
