"""Top-k routing of sparse MoE layers under bf16 noise: which decisions count, and were they kept.

The long-input rung keeps only the logit decisions bf16 noise cannot flip (HF fp32's
top-1/top-2 margin > 8 sigma). A sparse MoE layer takes a discrete decision inside the
network: each token's top-k experts, decided by the order of its router logits. Where
two experts nearly tie at the top-k boundary, any rounding can swap them, and the
token's output then moves far more than the logits' noise (transformers' own bf16 does
it), so the same rule is applied one level down:

- a token's routing in a sparse layer is *confident* when it was confident in every
  earlier sparse layer and HF fp32's gap between its k-th and (k+1)-th largest router
  logits exceeds 8 sigma_r;
- sigma_r (per sparse layer): RMS(HF bf16 router logits - HF fp32 router logits) over the
  tokens whose routing was confident in every earlier sparse layer (all tokens in the
  first): a near tie upstream may flip, and the flipped token's router logits then differ
  by far more than rounding noise, in transformers' own bf16 too;
- where it is confident, our selected expert set must equal HF fp32's;
- the argmax rung, and in bf16 the top-5 rung, apply at tokens whose routing is confident
  in every sparse layer (the others are counted and reported);
- the argmax rung's sigma (RMS of HF bf16 - HF fp32 logits) is measured over those tokens
  too, as sigma_r is: a flipped token's logits differ by far more than rounding noise, and
  counting them would inflate the margin the rung asks for (margin_sigma).

Captures (ours and the reference's, reference.forward) are named
`layers.{i}.mlp.router_logits` [T, E] and `layers.{i}.mlp.selected_experts` [T, k].
"""

from __future__ import annotations

import re

import numpy as np

_ROUTER = re.compile(r"^layers\.(\d+)\.mlp\.router_logits$")


def sparse_layers(captured: dict) -> list[int]:
    """Indices of the layers with router logits among the captures (empty for a dense model)."""
    return sorted(int(m.group(1)) for m in map(_ROUTER.match, captured) if m)


def router_names(layers) -> list[str]:
    return [f"layers.{i}.mlp.{n}" for i in layers for n in ("router_logits", "selected_experts")]


def boundary_gap(router_logits: np.ndarray, k: int) -> np.ndarray:
    """Per token: k-th largest minus (k+1)-th largest router logit, float64 [T] (inf when k >= E)."""
    logits = np.asarray(router_logits, dtype=np.float64)
    if k >= logits.shape[-1]:
        return np.full(logits.shape[0], np.inf)
    top = -np.sort(-logits, axis=-1)
    return top[:, k - 1] - top[:, k]


def same_sets(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per token: do two [T, k] expert index arrays select the same set?"""
    a = np.sort(np.asarray(a).astype(np.int64), axis=-1)
    b = np.sort(np.asarray(b).astype(np.int64), axis=-1)
    if a.shape != b.shape:
        return np.zeros(a.shape[0], dtype=bool)
    return (a == b).all(axis=-1)


def confidence(ref32: dict, ref16: dict, sigmas: float) -> dict:
    """From HF fp32 and HF bf16 captures of one input.

    Returns {"layers": {i: {"sigma_r", "k", "gap" [T], "confident" [T] bool, "after_near_tie",
    "experts" [T, k]}}, "tokens": [T] bool, routing confident in every sparse layer (all True
    for a dense model)}. A (token, layer) pair is confident when its gap exceeds
    sigmas * sigma_r and the token's routing was confident in every earlier sparse layer;
    after_near_tie counts the pairs whose gap is clear but follow a near tie upstream.
    """
    layers = {}
    tokens = None
    for i in sparse_layers(ref32):
        lo32 = np.asarray(ref32[f"layers.{i}.mlp.router_logits"], dtype=np.float64)
        lo16 = np.asarray(ref16[f"layers.{i}.mlp.router_logits"], dtype=np.float64)
        experts = np.asarray(ref32[f"layers.{i}.mlp.selected_experts"]).astype(np.int64)
        k = experts.shape[-1]
        # A token whose routing nearly tied in an earlier sparse layer may legitimately take
        # other experts there, and its input here then differs from fp32's by far more than
        # rounding noise: its decision here is not one bf16 must keep, and its router error
        # is no measure of that noise (in the first sparse layer every token counts).
        upstream = np.ones(lo32.shape[0], dtype=bool) if tokens is None else tokens
        d = (lo16 - lo32)[upstream]
        sigma_r = float(np.sqrt(np.mean(np.square(d)))) if d.size else 0.0
        gap = boundary_gap(lo32, k)
        clear = gap > sigmas * sigma_r
        layers[i] = {"sigma_r": sigma_r, "k": k, "gap": gap, "confident": clear & upstream,
                     "after_near_tie": int((clear & ~upstream).sum()), "experts": experts}
        tokens = clear & upstream
    if tokens is None:
        # Positions are the logits' rows (an encoder-decoder's encoder captures have others).
        n = ref32["logits"].shape[0] if "logits" in ref32 else next(iter(ref32.values())).shape[0] if ref32 else 0
        tokens = np.ones(n, dtype=bool)
    return {"layers": layers, "tokens": tokens}


def kept(ours: dict, conf: dict, positions: slice | np.ndarray | None = None) -> dict:
    """Our selected experts vs HF fp32's at every confident (token, sparse layer) pair.

    ours: captures with `layers.{i}.mlp.selected_experts` [T, k]; positions: which tokens
    to compare (default all). Returns {"pairs", "kept", "lost": [(token, layer), ...]
    (the first 10)}; pairs == kept is the check. A missing capture counts every pair lost.
    """
    pairs = matched = 0
    lost: list[tuple[int, int]] = []
    for i, layer in conf["layers"].items():
        idx = np.arange(layer["confident"].shape[0])
        if positions is not None:
            idx = idx[positions]
        idx = idx[layer["confident"][idx]]
        name = f"layers.{i}.mlp.selected_experts"
        if name in ours:
            ok = same_sets(np.asarray(ours[name])[idx], layer["experts"][idx])
        else:
            ok = np.zeros(idx.size, dtype=bool)
        pairs += int(idx.size)
        matched += int(ok.sum())
        lost += [(int(t), i) for t in idx[~ok][:10]]
    return {"pairs": pairs, "kept": matched, "lost": sorted(lost)[:10]}


def margin_sigma(logits32: np.ndarray, logits16: np.ndarray, conf: dict, sigma: float) -> float:
    """RMS(HF bf16 - HF fp32 logits) over the tokens whose routing is confident in every
    sparse layer: bf16's rounding noise without the routing flips. sigma: that RMS over all
    tokens, returned as is when every token is confident (a dense model)."""
    from . import metrics

    tokens = conf["tokens"]
    if tokens.all():
        return sigma
    return metrics.rms((np.asarray(logits16) - np.asarray(logits32))[tokens])
