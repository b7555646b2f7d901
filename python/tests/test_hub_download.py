"""Downloading from the Hub (hub/download.h) against a mock Hub on 127.0.0.1 (mock_hub.py).

Each test gets a fresh HF_HOME; the CLI runs with HF_ENDPOINT at the mock and without
HF_HUB_OFFLINE (conftest.py sets it for every other test). LFS files redirect to a second
host:port (the mock's CDN), as the Hub's do.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import _util
from mock_hub import MockHub

REPO = "hubzoo-test/tiny-llama"
TOKEN = "hf_test_token"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return _util.tiny_models.build("llama_linear", tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def hub(tiny_dir):
    h = MockHub()
    files = {p.name: p.read_bytes() for p in sorted(tiny_dir.iterdir()) if p.is_file()}
    # Files hubzoo must not fetch by default, and one it must (a sentence-transformers module).
    files.update({"pytorch_model.bin": b"\0" * 1000, "onnx/model.onnx": b"\1" * 1000,
                  "README.md": b"# tiny\n", "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}'})
    h.commit = h.add_repo(REPO, files)
    h.files = files
    yield h
    h.close()


@pytest.fixture
def home(tmp_path, hub):
    hub.reset()
    return tmp_path / "hf_home"


def hub_env(hub, home, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE")}
    env.update(HF_HOME=str(home), HF_ENDPOINT=hub.endpoint, HF_HUB_DOWNLOAD_TIMEOUT="5",
               HUBZOO_HTTP_MAX_BACKOFF="0.05",
               no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")  # a CI proxy must not take the mock's traffic
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(hub, home, *args, timeout=60, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(_util.HUBZOO_BIN), *args], capture_output=True, text=True,
                          env=hub_env(hub, home, **extra), timeout=timeout)


def assert_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Failed cleanly (exit > 0, no signal) with a last stderr line 'error: ...' naming `words`
    (progress lines may come before it)."""
    assert proc.returncode > 0, f"exit code {proc.returncode}; stderr={proc.stderr!r}"
    last = proc.stderr.strip("\n").splitlines()[-1]
    assert last.startswith("error:"), proc.stderr
    for w in words:
        assert w in last, f"{w!r} not in {last!r}"
    return last


def repo_dir(home) -> Path:
    return home / "hub" / ("models--" + REPO.replace("/", "--"))


def default_files(hub) -> set[str]:
    return {n for n in hub.files if n.endswith((".json", ".safetensors"))} - {"onnx/model.onnx"}


def lfs_sha(hub, name) -> str:
    return hashlib.sha256(hub.files[name]).hexdigest()


def test_pull_writes_the_hf_cache_layout(hubzoo_bin, hub, home):
    proc = run(hub, home, "pull", REPO)
    assert proc.returncode == 0, proc.stderr
    snap = repo_dir(home) / "snapshots" / hub.commit
    assert proc.stdout.strip() == str(snap)
    assert (repo_dir(home) / "refs" / "main").read_text() == hub.commit  # no newline
    got = {str(p.relative_to(snap)) for p in snap.rglob("*") if not p.is_dir()}
    assert got == default_files(hub), "pytorch_model.bin, ONNX and README.md are not fetched"
    for name in got:
        link = snap / name
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert link.read_bytes() == hub.files[name]
    # LFS blobs are named by their sha256, small files by their git blob sha1.
    blob = os.path.basename(os.readlink(snap / "model.safetensors"))
    assert blob == lfs_sha(hub, "model.safetensors")
    data = hub.files["config.json"]
    assert os.path.basename(os.readlink(snap / "config.json")) == hashlib.sha1(
        b"blob %d\0" % len(data) + data).hexdigest()
    assert not list((repo_dir(home) / "blobs").glob("*.incomplete"))
    # One line per file when stderr is not a terminal.
    assert f"[{len(got)}/{len(got)}]" in proc.stderr and "model.safetensors" in proc.stderr


