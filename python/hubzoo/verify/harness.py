"""The verification ladder run against transformers: references once per input, then each column."""

from __future__ import annotations

import gc
import json
import math
import os
import sys
import time

import numpy as np

from . import inputs as inputs_mod
from . import metadata, metrics, reference, routing, seq2seq

FORMAT = "hubzoo.verify/2"
DTYPES = ("float32", "bfloat16")
MODES = ("eager", "fused", "bf16dot")  # bf16dot: bfloat16 only
INPUTS = ("short", "long")

# The ladder's bars (docs/design.md, "The verification ladder").
FP32_LOGITS_ATOL = 1e-3
CACHED_ATOL_FP32 = 1e-4
BF16_RATIO_MAX = {"eager": 1.15, "fused": 1.0, "bf16dot": 1.0}
MARGIN_SIGMAS = 8.0
TOP_K = 5
NEW_TOKENS = 32
DECODE_STEPS_LONG = 64  # cached decode on the long input: prefill all but these, then step


class VerifyError(Exception):
    """A run that cannot start or finish (bad MODEL, unloadable reference, ...)."""


class Progress:
    """One line per step on stderr, with the time since the run started."""

    def __init__(self, enabled: bool = True, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"[verify {self.elapsed():7.1f}s] {message}", file=self.stream, flush=True)


def column_name(dtype: str, mode: str, input_name: str) -> str:
    return f"{dtype}/{mode}/{input_name}"


