"""Hostile inputs (issue 15): deep and special-file checkpoints through the CLI and
Python, crafted requests against a running server.

Each must be a clean error naming the problem: the CLI exits > 0 with one `error:` line
(no signal, no hang: every run has a timeout); the server answers 400 naming the field
or the depth, stays alive (/health 200 after each), and its RSS stays bounded.

Before the fixes: JSON nested 100k deep (config.json, safetensors header,
tokenizer.json Sequences, request fields) overflowed the stack (SIGSEGV);
"temperature": 1e999 was a 500; logit_bias with 100k entries took ~17 s of CPU;
a FIFO or /dev/zero as a JSON file hung or grew memory until killed.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from pathlib import Path

import pytest

import _util
from test_server import Served

DEEP = 100_000


def deep_array(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


# --- checkpoints, through the CLI and Python --------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _util.tiny_models.build("llama_linear", tmp_path_factory.mktemp("hostile") / "base")


@pytest.fixture
def model_dir(base, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(base, d)
    return d


def config_deep_extra_key(d: Path) -> str:
    text = (d / "config.json").read_text().rstrip().rstrip("}")
    (d / "config.json").write_text(text + ', "extra": ' + deep_array() + "}")
    return "config.json"


def config_one_deep_array(d: Path) -> str:
    (d / "config.json").write_text(deep_array())
    return "config.json"


def safetensors_deep_header(d: Path) -> str:
    f = d / "model.safetensors"
    data = f.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    entry = json.dumps(header[name]).replace('"shape": [', '"shape": [' + deep_array() + ", ", 1)
    rest = {k: v for k, v in header.items() if k != name}
    raw = ('{"' + name + '": ' + entry + ", " + json.dumps(rest)[1:]).encode()
    raw += b" " * (-len(raw) % 8)
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])
    return "model.safetensors"


def config_symlink_to_dev_zero(d: Path) -> str:
    (d / "config.json").unlink()
    os.symlink("/dev/zero", d / "config.json")
    return "config.json"


@pytest.mark.parametrize(
    "corrupt",
    [config_deep_extra_key, config_one_deep_array, safetensors_deep_header, config_symlink_to_dev_zero],
    ids=lambda f: f.__name__,
)
def test_hostile_checkpoint(hz, model_dir, corrupt):
    file = corrupt(model_dir)
    start = time.monotonic()
    line = _util.assert_cli_error(_util.run_cli("inspect", "-m", str(model_dir), timeout=60), file)
    assert time.monotonic() - start < 30, line
    with pytest.raises((hz.FormatError, hz.FileError)) as info:
        hz.CausalLM.from_pretrained(str(model_dir))
    assert file in str(info.value)
    if corrupt is not config_symlink_to_dev_zero:
        assert "nested deeper than the limit" in str(info.value)


def nested_sequences(levels: int) -> str:
    return '{"type": "Sequence", "normalizers": [' * levels + '{"type": "Lowercase"}' + "]}" * levels


def tokenizer_dir(tmp_path: Path, normalizer: str) -> Path:
    d = tmp_path / "tok"
    d.mkdir(parents=True)
    model = '{"type": "WordLevel", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"}'
    (d / "tokenizer.json").write_text('{"model": ' + model + ', "normalizer": ' + normalizer + "}")
    return d


def test_tokenizer_json_with_100k_nested_sequences(hz, tmp_path):
    d = tokenizer_dir(tmp_path, nested_sequences(DEEP))
    line = _util.assert_cli_error(_util.run_cli("tokenize", "-m", str(d), "a", timeout=60), "tokenizer.json")
    assert "nested deeper than the limit" in line
    with pytest.raises(hz.FormatError, match="nested deeper"):
        hz.Tokenizer.from_pretrained(str(d))


def test_tokenizer_json_sequences_past_the_builder_limit(hz, tmp_path):
    # 17 levels pass the parser's depth limit (34 < 128) and meet the builders' own.
    d = tokenizer_dir(tmp_path, nested_sequences(17))
    _util.assert_cli_error(_util.run_cli("tokenize", "-m", str(d), "a", timeout=60),
                           "tokenizer.json", "normalizer Sequences nested deeper than the limit of 16")
    ok = hz.Tokenizer.from_pretrained(str(tokenizer_dir(tmp_path / "ok", nested_sequences(16))))
    assert list(ok.encode("a").ids) == [0]


def test_fifo_tokenizer_json_does_not_hang(tmp_path):
    d = tmp_path / "fifo"
    d.mkdir()
    os.mkfifo(d / "tokenizer.json")
    # A hang is a subprocess.TimeoutExpired: the test fails.
    _util.assert_cli_error(_util.run_cli("tokenize", "-m", str(d), "a", timeout=20),
                           "tokenizer.json", "not a regular file")


def test_python_chat_template_json_is_bounded(hz):
    render = hz._hubzoo.render_chat_template
    with pytest.raises(hz.InvalidArgument, match="messages_json.*nested deeper"):
        render("{{ messages }}", deep_array())
    with pytest.raises(hz.InvalidArgument, match="options_json.*number overflow"):
        render("{{ messages }}", "[]", '{"x": 1e999}')


# --- crafted requests against a running server ------------------------------------------


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def server(hubzoo_bin, smollm2_path, tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("serve_hostile"), "--max-context", "512")
    yield s
    code = s.stop()
    assert code == 0, s.log_path.read_text()[-3000:]


def post_raw(server, path: str, body: str):
    return server.http.post(path, content=body.encode(), headers={"Content-Type": "application/json"})


def expect_400(server, body: str, *words: str, path: str = "/v1/chat/completions") -> dict:
    r = post_raw(server, path, body)
    assert r.status_code == 400, (r.status_code, r.text[:500])
    err = r.json()["error"]
    for w in words:
        assert w in err["message"] or w == err["param"], (w, err)
    assert server.proc.poll() is None, "server died"
    assert server.http.get("/health").status_code == 200
    return err


USER = '{"role": "user", "content": "hi"}'


def test_deep_json_requests_are_400(server):
    before = rss_kb(server.proc.pid)
    for _ in range(3):
        expect_400(server, '{"messages": [{"role": "user", "content": ' + deep_array() + "}]}",
                   "nested deeper than the limit of 64", "/messages/0/content/0/0")
        tool = '{"type": "function", "function": {"name": "f", "parameters": ' + deep_array() + "}}"
        expect_400(server, '{"messages": [' + USER + '], "tools": [' + tool + "]}",
                   "nested deeper", "/tools/0/function/parameters/0")
        expect_400(server, '{"messages": [' + USER + '], "stop": ' + deep_array() + "}",
                   "nested deeper", "/stop/0")
        expect_400(server, '{"prompt": ' + deep_array() + "}", "nested deeper", path="/v1/completions")
    grown_mb = (rss_kb(server.proc.pid) - before) / 1024
    assert grown_mb < 64, f"RSS grew {grown_mb:.0f} MB"


def test_out_of_range_numbers_are_400(server):
    for body, field in [
        ('{"messages": [' + USER + '], "temperature": 1e999}', "temperature"),
        ('{"messages": [' + USER + '], "top_p": -1e999}', "top_p"),
        ('{"messages": [' + USER + '], "temperature": 1e300}', "temperature"),
        ('{"messages": [' + USER + '], "max_tokens": 9223372036854775807}', "max_tokens"),
        ('{"messages": [' + USER + '], "max_tokens": 18446744073709551616}', "max_tokens"),
        ('{"messages": [' + USER + '], "seed": 2.0}', "seed"),
        ('{"messages": [' + USER + '], "logit_bias": {"5": 1e300}}', "logit_bias"),
        ('{"messages": [' + USER + '], "stop_token_ids": [-1]}', "stop_token_ids"),
        ('{"prompt": [1, 99999999], "max_tokens": 1}', "prompt"),
    ]:
        path = "/v1/completions" if body.startswith('{"prompt"') else "/v1/chat/completions"
        expect_400(server, body, field, path=path)


def test_logit_bias_with_100k_entries_is_a_fast_400(server):
    bias = "{" + ",".join(f'"{i}": 1' for i in range(100_000)) + "}"
    body = '{"messages": [' + USER + '], "logit_bias": ' + bias + "}"
    start = time.monotonic()
    err = expect_400(server, body, "logit_bias", "at most 1024 entries")
    assert time.monotonic() - start < 1.0, err


def test_oversized_arrays_are_400(server):
    before = rss_kb(server.proc.pid)
    expect_400(server, '{"messages": [' + USER + '], "stop": [' + ",".join(['"s"'] * 17) + "]}", "stop")
    expect_400(server, '{"messages": [' + USER + '], "stop": ["' + "x" * 2000 + '"]}', "stop")
    tools = ",".join(['{"type": "function", "function": {"name": "f"}}'] * 129)
    expect_400(server, '{"messages": [' + USER + '], "tools": [' + tools + "]}", "tools")
    expect_400(server, '{"messages": [' + ",".join([USER] * 2049) + "]}", "messages")
    expect_400(server, '{"prompt": [' + ",".join(['"a"'] * 65) + "]}", "prompt", path="/v1/completions")
    ids = ",".join(["1"] * 257)
    expect_400(server, '{"messages": [' + USER + '], "stop_token_ids": [' + ids + "]}", "stop_token_ids")
    grown_mb = (rss_kb(server.proc.pid) - before) / 1024
    assert grown_mb < 64, f"RSS grew {grown_mb:.0f} MB"
    # And a normal request still works.
    r = server.http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                       "max_tokens": 2})
    assert r.status_code == 200, r.text
