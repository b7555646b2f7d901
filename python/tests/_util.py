"""Helpers shared by the parity tests: transformers-side capture, padding, CLI runs, error log."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
HUBZOO_BIN = BUILD / "hubzoo"
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"


def load_testing(name: str):
    """hubzoo.testing.<name> from the source tree (works before the bindings are built), once
    per process: registered as hubzoo_testing_<name>, the name the modules use for each other."""
    key = f"hubzoo_testing_{name}"
    if key in sys.modules:
        return sys.modules[key]
    path = REPO / "python" / "hubzoo" / "testing" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


tiny_models = load_testing("tiny_models")


def capture_names(num_layers: int) -> list[str]:
    names = ["embed"]
    for i in range(num_layers):
        names += [f"layers.{i}", f"layers.{i}.self_attn", f"layers.{i}.mlp"]
    return names + ["norm", "logits"]


def hf_forward(model, input_ids, attention_mask=None, position_ids=None, capture=True):
    """transformers forward in fp32 -> (logits, {name: array}) with hubzoo's intermediate names.

    Hooks: embed_tokens output, each decoder layer output, self_attn output[0] (after
    o_proj, before the residual add), mlp output, final norm output. In sandwich-norm
    layers (Gemma) the branches are the post-norms' outputs, which is what the residual adds.
    """
    import torch

    captured: dict[str, np.ndarray] = {}
    handles = []

    def hook(name):
        def fn(_module, _inputs, output):
            if isinstance(output, (tuple, list)):
                output = output[0]
            captured[name] = output.detach().float().numpy().copy()

        return fn

    if capture:
        inner = getattr(model.model, "language_model", model.model)  # a multimodal model's text tower
        handles.append(inner.embed_tokens.register_forward_hook(hook("embed")))
        for i, layer in enumerate(inner.layers):
            handles.append(layer.register_forward_hook(hook(f"layers.{i}")))
            # Sandwich-norm layers (Gemma) add the post-norm of each branch to the residual.
            sandwich = hasattr(layer, "post_feedforward_layernorm")
            attn_out = layer.post_attention_layernorm if sandwich else layer.self_attn
            mlp_out = layer.post_feedforward_layernorm if sandwich else layer.mlp
            handles.append(attn_out.register_forward_hook(hook(f"layers.{i}.self_attn")))
            handles.append(mlp_out.register_forward_hook(hook(f"layers.{i}.mlp")))
        handles.append(inner.norm.register_forward_hook(hook("norm")))
    kwargs = {"input_ids": torch.as_tensor(np.asarray(input_ids, dtype=np.int64))}
    if attention_mask is not None:
        kwargs["attention_mask"] = torch.as_tensor(np.asarray(attention_mask, dtype=np.int64))
    if position_ids is not None:
        kwargs["position_ids"] = torch.as_tensor(np.asarray(position_ids, dtype=np.int64))
    try:
        with torch.no_grad():
            logits = model(**kwargs, use_cache=False).logits.to(torch.float32).numpy()
    finally:
        for h in handles:
            h.remove()
    captured["logits"] = logits
    return logits, captured


def hf_generate(model, input_ids, attention_mask=None, max_new_tokens=32):
    """Greedy transformers generation -> int64 [batch, new_tokens] (new tokens only)."""
    import torch

    ids = torch.as_tensor(np.asarray(input_ids, dtype=np.int64))
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(np.asarray(attention_mask))
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=max_new_tokens,
        )
    return out[:, ids.shape[1] :].numpy().astype(np.int64)


def positions_from_mask(mask: np.ndarray) -> np.ndarray:
    """Position ids as transformers' generate() derives them from a left-padded mask."""
    return np.maximum(np.cumsum(mask, axis=-1) - 1, 0).astype(np.int64)


def left_pad(prompts: list[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(prompts), width), dtype=np.int64)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = p
        mask[row, width - len(p) :] = 1
    return ids, mask


def random_prompt(vocab_size: int, length: int, seed: int) -> np.ndarray:
    """Token ids avoiding the special ids 0..2 of the tiny models."""
    return np.random.default_rng(seed).integers(3, vocab_size, size=length, dtype=np.int64)


def assert_argmax_equal(ours: np.ndarray, ref: np.ndarray, what: str = "") -> None:
    a, b = ours.argmax(-1), ref.argmax(-1)
    if np.array_equal(a, b):
        return
    bad = np.argwhere(a != b)
    top2 = np.sort(ref, axis=-1)[..., -2:]
    margins = [float(top2[tuple(i)][1] - top2[tuple(i)][0]) for i in bad[:5]]
    raise AssertionError(
        f"{what}argmax differs at {len(bad)} of {a.size} positions, first {bad[:5].tolist()} "
        f"(ours {a[tuple(bad[0])]}, reference {b[tuple(bad[0])]}; reference top-1/top-2 margins {margins})"
    )


# Max abs error per named intermediate, written to build/parity_errors.json at session end.
PARITY_ERRORS: dict[str, dict[str, float]] = {}


def record_error(model_key: str, name: str, ours: np.ndarray, ref: np.ndarray) -> float:
    err = float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
    PARITY_ERRORS.setdefault(model_key, {})[name] = err
    return err


def write_parity_errors() -> Path | None:
    if not PARITY_ERRORS:
        return None
    out = BUILD / "parity_errors.json" if BUILD.is_dir() else Path("parity_errors.json")
    existing = {}
    if out.is_file():
        try:
            existing = json.loads(out.read_text())
        except ValueError:
            existing = {}
    existing.update(PARITY_ERRORS)
    out.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")
    return out


def allclose_failure(name: str, ours: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when ours ~= ref (np.testing.assert_allclose's rule), else a one-line summary."""
    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    ratio = diff / (atol + rtol * np.abs(ref.astype(np.float64)))
    bad = int((ratio > 1).sum())
    if bad == 0:
        return None
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return (
        f"{name}: {bad} of {ratio.size} elements outside rtol={rtol} atol={atol}; max abs {diff.max():.3g}; "
        f"worst at {tuple(int(i) for i in worst)}: ours {ours[worst]:.7g} vs {ref[worst]:.7g}"
    )


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        [str(HUBZOO_BIN), *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )


def assert_cli_error(proc: subprocess.CompletedProcess, *must_mention: str) -> str:
    """The CLI failed cleanly: exit code > 0 (no signal), one 'error:' line on stderr naming things."""
    assert proc.returncode > 0, f"exit code {proc.returncode} (negative = killed by a signal); stderr={proc.stderr!r}"
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {proc.stderr!r}"
    assert lines[0].startswith("error:"), lines[0]
    for word in must_mention:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]


def serve(path, log_path, *args: str, timeout: float = 60) -> tuple[subprocess.Popen, str]:
    """`hubzoo serve -m path` on a free loopback port, output to log_path: (process, its URL)."""
    log = open(log_path, "w")
    proc = subprocess.Popen([str(HUBZOO_BIN), "serve", "-m", str(path), "--port", "0", *args],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}: {log_path.read_text()}")
        m = re.search(r"listening on (http://\S+)", log_path.read_text())
        if m:
            return proc, m.group(1)
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start: " + log_path.read_text())
