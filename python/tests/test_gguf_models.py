"""GGUF models on the fp32 ladder (issue 16): hubzoo runs the blocks as they are stored and
must match transformers' model loaded from the same file (which dequantizes every tensor).

Tiny random Llama/Qwen2 files in every GGML block type (python/tests/_gguf_models.py):
per-layer rtol/atol 1e-4, equal argmax, cached decode, batch invariance bit for bit, in both
numerics modes (fused: exact; int8: int8 activations, held to its own measured bound).
The real GGUF files (models/gguf/, scripts/prepare_models.py): logits atol 1e-3 with equal
argmax and 64 greedy tokens equal to transformers'.
"""

from __future__ import annotations

import numpy as np
import pytest

import _gguf_models as gm
import _util
from _util import allclose_failure, assert_argmax_equal, capture_names, hf_forward, random_prompt

PROMPT = np.array([1, 17, 254, 33, 90, 5, 299, 128, 64, 3, 200, 41, 77, 150, 9, 260], dtype=np.int64)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """(arch, qtype, tied) -> (path, transformers reference model), built once."""
    root = tmp_path_factory.mktemp("gguf")
    cache = {}

    def get(arch, qtype, tied=True):
        key = (arch, qtype, tied)
        if key not in cache:
            d = root / f"{arch}-{qtype}-{'tied' if tied else 'untied'}"
            d.mkdir()
            hf = gm.build_hf(arch, tied)
            path = gm.write_gguf(hf, arch, d / "model.gguf", qtype)
            cache[key] = (path, gm.load_reference(path))
        return cache[key]

    return get


def _check_layers(ours_captured, ref_captured, rtol, atol, key):
    failures = []
    for name in capture_names(gm.LAYERS):
        _util.record_error(key, name, ours_captured[name], ref_captured[name][0])
        f = allclose_failure(name, ours_captured[name], ref_captured[name][0], rtol, atol)
        if f:
            failures.append(f)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("qtype", gm.GGML_TYPES)
def test_tiny_llama_every_block_type(hz, tiny_gguf, qtype):
    """Per-layer parity at 1e-4 and equal argmax: the blocks are dequantized exactly."""
    path, ref = tiny_gguf("llama", qtype)
    model = hz.CausalLM.from_pretrained(path)
    assert model.info["quantized_matrices"] > 0
    names = capture_names(gm.LAYERS)
    logits, got = model.forward(PROMPT[None], capture=names)
    ref_logits, ref_captured = hf_forward(ref, PROMPT[None])
    _check_layers({n: got[n][0] for n in names}, ref_captured, 1e-4, 1e-4, f"gguf/llama-{qtype}")
    assert_argmax_equal(logits, ref_logits)


@pytest.mark.parametrize("qtype", ["F16", "BF16"])
def test_tiny_llama_f16_and_bf16_files(hz, tiny_gguf, qtype):
    """F16 / BF16 files: the matrices stay the 16-bit values they are (half the bytes of the
    F32 file's, the permuted q/k rows included) and multiply as their exact widening:
    per-layer parity at 1e-4 against transformers (which widens them at load), equal
    argmax, cached decode."""
    path, ref = tiny_gguf("llama", qtype)
    model = hz.CausalLM.from_pretrained(path)
    wide = hz.CausalLM.from_pretrained(tiny_gguf("llama", "F32")[0])
    assert model.info["quantized_matrices"] == 0
    assert model.info["weight_bytes"] < 0.55 * wide.info["weight_bytes"]
    names = capture_names(gm.LAYERS)
    logits, got = model.forward(PROMPT[None], capture=names)
    ref_logits, ref_captured = hf_forward(ref, PROMPT[None])
    _check_layers({n: got[n][0] for n in names}, ref_captured, 1e-4, 1e-4, f"gguf/llama-{qtype}")
    assert_argmax_equal(logits, ref_logits)
    inc = model.forward_incremental(PROMPT[None], 5)
    assert float(np.max(np.abs(inc - logits))) <= 1e-4
    assert_argmax_equal(inc, logits)


@pytest.mark.parametrize("arch,qtype,tied", [("llama", "Q4_K", False), ("qwen2", "Q8_0", True),
                                             ("qwen2", "Q5_K", False)])
