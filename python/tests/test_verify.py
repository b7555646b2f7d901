"""python -m hubzoo.verify: the report's structure, fp32 checks on a tiny model, outputs, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import _util

VARIANT = "llama_linear"  # the smallest tiny model
LONG_TOKENS = 96  # keeps the test quick; the harness's default is 512


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return _util.tiny_models.build(VARIANT, tmp_path_factory.mktemp("verify") / VARIANT)


@pytest.fixture(scope="module")
def cli_run(hz, tiny_path, tmp_path_factory):
    """main([...]) in-process, float32 only: (exit status, report, markdown text, png path, stdout)."""
    from hubzoo import verify

    out = tmp_path_factory.mktemp("verify_out")
    files = {"json": out / "r.json", "markdown": out / "r.md", "plot": out / "r.png"}
    import contextlib
    import io

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = verify.main([str(tiny_path), "--dtype", "float32", "--long-tokens", str(LONG_TOKENS), "--threads", "2",
                          "--json", str(files["json"]), "--markdown", str(files["markdown"]),
                          "--plot", str(files["plot"]), "--quiet"])
    report = json.loads(files["json"].read_text())
    return rc, report, files["markdown"].read_text(), files["plot"], stdout.getvalue()


TOP_KEYS = {"format", "model", "name", "snapshot", "architecture", "num_layers", "vocab_size", "metadata",
            "settings", "inputs", "references", "columns", "summary", "matrix", "notes", "elapsed_s"}
METADATA_KEYS = {"hubzoo_version", "git_commit", "compiler", "matmul_target", "cpu", "threads", "reference",
                 "versions", "date"}
REFERENCE_KEYS = {"tokens", "sigma", "margin_threshold", "margin_positions", "decided_positions", "routing",
                  "hf_fp32_greedy", "hf_bf16", "layers"}
HF_BF16_KEYS = {"logits_rms", "logits_max_abs", "kl_mean", "kl_max", "top1_agreement", "top5_containment",
                "margin_full", "greedy"}
COLUMN_KEYS = {"name", "dtype", "mode", "input", "tokens", "metrics", "layers", "checks", "passed"}
METRIC_KEYS = {"logits_rms", "logits_max_abs", "bf16_ratio", "kl_mean", "kl_max", "top1_agreement",
               "top5_containment", "greedy", "cached", "margin", "routing"}


def test_exit_status_and_stdout(cli_run):
    rc, report, _, _, stdout = cli_run
    assert rc == 0, report["summary"]
    assert "VERDICT" in stdout and "float32/fused/long" in stdout
    assert stdout.rstrip().endswith("result: PASS")


def test_report_structure(cli_run, tiny_path):
    _, report, _, _, _ = cli_run
    assert TOP_KEYS <= set(report), TOP_KEYS - set(report)
    assert report["format"] == "hubzoo.verify/2"
    assert report["model"] == report["name"] == str(tiny_path)
    assert report["architecture"] == "LlamaForCausalLM"
    assert METADATA_KEYS <= set(report["metadata"]), METADATA_KEYS - set(report["metadata"])
    meta = report["metadata"]
    assert meta["reference"]["attn_implementation"] == "eager"
    # What reference.load() does (hubzoo.testing.tiny_models.load_hf), not model.to(bfloat16).
    assert meta["reference"]["bf16"] == "from_pretrained(dtype=torch.bfloat16)"
    assert meta["threads"] == {"hubzoo": 2, "torch": 2}
    for dist in ("torch", "transformers", "tokenizers"):
        assert meta["versions"][dist], dist
    assert meta["matmul_target"] and meta["git_commit"] and meta["hubzoo_version"]
    assert report["settings"]["dtypes"] == ["float32"]
    assert report["settings"]["modes"] == ["eager", "fused"]

    # No tokenizer.json: deterministic random ids, the long input as long as asked.
    assert report["inputs"]["short"]["kind"] == "random"
    assert report["inputs"]["long"]["tokens"] == LONG_TOKENS
    for name in ("short", "long"):
        ref = report["references"][name]
        assert REFERENCE_KEYS <= set(ref), REFERENCE_KEYS - set(ref)
        assert HF_BF16_KEYS <= set(ref["hf_bf16"])
        assert ref["sigma"] > 0
        n_layers = report["num_layers"]
        assert ref["layers"]["names"] == ["embed", *(f"layers.{i}" for i in range(n_layers)), "norm", "logits"]

    names = [c["name"] for c in report["columns"]]
    assert names == ["float32/eager/short", "float32/eager/long", "float32/fused/short", "float32/fused/long"]
    for col in report["columns"]:
        assert COLUMN_KEYS <= set(col), COLUMN_KEYS - set(col)
        assert METRIC_KEYS <= set(col["metrics"]), METRIC_KEYS - set(col["metrics"])
        assert len(col["layers"]["rms"]) == len(col["layers"]["names"])
        assert all(v is not None and v >= 0 for v in col["layers"]["rms"])
        keys = {c["key"] for c in col["checks"]}
        assert {"fp32_logits_atol", "fp32_argmax", "fp32_greedy", "cached_atol", "cached_argmax", "top5",
                "routing_full", "routing_cached", "margin_full", "margin_cached", "kl_mean"} <= keys
        assert "bf16_ratio" not in keys  # a bf16-only bar

    mx = report["matrix"]
    assert mx["columns"] == names
    assert all(len(r["cells"]) == len(names) for r in mx["rows"])
    assert mx["rows"][-1]["key"] == "verdict"


def test_fp32_checks_pass(cli_run):
    _, report, _, _, _ = cli_run
    assert report["summary"]["passed"]
    assert report["summary"]["failed"] == []
    for col in report["columns"]:
        m = col["metrics"]
        failed = [c["label"] for c in col["checks"] if c["pass"] is False]
        assert not failed, (col["name"], failed)
        assert col["passed"] is True
        assert m["logits_max_abs"] <= 1e-3
        assert m["top1_agreement"] == 1.0 and m["top5_containment"] == 1.0
        assert m["greedy"]["identical"] and m["greedy"]["prefix"] == m["greedy"]["length"] > 0
        assert m["cached"]["positions"] > 0 and m["cached"]["max_abs_diff"] <= 1e-4
        assert m["bf16_ratio"] < 0.01  # fp32 sits far below bf16's own error
        assert m["kl_mean"] <= col["metrics"]["kl_max"]


def test_dense_model_excludes_no_tokens(cli_run):
    """No sparse layers: no routing pairs, no exclusions, the margin rung over every decided position."""
    _, report, _, _, _ = cli_run
    for name in ("short", "long"):
        ref = report["references"][name]
        assert ref["routing"]["sparse_layers"] == [] and ref["routing"]["confident_pairs"] == 0
        assert ref["routing"]["excluded_tokens"] == 0 and ref["routing"]["excluded_margin_positions"] == 0
        assert ref["decided_positions"] == ref["margin_positions"] > 0
    for col in report["columns"]:
        checks = {c["key"]: c for c in col["checks"]}
        assert checks["routing_full"]["pass"] is None and checks["routing_cached"]["pass"] is None
        assert col["metrics"]["margin"]["positions"] == report["references"][col["input"]]["margin_positions"]
    rows = {r["key"]: r["cells"] for r in report["matrix"]["rows"]}
    assert rows["routing_excluded"] == [f"0/{c['tokens']}" for c in report["columns"]]


def test_markdown_has_matrix(cli_run):
    _, report, md, plot, _ = cli_run
    header = "| check | " + " | ".join(f"`{c}`" for c in report["matrix"]["columns"]) + " |"
    assert header in md
    for row in report["matrix"]["rows"]:
        label = row["label"].replace("|", "\\|")
        cells = " | ".join(c.replace("|", "\\|") for c in row["cells"])
        assert f"| {label} | {cells} |" in md or row["key"] == "verdict", row["label"]
    assert "| **VERDICT** | " + " | ".join(["**PASS**"] * len(report["matrix"]["columns"])) + " |" in md
    assert "hubzoo" in md and report["metadata"]["git_commit"] in md
    assert "HF bf16 = from_pretrained(dtype=torch.bfloat16)" in md
    assert f"]({plot.name})" in md  # the plot linked relative to the markdown file


def test_plot_written(cli_run):
    _, _, _, plot, _ = cli_run
    data = Path(plot).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


BF16_CHECKS = {"bf16_ratio", "top5", "cached_argmax", "routing_full", "routing_cached", "margin_full",
               "margin_cached", "kl_mean"}


def test_bf16_columns_run_every_check(hz, tiny_path):
    """bf16 eager and fused: every bf16 rung runs and passes (the fp32-only bars do not apply)."""
    from hubzoo import verify

    report = verify.run(str(tiny_path), dtypes=["bfloat16"], modes=["eager", "fused"], long_tokens=48,
                        progress=False)
    assert [c["name"] for c in report["columns"]] == [
        "bfloat16/eager/short", "bfloat16/eager/long", "bfloat16/fused/short", "bfloat16/fused/long"]
    for col in report["columns"]:
        checks = {c["key"]: c for c in col["checks"]}
        assert BF16_CHECKS <= set(checks), BF16_CHECKS - set(checks)
        assert not {"fp32_logits_atol", "fp32_argmax", "fp32_greedy", "cached_atol"} & set(checks)
        assert checks["bf16_ratio"]["threshold"] == verify.harness.BF16_RATIO_MAX[col["mode"]]
        assert checks["bf16_ratio"]["pass"] is True, (col["name"], checks["bf16_ratio"])
        assert col["passed"] is True, (col["name"], [c["label"] for c in col["checks"] if c["pass"] is False])
        assert 0 < col["metrics"]["bf16_ratio"] <= verify.harness.BF16_RATIO_MAX[col["mode"]]
    assert report["summary"] == {"passed": True, "failed": []}
    assert report["references"]["short"]["hf_bf16"]["greedy"] is not None  # a bf16 column ran


def test_snapshot_hubzoo_refuses_is_a_clear_error(hz, tiny_path, tmp_path):
    """A checkpoint transformers loads but hubzoo refuses (hidden_act relu in a Llama) stops the
    run with VerifyError naming the snapshot, the dtype/mode and hubzoo's reason: no column is
    skipped in silence."""
    import shutil

    from hubzoo import verify

    path = tmp_path / "relu"
    shutil.copytree(tiny_path, path)
    config = json.loads((path / "config.json").read_text())
    config["hidden_act"] = "relu"
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(verify.VerifyError) as e:
        verify.run(str(path), dtypes=["float32"], modes=["fused"], long_tokens=16, new_tokens=4, progress=False)
    msg = str(e.value)
    assert str(path) in msg and "float32/fused" in msg and "hidden_act 'relu'" in msg, msg


def _module_env(hz) -> dict:
    env = dict(os.environ)
    pkg_root = str(Path(hz.__file__).resolve().parents[1])  # site-packages (or build/python)
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def test_bad_model_path_is_a_clear_error(hz, tmp_path):
    missing = tmp_path / "no-such-model"
    proc = subprocess.run([sys.executable, "-m", "hubzoo.verify", str(missing), "--dtype", "float32"],
                          capture_output=True, text=True, env=_module_env(hz), timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and str(missing) in last, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_directory_without_config_is_a_clear_error(hz, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hubzoo.verify", str(tmp_path)],
                          capture_output=True, text=True, env=_module_env(hz), timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert str(tmp_path) in proc.stderr and "config.json" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("variant", ["t5_v1_0", "t5_v1_1"])
def test_encoder_decoder_runs_the_ladder(hz, variant, tmp_path):
    """A T5 checkpoint (ReLU/tied and gated-GELU/untied): every column of every dtype and mode
    passes; per-layer rows name both stacks; the decoder positions are the teacher-forced
    sequence and the long input reaches the encoder whole."""
    from hubzoo import verify
    from hubzoo.testing import tiny_t5

    path = tiny_t5.build(variant, tmp_path / variant)
    report = verify.run(str(path), long_tokens=LONG_TOKENS, new_tokens=8, threads=2, progress=False)
    assert report["summary"] == {"passed": True, "failed": []}, report["summary"]
    assert len(report["columns"]) == 10  # float32 x 2 modes + bfloat16 x 3 (bf16dot), x 2 inputs
    names = report["references"]["long"]["layers"]["names"]
    assert names[0] == "encoder.embed" and "decoder.layers.0" in names and names[-1] == "logits"
    for col in report["columns"]:
        assert all(r is not None for r in col["layers"]["rms"]), (col["name"], names)
    assert report["inputs"]["long"]["tokens"] == LONG_TOKENS
    assert report["columns"][1]["tokens"] == 64  # start token + 63 input tokens
    assert report["references"]["short"]["hf_fp32_greedy"], "HF generate ran on the encoder input"
    assert any("encoder-decoder" in n for n in report["notes"])
