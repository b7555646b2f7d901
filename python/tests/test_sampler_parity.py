"""hubzoo's sampling processors against transformers' logits processors on the same logits.

transformers' order (generation/utils.py _get_logits_processor): SequenceBias (OpenAI's
logit_bias) -> RepetitionPenalty -> Temperature -> TopK -> TopP -> MinP. Presence and
frequency penalties are OpenAI's (no transformers processor): logit -= frequency * count
+ presence for each generated token, applied after the repetition penalty.

The cases are written here; the C++ gtest SamplerParity reads them (HUBZOO_SAMPLER_CASES)
and runs hubzoo's Sampler::process on each.
"""

from __future__ import annotations

import itertools
import json
import subprocess

import numpy as np
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import _util

VOCAB = 1000


def reference(logits, prompt, generated, p):
    procs = LogitsProcessorList()
    if p["logit_bias"]:
        procs.append(SequenceBiasLogitsProcessor(sequence_bias=[[[int(k)], v] for k, v in p["logit_bias"].items()]))
    if p["repetition_penalty"] != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(p["repetition_penalty"]))
    input_ids = torch.tensor([prompt + generated], dtype=torch.long)
    scores = procs(input_ids, torch.tensor(logits, dtype=torch.float32)[None])
    if p["presence_penalty"] or p["frequency_penalty"]:
        counts = np.bincount(np.asarray(generated, dtype=np.int64), minlength=VOCAB)
        for tok in np.nonzero(counts)[0]:
            scores[0, tok] -= np.float32(p["frequency_penalty"] * counts[tok] + p["presence_penalty"])
    warpers = LogitsProcessorList()
    if p["temperature"] != 1.0:
        warpers.append(TemperatureLogitsWarper(p["temperature"]))
    if p["top_k"] > 0:
        warpers.append(TopKLogitsWarper(p["top_k"]))
    if p["top_p"] < 1.0:
        warpers.append(TopPLogitsWarper(p["top_p"]))
    if p["min_p"] > 0.0:
        warpers.append(MinPLogitsWarper(p["min_p"]))
    out = warpers(input_ids, scores)[0].numpy()
    return [None if np.isinf(x) else float(x) for x in out]


def make_cases():
    rng = np.random.default_rng(0)
    cases = []
    grid = itertools.product([0.7, 1.0, 1.6], [0, 40], [1.0, 0.9, 0.5], [0.0, 0.05, 0.3])
    for i, (temperature, top_k, top_p, min_p) in enumerate(grid):
        logits = (rng.standard_normal(VOCAB) * (1.0 + i % 4)).astype(np.float32)
        prompt = rng.integers(0, VOCAB, size=12).tolist()
        generated = rng.integers(0, VOCAB, size=8).tolist() + [int(np.argmax(logits))]
        p = {
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "min_p": min_p,
            "repetition_penalty": [1.0, 1.3, 0.8][i % 3],
            "presence_penalty": [0.0, 0.6, -0.4][(i // 3) % 3],
            "frequency_penalty": [0.0, 0.3][i % 2],
            "logit_bias": {} if i % 4 else {str(int(rng.integers(VOCAB))): 5.0, "7": -100.0},
        }
        name = f"case{i}:T={temperature},k={top_k},p={top_p},min_p={min_p}"
        cases.append({
            "name": name,
            "logits": logits.tolist(),
            "prompt": prompt,
            "generated": generated,
            "params": p,
            "expected": reference(logits.tolist(), prompt, generated, p),
        })
    return cases


def test_sampler_process_equals_transformers(tmp_path):
    cases = make_cases()
    kept = [sum(x is not None for x in c["expected"]) for c in cases]
    assert min(kept) >= 1 and max(kept) == VOCAB and any(1 < k < 40 for k in kept)  # the filters bite
    path = tmp_path / "sampler_cases.json"
    path.write_text(json.dumps({"cases": cases}))
    binary = _util.BUILD / "hubzoo_tests"
    proc = subprocess.run(
        [str(binary), "--gtest_filter=SamplerParity.*"],
        env={"HUBZOO_SAMPLER_CASES": str(path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "[  PASSED  ] 1 test" in proc.stdout and "SKIPPED" not in proc.stdout, proc.stdout[-2000:]
