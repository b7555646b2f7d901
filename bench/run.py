"""The CPU benchmark of issue 8, in one command: hubzoo beside its peers, same run, same inputs.

    .venv/bin/python bench/run.py            # full run (~25 min on 2 busy cores)
    .venv/bin/python bench/run.py --quick    # one round, smaller figures (smoke test)

Engines (each figure from a fresh process per round; rounds alternate the engines, so a
change in machine load hits all alike; medians over --rounds):
  hubzoo float32 / bfloat16   `hubzoo bench` (cli/bench.cc)
  transformers float32 / bf16 bench/peer_transformers.py (PyTorch CPU, same synthetic ids)
  llama.cpp F32 / BF16        llama-bench (prefill pp128/512/2048, decode tg at batch 1) and
                              llama-batched-bench (decode at batch 1/4/16), built from the
                              llama-cpp-python sdist by bench/build_llama_cpp.sh (GGML_NATIVE)
Machine limits measured in the same run: fp32 FMA peak and memory read bandwidth
(build/bench/machine_bench), and hubzoo's matmul against oneDNN sgemm on the model's own
shapes (build/bench/matmul_bench, oneDNN from Debian's libdnnl). Embeddings: bench/embed.py.
Writes bench/results/bench.{json,md} and bench_*.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_process(cmd: list[str], env: dict | None = None, timeout: float = 3600,
                usage: dict | None = None) -> tuple[str, float]:
    """Runs cmd; returns (stdout, CLOCK_MONOTONIC time of the spawn). hubzoo reports its own
    peak RSS (VmHWM, read in the process); for a peer, pass `usage` and the child's peak RSS
    (its rusage from wait4) lands in usage["peak_rss_bytes"]."""
    spawn = time.clock_gettime(time.CLOCK_MONOTONIC)
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        p = subprocess.Popen(cmd, stdout=fout, stderr=ferr, text=True,
                             env={**os.environ, **(env or {})}, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9
                raise RuntimeError(f"{' '.join(cmd)} timed out after {timeout} s")
            time.sleep(0.01)
        p.returncode = os.waitstatus_to_exitcode(status)
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read(), ferr.read()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-3000:]}")
    if usage is not None:
        usage["peak_rss_bytes"] = max(usage.get("peak_rss_bytes", 0), ru.ru_maxrss * 1024)
    return out, spawn


def seconds_to_ready(cmd: list[str], port: int, timeout: float = 120) -> float:
    """Seconds from spawning a server (cmd, listening on 127.0.0.1:port) until its /health
    answers 200: what a user waits between starting it and the first request. The server is
    then stopped (SIGTERM; SIGKILL after 10 s)."""
    with tempfile.TemporaryFile("w+") as ferr:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=ferr, text=True, cwd=ROOT)
        try:
            while True:
                if p.poll() is not None:
                    ferr.seek(0)
                    raise RuntimeError(f"{' '.join(cmd)} exited ({p.returncode}) before it was ready:\n"
                                       f"{ferr.read()[-2000:]}")
                if time.monotonic() - t0 > timeout:
                    raise RuntimeError(f"{' '.join(cmd)} not ready after {timeout} s")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                        if r.status == 200:
                            return time.monotonic() - t0
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(0.002)
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_limits(build: Path, threads: int, mib: int | None = None) -> dict:
    """machine_bench's JSON; `mib`: its buffer (default 1 GiB; 256 takes ~1.7 s instead of ~5)."""
    cmd = [str(build / "bench/machine_bench"), "--threads", str(threads)]
    out, _ = run_process(cmd + (["--mib", str(mib)] if mib else []))
    return json.loads(out)


def machine_now(build: Path, threads: int, mib: int | None = None) -> tuple[float, float | None]:
    """The read bandwidth at `threads` threads now and the core-to-core round trip in ns (None with
    one thread): machine_bench, a few seconds. On a host whose two vCPUs sit on one CCD or on two
    (an EPYC), the round trip says which: ~140 ns on one, ~350 on two, where the bandwidth is ~35
    and ~60 GB/s."""
    lim = machine_limits(build, threads, mib)
    return (next(x for x in lim["threads"] if x["threads"] == threads)["read_gbs"], lim.get("pingpong_ns"))


