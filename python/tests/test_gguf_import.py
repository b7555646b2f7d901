"""GGUF metadata -> config.json, tensor map and tokenizer (models/gguf_import.h,
tokenizer/gguf_tokenizer.h) against transformers 5.23 loading the same file with
gguf_file=: AutoConfig fields, the GGUF -> HF tensor names and transforms of
load_gguf_checkpoint, and AutoTokenizer's ids and chat template.

Real files: the three GGUFs scripts/prepare_models.py links under models/gguf/.
Tiny files are written here with the `gguf` package: a llama (q/k permuted,
sentencepiece vocabulary with merges derived from scores), a qwen2 (byte-level
BPE with merges), a qwen3 (byte-level, merges derived from scores), a qwen3moe
and a gemma3 (Gemma's sentencepiece spelling of space tokens)."""

import functools
import json
import os
from pathlib import Path

import gguf
import numpy as np
import pytest

from hubzoo import Tokenizer, _hubzoo

ROOT = Path(__file__).resolve().parents[2]
REAL = {
    "smollm2": ROOT / "models" / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-coder": ROOT / "models" / "gguf" / "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
    "gemma3-270m": ROOT / "models" / "gguf" / "gemma-3-270m-Q4_K_M.gguf",
}

TEXTS = [
    "Hello world",
    " leading space and  two  spaces",
    "   ",
    "",
    "tabs\tand\nnew\nlines\r\n",
    "naïve café — Ünïcödé 中文字符 日本語 한국어 😀🚀",
    "1234567890 3.14159 1e-9 0x1F",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a != b) { printf(\"%d\\n\", a); }",
    "<|im_start|>user\nhi<|im_end|>",
    "<bos>text<eos> <start_of_turn>model",
    "<s> </s> <unk> <think>why</think>",
    "don't I'll we've THEY'RE",
    "ab abab ba aab",
]


def metadata_json(path) -> tuple[str, list[str]]:
    """The file's metadata as GgufFile::metadata() gives it (JSON text) and its tensor names."""
    reader = gguf.GGUFReader(str(path))
    meta = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # header fields, not key/value pairs
        meta[key] = field.contents()
    return json.dumps(meta, ensure_ascii=False), [t.name for t in reader.tensors]


def hf_config(path):
    from transformers import AutoConfig

    d, f = os.path.split(str(path))
    return AutoConfig.from_pretrained(d, gguf_file=f)


@functools.lru_cache(maxsize=2)
def hf_tokenizer(path):
    from transformers import AutoTokenizer

    d, f = os.path.split(str(path))
    return AutoTokenizer.from_pretrained(d, gguf_file=f)


def causal_lm_class(model_type: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]


def check_config(path):
    meta, names = metadata_json(path)
    ours = json.loads(_hubzoo.gguf_config(meta, names))
    ref = hf_config(path)
    theirs = ref.to_dict()
    assert ours["architectures"] == [causal_lm_class(theirs["model_type"])]
    for key, value in ours.items():
        if key == "architectures":
            continue
        if key == "moe_intermediate_size":
            continue  # transformers maps no key to it; checked in test_qwen3moe_expert_width
        assert key in theirs, key
        assert value == theirs[key], (key, value, theirs[key])
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                "tie_word_embeddings", "intermediate_size"):
        assert key in ours, key
    return meta, names, ours, ref