def _finite(x):
    """JSON-safe numbers: NaN/inf become None; numpy scalars become Python ones."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def _layer_rms(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray], names: list[str]) -> list[float | None]:
    out = []
    for n in names:
        if n in ours and n in ref and ours[n].shape == ref[n].shape:
            out.append(metrics.error_stats(ours[n], ref[n])["rms"])
        else:
            out.append(None)
    return out


def _greedy(ours: list[int], ref: list[int]) -> dict:
    return {
        "tokens": list(ours),
        "reference": list(ref),
        "prefix": metrics.prefix_match(ours, ref),
        "length": max(len(ours), len(ref)),
        "identical": list(ours) == list(ref),
    }


def _check(key: str, label: str, ok, value, threshold) -> dict:
    return {"key": key, "label": label, "pass": None if ok is None else bool(ok),
            "value": value, "threshold": threshold}


def _checks(dtype: str, mode: str, m: dict, ref: dict) -> list[dict]:
    checks = []
    if dtype == "float32":
        checks.append(_check("fp32_logits_atol", f"fp32 logits max abs <= {FP32_LOGITS_ATOL:g}",
                             m["logits_max_abs"] <= FP32_LOGITS_ATOL, m["logits_max_abs"], FP32_LOGITS_ATOL))
        checks.append(_check("fp32_argmax", "fp32 argmax equal at every position",
                             m["top1_agreement"] == 1.0, m["top1_agreement"], 1.0))
        checks.append(_check("fp32_greedy", f"fp32 greedy tokens identical to HF fp32 ({NEW_TOKENS} new)",
                             m["greedy"]["identical"], m["greedy"]["prefix"], m["greedy"]["length"]))
        checks.append(_check("cached_atol", f"cached decode max abs diff <= {CACHED_ATOL_FP32:g} (fp32)",
                             m["cached"]["max_abs_diff"] <= CACHED_ATOL_FP32, m["cached"]["max_abs_diff"],
                             CACHED_ATOL_FP32))
    else:
        bar = BF16_RATIO_MAX[mode]
        checks.append(_check("bf16_ratio", f"bf16 error ratio <= {bar:g} ({mode})",
                             m["bf16_ratio"] is not None and m["bf16_ratio"] <= bar, m["bf16_ratio"], bar))
    checks.append(_check("cached_argmax", "cached decode argmax = full forward argmax",
                         m["cached"]["argmax_agreement"] == 1.0, m["cached"]["argmax_agreement"], 1.0))
    sparse_bf16 = dtype == "bfloat16" and bool(ref["routing"]["sparse_layers"])
    where = "at every position" + (" whose routing is confident" if sparse_bf16 else "")
    checks.append(_check("top5", f"HF fp32 top-1 in our top-{TOP_K} {where}",
                         m["top5_containment"] == 1.0, m["top5_containment"], 1.0))
    rt = m["routing"]
    checks.append(_check("routing_full", "routing kept where confident, full forward",
                         None if not rt["pairs"] else rt["kept"] == rt["pairs"], rt["kept"], rt["pairs"]))
    checks.append(_check("routing_cached", "routing kept where confident, cached decode",
                         None if not rt["cached_pairs"] else rt["cached_kept"] == rt["cached_pairs"],
                         rt["cached_kept"], rt["cached_pairs"]))
    mg = m["margin"]
    checks.append(_check("margin_full", f"{MARGIN_SIGMAS:g}-sigma decisions kept, full forward",
                         None if mg["full"] is None else mg["full"] == 1.0, mg["full"], 1.0))
    checks.append(_check("margin_cached", f"{MARGIN_SIGMAS:g}-sigma decisions kept, cached decode",
                         None if mg["cached"] is None else mg["cached"] == 1.0, mg["cached"], 1.0))
    # KL grows with the square of the logit error: the mode's RMS bar carried over to KL
    # (eager reproduces transformers' bf16 roundings, so it sits at HF's own KL +- noise).
    kl_bar = ref["hf_bf16"]["kl_mean"] * (BF16_RATIO_MAX[mode] ** 2 if dtype == "bfloat16" else 1.0)
    label = "mean KL <= HF bf16's mean KL" + (
        f" x {BF16_RATIO_MAX[mode] ** 2:.4g}" if dtype == "bfloat16" and mode == "eager" else "")
    checks.append(_check("kl_mean", label, m["kl_mean"] <= kl_bar, m["kl_mean"], kl_bar))
    return checks


def _resolve(model: str) -> str:
    import hubzoo

    if not str(model):
        raise VerifyError("MODEL is empty")
    try:
        hubzoo.hub.ensure(str(model))  # downloads a repo id the cache lacks (unless offline)
        snapshot = hubzoo._hubzoo.resolve_snapshot(str(model))
    except hubzoo.Error as e:
        raise VerifyError(f"{model}: cannot resolve the model: {e}") from None
    if not os.path.isfile(os.path.join(snapshot, "config.json")):
        raise VerifyError(f"{model}: no config.json in {snapshot}")
    return snapshot


def _reference_for_input(hf32, hf16, inp, names, progress: Progress, new_tokens: int) -> dict:
    """HF fp32 and bf16 on one input: logits, intermediates, sigma, routing confidence, margins, greedy."""
    n = len(inp.ids)
    progress(f"HF fp32 forward, {inp.name} input ({n} tokens)")
    logits32, cap32 = reference.forward(hf32, inp.ids)
    progress(f"HF bf16 forward, {inp.name} input ({n} tokens)")
    logits16, cap16 = reference.forward(hf16, inp.ids)
    err16 = metrics.error_stats(logits16, logits32)
    sigma = err16["rms"]
    kl16 = metrics.kl_per_token(logits32, logits16)
    argmax32 = metrics.top1(logits32)
    margin = metrics.top2_margin(logits32)
    # The argmax rung counts a position when fp32's margin clears bf16's noise and, in a
    # sparse MoE model, the token's routing does too in every sparse layer (routing.py); the
    # noise is measured without the tokens whose routing is not confident (routing flips).
    conf = routing.confidence(cap32, cap16, MARGIN_SIGMAS)
    msigma = routing.margin_sigma(logits32, logits16, conf, sigma)
    by_margin = margin > MARGIN_SIGMAS * msigma
    confident = by_margin & conf["tokens"]
    hf16_routing = routing.kept(cap16, conf)
    route_layers = list(conf["layers"].values())
    routing_json = {
        "sparse_layers": sorted(conf["layers"]),
        "sigma_r": [lay["sigma_r"] for lay in route_layers],
        "threshold": [MARGIN_SIGMAS * lay["sigma_r"] for lay in route_layers],
        "pairs": n * len(route_layers),
        "confident_pairs": int(sum(lay["confident"].sum() for lay in route_layers)),
        "after_near_tie": int(sum(lay["after_near_tie"] for lay in route_layers)),
        "excluded_tokens": int((~conf["tokens"]).sum()),
        "excluded_margin_positions": int((by_margin & ~conf["tokens"]).sum()),
        "hf_bf16_kept": hf16_routing["kept"],
    }
    hf_bf16 = {
        "logits_rms": err16["rms"],
        "logits_max_abs": err16["max_abs"],
        "kl_mean": float(kl16.mean()),
        "kl_max": float(kl16.max()),
        "top1_agreement": metrics.fraction(metrics.top1(logits16) == argmax32),
        "top5_containment": metrics.fraction(metrics.top_k_contains(logits16, argmax32, TOP_K)),
        "margin_full": metrics.fraction(metrics.top1(logits16)[confident] == argmax32[confident]),
        "greedy": None,  # filled in when a bf16 column runs
    }
    del logits16
    progress(f"HF fp32 greedy generate, {inp.name} input ({new_tokens} new tokens)")
    greedy32 = reference.generate(hf32, inp.ids, new_tokens)
    return {
        "logits": logits32,
        "captured": cap32,
        "argmax": argmax32,
        "confident": confident,
        "routing": conf,
        "json": {
            "tokens": n,
            "sigma": sigma,
            "margin_sigma": msigma,
            "margin_threshold": MARGIN_SIGMAS * msigma,
            "margin_positions": int(by_margin.sum()),
            "decided_positions": int(confident.sum()),
            "routing": routing_json,
            "hf_fp32_greedy": greedy32,
            "hf_bf16": hf_bf16,
            "layers": {
                "names": names,
                "hf_fp32_rms": [metrics.rms(cap32[k]) if k in cap32 else None for k in names],
                "hf_bf16_err_rms": _layer_rms(cap16, cap32, names),
            },
        },
    }


def _column(ours, dtype, mode, inp, ref, names, progress: Progress, new_tokens: int) -> dict:
    n = len(inp.ids)
    ids = inp.ids[None]
    label = column_name(dtype, mode, inp.name)
    progress(f"hubzoo {label}: forward with capture ({n} tokens)")
    available = set(ours.capture_names)
    wanted = [k for k in names if k in available and k != "logits"]  # logits come back anyway
    conf = ref["routing"]
    route_names = [k for k in routing.router_names(conf["layers"]) if k in available]
    wanted += route_names
    logits, captured = ours.forward(ids, capture=wanted)
    logits = logits[0]
    captured = {k: v[0] for k, v in captured.items()}
    captured["logits"] = logits
    ref32 = ref["logits"]
    argmax32 = ref["argmax"]
    confident = ref["confident"]
    sigma = ref["json"]["sigma"]

    err = metrics.error_stats(logits, ref32)
    kl = metrics.kl_per_token(ref32, logits)
    ours_top1 = metrics.top1(logits)
    m = {
        "logits_rms": err["rms"],
        "logits_max_abs": err["max_abs"],
        "bf16_ratio": err["rms"] / sigma if sigma > 0 else None,
        "kl_mean": float(kl.mean()),
        "kl_max": float(kl.max()),
        "top1_agreement": metrics.fraction(ours_top1 == argmax32),
    }
    # The top-5 rung in bf16 skips the tokens whose routing nearly ties in some sparse layer
    # (routing.py): a bf16 flip there moves the token far past the noise, in transformers'
    # own bf16 too. fp32 and dense models check every position. Exclusions are reported.
    in_top5 = metrics.top_k_contains(logits, argmax32, TOP_K)
    top5_at = conf["tokens"] if dtype == "bfloat16" else np.ones(n, dtype=bool)
    m["top5_containment"] = metrics.fraction(in_top5[top5_at])
    m["top5_positions"] = int(top5_at.sum())
    m["top5_excluded"] = n - m["top5_positions"]
    m["top5_excluded_missing"] = int((~in_top5 & ~top5_at).sum())

    prefill = 1 if inp.name == "short" or n <= DECODE_STEPS_LONG else n - DECODE_STEPS_LONG
    prefill = min(max(prefill, 1), n)
    progress(f"hubzoo {label}: cached decode (prefill {prefill}, {n - prefill} decode steps)")
    inc, inc_captured = ours.forward_incremental(ids, prefill, capture=route_names)
    inc = inc[0]
    inc_captured = {k: v[0] for k, v in inc_captured.items()}
    dec = slice(prefill, n)
    if n > prefill:
        inc_top1 = metrics.top1(inc[dec])
        cached = {
            "prefill": prefill,
            "positions": n - prefill,
            "argmax_agreement": metrics.fraction(inc_top1 == metrics.top1(logits[dec])),
            "max_abs_diff": metrics.error_stats(inc[dec], logits[dec])["max_abs"],
        }
        conf_dec = confident[dec]
        margin_cached = metrics.fraction(inc_top1[conf_dec] == argmax32[dec][conf_dec])
        cached_confident = int(conf_dec.sum())
    else:
        cached = {"prefill": prefill, "positions": 0, "argmax_agreement": None, "max_abs_diff": None}
        margin_cached, cached_confident = None, 0
    del inc
    full_routing = routing.kept(captured, conf)
    cached_routing = routing.kept(inc_captured, conf, dec) if n > prefill else {"pairs": 0, "kept": 0, "lost": []}
    m["cached"] = cached
    m["routing"] = {
        "pairs": full_routing["pairs"],
        "kept": full_routing["kept"],
        "lost": full_routing["lost"],
        "cached_pairs": cached_routing["pairs"],
        "cached_kept": cached_routing["kept"],
        "cached_lost": cached_routing["lost"],
    }
    m["margin"] = {
        "threshold": ref["json"]["margin_threshold"],
        "positions": int(confident.sum()),
        "full": metrics.fraction(ours_top1[confident] == argmax32[confident]),
        "cached_positions": cached_confident,
        "cached": margin_cached,
    }

    progress(f"hubzoo {label}: greedy generate ({new_tokens} new tokens)")
    tokens = [int(t) for t in ours.generate(ids, max_new_tokens=new_tokens)[0]]
    m["greedy"] = _greedy(tokens, ref["json"]["hf_fp32_greedy"])

    layers = {"names": names, "rms": _layer_rms(captured, ref["captured"], names)}
    checks = _checks(dtype, mode, m, ref["json"])
    verdicts = [c["pass"] for c in checks if c["pass"] is not None]
    return {
        "name": label,
        "dtype": dtype,
        "mode": mode,
        "input": inp.name,
        "tokens": n,
        "metrics": m,
        "layers": layers,
        "checks": checks,
        "passed": all(verdicts),
    }


def _load_references(model, snapshot: str, config: dict, built: dict):
    """(HF fp32, HF bf16, num_layers, layer names, Pairs or None, the inputs the columns run).
    An encoder-decoder's columns run its decoder sequences (verify/seq2seq.py)."""
    s2s = seq2seq.is_seq2seq(config)
    try:
        load = seq2seq.load_hf if s2s else reference.load
        hf32, hf16 = load(snapshot, "float32"), load(snapshot, "bfloat16")
    except Exception as e:  # transformers raises many types for an unloadable snapshot
        raise VerifyError(f"{model}: transformers cannot load {snapshot}: {type(e).__name__}: {e}") from None
    if not s2s:
        num_layers = len(getattr(hf32.model, "language_model", hf32.model).layers)
        return hf32, hf16, num_layers, reference.layer_names(num_layers), None, built
    pairs = seq2seq.Pairs(hf32.config.decoder_start_token_id)
    try:
        runs = {name: pairs.decoder_input(built[name]) for name in INPUTS}
    except ValueError as e:
        raise VerifyError(f"{model}: {e}") from None
    names = seq2seq.layer_names(config)
    return (seq2seq.HFReference(hf32, pairs), seq2seq.HFReference(hf16, pairs),
            len(hf32.decoder.block), names, pairs, runs)


