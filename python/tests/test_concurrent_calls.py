"""One model called from several Python threads at once (the bindings release the GIL):
every call gives the bits it gives alone. The decoder's step buffers belong to the model,
so concurrent forwards must not share them mid-step."""

from __future__ import annotations

import threading

import numpy as np


def _run_threads(fn, n_threads):
    errors, results = [], [None] * n_threads

    def work(k):
        try:
            results[k] = fn(k)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_concurrent_forward_and_generate_match_alone(hz, tiny_paths):
    lm = hz.CausalLM.from_pretrained(tiny_paths["gemma4_text"])
    rng = np.random.default_rng(0)
    # Different lengths per thread, so a shared buffer would be resized under another call.
    prompts = [rng.integers(3, lm.vocab_size, size=(1, 8 + 9 * k)) for k in range(4)]
    alone_logits = [lm.forward(p) for p in prompts]
    alone_tokens = [lm.generate(p, max_new_tokens=8) for p in prompts]

    def calls(k):
        out = []
        for _ in range(6):
            out.append((lm.forward(prompts[k]), lm.generate(prompts[k], max_new_tokens=8)))
        return out

    for k, runs in enumerate(_run_threads(calls, len(prompts))):
        for logits, tokens in runs:
            assert np.array_equal(logits, alone_logits[k])
            assert np.array_equal(tokens, alone_tokens[k])
