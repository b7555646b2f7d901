"""Rerankers: a relevance score per (query, document), as sentence-transformers'
CrossEncoder computes it, or the yes/no recipe of Qwen3-Reranker-style decoders.

    rr = hubzoo.Reranker.from_pretrained("cross-encoder/ms-marco-MiniLM-L6-v2")
    rr.score("what is a panda?", ["a bear", "a car"])     # float32 [2]
    rr.rank("what is a panda?", ["a car", "a bear"])      # [{corpus_id, score}], best first

Pairs run as one ragged batch in C++: a score is bit-identical alone or in any batch.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import _hubzoo
from ._hubzoo import InvalidArgument

_DTYPES = ("float32", "bfloat16")
_MODES = ("eager", "fused", "bf16dot")


class Reranker:
    """A cross-encoder (*ForSequenceClassification) or decoder reranker (*ForCausalLM)."""

    def __init__(self, native, dtype: str, mode: str):
        self._rr = native
        self.dtype = dtype
        self.mode = mode
        self.info = native.info()
        self.num_labels = self.info["num_labels"]
        self.max_length = self.info["max_length"]

    @classmethod
    def from_pretrained(cls, path_or_id, dtype: str = "float32", mode: str = "fused",
                        num_threads: int = 0, max_length: int | None = None) -> "Reranker":
        """max_length: tokens of a pair (CrossEncoder's max_length); None: the model's."""
        if dtype not in _DTYPES:
            raise InvalidArgument(f"dtype {dtype!r} is not supported (supported: {_DTYPES})")
        if mode not in _MODES:
            raise InvalidArgument(f"mode must be one of {_MODES}, got {mode!r}")
        if max_length is not None and max_length <= 0:
            raise InvalidArgument(f"max_length must be positive, got {max_length}")
        native = _hubzoo.Reranker(str(path_or_id), num_threads, dtype, mode, max_length or 0)
        return cls(native, dtype, mode)

    def predict(self, pairs: Sequence[Sequence[str]], raw: bool = False,
                instruction: str | None = None, batch_size: int = 32) -> np.ndarray:
        """CrossEncoder.predict: [n] scores for n (a, b) pairs ([n, num_labels] when
        num_labels > 1). raw: logits before the activation."""
        pairs = [tuple(p) for p in pairs]
        for p in pairs:
            if len(p) != 2 or not all(isinstance(t, str) for t in p):
                raise InvalidArgument("each pair must be two strings")
        out = self._rr.score_pairs([p[0] for p in pairs], [p[1] for p in pairs], raw,
                                   instruction, batch_size)
        return out[:, 0] if self.num_labels == 1 else out

    def score(self, query: str, documents: Sequence[str], raw: bool = False,
              instruction: str | None = None, batch_size: int = 32) -> np.ndarray:
        """Scores of (query, document) for each document, in input order."""
        if not isinstance(query, str):
            raise InvalidArgument("query must be a string")
        if isinstance(documents, str):
            raise InvalidArgument("documents must be a list of strings, not one string")
        return self.predict([(query, d) for d in documents], raw=raw, instruction=instruction,
                            batch_size=batch_size)

    def rank(self, query: str, documents: Sequence[str], top_k: int | None = None,
             return_documents: bool = False, raw: bool = False,
             instruction: str | None = None, batch_size: int = 32) -> list[dict]:
        """CrossEncoder.rank: [{"corpus_id", "score"(, "text")}] best first."""
        if self.num_labels != 1:
            raise InvalidArgument("rank() needs a model with one label")
        scores = self.score(query, documents, raw=raw, instruction=instruction,
                            batch_size=batch_size)
        order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
        out = []
        for i in order[:top_k]:
            r = {"corpus_id": i, "score": float(scores[i])}
            if return_documents:
                r["text"] = documents[i]
            out.append(r)
        return out

    def tokenize(self, query: str, document: str, instruction: str | None = None):
        """(ids, type_ids) of the pair as the model gets it."""
        ids, types = self._rr.tokenize(query, document, instruction)
        return list(ids), list(types)