def run(model, dtypes=DTYPES, modes=MODES, threads: int | None = None, long_tokens: int = 512,
        new_tokens: int = NEW_TOKENS, progress: bool | Progress = True, name: str | None = None) -> dict:
    """Runs the ladder for every dtype x mode x input; returns the report (see hubzoo.verify).

    name: how reports title the model (default: MODEL as given).
    """
    import hubzoo

    from . import report as report_mod

    dtypes = list(dtypes)
    modes = list(modes)
    for d in dtypes:
        if d not in DTYPES:
            raise VerifyError(f"unknown dtype {d!r} (known: {', '.join(DTYPES)})")
    for md in modes:
        if md not in MODES:
            raise VerifyError(f"unknown mode {md!r} (known: {', '.join(MODES)})")
    if "bf16dot" in modes and "bfloat16" not in dtypes:
        if modes == ["bf16dot"]:
            raise VerifyError("mode bf16dot runs with dtype bfloat16")
        modes.remove("bf16dot")  # "all" modes of float32 only
    if long_tokens < 1:
        raise VerifyError(f"--long-tokens must be positive, got {long_tokens}")
    display_name = name or str(model)
    prog = progress if isinstance(progress, Progress) else Progress(bool(progress))
    snapshot = _resolve(model)
    with open(os.path.join(snapshot, "config.json")) as f:
        config = json.load(f)
    if isinstance(config.get("text_config"), dict):  # a multimodal checkpoint: its text tower
        config = {**config["text_config"], "architectures": config.get("architectures")}

    import torch

    if threads:
        torch.set_num_threads(int(threads))
    meta = metadata.collect(int(threads) if threads else (os.cpu_count() or 1), torch.get_num_threads())
    notes: list[str] = []

    with reference.quiet_transformers():
        prog(f"inputs for {model}")
        built, input_notes = inputs_mod.build(snapshot, config, long_tokens)
        notes += input_notes
        prog("loading HF references (eager attention), fp32 and bf16")
        hf32, hf16, num_layers, names, pairs, runs = _load_references(model, snapshot, config, built)
        if pairs is not None:
            notes.append(f"encoder-decoder: the input feeds the encoder; the columns' positions are the "
                         f"decoder's, teacher-forced (start token + the input's first "
                         f"{seq2seq.DECODER_TOKENS - 1} tokens); greedy generates from the encoder input")

        refs = {}
        for name in INPUTS:
            refs[name] = _reference_for_input(hf32, hf16, runs[name], names, prog, new_tokens)
        del hf32
        gc.collect()

        columns: list[dict] = []
        bf16_greedy_done = False
        for dtype in dtypes:
            for mode in modes:
                if mode == "bf16dot" and dtype != "bfloat16":
                    continue  # bf16 dot products multiply bf16 weights
                prog(f"hubzoo load {dtype}/{mode}")
                try:
                    if pairs is None:
                        ours = hubzoo.CausalLM.from_pretrained(snapshot, dtype=dtype, mode=mode,
                                                               num_threads=int(threads or 0))
                    else:
                        ours = seq2seq.Ours(hubzoo.Seq2SeqLM.from_pretrained(
                            snapshot, dtype=dtype, mode=mode, num_threads=int(threads or 0)), pairs)
                except hubzoo.Error as e:
                    raise VerifyError(f"{model}: hubzoo cannot load {snapshot} as {dtype}/{mode}: {e}") from None
                if dtype == "bfloat16" and not bf16_greedy_done:
                    # Short input only: transformers' bf16 decode on CPU is slow, and this row is context.
                    prog(f"HF bf16 greedy generate, short input ({new_tokens} new tokens)")
                    hf_tokens = reference.generate(hf16, runs["short"].ids, new_tokens)
                    refs["short"]["json"]["hf_bf16"]["greedy"] = _greedy(hf_tokens,
                                                                         refs["short"]["json"]["hf_fp32_greedy"])
                    bf16_greedy_done = True
                for name in INPUTS:
                    columns.append(_column(ours, dtype, mode, runs[name], refs[name], names, prog, new_tokens))
                del ours
                gc.collect()
        del hf16

    failed = [f"{c['name']}: {k['label']}" for c in columns for k in c["checks"] if k["pass"] is False]
    report = {
        "format": FORMAT,
        "model": str(model),
        "name": display_name,
        "snapshot": snapshot,
        "architecture": (config.get("architectures") or ["?"])[0],
        "num_layers": num_layers,
        "vocab_size": int(config.get("vocab_size", 0)),
        "metadata": meta,
        "settings": {
            "dtypes": dtypes,
            "modes": modes,
            "long_tokens": long_tokens,
            "new_tokens": new_tokens,
            "decode_steps_long": DECODE_STEPS_LONG,
            "margin_sigmas": MARGIN_SIGMAS,
            "top_k": TOP_K,
            "thresholds": {
                "fp32_logits_atol": FP32_LOGITS_ATOL,
                "cached_atol_fp32": CACHED_ATOL_FP32,
                "bf16_ratio_max": BF16_RATIO_MAX,
            },
        },
        "inputs": {
            name: {"kind": built[name].kind, "tokens": len(built[name].ids),
                   "description": built[name].description, "ids": [int(i) for i in built[name].ids]}
            for name in INPUTS
        },
        "references": {name: refs[name]["json"] for name in INPUTS},
        "columns": columns,
        "summary": {
            "passed": bool(columns) and not failed,
            "failed": failed,
        },
        "notes": notes,
        "elapsed_s": prog.elapsed(),
    }
    report = _finite(report)
    report["matrix"] = report_mod.matrix(report)
    prog(f"done: {'PASS' if report['summary']['passed'] else 'FAIL'}")
    return report
