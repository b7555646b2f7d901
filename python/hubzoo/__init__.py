"""hubzoo: Hugging Face Hub models in native C++, verified against transformers.

numpy in, numpy out. Errors are typed: hubzoo.Error and its subclasses.
"""

from __future__ import annotations

import json
import os
from typing import Iterable

import numpy as np

from . import _hubzoo
from ._hubzoo import (  # noqa: F401  (re-exported)
    ConfigError,
    DownloadError,
    Error,
    FileError,
    FormatError,
    InvalidArgument,
    NetworkError,
    NotFoundError,
    TensorMappingError,
)

from .embedder import Embedder, Encoder, supported_encoders  # noqa: E402,F401  (re-exported)
from .hub import ensure as _ensure_downloaded  # noqa: E402
from .hub import pull  # noqa: E402,F401  (re-exported)
from .seq2seq import Seq2SeqLM  # noqa: E402,F401  (re-exported)
from .reranker import Reranker  # noqa: E402,F401  (re-exported)

__version__ = _hubzoo.__version__
git_commit = _hubzoo.git_commit

_DTYPES = ("float32", "bfloat16")
_MODES = ("eager", "fused", "bf16dot", "int8")


def _as_ids(input_ids, name="input_ids") -> np.ndarray:
    a = np.asarray(input_ids)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise InvalidArgument(f"{name} must be [batch, seq], got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer) and a.dtype != np.bool_:
        raise InvalidArgument(f"{name} must hold integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64)


class CausalLM:
    """A decoder-only LM loaded from a Hub snapshot directory or a cached repo id."""

    def __init__(self, model: "_hubzoo.CausalLM", dtype: str, mode: str):
        self._model = model
        self.dtype = dtype
        self.mode = mode
        info = model.info()
        self.info = info
        self.num_layers = info["num_layers"]
        self.vocab_size = info["vocab_size"]
        self.eos_token_ids = list(info["eos_token_ids"])
        self.config = json.loads(info["config"])

    @classmethod
    def from_pretrained(cls, path_or_id, dtype: str = "float32", mode: str = "fused",
                        num_threads: int = 0, gguf_file: str | None = None,
                        quantize: str | None = None) -> "CausalLM":
        """path_or_id: a snapshot folder, a repo id in the HF cache, or a .gguf file.
        gguf_file picks one .gguf of a folder (as transformers' gguf_file=); quantize
        ("q8_0", "q4_0", "q4_k", "q6_k", ..., or the mixes "q4_k_m", "q5_k_m") quantizes
        fp32/bf16/f16 weights on load, and "dequantize" makes a quantized checkpoint's
        matrices dense in the dtype (as transformers loads a GGUF); mode "int8"
        runs quantized weights with int8 activations (as llama.cpp, with a scale per 16
        columns against 32-weight blocks and per 32 against K blocks); mode "bf16dot" (dtype
        bfloat16) rounds matmul inputs to bf16 for the CPU's bf16 dot products."""
        if dtype not in _DTYPES:
            raise InvalidArgument(f"dtype {dtype!r} is not supported yet (supported: {_DTYPES})")
        if mode not in _MODES:
            raise InvalidArgument(f"mode must be one of {_MODES}, got {mode!r}")
        _ensure_downloaded(path_or_id, gguf_file)
        native = _hubzoo.CausalLM(str(path_or_id), num_threads, dtype, mode, gguf_file or "",
                                  quantize or "")
        return cls(native, dtype, mode)

    def _inputs(self, input_ids, attention_mask):
        ids = _as_ids(input_ids)
        mask = None if attention_mask is None else _as_ids(attention_mask, "attention_mask")
        return ids, mask

    def forward(self, input_ids, attention_mask=None, capture: Iterable[str] | None = None):
        """Logits float32 [batch, seq, vocab]; with capture=[names] also {name: [batch, seq, F]}.

        Padded positions (attention_mask == 0) never enter the model; their outputs are zeros.
        """
        ids, mask = self._inputs(input_ids, attention_mask)
        names = list(capture) if capture is not None else []
        logits, captured = self._model.forward(ids, mask, names, -1)
        return (logits, dict(captured)) if capture is not None else logits

    def forward_incremental(self, input_ids, prefill_len: int, attention_mask=None,
                            capture: Iterable[str] | None = None):
        """Prefill of the first prefill_len columns, then one cached decode step per column.

        With capture=[names] also {name: [batch, seq, F]}, as forward."""
        ids, mask = self._inputs(input_ids, attention_mask)
        if not 1 <= int(prefill_len) <= ids.shape[1]:
            raise InvalidArgument(f"prefill_len must be in [1, {ids.shape[1]}], got {prefill_len}")
        names = list(capture) if capture is not None else []
        logits, captured = self._model.forward(ids, mask, names, int(prefill_len))
        return (logits, dict(captured)) if capture is not None else logits

    def generate(self, input_ids, attention_mask=None, max_new_tokens: int = 32,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, ignore_eos: bool = False, json_schema=None,
                 regex: str | None = None, choice: list[str] | None = None,
                 json_object: bool = False, kv_cache_bytes: int = 0) -> np.ndarray:
        """New tokens int64 [batch, steps] (left padding allowed via attention_mask).

        Each row is one request to the engine's Scheduler (as the server runs them), every
        row sampling from the same seed. Rows that stop early are padded, as transformers'
        generate() pads them, with pad_token_id (else the first EOS id). Generation stops
        at the model's max_position_embeddings.
        ignore_eos: run all max_new_tokens steps even past an EOS (benchmarks).
        Structured generation (at most one; uses the checkpoint's tokenizer): json_schema (a
        dict or JSON text), regex (the whole output matches it), choice (one of the strings),
        json_object (any JSON object). The output is compact JSON (no whitespace); an
        unsupported schema keyword raises InvalidArgument naming it.

        kv_cache_bytes: the KV cache's budget (0: every row at once, up to half the memory
        available); rows beyond it wait for pages, and a row that cannot fit it alone is
        refused (InvalidArgument)."""
        ids, mask = self._inputs(input_ids, attention_mask)
        given = [k for k, v in (("json_schema", json_schema), ("regex", regex),
                                ("choice", choice), ("json_object", json_object or None))
                 if v is not None]
        if len(given) > 1:
            raise InvalidArgument(f"give at most one of json_schema, regex, choice, json_object "
                                  f"(got {given})")
        kind, text, choices = (given[0] if given else ""), "", []
        if json_schema is not None:
            text = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
        elif regex is not None:
            text = str(regex)
        elif choice is not None:
            choices = [str(c) for c in choice]
        return self._model.generate(ids, mask, int(max_new_tokens), float(temperature),
                                    int(top_k or 0), float(1.0 if top_p is None else top_p),
                                    int(seed or 0), not ignore_eos, kind, text, choices,
                                    int(kv_cache_bytes))

    def generate_rows(self, prompts, max_tokens=32, temperature=0.0, top_k=0, top_p=1.0,
                      seed=0, stop_token_ids=None, ignore_eos=False, stop=None,
                      skip_special_tokens=True, return_text=False) -> list[tuple]:
        """One scheduler run of independent rows, each with its own sampling settings:
        prompts is a list of token-id lists; every other argument is one value for all
        rows or a list with one per row (stop_token_ids and stop: a list, or one per row).
        stop: strings on which the engine ends a row (the checkpoint's tokenizer decodes).
        Per row: (new tokens, a final EOS / stop token or the token completing a stop
        string included; finish reason "stop" or "length"), and with return_text the
        text as the engine released it (a matched stop string and what follows cut off).
        A row's tokens do not depend on the other rows."""
        prompts = [[int(t) for t in p] for p in prompts]
        n = len(prompts)

        def per_row(name, value):
            if isinstance(value, (list, tuple, np.ndarray)):
                if len(value) != n:
                    raise InvalidArgument(f"{name} has {len(value)} values for {n} prompts")
                return list(value)
            return [value] * n

        def per_row_list(name, value, item):
            value = [] if value is None else value
            if isinstance(value, (str, bytes)):
                raise InvalidArgument(f"{name} must be a list, not one string")
            if value and isinstance(value[0], (list, tuple, np.ndarray)):
                return [[item(v) for v in row] for row in per_row(name, value)]
            return [[item(v) for v in value]] * n

        stops = per_row_list("stop_token_ids", stop_token_ids, int)
        stop_strings = per_row_list("stop", stop, str)
        rows = zip(per_row("max_tokens", max_tokens), per_row("temperature", temperature),
                   per_row("top_k", top_k), per_row("top_p", top_p), per_row("seed", seed),
                   stops, stop_strings, per_row("ignore_eos", ignore_eos))
        options = []
        for m, t, k, p, s, st, ss, ig in rows:
            o = _hubzoo.RowOptions()
            o.max_tokens, o.temperature, o.top_k, o.top_p = int(m), float(t), int(k or 0), float(p)
            o.seed, o.stop_token_ids, o.stop, o.ignore_eos = int(s or 0), st, ss, bool(ig)
            o.skip_special_tokens = bool(skip_special_tokens)
            options.append(o)
        done = self._model.generate_rows(prompts, options, bool(return_text))
        if return_text:
            return [(list(tokens), reason, text) for tokens, reason, text in done]
        return [(list(tokens), reason) for tokens, reason, _ in done]

    def engine_stats(self) -> dict:
        """Counters of the engine generate() and generate_rows() run on, which is kept
        between calls so that later calls reuse the KV pages of earlier prompts and answers
        (a shared system prompt, the next turn of a conversation; results are the same bits
        either way): prefix_lookup_tokens, prefix_hit_tokens, prefix_cached_pages,
        preempted, kv_total_bytes, kv_budget_bytes, max_slots."""
        return dict(self._model.engine_stats())

    def release_engine(self) -> None:
        """Drops that engine and the KV pages it keeps for later calls (at most 256 MiB
        beyond what running requests hold); the next call builds a new one."""
        self._model.release_engine()

    def kv_cache_stats(self) -> dict:
        """The KV cache's accounting after the last forward()/forward_incremental():
        per layer its window (0: every position), row size and element type ("float32",
        "bfloat16", "float16"), and bytes held per slot."""
        return dict(self._model.kv_cache_stats())

    def kv_slot_bytes_at(self, n: int) -> int:
        """Bytes of keys and values one sequence needs at n positions."""
        return int(self._model.kv_slot_bytes_at(int(n)))

    @property
    def capture_names(self) -> list[str]:
        return list(self._model.capture_names())


def matmul_target() -> str:
    return _hubzoo.matmul_target()


class Encoding:
    """Token ids, token strings and (start, end) character offsets of one text."""

    __slots__ = ("ids", "tokens", "offsets")

    def __init__(self, ids, tokens, offsets):
        self.ids = list(ids)
        self.tokens = list(tokens)
        self.offsets = [tuple(o) for o in offsets]

    def __repr__(self):
        return f"Encoding(ids={self.ids!r})"


class PairEncoding(Encoding):
    """An encoded pair: Encoding plus the token type ids (0: first text, 1: the pair)."""

    __slots__ = ("type_ids",)

    def __init__(self, ids, tokens, offsets, type_ids):
        super().__init__(ids, tokens, offsets)
        self.type_ids = list(type_ids)


class Tokenizer:
    """A tokenizer run in C++. From a snapshot directory (or repo id) it behaves as
    transformers.AutoTokenizer (tokenizer_config.json applied); from a tokenizer.json file,
    as HF `tokenizers.Tokenizer.from_file`."""

    def __init__(self, native, snapshot: str | None):
        self._tok = native
        self.snapshot = snapshot

    @classmethod
    def from_pretrained(cls, path_or_id, gguf_file: str | None = None) -> "Tokenizer":
        """From a snapshot folder or repo id, a .gguf file (or gguf_file= of a folder:
        its own tokenizer metadata, as transformers' AutoTokenizer(gguf_file=)), or a
        tokenizer.json."""
        path = str(path_or_id)
        _ensure_downloaded(path, gguf_file)
        if gguf_file:
            path = os.path.join(_hubzoo.resolve_snapshot(path), gguf_file)
        if path.endswith(".gguf") and os.path.isfile(path):
            return cls(_hubzoo.Tokenizer(path), path)
        if os.path.isfile(path):  # a tokenizer.json itself
            return cls(_hubzoo.Tokenizer(path), None)
        snapshot = _hubzoo.resolve_snapshot(path)
        return cls(_hubzoo.Tokenizer(snapshot), snapshot)

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        return Encoding(*self._tok.encode(text, add_special_tokens))

    def encode_pair(self, text: str, pair: str, add_special_tokens: bool = True,
                    max_length: int = 0) -> Encoding:
        """HF encode(text, pair); max_length > 0 truncates longest_first to that many
        tokens in all, as tokenizer(text, pair, truncation=True, max_length=...)."""
        e, type_ids = self._tok.encode_pair(text, pair, add_special_tokens, int(max_length))
        return PairEncoding(*e, type_ids)

    def encode_batch(self, texts, add_special_tokens: bool = True) -> list[Encoding]:
        return [Encoding(*e) for e in self._tok.encode_batch(list(texts), add_special_tokens)]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens)

    def token_to_id(self, token: str):
        return self._tok.token_to_id(token)

    def id_to_token(self, id: int):
        return self._tok.id_to_token(int(id))

    @property
    def vocab_size(self) -> int:
        return self._tok.vocab_size()

    def apply_chat_template(self, messages, add_generation_prompt: bool = False, tools=None,
                            documents=None, tokenize: bool = False, **kwargs):
        """The chat prompt as transformers' apply_chat_template renders it: the string, or
        with tokenize=True its ids (encoded without adding special tokens, as transformers does)."""
        text = self._render_chat(messages, add_generation_prompt, tools, documents, kwargs)
        return self.encode(text, add_special_tokens=False).ids if tokenize else text

    def _render_chat(self, messages, add_generation_prompt, tools, documents, kwargs) -> str:
        if self.snapshot is None:
            raise InvalidArgument("apply_chat_template needs a snapshot directory, not a tokenizer.json")
        options = dict(kwargs, add_generation_prompt=bool(add_generation_prompt))
        if tools is not None:
            options["tools"] = tools
        if documents is not None:
            options["documents"] = documents
        return _hubzoo.render_chat_template_from_snapshot(
            self.snapshot, json.dumps(list(messages), ensure_ascii=False),
            json.dumps(options, ensure_ascii=False))