def check_tensor_map(path, meta, names, ref_config):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map)

    values = json.loads(meta)
    arch = values["general.architecture"]
    # The config dict load_gguf_checkpoint hands the processor: GGUF keys renamed
    # by GGUF_CONFIG_MAPPING (rebuilt here from the metadata already read).
    renames = GGUF_CONFIG_MAPPING[{"qwen3moe": "qwen3_moe"}.get(arch, arch)]
    parsed = {renames[k[len(arch) + 1:]]: v for k, v in values.items()
              if k.startswith(arch + ".") and renames.get(k[len(arch) + 1:])}
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=parsed)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(ref_config)
    expected = get_gguf_hf_weights_map(model, processor)
    mapped, ignored = _hubzoo.gguf_tensor_map(meta, names)
    ignored_names = {i.split(":")[0] for i in ignored}
    assert {m[0] for m in mapped} | ignored_names == set(names)
    for gguf_name, hf_name, perm, subtract_one, fused_part in mapped:
        if "_exps." in gguf_name:
            check_expert_tensor(processor, expected, gguf_name, hf_name, fused_part)
            continue
        assert expected.get(gguf_name) == hf_name, gguf_name
        # The transforms: run transformers' processor on a probe tensor.
        rows = len(perm) if perm else 4
        probe = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) + 5
        out = processor.process(weights=probe, name=gguf_name).weights
        want = probe[np.asarray(perm)] if perm else probe
        if subtract_one:
            want = want - 1
        np.testing.assert_array_equal(out, want, err_msg=gguf_name)
        assert fused_part == {"ffn_gate_exps": 0, "ffn_up_exps": 1}.get(gguf_name.split(".")[-2], -1)
    for name in ignored_names:
        assert name not in expected and name[: -len(".weight")] not in expected
    return mapped


def check_expert_tensor(processor, expected, gguf_name, hf_name, fused_part):
    """MoE experts: transformers maps `blk.N.ffn_*_exps` (no suffix) and fills its fused
    gate_up_proj [E, 2I, H] with gate rows first, then up; down_proj as it is."""
    stem = gguf_name[: -len(".weight")]
    assert expected.get(stem) == hf_name, gguf_name
    probe = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) + 1
    params = {"tensors": {}}
    processor.process(weights=probe, name=gguf_name, tensor_key_mapping=expected,
                      parsed_parameters=params)
    out = params["tensors"][hf_name].numpy()
    if fused_part < 0:
        np.testing.assert_array_equal(out, probe)
    else:
        assert out.shape == (2, 6, 4)
        np.testing.assert_array_equal(out[:, fused_part * 3:(fused_part + 1) * 3], probe)
    assert fused_part == {"ffn_gate_exps": 0, "ffn_up_exps": 1}.get(gguf_name.split(".")[-2], -1)


def hubzoo_tokenizer(meta, tmp_path):
    tok_json, cfg_json = _hubzoo.gguf_tokenizer_files(meta)
    d = tmp_path / "tok"
    d.mkdir(exist_ok=True)
    (d / "tokenizer.json").write_text(tok_json)
    (d / "tokenizer_config.json").write_text(cfg_json)
    return Tokenizer.from_pretrained(d)


def check_tokenizer(path, meta, tmp_path, texts=TEXTS):
    """Both ways hubzoo builds a GGUF's tokenizer against transformers': the written
    tokenizer.json + config, and the .gguf loaded directly (its BPE model built from
    tables, not written to JSON and parsed back)."""
    ref = hf_tokenizer(path)
    ours = hubzoo_tokenizer(meta, tmp_path)
    direct = Tokenizer.from_pretrained(path)
    for text in texts:
        for special in (True, False):
            want = ref(text, add_special_tokens=special)["input_ids"]
            assert ours.encode(text, add_special_tokens=special).ids == want, (text, special)
            assert direct.encode(text, add_special_tokens=special).ids == want, (text, special)
        ids = ref(text)["input_ids"]
        for tok in (ours, direct):
            assert tok.decode(ids) == ref.decode(ids), text
            assert tok.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    return ours, ref


# ---- real files ----

@pytest.mark.parametrize("name", sorted(REAL))
def test_real_gguf(name, tmp_path):
    path = REAL[name]
    if not path.is_file():
        pytest.fail(f"{path} missing: run scripts/prepare_models.py", pytrace=False)
    meta, names, ours, ref = check_config(path)
    check_tensor_map(path, meta, names, ref)
    tok, ref_tok = check_tokenizer(path, meta, tmp_path)
    if name == "qwen2.5-coder":
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}]
        messages = [{"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": "",
                     "tool_calls": [{"type": "function", "function": {
                         "name": "get_weather", "arguments": {"city": "Paris"}}}]},
                    {"role": "tool", "content": "sunny"}]
        for t in (None, tools):
            want = ref_tok.apply_chat_template(messages, tools=t, tokenize=False,
                                               add_generation_prompt=True)
            assert tok.apply_chat_template(messages, tools=t, add_generation_prompt=True) == want


