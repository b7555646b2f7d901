"""Numbers the harness reports: logits errors, KL divergence, top-k and margin-aware decisions.

Every function takes logits shaped [seq, vocab] (one sequence) and works in float64 on
row blocks, so a long input with a large vocabulary never needs more than a few
blocks of float64 at a time.
"""

from __future__ import annotations

import numpy as np

_BLOCK = 64  # rows per float64 block


def _blocks(n: int):
    for start in range(0, n, _BLOCK):
        yield slice(start, min(start + _BLOCK, n))


def error_stats(ours: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """RMS and max abs of (ours - ref) over every element."""
    if ours.shape != ref.shape:
        raise ValueError(f"shape mismatch: {ours.shape} vs {ref.shape}")
    total = 0.0
    worst = 0.0
    for rows in _blocks(ours.shape[0]):
        d = ours[rows].astype(np.float64) - ref[rows].astype(np.float64)
        total += float(np.square(d).sum())
        if d.size:
            worst = max(worst, float(np.abs(d).max()))
    n = ours.size
    return {"rms": (total / n) ** 0.5 if n else 0.0, "max_abs": worst}


def rms(values: np.ndarray) -> float:
    total = 0.0
    for rows in _blocks(values.shape[0]):
        total += float(np.square(values[rows].astype(np.float64)).sum())
    return (total / values.size) ** 0.5 if values.size else 0.0


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def kl_per_token(ref: np.ndarray, ours: np.ndarray) -> np.ndarray:
    """KL(softmax(ref) || softmax(ours)) per position, in nats, float64 [seq]."""
    out = np.empty(ref.shape[0], dtype=np.float64)
    for rows in _blocks(ref.shape[0]):
        lp = _log_softmax(ref[rows])
        lq = _log_softmax(ours[rows])
        out[rows] = (np.exp(lp) * (lp - lq)).sum(axis=-1)
    return np.maximum(out, 0.0)  # rounding can leave -1e-17


def top1(logits: np.ndarray) -> np.ndarray:
    return logits.argmax(axis=-1)


def top_k_contains(ours: np.ndarray, target: np.ndarray, k: int = 5) -> np.ndarray:
    """Per position: is target[pos] among ours' k largest logits? (ties at the k-th value count in)."""
    picked = ours[np.arange(ours.shape[0]), target]
    larger = (ours > picked[:, None]).sum(axis=-1)
    return larger < k


def top2_margin(logits: np.ndarray) -> np.ndarray:
    """Per position: top-1 minus top-2 logit."""
    top = np.partition(logits, -2, axis=-1)[:, -2:]
    return (top[:, 1] - top[:, 0]).astype(np.float64)


def prefix_match(a, b) -> int:
    """Number of identical leading tokens of two sequences."""
    n = 0
    for x, y in zip(a, b):
        if int(x) != int(y):
            break
        n += 1
    return n


def fraction(mask: np.ndarray) -> float | None:
    return float(mask.mean()) if mask.size else None