def test_tiny_untied_and_qwen2(hz, tiny_gguf, arch, qtype, tied):
    """Untied files (a quantized embedding table looked up row by row, output in Q6_K) and
    Qwen2 (q/k/v biases, no q/k permutation)."""
    path, ref = tiny_gguf(arch, qtype, tied)
    model = hz.CausalLM.from_pretrained(path)
    names = capture_names(gm.LAYERS)
    logits, got = model.forward(PROMPT[None], capture=names)
    ref_logits, ref_captured = hf_forward(ref, PROMPT[None])
    _check_layers({n: got[n][0] for n in names}, ref_captured, 1e-4, 1e-4, f"gguf/{arch}-{qtype}-{tied}")
    assert_argmax_equal(logits, ref_logits)


@pytest.mark.parametrize("mode", ["fused", "int8"])
@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0", "Q4_K", "Q6_K"])
def test_cached_decode_and_batch_invariance(hz, tiny_gguf, qtype, mode):
    """Cached decode equals the full forward; each prompt's logits are bit-identical alone
    and inside a batch, in any slot (both modes: the int8 path quantizes each activation row
    on its own)."""
    path, _ = tiny_gguf("llama", qtype)
    model = hz.CausalLM.from_pretrained(path, mode=mode)
    full = model.forward(PROMPT[None])
    inc = model.forward_incremental(PROMPT[None], 5)
    err = float(np.max(np.abs(inc - full)))
    assert err <= 1e-4, f"cached decode differs by {err}"
    assert_argmax_equal(inc, full)
    prompts = [PROMPT, PROMPT[3:11], np.array([5, 6, 7, 8], dtype=np.int64)]
    alone = [model.forward(p[None])[0] for p in prompts]
    for order in ([0, 1, 2], [2, 0, 1]):
        ids, mask = _util.left_pad([prompts[i] for i in order], 0)
        logits = model.forward(ids, attention_mask=mask)
        for slot, i in enumerate(order):
            pad = ids.shape[1] - len(prompts[i])
            assert np.array_equal(logits[slot, pad:], alone[i]), f"prompt {i} in slot {slot} differs"


@pytest.mark.parametrize("qtype,tied", [("Q4_0", True), ("Q8_0", True), ("Q4_K", False),
                                        ("Q6_K", True)])
def test_dequantize_on_load(hz, tiny_gguf, qtype, tied):
    """quantize="dequantize": the file's matrices (the untied file's embedding table too)
    dense in the dtype, as transformers loads a GGUF. float32: the exact ladder against
    transformers (the same values as the blocks). bf16dot: the bf16 ladder's error ratio
    against transformers' own bf16 load of the file, and batch invariance bit for bit."""
    import torch
    import transformers

    path, ref = tiny_gguf("llama", qtype, tied)
    dense = hz.CausalLM.from_pretrained(path, quantize="dequantize")
    assert dense.info["quantized_matrices"] == 0
    assert hz.CausalLM.from_pretrained(path).info["quantized_matrices"] > 0
    names = capture_names(gm.LAYERS)
    logits, got = dense.forward(PROMPT[None], capture=names)
    ref_logits, ref_captured = hf_forward(ref, PROMPT[None])
    _check_layers({n: got[n][0] for n in names}, ref_captured, 1e-4, 1e-4,
                  f"gguf/dequantize-{qtype}")
    assert_argmax_equal(logits, ref_logits)

    bf16 = hz.CausalLM.from_pretrained(path, dtype="bfloat16", mode="bf16dot",
                                       quantize="dequantize")
    assert bf16.info["quantized_matrices"] == 0
    ref16 = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.bfloat16).eval()
    long = random_prompt(ref.config.vocab_size, 200, seed=7)
    for ids in (PROMPT, long):
        r32, _ = hf_forward(ref, ids[None], capture=False)
        r16, _ = hf_forward(ref16, ids[None], capture=False)
        sigma = float(np.sqrt(np.mean((r16 - r32) ** 2)))
        ours = bf16.forward(ids[None])
        ratio = float(np.sqrt(np.mean((ours - r32) ** 2))) / sigma
        assert 0 < ratio <= 1.0, f"{qtype}, {len(ids)} tokens: bf16 error ratio {ratio:.3f}"
    prompts = [PROMPT, long[:37]]
    alone = [bf16.forward(p[None])[0] for p in prompts]
    ids, mask = _util.left_pad(prompts, 0)
    batch = bf16.forward(ids, attention_mask=mask)
    for slot, p in enumerate(prompts):
        assert np.array_equal(batch[slot, ids.shape[1] - len(p):], alone[slot])

    with pytest.raises(Exception, match="dequantize"):
        hz.CausalLM.from_pretrained(path, mode="int8", quantize="dequantize")