# ---- tiny files written here ----

def write_gguf(path, arch, kv, tensors, make=None):
    """make(name, shape) -> (data, raw_dtype or None): each tensor's data (default: zeros)."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in kv.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, value)
    for name, shape in tensors:
        data, raw_dtype = make(name, shape) if make else (np.zeros(shape, dtype=np.float32), None)
        w.add_tensor(name, data, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def byte_level_vocab():
    """A byte-level vocabulary: the 256 byte symbols, some merges, control and user tokens."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ w", "o r", "l l",
              "Ġ Ġ", "ĠĠ ĠĠ", "1 2", "12 3", "d e", "de f", "Ġ (", "a b", "ab ab"]
    merged = [m.replace(" ", "") for m in merges]
    tokens = symbols + merged
    types = [1] * len(tokens)
    for special, t in (("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3),
                       ("<think>", 4), ("</think>", 4), ("<|中|>", 3)):
        tokens.append(special)
        types.append(t)
    scores = [-float(i) for i in range(len(tokens))]
    return tokens, merges, types, scores


def spm_vocab(gemma: bool):
    """A sentencepiece vocabulary: specials, byte pieces, characters and pieces with scores."""
    if gemma:
        head = [("<pad>", 3), ("<eos>", 3), ("<bos>", 3), ("<unk>", 2), ("<mask>", 4),
                ("<start_of_turn>", 3), ("<end_of_turn>", 3)]
    else:
        head = [("<unk>", 2), ("<s>", 3), ("</s>", 3), ("<think>", 4)]
    tokens = [t for t, _ in head]
    types = [t for _, t in head]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)
    pieces = ["▁", "a", "b", "e", "h", "l", "o", "r", "t", "w", "d", "n", "\n", "  ", "   ", "\t",
              "▁a", "ab", "▁ab", "abab", "he", "ll", "hell", "hello", "▁w", "or", "▁wor", "ld",
              "▁world", "▁t", "th", "the", "▁the", "1", "2", "3", "12", "123", "é", "中"]
    tokens += pieces
    types += [1] * len(pieces)
    scores = [0.0] * len(head) + [0.0] * 256 + [-float(len(p) > 1) * i / 10 - i for i, p in enumerate(pieces)]
    return tokens, types, scores


