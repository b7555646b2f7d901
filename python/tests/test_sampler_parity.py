"""hubzoo's sampling processors against transformers' logits processors on the same logits.

transformers' order (generation/utils.py _get_logits_processor): SequenceBias (OpenAI's
logit_bias) -> RepetitionPenalty -> Temperature -> TopK -> TopP -> MinP. Presence and
frequency penalties are OpenAI's (no transformers processor): logit -= frequency * count
+ presence for each generated token, applied after the repetition penalty.

Each case runs hubzoo's Sampler::process through `_hubzoo.ops.sampler_process`.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
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

from hubzoo import _hubzoo

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


def test_sampler_process_equals_transformers():
    cases = make_cases()
    kept = [sum(x is not None for x in c["expected"]) for c in cases]
    assert min(kept) >= 1 and max(kept) == VOCAB and any(1 < k < 40 for k in kept)  # the filters bite
    for c in cases:
        p = c["params"]
        ours = _hubzoo.ops.sampler_process(
            np.asarray(c["logits"], dtype=np.float32), c["prompt"], c["generated"],
            temperature=p["temperature"], top_k=p["top_k"], top_p=p["top_p"], min_p=p["min_p"],
            repetition_penalty=p["repetition_penalty"], presence_penalty=p["presence_penalty"],
            frequency_penalty=p["frequency_penalty"],
            logit_bias=[(int(k), float(v)) for k, v in p["logit_bias"].items()])
        expected = c["expected"]
        removed = np.array([x is None for x in expected])
        np.testing.assert_array_equal(np.isinf(ours), removed, err_msg=c["name"])
        want = np.array([0.0 if x is None else x for x in expected], dtype=np.float32)
        tol = 1e-6 * np.maximum(1.0, np.abs(want))
        bad = ~removed & (np.abs(ours - want) > tol)
        assert not bad.any(), f"{c['name']}: tokens {np.nonzero(bad)[0][:5]} differ"


def test_sampler_process_rejects_bad_values():
    logits = np.zeros(10, dtype=np.float32)
    cases = {"top_p": {"top_p": 0.0}, "temperature": {"temperature": -1.0}, "min_p": {"min_p": 1.5},
             "logit_bias": {"logit_bias": [(10, 1.0)]}}
    for name, kwargs in cases.items():
        with pytest.raises(_hubzoo.InvalidArgument, match=name):
            _hubzoo.ops.sampler_process(logits, [], [], **kwargs)
