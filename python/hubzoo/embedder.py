"""Encoders and sentence embeddings, as sentence-transformers computes them.

    emb = hubzoo.Embedder.from_pretrained("models/all-MiniLM-L6-v2")
    vectors = emb.encode(["first text", "second"])          # float32 [2, 384]

The pipeline is read from the snapshot (modules.json, 1_Pooling, 2_Dense, Normalize,
sentence_bert_config.json, config_sentence_transformers.json prompts). Batches are
ragged in C++: a text's vector is bit-identical alone or in any batch.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from . import _hubzoo
from ._hubzoo import InvalidArgument
from .hub import ensure

_DTYPES = ("float32", "bfloat16")
_MODES = ("eager", "fused", "bf16dot")


def _check(dtype: str, mode: str) -> None:
    if dtype not in _DTYPES:
        raise InvalidArgument(f"dtype {dtype!r} is not supported (supported: {_DTYPES})")
    if mode not in _MODES:
        raise InvalidArgument(f"mode must be one of {_MODES}, got {mode!r}")


def _ids(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise InvalidArgument(f"{name} must be [batch, seq], got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer) and a.dtype != np.bool_:
        raise InvalidArgument(f"{name} must hold integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64)


class Encoder:
    """A BERT / RoBERTa / XLM-RoBERTa encoder, or a Llama/Qwen decoder used as one.

    forward() returns the last hidden states [batch, seq, hidden] (a decoder's final
    norm output); padded positions (attention_mask == 0) never enter the model and
    come back as zeros.
    """

    def __init__(self, native, dtype: str, mode: str):
        self._enc = native
        self.dtype = dtype
        self.mode = mode
        self.info = native.info()

    @classmethod
    def from_pretrained(cls, path_or_id, dtype: str = "float32", mode: str = "fused",
                        num_threads: int = 0) -> "Encoder":
        _check(dtype, mode)
        ensure(path_or_id)
        return cls(_hubzoo.Encoder(str(path_or_id), num_threads, dtype, mode), dtype, mode)

    @property
    def capture_names(self) -> list[str]:
        return list(self._enc.capture_names())

    def forward(self, input_ids, attention_mask=None, token_type_ids=None,
                capture: Iterable[str] | None = None):
        ids = _ids(input_ids, "input_ids")
        mask = None if attention_mask is None else _ids(attention_mask, "attention_mask")
        types = None if token_type_ids is None else _ids(token_type_ids, "token_type_ids")
        names = list(capture) if capture is not None else []
        hidden, captured = self._enc.forward(ids, mask, types, names)
        return (hidden, dict(captured)) if capture is not None else hidden


class Embedder:
    """The sentence-transformers pipeline of a snapshot directory or cached repo id."""

    def __init__(self, native, dtype: str, mode: str):
        self._emb = native
        self.dtype = dtype
        self.mode = mode
        self.info = native.info()
        self.dimension = self.info["dimension"]
        self.prompts = dict(self.info["prompts"])
        self.max_seq_length = self.info["max_seq_length"]

    @classmethod
    def from_pretrained(cls, path_or_id, dtype: str = "float32", mode: str = "fused",
                        num_threads: int = 0) -> "Embedder":
        _check(dtype, mode)
        ensure(path_or_id)
        return cls(_hubzoo.Embedder(str(path_or_id), num_threads, dtype, mode), dtype, mode)

    def encode(self, texts: str | Sequence[str], normalize: bool | None = None,
               prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int = 32) -> np.ndarray:
        """float32 [n, dimension] for a list of n texts; [dimension] for a single string
        (as sentence-transformers). An empty list gives an empty [0, dimension] array.

        normalize: None follows the snapshot's modules (Normalize or not); True
        L2-normalises the result (encode(normalize_embeddings=True)); False skips the
        snapshot's Normalize modules. prompt wins over prompt_name; with neither, the
        configured default_prompt_name applies.
        """
        single = isinstance(texts, str)
        batch = [texts] if single else list(texts)
        for i, t in enumerate(batch):
            if not isinstance(t, str):
                raise InvalidArgument(f"texts[{i}] must be a str, got {type(t).__name__}")
        out = self._emb.encode(batch, normalize, prompt_name, prompt, int(batch_size))
        return out[0] if single else out

    def encode_query(self, texts: str | Sequence[str], **kwargs) -> np.ndarray:
        """encode() with the "query" prompt when the snapshot configures one (else as
        encode()), as SentenceTransformer.encode_query."""
        if kwargs.get("prompt_name") is None and kwargs.get("prompt") is None and "query" in self.prompts:
            kwargs["prompt_name"] = "query"
        return self.encode(texts, **kwargs)

    def encode_document(self, texts: str | Sequence[str], **kwargs) -> np.ndarray:
        """encode() with the first of the "document", "passage", "corpus" prompts the snapshot
        configures (else as encode()), as SentenceTransformer.encode_document."""
        if kwargs.get("prompt_name") is None and kwargs.get("prompt") is None:
            for name in ("document", "passage", "corpus"):
                if name in self.prompts:
                    kwargs["prompt_name"] = name
                    break
        return self.encode(texts, **kwargs)

    def tokenize(self, text: str) -> list[int]:
        """Token ids the encoder gets for a text (a prompt already prepended), truncated
        to max_seq_length."""
        return list(self._emb.tokenize(text))

    def prompt_length(self, prompt: str) -> int:
        """Prompt tokens left out of pooling when the pooling config has include_prompt=false."""
        return int(self._emb.prompt_length(prompt))


def supported_encoders() -> list[str]:
    return list(_hubzoo.supported_encoders())
