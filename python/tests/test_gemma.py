"""Gemma 2 / Gemma 3 / Gemma 4 text beyond the shared ladder (test_decoder_parity.py, test_bf16.py run
every tiny variant, Gemma included): inputs many sliding windows long, the ring-buffer KV
cache's accounting, config spellings and bad configs.

Long-input rules (docs/design.md) on inputs 10+ windows long, fp32 against transformers eager:
full forward logits (atol 1e-3, argmax kept wherever fp32's top-1/top-2 margin > 8 sigma),
cached token-by-token decoding from a 1-token prefill, and greedy generation that runs
past the window on both sides' caches (transformers' sliding-window DynamicCache, ours the
ring buffer).
"""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import _util
from _util import hf_forward, hf_generate, random_prompt

GEMMAS = [v for v, (arch, _) in _util.tiny_models.VARIANTS.items() if arch.startswith("Gemma")]
FLOAT = 4  # bytes of a key or value element: float32
BF16 = 2  # in bf16 modes (bf16 values, kept in 2 bytes)
PAGE = 16  # positions per KV-cache page (layers/kv_cache.h)


def pages_held(length: int, win: int) -> int:
    """Pages a layer holds at `length` positions: those of its last `win` (0: all)."""
    first = max(0, length - win) // PAGE if win else 0
    return -(-length // PAGE) - first


def pages_reserved(n: int, win: int) -> int:
    """Pages a KV budget reserves per sequence of n positions (KvCache::slot_bytes_at)."""
    pages = -(-n // PAGE)
    return min(pages, 2 * (-(-win // PAGE) + 1)) if win else pages


def window(hf) -> int:
    return hf.config.sliding_window


def long_prompt(hf, windows=10, seed=5) -> np.ndarray:
    return random_prompt(hf.config.vocab_size, windows * window(hf) + 3, seed)


@pytest.fixture(params=GEMMAS, scope="module")
def variant(request):
    return request.param


def test_variants_cross_their_window(variant, hf_tiny):
    hf = hf_tiny(variant)
    types = hf.config.layer_types
    assert "sliding_attention" in types and "full_attention" in types
    assert 8 <= window(hf) <= 16  # the ladder's 37-token prompts cross it


def test_long_forward_matches_transformers(variant, hf_tiny, our_tiny):
    hf, ours = hf_tiny(variant), our_tiny(variant)
    ids = long_prompt(hf)[None]
    ref, _ = hf_forward(hf, ids, capture=False)
    got = ours.forward(ids)
    err = _util.record_error(f"tiny/{variant}", f"long({ids.shape[1]})/logits", got, ref)
    assert err <= 1e-3, f"max abs logit error {err}"
    _util.assert_argmax_equal(got, ref)


def test_long_cached_decode_matches_transformers(variant, hf_tiny, our_tiny):
    """1-token prefill, then one cached step per token, 10+ windows past the first."""
    hf, ours = hf_tiny(variant), our_tiny(variant)
    ids = long_prompt(hf, seed=6)[None]
    ref, _ = hf_forward(hf, ids, capture=False)
    full = ours.forward(ids)
    for prefill in (1, window(hf) - 1, 3 * window(hf) + 2):
        inc = ours.forward_incremental(ids, prefill)
        np.testing.assert_array_equal(inc, full, err_msg=f"prefill {prefill}: cached != full")
    err = float(np.max(np.abs(inc - ref)))
    assert err <= 1e-3, f"cached decode vs transformers: max abs {err}"
    _util.assert_argmax_equal(inc, ref)


def test_greedy_generation_past_the_window(variant, hf_tiny, our_tiny):
    hf, ours = hf_tiny(variant), our_tiny(variant)
    ids = random_prompt(hf.config.vocab_size, 5, seed=7)[None]
    n = 6 * window(hf)
    ref = hf_generate(hf, ids, max_new_tokens=n)
    got = ours.generate(ids, max_new_tokens=n)
    assert ref.shape[1] > 2 * window(hf), "EOS came too early for this test to cross the window"
    assert got.tolist() == ref.tolist()


def cache_layers(hf) -> list[tuple[int, int]]:
    """(row size, window) of each KV-cache layer the engine should hold: one per decoder
    layer that computes keys (Gemma 4's KV-shared layers reuse an earlier layer's)."""
    out = []
    for layer, kind in zip(hf.model.layers, hf.config.layer_types):
        attn = layer.self_attn
        if getattr(attn, "is_kv_shared_layer", False):
            continue
        out.append((attn.k_proj.out_features, window(hf) if kind == "sliding_attention" else 0))
    return out


def test_sliding_cache_stops_at_the_window(variant, hf_tiny, our_tiny):
    """The engine's own accounting: a sliding layer holds window rows per slot, at any length."""
    hf, ours = hf_tiny(variant), our_tiny(variant)
    w = window(hf)
    layers = cache_layers(hf)
    assert any(win for _, win in layers) and any(not win for _, win in layers)
    for length in (w - 3, w, w + 1, 4 * w, 10 * w + 3):
        ids = random_prompt(hf.config.vocab_size, length, seed=length)[None]
        for prefill in (1, length):  # token-by-token decode, and one prefill chunk
            ours.forward_incremental(ids, prefill)
            stats = ours.kv_cache_stats()
            assert stats["lengths"] == [length]
            assert stats["windows"] == [win for _, win in layers]
            assert stats["row_sizes"] == [row for row, _ in layers]
            for i, (row, win) in enumerate(layers):
                held = stats["layer_slot_bytes"][i][0]
                # Whole pages: a windowed layer's stop at those of its window.
                assert held == pages_held(length, win) * 2 * PAGE * row * FLOAT, (i, length, held)
                if win:
                    assert held <= (-(-win // PAGE) + 1) * 2 * PAGE * row * FLOAT
    # What a KV budget reserves per sequence (the scheduler's kv_budget_bytes uses it).
    for n in (1, w, 1000):
        want = sum(2 * pages_reserved(n, win) * PAGE * row * FLOAT for row, win in layers)
        assert ours.kv_slot_bytes_at(n) == want


@pytest.mark.parametrize("mode", ["eager", "fused"])
def test_bf16_past_the_window(variant, mode, hz, tiny_paths, hf_tiny):
    """bf16: the ring buffer stops at the window, cached decode equals the full forward
    bit for bit, and a prompt alone equals itself in a padded batch."""
    hf = hf_tiny(variant)
    w = window(hf)
    ours = hz.CausalLM.from_pretrained(str(tiny_paths[variant]), dtype="bfloat16", mode=mode)
    ids = random_prompt(hf.config.vocab_size, 5 * w, seed=9)[None]
    full = ours.forward(ids)
    np.testing.assert_array_equal(ours.forward_incremental(ids, 2), full)
    stats = ours.kv_cache_stats()
    for i, (row, win) in enumerate(cache_layers(hf)):
        if win:
            assert stats["layer_slot_bytes"][i][0] == pages_held(5 * w, win) * 2 * PAGE * row * BF16
    prompts = [random_prompt(hf.config.vocab_size, n, seed=n) for n in (3 * w + 1, w - 2, 2 * w)]
    batch, mask = _util.left_pad(prompts, _util.tiny_models.SPECIAL_TOKENS["pad_token_id"])
    batched = ours.forward_incremental(batch, 5, attention_mask=mask)
    for row, p in enumerate(prompts):
        alone = ours.forward(p[None])[0]
        np.testing.assert_array_equal(batched[row, batch.shape[1] - len(p):], alone)


# --- config spellings -------------------------------------------------------------------


def _rewrite(src, dst, edit):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


def _gemma3_v4_spelling(c):
    """Gemma 3 as transformers 4 wrote it: rope_theta / rope_local_base_freq / rope_scaling
    and sliding_window_pattern instead of rope_parameters and layer_types."""
    assert c["layer_types"] == ["sliding_attention"] * 2 + ["full_attention", "sliding_attention"]
    rope = c.pop("rope_parameters")
    del c["layer_types"], c["_sliding_window_pattern"]
    c["sliding_window_pattern"] = 3  # sliding, sliding, full, sliding
    c["rope_theta"] = rope["full_attention"]["rope_theta"]
    c["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
    c["rope_scaling"] = {"rope_type": "linear", "factor": rope["full_attention"]["factor"]}


def _gemma2_default_pattern(c):
    assert c["layer_types"] == ["sliding_attention", "full_attention"] * 2
    del c["layer_types"]  # Gemma 2 alternates, sliding first


def _gemma4_hub_spelling(c):
    """Gemma 4 as the Hub's config.json spells head geometry: global_head_dim and
    num_global_key_value_heads, from which transformers derives per_layer_config."""
    plc = c.pop("per_layer_config")
    assert sorted(plc) == ["1", "3"]
    c["global_head_dim"] = plc["1"]["head_dim"]
    c["num_global_key_value_heads"] = plc["1"]["num_key_value_heads"]


@pytest.mark.parametrize(
    "variant_name,edit",
    [
        ("gemma3_text", _gemma3_v4_spelling),
        ("gemma2_softcap", _gemma2_default_pattern),
        ("gemma4_text", _gemma4_hub_spelling),
    ],
)
def test_older_config_spellings(variant_name, edit, hz, tiny_paths, hf_tiny, tmp_path):
    path = _rewrite(tiny_paths[variant_name], tmp_path / "old", edit)
    hf_old = _util.tiny_models.load_hf(path)
    ids = long_prompt(hf_old, windows=4)[None]
    ref, _ = hf_forward(hf_old, ids, capture=False)
    original, _ = hf_forward(hf_tiny(variant_name), ids, capture=False)
    np.testing.assert_array_equal(ref, original)  # transformers reads both the same way
    got = hz.CausalLM.from_pretrained(str(path)).forward(ids)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-3)
    _util.assert_argmax_equal(got, ref)


# --- bad configs: ConfigError naming the field --------------------------------------------

BAD_CONFIGS = [
    ("gemma2_softcap", {"layer_types": ["sliding_attention", "chunked_attention"] * 2}, "chunked_attention"),
    ("gemma2_softcap", {"layer_types": ["full_attention"] * 3}, "layer_types"),
    ("gemma2_softcap", {"sliding_window": 0}, "sliding_window"),
    ("gemma3_text", {"sliding_window": -4}, "sliding_window"),
    ("gemma2_softcap", {"hidden_activation": "relu"}, "hidden_activation"),
    ("gemma2_softcap", {"query_pre_attn_scalar": 0}, "query_pre_attn_scalar"),
    ("gemma2_softcap", {"attn_logit_softcapping": 0.0}, "attn_logit_softcapping"),
    ("gemma3_text", {"final_logit_softcapping": -1.0}, "final_logit_softcapping"),
    ("gemma3_text", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("gemma3_text", {"rope_parameters": {"chunked_attention": {"rope_type": "default"}}}, "chunked_attention"),
    ("gemma3_text", {"rope_parameters": {"full_attention": {"rope_type": "dynamic"}}}, "dynamic"),
    ("gemma3_text", {"sliding_window_pattern": 0, "layer_types": None}, "sliding_window_pattern"),
    ("gemma4_text", {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2}, "enable_moe_block"),
    ("gemma4_text", {"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ("gemma4_text", {"num_kv_shared_layers": 4}, "num_kv_shared_layers"),
    ("gemma4_text", {"num_kv_shared_layers": 3}, "num_kv_shared_layers"),  # no full producer
    ("gemma4_text", {"per_layer_config": {"1": {"head_dim": 16, "sliding_window": 3}}}, "sliding_window"),
    ("gemma4_text", {"per_layer_config": {"7": {"head_dim": 16}}}, "per_layer_config"),
    ("gemma4_text", {"layer_types": ["sliding_attention", "local_attention"] * 2}, "local_attention"),
    ("gemma4_text", {"sliding_window": 0}, "sliding_window"),
    ("gemma4_text", {"rope_parameters": {"full_attention": {"rope_type": "default"}}}, "sliding_attention"),
    ("gemma4_text", {"hidden_activation": "silu"}, "hidden_activation"),
    ("gemma4_moe", {"num_experts": None}, "num_experts"),
    ("gemma4_moe", {"top_k_experts": None}, "top_k_experts"),
    ("gemma4_moe", {"moe_intermediate_size": 0}, "moe_intermediate_size"),
    ("gemma4_moe", {"top_k_experts": 9}, "top_k_experts"),
    ("gemma4_moe", {"num_experts": -8}, "num_experts"),
    ("gemma4_moe", {"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
]


@pytest.mark.parametrize("variant_name,fields,named", BAD_CONFIGS)
def test_bad_config_is_a_config_error(variant_name, fields, named, hz, tiny_paths, tmp_path):
    def edit(c):
        for key, value in fields.items():
            if value is None:
                c.pop(key, None)
            else:
                c[key] = value

    path = _rewrite(tiny_paths[variant_name], tmp_path / "bad", edit)
    with pytest.raises(hz.ConfigError, match=named):
        hz.CausalLM.from_pretrained(str(path))


# --- through the server: continuous batching over ring buffers ----------------------------


def test_server_batches_requests_past_the_window(variant, hz, hubzoo_bin, tiny_paths, hf_tiny, tmp_path):
    """Five greedy requests of different lengths, three slots: each continues past the window
    while others join and leave, and equals generate() alone; the KV budget counts only the
    window for sliding layers (hubzoo_kv_cache_budget_bytes)."""
    import httpx2 as httpx
    from tokenizers import Tokenizer, models, pre_tokenizers

    hf = hf_tiny(variant)
    w, vocab = window(hf), hf.config.vocab_size
    path = tmp_path / "served"
    shutil.copytree(tiny_paths[variant], path)
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    ours = hz.CausalLM.from_pretrained(str(path))
    prompts = [random_prompt(vocab, n, seed=n) for n in (3, w + 2, 3 * w, 5, 2 * w + 1)]
    max_context = 512
    proc, url = _util.serve(path, path / "serve.log", "--max-concurrency", "3", "--max-context", str(max_context))
    try:
        def ask(p):
            body = {"prompt": p.tolist(), "max_tokens": 4 * w, "temperature": 0, "logprobs": 0}
            return httpx.post(url + "/v1/completions", json=body, timeout=120).json()

        with ThreadPoolExecutor(len(prompts)) as ex:
            answers = list(ex.map(ask, prompts))
        metrics = httpx.get(url + "/metrics").text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for p, answer in zip(prompts, answers):
        got = [int(t[1:]) for t in answer["choices"][0]["logprobs"]["tokens"]]
        want = ours.generate(p[None], max_new_tokens=4 * w)[0].tolist()
        if want[-1] in ours.eos_token_ids and len(want) < 4 * w:
            want = want[:-1]  # the server does not return the EOS token
        assert got == want, f"prompt of {len(p)} tokens"
    budget = re.search(r"hubzoo_kv_cache_budget_bytes\{[^}]*\} (\d+)", metrics)
    assert budget and int(budget.group(1)) == 3 * ours.kv_slot_bytes_at(max_context)
    full_everywhere = 2 * max_context * sum(row for row, _ in cache_layers(hf)) * FLOAT
    assert int(budget.group(1)) < 3 * full_everywhere
