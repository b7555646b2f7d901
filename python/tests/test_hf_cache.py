"""Loading by repo id from a Hugging Face cache laid out as huggingface_hub lays it out.

<cache>/models--<org>--<name>/{blobs/<sha256>, refs/main, snapshots/<commit>/<file> -> blob}
The cache is found through HF_HUB_CACHE, or HF_HOME (then <HF_HOME>/hub).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

import _util

REPO_ID = "hubzoo-test/tiny-llama"
COMMIT_MAIN = "1" * 8 + "0123456789abcdef0123456789abcdef"
COMMIT_OTHER = "2" * 8 + "fedcba9876543210fedcba9876543210"


def add_snapshot(cache: Path, repo_id: str, commit: str, src: Path, ref: str | None) -> Path:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # no trailing newline, as huggingface_hub writes
    return snapshot


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory, tiny_paths):
    """HF_HOME with hub/: main -> llama_linear, another commit -> llama_yarn (different vocab)."""
    home = tmp_path_factory.mktemp("hf_home")
    cache = home / "hub"
    add_snapshot(cache, REPO_ID, COMMIT_MAIN, tiny_paths["llama_linear"], ref="main")
    add_snapshot(cache, REPO_ID, COMMIT_OTHER, tiny_paths["llama_yarn"], ref=None)
    return home


def test_layout_matches_huggingface_hub(hf_home):
    from huggingface_hub import snapshot_download

    path = snapshot_download(REPO_ID, cache_dir=hf_home / "hub", local_files_only=True)
    assert Path(path).name == COMMIT_MAIN
    path = snapshot_download(REPO_ID, revision=COMMIT_OTHER, cache_dir=hf_home / "hub", local_files_only=True)
    assert Path(path).name == COMMIT_OTHER


def _clear(monkeypatch):
    for var in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _probe(hz, ref, vocab):
    model = hz.CausalLM.from_pretrained(ref)
    assert model.config["vocab_size"] == vocab
    ids = _util.random_prompt(vocab, 9, seed=1)[None]
    return model.forward(ids)


def test_by_repo_id_via_hf_hub_cache(hz, hf_home, tiny_paths, monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "hub"))
    by_id = _probe(hz, REPO_ID, 515)
    by_path = _probe(hz, str(tiny_paths["llama_linear"]), 515)
    assert np.array_equal(by_id, by_path)


def test_by_repo_id_via_hf_home(hz, hf_home, monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    _probe(hz, REPO_ID, 515)


def test_by_revision(hz, hf_home, monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "hub"))
    _probe(hz, f"{REPO_ID}@{COMMIT_OTHER}", 509)
    _probe(hz, f"{REPO_ID}@{COMMIT_MAIN}", 515)
    _probe(hz, f"{REPO_ID}@main", 515)


def test_unknown_revision(hz, hf_home, monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "hub"))
    with pytest.raises(hz.NotFoundError) as info:
        hz.CausalLM.from_pretrained(f"{REPO_ID}@{'3' * 40}")
    assert REPO_ID in str(info.value)


def test_cli_by_repo_id(hubzoo_bin, hf_home):
    env = {"HF_HUB_CACHE": str(hf_home / "hub"), "HF_HUB_OFFLINE": "1"}
    proc = _util.run_cli("inspect", "-m", REPO_ID, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