def test_pull_again_fetches_nothing_and_quiet_is_quiet(hubzoo_bin, hub, home):
    assert run(hub, home, "pull", REPO).returncode == 0
    hub.reset()
    proc = run(hub, home, "pull", "--quiet", REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert [r["method"] for r in hub.requests] == ["GET"]  # the model-info call only
    assert hub.cdn_requests == []


def test_include_and_exclude_globs(hubzoo_bin, hub, home):
    proc = run(hub, home, "pull", "--include", "*.bin", "--include", "onnx/",
               "--exclude", "generation_config.json", REPO)  # one glob per flag: REPO stays positional
    assert proc.returncode == 0, proc.stderr
    snap = Path(proc.stdout.strip())
    assert (snap / "pytorch_model.bin").is_file() and (snap / "onnx" / "model.onnx").is_file()
    assert not (snap / "generation_config.json").exists()


def test_token_is_not_sent_to_the_cdn_host(hubzoo_bin, hub, home):
    proc = run(hub, home, "pull", REPO, HF_TOKEN=TOKEN)
    assert proc.returncode == 0, proc.stderr
    assert hub.requests and all(r["headers"].get("authorization") == f"Bearer {TOKEN}" for r in hub.requests)
    assert hub.cdn_requests, "LFS files come from the second host"
    assert all("authorization" not in r["headers"] for r in hub.cdn_requests)


def test_token_file_under_hf_home(hubzoo_bin, hub, home):
    home.mkdir(parents=True)
    (home / "token").write_text(TOKEN + "\n")
    hub.faults.gated_token = TOKEN
    proc = run(hub, home, "pull", REPO)
    assert proc.returncode == 0, proc.stderr


def test_model_commands_download_then_run_offline(hubzoo_bin, hub, home):
    proc = run(hub, home, "inspect", "-m", REPO)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["architecture"] == "LlamaForCausalLM"
    hub.reset()
    for extra in ({"HF_HUB_OFFLINE": "1"}, {}):
        args = ("inspect", "-m", REPO) + (() if extra else ("--offline",))
        proc = run(hub, home, *args, **extra)
        assert proc.returncode == 0, proc.stderr
    assert hub.requests == [] and hub.cdn_requests == []


def test_offline_keeps_the_not_found_error(hubzoo_bin, hub, home):
    for args, extra in ((("--offline",), {}), ((), {"HF_HUB_OFFLINE": "1"})):
        proc = run(hub, home, "inspect", "-m", REPO, *args, **extra)
        assert_error(proc, "not found in the Hugging Face cache", "hf download")
    assert hub.requests == []


def test_dropped_connection_resumes_with_range(hubzoo_bin, hub, home):
    size = len(hub.files["model.safetensors"])
    hub.faults.drop_after["model.safetensors"] = size // 3
    proc = run(hub, home, "pull", REPO)
    assert proc.returncode == 0, proc.stderr
    gets = [r for r in hub.cdn_requests if r["method"] == "GET"]
    assert len(gets) == 2
    assert "range" not in gets[0]["headers"]
    assert gets[1]["headers"]["range"] == f"bytes={size // 3}-"
    assert hub.bytes_served["model.safetensors"] == size  # only the rest was fetched again
    assert (Path(proc.stdout.strip()) / "model.safetensors").read_bytes() == hub.files["model.safetensors"]


def test_failed_download_is_resumed_by_the_next_run(hubzoo_bin, hub, home):
    size = len(hub.files["model.safetensors"])
    cut = size // 2
    hub.faults.drop_after["model.safetensors"] = cut
    proc = run(hub, home, "pull", REPO, HUBZOO_HTTP_RETRIES=0)
    assert_error(proc, "model.safetensors", "run again to resume")
    partial = repo_dir(home) / "blobs" / (lfs_sha(hub, "model.safetensors") + ".incomplete")
    assert partial.stat().st_size == cut
    # Not complete-looking: no ref, no link to the missing weights.
    assert not (repo_dir(home) / "refs" / "main").exists()
    assert not (repo_dir(home) / "snapshots" / hub.commit / "model.safetensors").exists()
    hub.reset()
    proc = run(hub, home, "pull", REPO)
    assert proc.returncode == 0, proc.stderr
    gets = [r for r in hub.cdn_requests if r["method"] == "GET"]
    assert [g["headers"].get("range") for g in gets] == [f"bytes={cut}-"]
    assert hub.bytes_served["model.safetensors"] == size - cut


def test_wrong_sha256_deletes_the_blob(hubzoo_bin, hub, home):
    hub.faults.wrong_sha.add("model.safetensors")
    proc = run(hub, home, "pull", REPO)
    assert_error(proc, "sha256 mismatch", "model.safetensors", lfs_sha(hub, "model.safetensors"))
    blobs = repo_dir(home) / "blobs"
    assert not (blobs / lfs_sha(hub, "model.safetensors")).exists()
    assert not list(blobs.glob("*.incomplete"))
    assert not (repo_dir(home) / "refs" / "main").exists()


def test_gated_repo_names_the_access_url(hubzoo_bin, hub, home):
    hub.faults.gated_token = TOKEN
    proc = run(hub, home, "pull", REPO)
    assert_error(proc, "gated", f"{hub.endpoint}/{REPO}", "HF_TOKEN")
    proc = run(hub, home, "pull", REPO, HF_TOKEN=TOKEN)
    assert proc.returncode == 0, proc.stderr


def test_401_and_404s_say_what_is_missing(hubzoo_bin, hub, home):
    proc = run(hub, home, "pull", "hubzoo-test/no-such-repo")
    assert_error(proc, "no-such-repo", "not found", "HF_TOKEN")  # 401 RepoNotFound
    hub.faults.api_status = (401, {}, 1)
    proc = run(hub, home, "pull", REPO, HF_TOKEN="bad")
    assert_error(proc, "401", "token")
    proc = run(hub, home, "pull", REPO + "@no-such-branch")
    assert_error(proc, "revision not found", "no-such-branch")
    hub.faults.status["config.json"] = (404, {"X-Error-Code": "EntryNotFound"}, 1)
    proc = run(hub, home, "pull", REPO)
    assert_error(proc, "not found", "config.json")


def test_429_is_retried_after_retry_after(hubzoo_bin, hub, home):
    hub.faults.status["config.json"] = (429, {"Retry-After": "0"}, 2)
    proc = run(hub, home, "pull", REPO)
    assert proc.returncode == 0, proc.stderr
    heads = [r for r in hub.requests if r["method"] == "HEAD" and r["path"].endswith(f"/{hub.commit}/config.json")]
    assert len(heads) == 3
    hub.reset()
    hub.faults.status["generation_config.json"] = (503, {}, 100)
    proc = run(hub, home, "pull", REPO, HUBZOO_HTTP_RETRIES=2, HF_HOME=home.parent / "other_home")
    assert_error(proc, "503", "after 2 retries", "generation_config.json")


def test_slow_server_times_out(hubzoo_bin, hub, home):
    hub.faults.slow["config.json"] = 4.0
    t0 = time.monotonic()
    proc = run(hub, home, "pull", REPO, HF_HUB_DOWNLOAD_TIMEOUT=1, HUBZOO_HTTP_RETRIES=0)
    assert time.monotonic() - t0 < 4.0
    assert_error(proc, "timed out", "HF_HUB_DOWNLOAD_TIMEOUT")


def test_hostile_file_names_are_refused(hubzoo_bin, hub, home):
    hub.faults.sibling_names = ["config.json", "../../../../evil.safetensors"]
    proc = run(hub, home, "pull", REPO)
    assert_error(proc, "evil.safetensors", "would leave the snapshot folder")
    assert not any(p.name.startswith("evil") for p in home.rglob("*"))
    assert not (home.parent / "evil.safetensors").exists()


def test_concurrent_pulls_share_the_blobs(hubzoo_bin, hub, home):
    hub.faults.slow["model.safetensors"] = 0.5  # both are inside the download at once
    procs = [subprocess.Popen([str(_util.HUBZOO_BIN), "pull", REPO], env=hub_env(hub, home),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    snap = repo_dir(home) / "snapshots" / hub.commit
    for name in default_files(hub):
        assert (snap / name).read_bytes() == hub.files[name]
    assert hub.bytes_served["model.safetensors"] == len(hub.files["model.safetensors"])  # fetched once


def test_killed_download_never_looks_complete(hubzoo_bin, hub, home):
    hub.faults.slow["model.safetensors"] = 30
    p = subprocess.Popen([str(_util.HUBZOO_BIN), "pull", REPO], env=hub_env(hub, home),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = repo_dir(home) / "blobs" / (lfs_sha(hub, "model.safetensors") + ".incomplete")
    deadline = time.monotonic() + 20
    while not partial.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert partial.exists()
    p.send_signal(signal.SIGKILL)
    p.wait()
    proc = run(hub, home, "inspect", "-m", REPO, "--offline")
    assert_error(proc, "not found in the Hugging Face cache")
    assert not (repo_dir(home) / "snapshots" / hub.commit / "model.safetensors").exists()
    hub.faults.slow.clear()
    assert run(hub, home, "pull", REPO).returncode == 0


def test_cache_ls_and_rm(hubzoo_bin, hub, home):
    assert run(hub, home, "pull", REPO).returncode == 0
    proc = run(hub, home, "cache", "ls", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(proc.stdout)
    assert entry["repo"] == REPO
    assert entry["size_bytes"] == sum(len(hub.files[n]) for n in default_files(hub))
    (rev,) = entry["revisions"]
    assert rev == {"commit": hub.commit, "refs": ["main"], "files": len(default_files(hub)), "runnable": True}
    text = run(hub, home, "cache", "ls").stdout
    assert REPO in text and "yes" in text
    proc = run(hub, home, "cache", "rm", REPO)
    assert proc.returncode == 0, proc.stderr
    assert not repo_dir(home).exists()
    assert_error(run(hub, home, "cache", "rm", REPO), "not in the cache")


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_huggingface_hub_download_then_hubzoo_offline(hubzoo_bin, hub, home):
    env = hub_env(hub, home)
    proc = _python(f"from huggingface_hub import snapshot_download; "
                   f"print(snapshot_download({REPO!r}, endpoint={hub.endpoint!r}))", env)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip().splitlines()[-1]).name == hub.commit
    hub.reset()
    proc = run(hub, home, "inspect", "-m", REPO, HF_HUB_OFFLINE=1)
    assert proc.returncode == 0, proc.stderr
    assert hub.requests == [] and hub.cdn_requests == []
    # Online, hubzoo finds every file in huggingface_hub's layout: no file is fetched again.
    proc = run(hub, home, "inspect", "-m", REPO)
    assert proc.returncode == 0, proc.stderr
    assert [r["method"] for r in hub.requests] == ["GET"] and hub.cdn_requests == []


def test_hubzoo_pull_then_transformers_loads_offline(hubzoo_bin, hub, home):
    assert run(hub, home, "pull", REPO).returncode == 0
    env = hub_env(hub, home, HF_HUB_OFFLINE=1)
    proc = _python(
        "import transformers, huggingface_hub\n"
        f"m = transformers.AutoModelForCausalLM.from_pretrained({REPO!r}, local_files_only=True)\n"
        f"print(type(m).__name__, huggingface_hub.snapshot_download({REPO!r}, local_files_only=True))", env)
    assert proc.returncode == 0, proc.stderr
    name, path = proc.stdout.split()[-2:]
    assert name == "LlamaForCausalLM" and Path(path).name == hub.commit


def test_python_from_pretrained_downloads(hz, hub, home, monkeypatch):
    for k, v in hub_env(hub, home).items():
        if os.environ.get(k) != v:
            monkeypatch.setenv(k, v)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    model = hz.CausalLM.from_pretrained(REPO)
    assert model.num_layers >= 1
    assert (repo_dir(home) / "refs" / "main").read_text() == hub.commit
    path = hz.pull(REPO, include=["*.bin"], quiet=True)
    assert (Path(path) / "pytorch_model.bin").is_file()
    with pytest.raises(hz.NotFoundError, match="no-such-repo"):
        hz.CausalLM.from_pretrained("hubzoo-test/no-such-repo")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hz.NotFoundError, match="not found in the Hugging Face cache"):
        hz.CausalLM.from_pretrained("hubzoo-test/other")


def test_serve_logs_download_progress(hubzoo_bin, hub, home, smollm2_path):
    # The server needs a tokenizer: SmolLM2's beside the tiny model's weights.
    files = {n: d for n, d in hub.files.items() if "/" not in n and n.endswith((".json", ".safetensors"))}
    files.update({n: (Path(smollm2_path) / n).read_bytes() for n in ("tokenizer.json", "tokenizer_config.json")})
    hub.add_repo(REPO + "-chat", files)
    p = subprocess.Popen([str(_util.HUBZOO_BIN), "serve", "-m", REPO + "-chat", "--port", "0"], env=hub_env(hub, home),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "listening on" in line:
                break
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    text = "".join(lines)
    assert f"hubzoo serve: downloading {REPO}-chat" in text, text
    assert "hubzoo serve: [1/" in text and "listening on" in text, text


def test_write_failure_keeps_the_partial_file(hubzoo_bin, hub, home):
    """A disk that refuses writes (here RLIMIT_FSIZE, as a full disk would): a clear error, the
    partial file kept, and the next run resumes it."""
    import resource

    limit = len(hub.files["model.safetensors"]) // 2

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run([str(_util.HUBZOO_BIN), "pull", REPO], capture_output=True, text=True,
                          env=hub_env(hub, home), preexec_fn=small_files, timeout=60)
    assert_error(proc, "cannot write", "model.safetensors", "run again to resume")
    partial = repo_dir(home) / "blobs" / (lfs_sha(hub, "model.safetensors") + ".incomplete")
    kept = partial.stat().st_size
    assert 0 < kept <= limit
    assert not (repo_dir(home) / "refs" / "main").exists()
    hub.reset()
    assert run(hub, home, "pull", REPO).returncode == 0
    gets = [r for r in hub.cdn_requests if r["method"] == "GET"]
    assert [g["headers"].get("range") for g in gets] == [f"bytes={kept}-"]


def test_gguf_repo_takes_only_the_file_asked_for(hubzoo_bin, hub, home):
    hub.add_repo("hubzoo-test/tiny-gguf", {"a.Q4_K_M.gguf": b"GGUF" + b"\0" * 100,
                                           "a.Q8_0.gguf": b"GGUF" + b"\1" * 100, "README.md": b"x"})
    assert_error(run(hub, home, "pull", "hubzoo-test/tiny-gguf"), "--gguf-file", "a.Q4_K_M.gguf", "a.Q8_0.gguf")
    proc = run(hub, home, "pull", "hubzoo-test/tiny-gguf", "--gguf-file", "a.Q8_0.gguf")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in Path(proc.stdout.strip()).iterdir()) == ["a.Q8_0.gguf"]


def test_revisions_branch_tag_pr_and_commit(hubzoo_bin, hub, home):
    v1 = hub.add_repo("hubzoo-test/revs", {"config.json": b'{"v": 1}'}, revision="v1")
    pr = hub.add_repo("hubzoo-test/revs", {"config.json": b'{"v": 2}'}, revision="refs/pr/1")
    refs = home / "hub" / "models--hubzoo-test--revs" / "refs"
    for rev, commit in (("v1", v1), ("refs/pr/1", pr)):
        proc = run(hub, home, "pull", f"hubzoo-test/revs@{rev}")
        assert proc.returncode == 0, proc.stderr
        assert Path(proc.stdout.strip()).name == commit
        assert (refs / rev).read_text() == commit
    before = sorted(p.relative_to(refs) for p in refs.rglob("*") if p.is_file())
    proc = run(hub, home, "pull", f"hubzoo-test/revs@{v1}")  # a commit: no ref written
    assert proc.returncode == 0 and Path(proc.stdout.strip()).name == v1
    assert sorted(p.relative_to(refs) for p in refs.rglob("*") if p.is_file()) == before
    assert any("/revision/refs%2Fpr%2F1" in r["path"] for r in hub.requests)


def test_terminal_shows_a_bar_with_rate_and_eta(hubzoo_bin, hub, home):
    import pty

    master, slave = pty.openpty()
    p = subprocess.Popen([str(_util.HUBZOO_BIN), "pull", REPO], env=hub_env(hub, home),
                         stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=60) == 0
    text = out.decode()
    assert "\r\x1b[K[" in text and "ETA" in text and "total" in text and "/s" in text, text


def test_hf_hub_cache_and_an_unreachable_hub_fall_back_to_the_cache(hubzoo_bin, hub, home):
    cache = home.parent / "elsewhere"
    proc = run(hub, home, "pull", REPO, HF_HUB_CACHE=cache)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(cache) and not home.exists()
    # The Hub is down (nothing listens there): the cached snapshot serves, with a warning.
    proc = run(hub, home, "inspect", "-m", REPO, HF_HUB_CACHE=cache, HF_ENDPOINT="http://127.0.0.1:9",
               HUBZOO_HTTP_RETRIES=0)
    assert proc.returncode == 0, proc.stderr
    assert "cannot reach the Hub" in proc.stderr and "using the cached" in proc.stderr
    # Not cached and unreachable: the network error.
    proc = run(hub, home, "inspect", "-m", "hubzoo-test/other", HF_ENDPOINT="http://127.0.0.1:9",
               HUBZOO_HTTP_RETRIES=0)
    assert_error(proc, "127.0.0.1:9")
