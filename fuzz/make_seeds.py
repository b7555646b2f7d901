"""Writes the seed corpora of fuzz/corpus/<target>/ (committed; rerun to refresh).

    .venv/bin/python fuzz/make_seeds.py     (the hubzoo installed in .venv by scripts/setup.sh)

Seeds are small real inputs: the tiny test models' config.json (every family) and the
prepared models' configs; tokenizer.json files of every model kind trained on the tiny
encoders' corpus (a real 3.5 MB tokenizer.json would make each run milliseconds slower);
the chat templates of python/tests/data with a conversation; request bodies; safetensors
files written here; small GGUF files written by gguf-py's GGUFWriter. Inputs with two parts join them with a NUL byte (fuzz/fuzz_util.h).
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target: str, data: bytes) -> None:
    out = CORPUS / target
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def configs() -> None:
    from hubzoo.testing import tiny_encoders, tiny_models

    for variant in tiny_models.VARIANTS:
        write("config", tiny_models.make_config(variant).to_json_string().encode())
    import transformers

    for name, (arch, fields, _kind, _specials) in tiny_encoders.ENCODERS.items():
        model_type = {"BertModel": "bert", "RobertaModel": "roberta",
                      "XLMRobertaModel": "xlm-roberta", "Qwen3ForCausalLM": "qwen3",
                      "LlamaForCausalLM": "llama"}[arch]
        config = transformers.AutoConfig.for_model(model_type, **fields, vocab_size=300)
        config.architectures = [arch]
        write("config", config.to_json_string().encode())
    for snap in ("SmolLM2-135M-Instruct", "all-MiniLM-L6-v2"):
        path = ROOT / "models" / snap / "config.json"
        if path.exists():
            write("config", path.read_bytes())


TEXTS = ["Hello, world! It's 2+2=4.", "  Ünïcödé ½ 東京 🙂\tnew\nline  ", "<s>a</s>[CLS]"]


def tokenizers() -> None:
    from hubzoo.testing import tiny_encoders

    for kind, specials in (("wordpiece", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
                           ("bytelevel", ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]),
                           ("unigram", ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]),
                           ("bytelevel_eos", ["<|endoftext|>"])):
        tok = tiny_encoders._train_tokenizer(kind, specials)
        text = json.dumps(json.loads(tok.to_str()), separators=(",", ":")).encode()
        for t in TEXTS:
            write("tokenizer", text + b"\0" + t.encode())


MESSAGES = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}],
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": {
                       "name": "get_weather", "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "content": "22C"}],
     "tools": [{"type": "function", "function": {
         "name": "get_weather", "description": "Weather",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
     "add_generation_prompt": True},
]


def templates() -> None:
    data = ROOT / "python" / "tests" / "data" / "chat_templates"
    for i, path in enumerate(sorted(data.rglob("*.jinja"))):
        messages = MESSAGES[i % len(MESSAGES)]
        write("jinja", path.read_bytes() + b"\0" + json.dumps(messages).encode())


def requests() -> None:
    bodies = [
        {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
        {"model": "m", "prompt": "Once", "temperature": 0.7, "top_p": 0.9, "seed": 3,
         "stop": ["\n", "."], "n": 2, "logprobs": 2, "stream": True,
         "stream_options": {"include_usage": True}},
        {"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": -100, "7": 3.5},
         "presence_penalty": 0.5, "frequency_penalty": -0.5, "top_k": 40, "min_p": 0.05,
         "repetition_penalty": 1.1, "ignore_eos": True, "skip_special_tokens": False,
         "stop_token_ids": [2, 3], "max_completion_tokens": 16, "return_token_ids": True},
    ]
    for b in bodies:
        write("openai", json.dumps(b).encode())


def safetensors_file(tensors: dict, metadata: dict | None = None) -> bytes:
    header, blob = {}, b""
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + n]}
        blob += bytes((i * 37) % 256 for i in range(n))
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def safetensors() -> None:
    write("safetensors", safetensors_file({"w": ("F32", [2, 3]), "b": ("BF16", [3]),
                                           "ids": ("I64", [2])}, {"format": "pt"}))
    write("safetensors", safetensors_file({"e": ("F16", [0, 4]), "s": ("U8", [])}))
    write("safetensors", safetensors_file({}))


def gguf_file(build, alignment: int | None = None, version: int = 3) -> bytes:
    """A GGUF written by gguf-py's GGUFWriter; build(writer) adds keys and tensors."""
    import tempfile

    from gguf import GGUFWriter

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.gguf"
        w = GGUFWriter(str(path), "llama")
        if alignment is not None:
            w.add_custom_alignment(alignment)
        build(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        data = path.read_bytes()
    return data[:4] + struct.pack("<I", version) + data[8:]


def gguf() -> None:
    import numpy as np
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFValueType as V
    from gguf.quants import quantize

    x = np.linspace(-1, 1, 256, dtype=np.float32)

    def every_type(w):
        for key, value, vtype in [("u8", 7, V.UINT8), ("i8", -7, V.INT8), ("u16", 700, V.UINT16),
                                  ("i16", -700, V.INT16), ("u32", 70000, V.UINT32),
                                  ("i32", -70000, V.INT32), ("f32", 0.5, V.FLOAT32),
                                  ("bool", True, V.BOOL), ("str", "h\u00e9", V.STRING),
                                  ("u64", 2**40, V.UINT64), ("i64", -(2**40), V.INT64),
                                  ("f64", 0.25, V.FLOAT64)]:
            w.add_key_value("t." + key, value, vtype)
        w.add_key_value("t.tokens", ["a", "b", "\u2581c"], V.ARRAY, sub_type=V.STRING)
        w.add_key_value("t.scores", [0.0, -1.0], V.ARRAY, sub_type=V.FLOAT32)
        w.add_key_value("t.nested", [[1, 2], [3]], V.ARRAY)
        w.add_tensor("f32", x[:8].reshape(2, 4))
        w.add_tensor("f16", x[:4].astype(np.float16))
        w.add_tensor("bf16", quantize(x[:4], Q.BF16), raw_dtype=Q.BF16)
        w.add_tensor("q8_0", quantize(x[:64].reshape(2, 32), Q.Q8_0), raw_dtype=Q.Q8_0)

    def k_quant(w):
        w.add_uint32("llama.block_count", 1)
        w.add_tensor("blk.0.ffn_up.weight", np.arange(144, dtype=np.uint8).reshape(1, 144),
                     raw_dtype=Q.Q4_K)
        w.add_tensor("blk.0.attn_q.weight", quantize(x[:64].reshape(2, 32), Q.Q4_0),
                     raw_dtype=Q.Q4_0)

    write("gguf", gguf_file(every_type))
    write("gguf", gguf_file(every_type, version=2))
    write("gguf", gguf_file(k_quant, alignment=64))
    write("gguf", gguf_file(lambda w: w.add_string("general.name", "empty")))


# Model outputs for fuzz/tool_parser_fuzz.cc: byte 0 picks the format (its value % 4:
# hermes, llama3, mistral, gemma) and the chunk size (1 + (value >> 2) % 16).
TOOL_OUTPUTS = [
    (0, 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}'
        '\n</tool_call>\n<tool_call>\n{"name": "t", "arguments": "{\\"x\\": 1}"}\n</tool_call>'),
    (0, '```json\n{\n  "name": "get_weather",\n  "arguments": {"city": "Paris"}\n}\n```'),
    (1, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; {"name": "b", '
        '"parameters": {}}'),
    (2, 'Ok [TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}, "id": "abc123def"}]'),
    (2, '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]t[CALL_ID]a1b2c3d4e[ARGS]{}'),
    (3, '<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3,'
        'tags:[<escape>a<escape>,2],o:{d:null}}<end_function_call>'),
]


def tool_outputs() -> None:
    for fmt, text in TOOL_OUTPUTS:
        for chunk in (0, 3):
            write("tool_parser", bytes([fmt + 4 * chunk]) + text.encode())


if __name__ == "__main__":
    configs()
    tokenizers()
    templates()
    requests()
    safetensors()
    gguf()
    tool_outputs()
    for d in sorted(CORPUS.iterdir()):
        print(d.name, len(list(d.iterdir())), sum(f.stat().st_size for f in d.iterdir()))