def matmul_vs_onednn(build: Path, quick: bool) -> dict:
    tmp = ROOT / "build/bench/matmul.json"
    run_process([str(build / "bench/matmul_bench"), "--json", str(tmp)] + (["--quick"] if quick else []))
    return json.loads(tmp.read_text())


def hubzoo_engine(build: Path, model: str, dtype: str, a, mode: str = "fused") -> dict:
    cmd = [str(build / "hubzoo"), "bench", "-m", model, "--dtype", dtype, "--mode", mode, "--threads", str(a.threads),
           "--prefill", a.prefill, "--decode-batch", a.decode_batch,
           "--decode-tokens", str(a.decode_tokens), "--repeats", "1"]
    out, spawn = run_process(cmd)
    r = json.loads(out)
    r["ttft_cold_process_seconds"] = r["first_token_monotonic_s"] - spawn
    return r


def transformers_engine(model: str, dtype: str, a) -> dict:
    cmd = [PY, str(ROOT / "bench/peer_transformers.py"), "--model", model, "--dtype", dtype,
           "--threads", str(a.threads), "--prefill", a.prefill, "--decode-batch", a.decode_batch,
           "--decode-tokens", str(a.decode_tokens)]
    out, spawn = run_process(cmd, env={"OMP_NUM_THREADS": str(a.threads)})
    r = json.loads(out)
    r["ttft_cold_process_seconds"] = r["first_token_monotonic_s"] - spawn
    return r


def llama_cpp_engine(llama_dir: Path, gguf: Path, a, ready: bool = False) -> dict:
    """llama-bench (prefill, decode b1) and llama-batched-bench (decode at each batch) on the
    file; with `ready`, also llama-server's seconds from spawn to a 200 from /health
    (ready_seconds: its load, context of 1024 tokens, no warm-up run)."""
    bin_dir = llama_dir / "bin"
    usage: dict = {}  # peak RSS: the larger of its two processes
    out, _ = run_process([str(bin_dir / "llama-bench"), "-m", str(gguf), "-t", str(a.threads),
                             "-p", a.prefill, "-n", str(a.decode_tokens), "-r", "1", "-o", "json"],
                         usage=usage)
    rows = json.loads(out)
    prefill, decode = [], []
    for row in rows:
        if row["n_prompt"] > 0:
            prefill.append({"tokens": row["n_prompt"], "tok_s": row["avg_ts"]})
        elif row["n_gen"] > 0:
            tg1 = row["avg_ts"]
    batches = [int(b) for b in a.decode_batch.split(",") if b]
    ctx = max(batches) * (16 + a.decode_tokens) + 64
    out, _ = run_process([str(bin_dir / "llama-batched-bench"), "-m", str(gguf), "-t", str(a.threads),
                             "-c", str(ctx), "-b", "2048", "-ub", "512", "-npp", "16",
                             "-ntg", str(a.decode_tokens), "-npl", a.decode_batch,
                             "--output-format", "jsonl"], usage=usage)
    for line in out.splitlines():
        if line.startswith("{") and '"speed_tg"' in line:
            j = json.loads(line)
            decode.append({"batch": j["pl"], "tok_s": j["speed_tg"], "step_ms": 1e3 * j["pl"] / j["speed_tg"]})
    ready_s = None
    if ready:
        port = free_port()
        ready_s = seconds_to_ready([str(bin_dir / "llama-server"), "-m", str(gguf), "-t", str(a.threads),
                                    "-c", "1024", "--no-warmup", "--host", "127.0.0.1", "--port", str(port)],
                                   port)
    return {"engine": "llama.cpp", "prefill": prefill, "decode": decode, "llama_bench_tg_batch1": tg1,
            "peak_rss_bytes": usage["peak_rss_bytes"], "ready_seconds": ready_s,
            "gguf": gguf.name, "build": rows[0].get("build_commit") if rows else None,
            "cpu_info": rows[0].get("cpu_info") if rows else None}