@pytest.mark.parametrize("qtype", gm.GGML_TYPES)
def test_int8_mode_keeps_panels_of_the_types_with_a_panel_layout(hz, tiny_gguf, qtype):
    """int8 loads keep the matrices of the types with a panel layout (the 32-weight types
    and Q2_K .. Q6_K) as panels where the CPU's int8 kernels read them (AVX2 and every
    AVX-512 target), else none; the exact mode never does. (Their
    results are those of the rows bit for bit: the C++ kernel tests; the ladder above runs
    on them.)"""
    path, _ = tiny_gguf("llama", qtype)
    int8 = hz.CausalLM.from_pretrained(path, mode="int8").info
    exact = hz.CausalLM.from_pretrained(path).info
    assert exact["panel_matrices"] == 0
    target = hz._hubzoo.quant.target()
    panels = (target == "AVX2" or target.startswith("AVX3")) and qtype in (
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
    assert hz._hubzoo.quant.reads_panels(qtype) == panels
    # q, k (llama's reordered rows, through a row order), v, o and the MLP's three: 7 per
    # layer, and the tied embedding is the logits' matrix.
    assert int8["panel_matrices"] == (7 * gm.LAYERS + 1 if panels else 0), int8["panel_matrices"]


@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0", "Q4_K", "Q6_K"])
def test_int8_mode_error_is_bounded(hz, tiny_gguf, qtype):
    """int8 activations against the same reference: logits within a small multiple of the
    logits' scale, and the same top-1 token at 90% of 96 positions or more (int8 rounding
    flips positions whose top-1/top-2 margin is below its error, about 0.05: a rate needs
    enough positions, 16 allow one flip)."""
    path, ref = tiny_gguf("llama", qtype)
    prompt = random_prompt(gm.VOCAB, 96, seed=3)
    ours = hz.CausalLM.from_pretrained(path, mode="int8").forward(prompt[None])
    ref_logits, _ = hf_forward(ref, prompt[None], capture=False)
    scale = float(np.abs(ref_logits).max())
    err = float(np.abs(ours - ref_logits).max())
    _util.record_error(f"gguf/llama-{qtype}-int8", "logits", ours, ref_logits)
    assert err <= 0.05 * scale, f"int8 logits off by {err} (scale {scale})"
    agree = float((ours.argmax(-1) == ref_logits.argmax(-1)).mean())
    assert agree >= 0.9, f"top-1 agreement {agree}"


def test_fused_is_closer_than_int8(hz, tiny_gguf):
    """The exact mode's error is far below the int8 mode's: a mode mix-up cannot pass both."""
    path, ref = tiny_gguf("llama", "Q4_K")
    ref_logits, _ = hf_forward(ref, PROMPT[None], capture=False)
    exact = hz.CausalLM.from_pretrained(path).forward(PROMPT[None])
    int8 = hz.CausalLM.from_pretrained(path, mode="int8").forward(PROMPT[None])
    e_exact = float(np.abs(exact - ref_logits).max())
    e_int8 = float(np.abs(int8 - ref_logits).max())
    assert e_exact < 1e-4 and e_int8 > 10 * e_exact, (e_exact, e_int8)


def test_gguf_file_option_and_folder_errors(hz, tiny_gguf, tmp_path):
    """gguf_file= picks a file of a folder; a folder of GGUFs without it names them; a path
    with directories in gguf_file is refused."""
    path, _ = tiny_gguf("llama", "Q8_0")
    a = hz.CausalLM.from_pretrained(path.parent, gguf_file=path.name).forward(PROMPT[None])
    b = hz.CausalLM.from_pretrained(path).forward(PROMPT[None])
    assert np.array_equal(a, b)
    with pytest.raises(Exception, match="model.gguf"):
        hz.CausalLM.from_pretrained(path.parent)
    with pytest.raises(Exception, match="file name inside the snapshot"):
        hz.CausalLM.from_pretrained(path.parent, gguf_file="../model.gguf")


# ---- real files ----------------------------------------------------------------------------

REAL = {
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", "Once upon a time, in a small village by the sea,"),
    "qwen2.5-coder": ("Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf", "def quicksort(items):\n    \"\"\""),
    "gemma3": ("gemma-3-270m-Q4_K_M.gguf", "The capital of France is"),
}


def _real_path(name):
    path = _util.REPO / "models" / "gguf" / REAL[name][0]
    if not path.is_file():
        pytest.fail(f"{path} missing: run scripts/prepare_models.py", pytrace=False)
    return path


@pytest.fixture(scope="module")
def real_reference():
    cache = {}

    def get(name):
        if name not in cache:
            import transformers

            path = _real_path(name)
            tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            ids = np.asarray(tok(REAL[name][1])["input_ids"], dtype=np.int64)
            cache[name] = (path, gm.load_reference(path), ids)
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(REAL))
def test_real_gguf_logits_and_greedy(hz, real_reference, name):
    path, ref, ids = real_reference(name)
    model = hz.CausalLM.from_pretrained(path)
    ours = model.forward(ids[None])
    ref_logits, _ = hf_forward(ref, ids[None], capture=False)
    err = _util.record_error(f"gguf/{name}", "logits", ours, ref_logits)
    assert err <= 1e-3, f"logits max abs error {err}"
    assert_argmax_equal(ours, ref_logits)
    got = model.generate(ids[None], max_new_tokens=64)
    want = _util.hf_generate(ref, ids[None], max_new_tokens=64)
    assert got.tolist() == want.tolist()


