"""hubzoo.Seq2SeqLM: encoder-decoder models (T5, FLAN-T5, mT5) over the C++ Seq2SeqLM."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from . import _hubzoo
from .embedder import _ids  # [batch, seq] int64 ids, checked
from .hub import ensure as _ensure_downloaded
from ._hubzoo import InvalidArgument

_DTYPES = ("float32", "bfloat16")
_MODES = ("eager", "fused", "bf16dot")


class Seq2SeqLM:
    """An encoder-decoder LM loaded from a Hub snapshot directory or a cached repo id."""

    def __init__(self, native, dtype: str, mode: str):
        self._model = native
        self.dtype = dtype
        self.mode = mode
        self.info = native.info()
        self.vocab_size = self.info["vocab_size"]
        self.decoder_start_token_id = self.info["decoder_start_token_id"]
        self.eos_token_ids = list(self.info["eos_token_ids"])

    @classmethod
    def from_pretrained(cls, path_or_id, dtype: str = "float32", mode: str = "fused",
                        num_threads: int = 0) -> "Seq2SeqLM":
        if dtype not in _DTYPES:
            raise InvalidArgument(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        if mode not in _MODES:
            raise InvalidArgument(f"mode must be one of {_MODES}, got {mode!r}")
        _ensure_downloaded(path_or_id)
        return cls(_hubzoo.Seq2SeqLM(str(path_or_id), num_threads, dtype, mode), dtype, mode)

    def _run(self, input_ids, decoder_input_ids, attention_mask, capture, prefill_len):
        ids = _ids(input_ids, "input_ids")
        dec = _ids(decoder_input_ids, "decoder_input_ids")
        mask = None if attention_mask is None else _ids(attention_mask, "attention_mask")
        names = list(capture) if capture is not None else []
        logits, captured = self._model.forward(ids, mask, dec, names, prefill_len)
        return (logits, dict(captured)) if capture is not None else logits

    def forward(self, input_ids, decoder_input_ids, attention_mask=None,
                capture: Iterable[str] | None = None):
        """Decoder logits float32 [batch, dec_seq, vocab]; with capture=[names] also
        {name: array}: "encoder.*" names [batch, seq, F] (padded positions zero),
        "decoder.*" and "logits" [batch, dec_seq, F]."""
        return self._run(input_ids, decoder_input_ids, attention_mask, capture, -1)

    def forward_incremental(self, input_ids, decoder_input_ids, prefill_len: int,
                            attention_mask=None, capture: Iterable[str] | None = None):
        """The decoder's first prefill_len columns in one pass, then one cached step per column."""
        dec = _ids(decoder_input_ids, "decoder_input_ids")
        if not 1 <= int(prefill_len) <= dec.shape[1]:
            raise InvalidArgument(f"prefill_len must be in [1, {dec.shape[1]}], got {prefill_len}")
        return self._run(input_ids, dec, attention_mask, capture, int(prefill_len))

    def generate(self, input_ids, attention_mask=None, max_new_tokens: int = 32,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, ignore_eos: bool = False) -> np.ndarray:
        """New tokens int64 [batch, steps] (the decoder start token not included); rows that
        stop at EOS early are padded with pad_token_id, as transformers pads them."""
        ids = _ids(input_ids, "input_ids")
        mask = None if attention_mask is None else _ids(attention_mask, "attention_mask")
        return self._model.generate(ids, mask, int(max_new_tokens), float(temperature),
                                    int(top_k or 0), float(1.0 if top_p is None else top_p),
                                    int(seed or 0), not ignore_eos)

    @property
    def capture_names(self) -> list[str]:
        return list(self._model.capture_names())