def median_engine(runs: list[dict]) -> dict:
    """Per-figure medians over rounds (other fields from the first run)."""
    r = dict(runs[0])
    for key in ("load_seconds", "ttft_cold_process_seconds", "ttft_from_main_seconds", "peak_rss_bytes",
                "llama_bench_tg_batch1", "ready_seconds"):
        vals = [x[key] for x in runs if x.get(key) is not None]
        if vals:
            r[key] = statistics.median(vals)
    for figure, key in (("prefill", "tokens"), ("decode", "batch")):
        out = []
        for item in runs[0].get(figure, []):
            same = [y for x in runs for y in x[figure] if y[key] == item[key]]
            out.append({key: item[key], "tok_s": statistics.median(y["tok_s"] for y in same),
                        "tok_s_best": max(y["tok_s"] for y in same),
                        "tok_s_all": [y["tok_s"] for y in same]})
        r[figure] = out
    r["rounds"] = len(runs)
    r["read_gbs_before_all"] = [x.get("read_gbs_before") for x in runs]
    r["pingpong_ns_before_all"] = [x.get("pingpong_ns_before") for x in runs]
    return r


def model_flops(cfg: dict, p: int) -> float:
    """FLOPs of one prefill of p tokens: linear layers for every token, causal attention
    (QK^T and PV over the p*(p+1)/2 visible pairs), the lm_head for the last row only."""
    h, i, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", h // heads)
    linear = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * i
    attn = 2 * 2 * heads * hd * p * (p + 1) / 2
    return L * (2 * linear * p + attn) + 2 * h * cfg["vocab_size"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct"))
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--transformers-rounds", type=int, default=1,
                    help="rounds that also run transformers (10x slower than the others)")
    ap.add_argument("--prefill", default="128,512,2048")
    ap.add_argument("--decode-batch", default="1,4,16")
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--skip", default="", help="comma list of: transformers,llama.cpp,embed,matmul")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench/results/bench"))
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.prefill, a.decode_tokens = 1, "128,512", 16
    skip = set(a.skip.split(","))
    build = Path(a.build)
    cfg = json.loads((Path(a.model) / "config.json").read_text())
    load_start = os.getloadavg()

    report = {"command": " ".join([Path(PY).name] + sys.argv), "threads": a.threads, "rounds": a.rounds,
              "model": Path(a.model).name, "machine": machine_description(),
              "load_average_start": load_start}
    log("machine limits")
    limits_start = machine_limits(build, a.threads)
    if "matmul" not in skip:
        log("matmul vs oneDNN")
        report["matmul"] = matmul_vs_onednn(build, a.quick)

    engines = {
        "hubzoo float32": lambda: hubzoo_engine(build, a.model, "float32", a),
        "hubzoo bfloat16": lambda: hubzoo_engine(build, a.model, "bfloat16", a),
        # bf16 weights on the CPU's bf16 dot products (matmul inputs rounded to bf16).
        "hubzoo bfloat16 bf16dot": lambda: hubzoo_engine(build, a.model, "bfloat16", a, "bf16dot"),
    }
    if "llama.cpp" not in skip:
        log("llama.cpp build (cached)")
        out, _ = run_process(["bash", str(ROOT / "bench/build_llama_cpp.sh"), a.model])
        llama_dir = Path(out.strip().splitlines()[-1])
        sha = llama_dir.name.rsplit("-", 1)[1]
        gguf_dir = llama_dir.parent / "gguf"
        for t, name in (("f32", "F32"), ("bf16", "BF16")):
            g = gguf_dir / f"{Path(a.model).name}-{sha}-{t}.gguf"
            engines[f"llama.cpp {name}"] = lambda g=g: llama_cpp_engine(llama_dir, g, a)
        report["llama_cpp_dir"] = str(llama_dir)
    if "transformers" not in skip:
        engines["transformers float32"] = lambda: transformers_engine(a.model, "float32", a)
        engines["transformers bfloat16"] = lambda: transformers_engine(a.model, "bfloat16", a)

    runs = {name: [] for name in engines}
    for rnd in range(a.rounds):
        for name, fn in engines.items():
            if name.startswith("transformers") and rnd >= a.transformers_rounds:
                continue
            log(f"round {rnd + 1}/{a.rounds}: {name}")
            # A shared machine's bandwidth moves between runs (on some hosts it flips between two
            # levels every few minutes): each run keeps the bandwidth measured just before it.
            gbs, pingpong = machine_now(build, a.threads)
            runs[name].append(dict(fn(), read_gbs_before=gbs, pingpong_ns_before=pingpong))
    report["engines"] = {name: median_engine(r) for name, r in runs.items()}
    report["flops"] = {str(p): model_flops(cfg, int(p)) for p in a.prefill.split(",")}
    if "embed" not in skip:
        log("embeddings (bench/embed.py)")
        run_process([PY, str(ROOT / "bench/embed.py"), "--threads", str(a.threads), "--repeats",
                     "2" if a.quick else "3"] + (["--sentences", "64"] if a.quick else []),
                    env={"PYTHONPATH": str(build / "python")})
        report["embed"] = json.loads((ROOT / "bench/results/embed.json").read_text())
    report["load_average_end"] = os.getloadavg()
    # The machine's limits: the better of a measurement at the start and one at the end (on a
    # shared machine a busy moment lowers them; the limit is what the hardware can do).
    log("machine limits (again)")
    limits_end = machine_limits(build, a.threads)
    report["machine_limits"] = dict(limits_start, threads=[
        {"threads": s["threads"], "fma_gflops": max(s["fma_gflops"], e["fma_gflops"]),
         "read_gbs": max(s["read_gbs"], e["read_gbs"]), "start": s, "end": e}
        for s, e in zip(limits_start["threads"], limits_end["threads"])])
    report["targets"] = targets(report, cfg)

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    from bench_report import write_markdown, write_plots  # noqa: E402  (bench/ is on sys.path)

    write_markdown(report, out.with_suffix(".md"))
    write_plots(report, out)
    print(out.with_suffix(".md").read_text())


