"""The two inputs every column runs on: "short" and "long".

short: the chat-template prompt (one user turn, generation prompt added) when the snapshot
       has a chat template, else SHORT_TEXT; tokenized by transformers' AutoTokenizer.
long:  LONG_TEXT (repeated if needed), cut to exactly `long_tokens` tokens, and longer
       than any sliding window the config enables.
Without a tokenizer.json (tiny random checkpoints) both are deterministic random ids
that avoid the ids below 3 (pad/bos/eos of the tiny models).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from . import texts

SHORT_RANDOM_TOKENS = 32
RANDOM_SEEDS = {"short": 0, "long": 1}


@dataclass
class Input:
    name: str  # "short" or "long"
    kind: str  # "chat", "sentence", "text" or "random"
    ids: np.ndarray  # int64 [seq]
    description: str


def long_length(config: dict, long_tokens: int) -> tuple[int, str | None]:
    """Tokens of the long input: long_tokens, or more to pass an enabled sliding window."""
    window = config.get("sliding_window")
    if isinstance(window, int) and window > 0 and config.get("use_sliding_window", True) is not False:
        if long_tokens <= window:
            return window + 64, f"sliding_window {window} is enabled: long input made {window + 64} tokens"
    return long_tokens, None


def _random_ids(vocab_size: int, length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, vocab_size, size=length, dtype=np.int64)


def _ids(encoded) -> list[int]:
    if hasattr(encoded, "keys"):  # BatchEncoding
        encoded = encoded["input_ids"]
    return [int(i) for i in encoded]


def build(snapshot: str, config: dict, long_tokens: int) -> tuple[dict[str, Input], list[str]]:
    """{"short": Input, "long": Input} and notes worth showing (e.g. a stretched long input)."""
    notes: list[str] = []
    n_long, note = long_length(config, long_tokens)
    if note:
        notes.append(note)
    max_pos = config.get("max_position_embeddings")
    if isinstance(max_pos, int) and 0 < max_pos < n_long:
        notes.append(f"long input cut to max_position_embeddings {max_pos}")
        n_long = max_pos

    if not os.path.isfile(os.path.join(snapshot, "tokenizer.json")):
        vocab = int(config["vocab_size"])
        return {
            "short": Input("short", "random", _random_ids(vocab, SHORT_RANDOM_TOKENS, RANDOM_SEEDS["short"]),
                           f"{SHORT_RANDOM_TOKENS} random ids (no tokenizer.json; seed {RANDOM_SEEDS['short']})"),
            "long": Input("long", "random", _random_ids(vocab, n_long, RANDOM_SEEDS["long"]),
                          f"{n_long} random ids (no tokenizer.json; seed {RANDOM_SEEDS['long']})"),
        }, notes

    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(snapshot)
    if getattr(tokenizer, "chat_template", None):
        short_ids = _ids(tokenizer.apply_chat_template(texts.CHAT_MESSAGES, add_generation_prompt=True,
                                                       tokenize=True))
        short = Input("short", "chat", np.asarray(short_ids, dtype=np.int64),
                      f"chat template, user: {texts.CHAT_MESSAGES[0]['content']!r}")
    else:
        short_ids = _ids(tokenizer(texts.SHORT_TEXT)["input_ids"])
        short = Input("short", "sentence", np.asarray(short_ids, dtype=np.int64),
                      f"text {texts.SHORT_TEXT!r}")

    text = texts.LONG_TEXT
    long_ids = _ids(tokenizer(text)["input_ids"])
    while len(long_ids) < n_long:
        text = text + "\n\n" + texts.LONG_TEXT
        long_ids = _ids(tokenizer(text)["input_ids"])
    long = Input("long", "text", np.asarray(long_ids[:n_long], dtype=np.int64),
                 f"LONG_TEXT (prose about lighthouses), first {n_long} tokens")
    return {"short": short, "long": long}, notes
