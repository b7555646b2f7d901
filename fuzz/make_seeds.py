"""Writes the seed corpora of fuzz/corpus/<target>/ (committed; rerun to refresh).

    .venv/bin/python fuzz/make_seeds.py     (the hubzoo installed in .venv by scripts/setup.sh)

Seeds are small real inputs: the tiny test models' config.json (every family) and the
prepared models' configs; tokenizer.json files of every model kind trained on the tiny
encoders' corpus (a real 3.5 MB tokenizer.json would make each run milliseconds slower);
the chat templates of python/tests/data with a conversation; request bodies; safetensors
files written here. Inputs with two parts join them with a NUL byte (fuzz/fuzz_util.h).
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


if __name__ == "__main__":
    configs()
    tokenizers()
    templates()
    requests()
    safetensors()
    for d in sorted(CORPUS.iterdir()):
        print(d.name, len(list(d.iterdir())), sum(f.stat().st_size for f in d.iterdir()))