def machine_description() -> dict:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    mem = next((line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal")), "0")
    git = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return {
        "cpu": fields.get("Model name", "").strip(),
        "cores": os.cpu_count(),
        "simd": [f for f in flags if f.startswith(("avx", "fma", "amx"))],
        "l2": fields.get("L2 cache", "").strip(),
        "l3": fields.get("L3 cache", "").strip(),
        "memory_gib": round(int(mem) / 2**20, 1),
        "kernel": platform.release(),
        "git_commit": git.stdout.strip(),
    }


def targets(r: dict, cfg: dict) -> list[dict]:
    """The issue's targets, each with its measured value and whether it is met."""
    e = r["engines"]
    thr = r["threads"]
    lim = next(x for x in r["machine_limits"]["threads"] if x["threads"] == thr)

    def fig(engine, figure, key, value):
        """Best round: on a shared machine the fastest round is the one least disturbed, for
        every engine alike (medians are in the tables)."""
        if engine not in e:
            return None
        return next((x.get("tok_s_best", x["tok_s"]) for x in e[engine][figure] if x[key] == value), None)

    out = []

    def add(name, value, bar, higher=True, note=""):
        ok = None if value is None else (value >= bar if higher else value <= bar)
        out.append({"target": name, "value": value, "bar": bar, "met": ok, "note": note})

    hz = e["hubzoo bfloat16"]
    d_hz = fig("hubzoo bfloat16", "decode", "batch", 1)
    d_ll = fig("llama.cpp BF16", "decode", "batch", 1)
    add("bf16 decode b1 / llama.cpp BF16", d_hz / d_ll if d_ll else None, 1.2,
        note=paired_rounds(e, "hubzoo bfloat16", "llama.cpp BF16"))
    bound = lim["read_gbs"] * 1e9 / hz["weight_bytes"]
    add("bf16 decode b1 / bandwidth bound", d_hz / bound, 0.85,
        note=f"bound {bound:.0f} tok/s = {lim['read_gbs']:.1f} GB/s / {hz['weight_bytes'] / 1e6:.0f} MB")
    # bf16 with hubzoo's fastest verified bf16 mode (bf16dot), as the issue asks: medians of
    # the alternating rounds, not the best round.
    def med(engine, figure, key, value):
        if engine not in e:
            return None
        return next((x["tok_s"] for x in e[engine][figure] if x[key] == value), None)

    dot = "hubzoo bfloat16 bf16dot"
    for peer, bar in (("llama.cpp BF16", 1.0), ("transformers bfloat16", 1.0)):
        a_, b_ = med(dot, "prefill", "tokens", 512), med(peer, "prefill", "tokens", 512)
        add(f"bf16 prefill 512 (bf16dot) / {peer}, medians", a_ / b_ if (a_ and b_) else None, bar)
    a_, b_ = med(dot, "decode", "batch", 1), med("llama.cpp BF16", "decode", "batch", 1)
    add("bf16 decode b1 (bf16dot) / llama.cpp BF16, medians", a_ / b_ if (a_ and b_) else None, 1.2,
        note=paired_rounds(e, dot, "llama.cpp BF16"))
    p_hz = fig("hubzoo float32", "prefill", "tokens", 512)
    p_ll = fig("llama.cpp F32", "prefill", "tokens", 512)
    add("fp32 prefill 512 / llama.cpp F32", p_hz / p_ll if (p_hz and p_ll) else None, 1.0)
    if p_hz:
        gf = r["flops"]["512"] / (512 / p_hz) * 1e-9
        add("fp32 prefill 512 / FMA peak", gf / lim["fma_gflops"], 0.5,
            note=f"{gf:.0f} of {lim['fma_gflops']:.0f} GFLOP/s")
    if "matmul" in r:
        for t in sorted({1, thr}):
            rows = [x for x in r["matmul"]["results"] if x["threads"] == t and x["hubzoo_vs_onednn"]]
            if not rows:
                continue
            w = min(rows, key=lambda x: x["hubzoo_vs_onednn"])
            geo = statistics.geometric_mean(x["hubzoo_vs_onednn"] for x in rows)
            add(f"matmul / oneDNN sgemm, {t} thread(s), worst model shape", w["hubzoo_vs_onednn"], 1.0,
                note=f"{w['shape']} M={w['m']}; geomean {geo:.2f}x over {len(rows)} shapes x M")
    t_hz = e["hubzoo float32"]["ttft_cold_process_seconds"]
    if "transformers float32" in e:
        add("TTFT cold process / transformers fp32", t_hz / e["transformers float32"]["ttft_cold_process_seconds"],
            0.1, higher=False)
    if "embed" in r:
        mixed = r["embed"]["corpora"]["mixed"]
        add("embeddings b64 / sentence-transformers", embed_ratio(mixed, 64), 2.0, note="mixed corpus")
    kv = hz["max_kv_cache_bytes"]
    add("peak RSS / (weights + KV cache), bf16", hz["peak_rss_bytes"] / (hz["weight_bytes"] + kv), 1.2,
        higher=False, note=f"largest KV cache of the run {kv / 2**20:.0f} MiB")
    return out


def paired_rounds(e: dict, engine: str, peer: str) -> str:
    """Round k of `engine` over round k of `peer` (decode b1), each with the read bandwidth
    measured just before the two runs (and the core-to-core round trip, where recorded): where
    the machine's bandwidth moved during the run, this shows which level each ratio was measured at."""
    if engine not in e or peer not in e:
        return ""
    a_ = next((x["tok_s_all"] for x in e[engine]["decode"] if x["batch"] == 1), [])
    b_ = next((x["tok_s_all"] for x in e[peer]["decode"] if x["batch"] == 1), [])
    ga, gb = e[engine].get("read_gbs_before_all", []), e[peer].get("read_gbs_before_all", [])
    pa, pb = e[engine].get("pingpong_ns_before_all", []), e[peer].get("pingpong_ns_before_all", [])
    pairs = [f"{x / y:.2f}x at {g:.0f}/{h:.0f} GB/s" + (f", {p:.0f}/{q:.0f} ns" if p and q else "")
             for x, y, g, h, p, q in zip(a_, b_, ga, gb, pa + [None] * len(ga), pb + [None] * len(gb))
             if g is not None and h is not None]
    return "rounds: " + ", ".join(pairs) if pairs else ""


def embed_ratio(corpus: dict, batch: int):
    try:
        return corpus["ratio_over_sentence_transformers"]["hubzoo float32"][str(batch)]
    except (KeyError, TypeError):
        return None


if __name__ == "__main__":
    main()