def test_cli_and_server_options_on_gguf(hubzoo_bin):
    """The CLI takes a .gguf: tokenize equals transformers' gguf_file= tokenizer, chat
    renders the file's own chat template, a folder with --gguf-file picks the file."""
    import json

    import transformers

    path = _real_path("qwen2.5-coder")
    text = "def héllo():\n    return 42  # ünïcode"
    proc = _util.run_cli("tokenize", "-m", str(path), "--format", "json", text)
    assert proc.returncode == 0, proc.stderr
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert json.loads(proc.stdout)["ids"] == tok(text)["input_ids"]
    proc = _util.run_cli("chat", "-m", str(path.parent), "--gguf-file", path.name, "--message", "Hi",
                         "--max-new-tokens", "4", "--stats", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "prompt" in proc.stderr  # --stats: the rendered prompt's size and speed
    proc = _util.run_cli("generate", "-m", str(path.parent), "--prompt", "x")
    assert proc.returncode != 0 and "--gguf-file" in proc.stderr and path.name in proc.stderr


def test_dequantize_on_load_stacked_experts(hz, tmp_path):
    """A Qwen3-MoE file whose stacked expert tensors are Q8_0 blocks: under
    quantize="dequantize" each expert is dense (nothing stays quantized) and the logits
    equal the exact mode's on the blocks within fp32 rounding."""
    import gguf

    import test_gguf_import as gi

    rng = np.random.default_rng(5)

    def make(name, shape):
        if len(shape) == 1:  # norms
            return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32), None
        x = (0.05 * rng.standard_normal(shape)).astype(np.float32)
        if "_exps." not in name:
            return x, None
        q8 = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(x, q8), q8

    path = gi.tiny(tmp_path, **gi.TINY["qwen3moe"], make=make)
    blocks = hz.CausalLM.from_pretrained(str(path))
    dense = hz.CausalLM.from_pretrained(str(path), quantize="dequantize")
    assert blocks.info["quantized_matrices"] > 0
    assert dense.info["quantized_matrices"] == 0
    ids = np.array([[5, 9, 33, 70, 12, 101, 7, 64]], dtype=np.int64)
    want, got = blocks.forward(ids), dense.forward(ids)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert_argmax_equal(got, want)


def test_int8_mode_keeps_a_half_kv_cache(hz, tiny_gguf):
    """The int8 mode keeps keys and values as IEEE halves (float16), half the bytes of the
    fused mode's float32 cache; the bf16 modes keep bf16 (docs/architecture.md, "The int8
    mode's KV cache"). That fresh keys and values are rounded as the cached ones are is
    test_families.py's test_int8_mode_past_the_window (the ring buffer reads both; here every
    layer writes its chunk first and reads the cache)."""
    path, _ = tiny_gguf("llama", "Q8_0")
    ids = np.array([[5, 9, 33, 70]], dtype=np.int64)
    bytes_at, elements = {}, {}
    for mode, dtype in (("fused", "float32"), ("int8", "float32"), ("fused", "bfloat16")):
        model = hz.CausalLM.from_pretrained(path, mode=mode, dtype=dtype)
        bytes_at[mode, dtype] = model.kv_slot_bytes_at(64)
        model.forward(ids)
        elements[mode, dtype] = set(model.kv_cache_stats()["elements"])
    fused, int8 = bytes_at["fused", "float32"], bytes_at["int8", "float32"]
    assert fused > 0 and int8 * 2 == fused, (fused, int8)
    assert elements == {("fused", "float32"): {"float32"}, ("int8", "float32"): {"float16"},
                        ("fused", "bfloat16"): {"bfloat16"}}, elements