def tiny(tmp_path, arch, *, heads=4, kv_heads=2, head_dim=None, layers=2, moe=False, gemma=False,
         tokenizer="gpt2", with_merges=True, untied=True, extra=None, make=None):
    hidden = 32
    kv = {f"{arch}.context_length": 256, f"{arch}.embedding_length": hidden,
          f"{arch}.block_count": layers, f"{arch}.feed_forward_length": 64,
          f"{arch}.attention.head_count": heads, f"{arch}.attention.head_count_kv": kv_heads,
          f"{arch}.rope.freq_base": 50000.0, f"{arch}.attention.layer_norm_rms_epsilon": 1e-5}
    hd = head_dim or hidden // heads
    if head_dim is not None:
        kv[f"{arch}.attention.key_length"] = head_dim
        kv[f"{arch}.attention.value_length"] = head_dim
    if arch == "llama":
        kv["llama.rope.dimension_count"] = hd
    if moe:
        kv.update({f"{arch}.expert_count": 4, f"{arch}.expert_used_count": 2,
                   f"{arch}.expert_feed_forward_length": 768})
    if gemma:
        kv[f"{arch}.attention.sliding_window"] = 16
    if tokenizer == "gpt2":
        tokens, merges, types, scores = byte_level_vocab()
        kv.update({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
                   "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
                   "tokenizer.ggml.scores": scores,
                   "tokenizer.ggml.bos_token_id": tokens.index("<|endoftext|>"),
                   "tokenizer.ggml.eos_token_id": tokens.index("<|im_end|>"),
                   "tokenizer.ggml.padding_token_id": tokens.index("<|endoftext|>"),
                   "tokenizer.ggml.add_bos_token": False,
                   "tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n"
                                              "{{ m.content }}<|im_end|>\n{% endfor %}"})
        if with_merges:
            kv["tokenizer.ggml.merges"] = merges
    else:
        tokens, types, scores = spm_vocab(gemma)
        kv.update({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
                   "tokenizer.ggml.token_type": types, "tokenizer.ggml.scores": scores,
                   "tokenizer.ggml.bos_token_id": tokens.index("<bos>" if gemma else "<s>"),
                   "tokenizer.ggml.eos_token_id": tokens.index("<eos>" if gemma else "</s>"),
                   "tokenizer.ggml.unknown_token_id": tokens.index("<unk>")})
        if gemma:
            kv["tokenizer.ggml.padding_token_id"] = 0
    kv.update(extra or {})
    vocab = len(tokens)
    names = [("token_embd.weight", (vocab, hidden)), ("output_norm.weight", (hidden,))]
    if untied:
        names.append(("output.weight", (vocab, hidden)))
    for i in range(layers):
        b = f"blk.{i}."
        names += [(b + "attn_norm.weight", (hidden,)), (b + "attn_q.weight", (heads * hd, hidden)),
                  (b + "attn_k.weight", (kv_heads * hd, hidden)),
                  (b + "attn_v.weight", (kv_heads * hd, hidden)),
                  (b + "attn_output.weight", (hidden, heads * hd)), (b + "ffn_norm.weight", (hidden,))]
        if arch == "qwen2":
            names += [(b + n, (r,)) for n, r in (("attn_q.bias", heads * hd),
                                                  ("attn_k.bias", kv_heads * hd),
                                                  ("attn_v.bias", kv_heads * hd))]
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            names += [(b + "attn_q_norm.weight", (hd,)), (b + "attn_k_norm.weight", (hd,))]
        if gemma:
            names += [(b + "post_attention_norm.weight", (hidden,)),
                      (b + "post_ffw_norm.weight", (hidden,))]
        if moe:
            names += [(b + "ffn_gate_inp.weight", (4, hidden)),
                      (b + "ffn_gate_exps.weight", (4, 768, hidden)),
                      (b + "ffn_up_exps.weight", (4, 768, hidden)),
                      (b + "ffn_down_exps.weight", (4, hidden, 768))]
        else:
            names += [(b + "ffn_gate.weight", (64, hidden)), (b + "ffn_up.weight", (64, hidden)),
                      (b + "ffn_down.weight", (hidden, 64))]
    if arch == "llama":
        names.append(("rope_freqs.weight", (hd // 2,)))
    return write_gguf(tmp_path / f"{arch}.gguf", arch, kv, names, make)


TINY = {
    "llama": dict(arch="llama", tokenizer="llama"),
    "llama-mha-tied": dict(arch="llama", tokenizer="llama", kv_heads=4, untied=False,
                           extra={"tokenizer.ggml.add_eos_token": True}),
    "qwen2": dict(arch="qwen2"),
    "qwen3": dict(arch="qwen3", head_dim=128, with_merges=False),
    "qwen3moe": dict(arch="qwen3moe", head_dim=16, moe=True),
    "gemma2": dict(arch="gemma2", tokenizer="llama", gemma=True, head_dim=16, heads=2, kv_heads=1,
                   untied=False),
    "gemma3": dict(arch="gemma3", tokenizer="llama", gemma=True, head_dim=16, heads=2, kv_heads=1,
                   untied=False),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_gguf(name, tmp_path):
    path = tiny(tmp_path, **TINY[name])
    meta, names, ours, ref = check_config(path)
    mapped = check_tensor_map(path, meta, names, ref)
    if TINY[name]["arch"] == "llama":
        assert any(perm for _, hf, perm, _, _ in mapped if "q_proj" in hf)
    if name.startswith("gemma"):
        per_layer = 6 if name == "gemma3" else 4  # 4 norms (+ q/k norms in Gemma 3)
        assert sum(s for *_, s, _ in mapped) == 1 + 2 * per_layer  # + output_norm
    check_tokenizer(path, meta, tmp_path)


def test_qwen3moe_expert_width(tmp_path):
    meta, names = metadata_json(tiny(tmp_path, arch="qwen3moe", head_dim=16, moe=True,
                                     extra={"qwen3moe.expert_feed_forward_length": 96}))
    assert json.loads(_hubzoo.gguf_config(meta, names))["moe_intermediate_size"] == 96


def test_chat_template_from_metadata(tmp_path):
    path = tiny(tmp_path, arch="qwen2")
    meta, _ = metadata_json(path)
    ref = hf_tokenizer(path)
    ours = hubzoo_tokenizer(meta, tmp_path)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(messages) == ref.apply_chat_template(messages, tokenize=False)


# ---- bad metadata: ConfigError naming the key ----

def base_meta():
    return {"general.architecture": "llama", "llama.embedding_length": 32, "llama.block_count": 2,
            "llama.feed_forward_length": 64, "llama.attention.head_count": 4,
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"]}


@pytest.mark.parametrize("change,fragment", [
    ({"general.architecture": "mamba"}, "'mamba' is not supported (supported: llama, qwen2"),
    ({"llama.block_count": None}, "missing required key 'llama.block_count'"),
    ({"llama.block_count": 10**15}, "'llama.block_count'"),
    ({"llama.embedding_length": -1}, "'llama.embedding_length'"),
    ({"llama.attention.head_count": "4"}, "'llama.attention.head_count' must be an integer"),
    ({"llama.attention.head_count_kv": 3}, "is not a multiple of 'llama.attention.head_count_kv'"),
    ({"llama.attention.layer_norm_rms_epsilon": -1.0}, "'llama.attention.layer_norm_rms_epsilon'"),
    ({"llama.rope.dimension_count": 1 << 40}, "'llama.rope.dimension_count'"),
    ({"tokenizer.ggml.eos_token_id": 7}, "'tokenizer.ggml.eos_token_id'"),
])
def test_bad_config_metadata(change, fragment):
    meta = base_meta()
    for k, v in change.items():
        if v is None:
            meta.pop(k)
        else:
            meta[k] = v
    with pytest.raises(_hubzoo.ConfigError, match=None) as e:
        _hubzoo.gguf_config(json.dumps(meta), [])
    assert fragment in str(e.value)


@pytest.mark.parametrize("change,fragment", [
    ({"tokenizer.ggml.model": "bert"}, "'bert' is not supported (supported: gpt2, llama)"),
    ({"tokenizer.ggml.tokens": None}, "'tokenizer.ggml.tokens' is missing"),
    ({"tokenizer.ggml.tokens": [1, 2]}, "'tokenizer.ggml.tokens' must be an array of strings"),
    ({"tokenizer.ggml.scores": [0.0]}, "'tokenizer.ggml.scores' must be an array of 3 numbers"),
    ({"tokenizer.ggml.merges": ["a b c"]}, "'tokenizer.ggml.merges' has an entry 'a b c'"),
    ({"tokenizer.ggml.tokens": ["x" * 5000]}, "'tokenizer.ggml.tokens' has an entry of 5000 bytes"),
    ({"tokenizer.ggml.bos_token_id": 3}, "'tokenizer.ggml.bos_token_id'"),
    ({"tokenizer.chat_template": 5}, "'tokenizer.chat_template' must be a string"),
])
def test_bad_tokenizer_metadata(change, fragment):
    meta = base_meta()
    meta["tokenizer.ggml.merges"] = ["a b"]
    meta["tokenizer.ggml.tokens"] = ["a", "b", "ab"]
    meta["tokenizer.ggml.scores"] = [0.0, 0.0, 0.0]
    for k, v in change.items():
        if v is None:
            meta.pop(k)
        else:
            meta[k] = v
    with pytest.raises(_hubzoo.ConfigError) as e:
        _hubzoo.gguf_tokenizer_files(json.dumps(meta))
    assert fragment in str(e.value)
