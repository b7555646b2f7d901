"""Quantized weights, side by side (issue 16): hubzoo and llama.cpp on the same GGUF files.

    .venv/bin/python bench/quant.py                 # every file, 3 rounds (~10 min on 2 cores)
    .venv/bin/python bench/quant.py --quick         # one round, fewer figures (smoke test)

Files: the real GGUFs that setup prepares (SmolLM2-135M Q4_1, Qwen2.5-Coder-0.5B Q4_K_M,
Gemma-3-270M Q4_K_M) and Q8_0 / Q4_0 / Q4_K files llama.cpp's own llama-quantize makes from
SmolLM2's F32 GGUF (bench/build_llama_cpp.sh); with --k-quants TYPES (e.g. Q3_K_M,Q2_K), also
files of those types llama-quantize makes from the model each real Q4_K_M file holds (the file
dequantized to F32 by llama-quantize --allow-requantize), for the types with no real file here.
Engines, each a fresh process per figure and
round, the engines' order reversed every other round so a change in machine load hits all alike:
  hubzoo fused   `hubzoo bench -m FILE.gguf` (fp32 activations, exactly dequantized weights)
  hubzoo int8    the same with --mode int8 (int8 activations, as llama.cpp computes)
  hubzoo bf16dot-dequantize  with --modes ...,bf16dot-dequantize: --dtype bfloat16 --mode
                 bf16dot --quantize dequantize (dense bf16 weights, as transformers loads it)
  llama.cpp      llama-bench and llama-batched-bench on the same file
On a CPU with AMX, llama.cpp's native build dies of SIGILL in every quantized product of more
than one row (bench/build_llama_cpp.sh), so there "llama.cpp" is its build with AMX off, and
"llama.cpp AMX" the native build's decode at batch 1 (llama-bench -p 0), which does run and is
faster; the ratio at batch 1 is against the faster of the two.
  transformers D with --transformers D (a comma list of dtypes): bench/peer_transformers.py on the
                 same file (gguf_file=: transformers dequantizes it at load, then casts to D),
                 prefill and decode at batch 1 only (the best-vs-best table's figures)
Reported: medians over rounds of decode tok/s at batch 1/4/16, prefill 512, load time (hubzoo's
own), seconds from starting a server (`hubzoo serve`, `llama-server`) to its first 200 from
/health, peak RSS; ratios against llama.cpp; decode against the bandwidth bound (the file's bytes a
decode step reads / read bandwidth measured by build/bench/machine_bench just before each engine's
run; see bytes_read_per_token).
Writes bench/results/quant.{json,md}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import (PY, ROOT, free_port, llama_cpp_engine, log, machine_description,  # noqa: E402
                 machine_limits, machine_now, median_engine, run_process, seconds_to_ready)

MODELS = ROOT / "models"


def real_ggufs() -> dict[str, Path]:
    """The GGUF files scripts/prepare_models.py links under models/."""
    out = {}
    for p in sorted(MODELS.glob("**/*.gguf")):
        out[p.stem] = p.resolve()
    return out


def quantized_from_f32(llama_dir: Path, f32: Path, types: list[str]) -> dict[str, Path]:
    """Q8_0/Q4_0/Q4_K (or F16, BF16, ...) files made by llama-quantize from an F32 GGUF (cached
    beside it)."""
    out = {}
    for t in types:
        dst = f32.with_name(f32.name.replace("-f32.gguf", f"-{t.lower()}.gguf"))
        if not dst.is_file():
            tmp = dst.with_suffix(".tmp")
            run_process([str(llama_dir / "bin/llama-quantize"), str(f32), str(tmp), t])
            tmp.rename(dst)
        out[dst.stem] = dst
    return out


def dequantized_f32(llama_dir: Path, path: Path) -> Path:
    """The model a quantized GGUF holds as an F32 GGUF: llama-quantize --allow-requantize
    dequantizes every tensor (cached under ~/.cache/hubzoo/gguf, keyed by the file's sha256)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    dst = Path.home() / ".cache/hubzoo/gguf" / f"{path.stem}-{digest}-dequantized-f32.gguf"
    if not dst.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_suffix(".tmp")
        run_process([str(llama_dir / "bin/llama-quantize"), "--allow-requantize", str(path),
                     str(tmp), "F32"])
        tmp.rename(dst)
    return dst


def bytes_read_per_token(path: Path) -> int:
    """The file's bytes one decode step reads: every tensor's data once, except an untied
    model's token_embd (a step looks up one of its rows; llama.cpp and hubzoo both then read
    output.weight for the logits). Not the header and its vocabulary, read only at load.
    For Qwen2.5-Coder-0.5B Q4_K_M that is 392 of the file's 491 MB; a tied model (SmolLM2,
    Gemma 3) reads its token_embd whole as the output matrix."""
    import gguf
    sizes = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(path).tensors}
    untied_embedding = sizes.get("token_embd.weight", 0) if "output.weight" in sizes else 0
    return sum(sizes.values()) - untied_embedding


def cpu_has_amx() -> bool:
    flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "").split()
    return "amx_int8" in flags and "amx_tile" in flags


def llama_cpp_decode_b1(llama_dir: Path, gguf: Path, a) -> dict:
    """llama-bench's decode at batch 1 alone (no prefill run before it)."""
    usage: dict = {}
    out, _ = run_process([str(llama_dir / "bin/llama-bench"), "-m", str(gguf), "-t", str(a.threads),
                          "-p", "0", "-n", str(a.decode_tokens), "-r", "1", "-o", "json"], usage=usage)
    rows = json.loads(out)
    tg1 = next(row["avg_ts"] for row in rows if row["n_gen"] > 0)
    return {"engine": "llama.cpp AMX", "decode": [{"batch": 1, "tok_s": tg1}], "llama_bench_tg_batch1": tg1,
            "peak_rss_bytes": usage["peak_rss_bytes"], "gguf": gguf.name,
            "build": rows[0].get("build_commit") if rows else None}


def transformers_gguf(gguf: Path, dtype: str, a) -> dict:
    """transformers on the file as it loads a GGUF (dequantized, cast to dtype): prefill and
    decode at batch 1."""
    cmd = [PY, str(ROOT / "bench/peer_transformers.py"), "--model", str(gguf.parent),
           "--gguf-file", gguf.name, "--dtype", dtype, "--threads", str(a.threads),
           "--prefill", a.prefill, "--decode-batch", "1", "--decode-tokens", str(a.decode_tokens)]
    out, spawn = run_process(cmd, env={"OMP_NUM_THREADS": str(a.threads)})
    r = json.loads(out)
    r["ttft_cold_process_seconds"] = r["first_token_monotonic_s"] - spawn
    return r


# --modes names: a numerics mode on the blocks, or "bf16dot-dequantize" (the file's matrices
# dequantized at load to dense bf16, as transformers loads a GGUF, on the bf16 dot products).
# As load options (hubzoo.CausalLM.from_pretrained's keywords, the CLI's flags).
def mode_options(mode: str) -> dict[str, str]:
    if mode == "bf16dot-dequantize":
        return {"dtype": "bfloat16", "mode": "bf16dot", "quantize": "dequantize"}
    return {"dtype": "float32", "mode": mode}


def mode_flags(mode: str) -> list[str]:
    return [x for key, value in mode_options(mode).items() for x in (f"--{key}", value)]


def hubzoo_gguf(build: Path, gguf: Path, mode: str, a) -> dict:
    cmd = [str(build / "hubzoo"), "bench", "-m", str(gguf), *mode_flags(mode),
           "--threads", str(a.threads), "--prefill", a.prefill, "--decode-batch", a.decode_batch,
           "--decode-tokens", str(a.decode_tokens), "--repeats", "1"]
    out, spawn = run_process(cmd)
    r = json.loads(out)
    r["ttft_cold_process_seconds"] = r["first_token_monotonic_s"] - spawn
    port = free_port()
    r["ready_seconds"] = seconds_to_ready(
        [str(build / "hubzoo"), "serve", "-m", str(gguf), *mode_flags(mode), "--threads", str(a.threads),
         "--max-concurrency", "1", "--max-context", "1024", "--port", str(port)], port)
    return r


def fig(engine: dict, figure: str, key: str, value: int):
    return next((x["tok_s"] for x in engine.get(figure, []) if x[key] == value), None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefill", default="512")
    ap.add_argument("--decode-batch", default="1,4,16")
    # 128, not 32: a 32-token run is ~80 ms of decode, short enough for a neighbour's burst
    # on a shared machine to move one run's figure by 30% (0.59-0.93 of the bound in one
    # file's five rounds); the same count goes to llama-bench and llama-batched-bench.
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--files", default="", help="comma list of file stems (default: all)")
    ap.add_argument("--from-f32", default="Q8_0,Q4_0,Q4_K",
                    help="comma list of llama-quantize types made from SmolLM2's F32 GGUF "
                         "(F16 and BF16 too)")
    ap.add_argument("--k-quants", default="",
                    help="comma list of llama-quantize types (e.g. Q3_K_M,Q2_K) made from the "
                         "model each real Q4_K_M file holds")
    ap.add_argument("--modes", default="fused,int8")
    ap.add_argument("--transformers", default="",
                    help="comma list of dtypes: transformers on each file too (b1 and prefill)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench/results/quant"))
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.decode_batch, a.decode_tokens = 1, "1,4", 16
    build = Path(a.build)

    log("llama.cpp build (cached)")
    out, _ = run_process(["bash", str(ROOT / "bench/build_llama_cpp.sh"), str(MODELS / "SmolLM2-135M-Instruct")])
    llama_dir = Path(out.strip().splitlines()[-1])
    sha = llama_dir.name.rsplit("-", 1)[1]
    f32 = llama_dir.parent / "gguf" / f"SmolLM2-135M-Instruct-{sha}-f32.gguf"
    files = real_ggufs()
    files.update(quantized_from_f32(llama_dir, f32, [t for t in a.from_f32.split(",") if t]))
    k_quants = [t for t in a.k_quants.split(",") if t]
    if k_quants:
        for stem, path in list(files.items()):
            if stem.endswith("Q4_K_M"):
                files.update(quantized_from_f32(llama_dir, dequantized_f32(llama_dir, path),
                                                k_quants))
    if a.files:
        keep = set(a.files.split(","))
        files = {k: v for k, v in files.items() if k in keep}

    report = {"command": " ".join([Path(sys.executable).name] + sys.argv), "threads": a.threads,
              "rounds": a.rounds, "machine": machine_description(), "load_average_start": os.getloadavg(),
              "llama_cpp_dir": str(llama_dir), "files": {}}
    # With AMX: the build without it for every figure, the native one for decode at batch 1.
    amx_llama_dir = None
    if cpu_has_amx():
        amx_llama_dir = llama_dir
        out, _ = run_process(["env", "NO_AMX=1", "bash", str(ROOT / "bench/build_llama_cpp.sh")])
        llama_dir = Path(out.strip().splitlines()[-1])
        report["llama_cpp_dir"] = str(llama_dir)
        report["llama_cpp_amx_dir"] = str(amx_llama_dir)
    log("machine limits")
    report["machine_limits"] = machine_limits(build, a.threads)
    modes = [m for m in a.modes.split(",") if m]
    for name, path in files.items():
        engines = {f"hubzoo {m}": (lambda m=m, p=path: hubzoo_gguf(build, p, m, a)) for m in modes}
        engines["llama.cpp"] = lambda p=path: llama_cpp_engine(llama_dir, p, a, ready=True)
        if amx_llama_dir:
            engines["llama.cpp AMX"] = lambda p=path: llama_cpp_decode_b1(amx_llama_dir, p, a)
        for dt in (d for d in a.transformers.split(",") if d):
            engines[f"transformers {dt}"] = lambda p=path, dt=dt: transformers_gguf(p, dt, a)
        runs = {e: [] for e in engines}
        read_bytes = bytes_read_per_token(path)
        # The read bandwidth just before each engine's run: a shared machine's moves within a
        # round (37-70 GB/s in one), and an engine's run takes tens of seconds.
        read_gbs = {e: [] for e in engines}
        pingpong_ns = {e: [] for e in engines}  # the core-to-core round trip then (run.machine_now)
        order = list(engines)
        for rnd in range(a.rounds):
            for e in (order if rnd % 2 == 0 else order[::-1]):  # alternating the engines' order
                log(f"{name}: round {rnd + 1}/{a.rounds}: {e}")
                gbs, pingpong = machine_now(build, a.threads)
                read_gbs[e].append(gbs)
                pingpong_ns[e].append(pingpong)
                try:
                    runs[e].append(engines[e]())
                except RuntimeError as err:  # recorded, not hidden: the table shows the failure
                    runs[e].append({"error": str(err)[-2000:]})
        med = {}
        for e, r in runs.items():
            ok = [x for x in r if "error" not in x]
            med[e] = median_engine(ok) if ok else {"error": r[0]["error"]}
            # decode b1 against the bound measured just before its run, then the median over rounds
            ratios = [fig(x, "decode", "batch", 1) * read_bytes / (gbs * 1e9)
                      for x, gbs in zip(r, read_gbs[e]) if "error" not in x and fig(x, "decode", "batch", 1)]
            if ratios:
                med[e]["bound_ratio"] = statistics.median(ratios)
                med[e]["bound_ratio_rounds"] = ratios
        report["files"][name] = {"path": str(path), "bytes": path.stat().st_size,
                                 "bytes_read_per_token": read_bytes, "engines": med,
                                 "read_gbs_runs": read_gbs,
                                 "pingpong_ns_runs": pingpong_ns,
                                 "read_gbs_rounds": [g for gs in read_gbs.values() for g in gs]}
    report["load_average_end"] = os.getloadavg()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, out.with_suffix(".md"))
    print(out.with_suffix(".md").read_text())


def write_markdown(r: dict, path: Path) -> None:
    thr = r["threads"]
    lim = next(x for x in r["machine_limits"]["threads"] if x["threads"] == thr)
    m = r["machine"]
    lines = [f"# Quantized weights: hubzoo vs llama.cpp on the same GGUF files, {thr} threads", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, SIMD {' '.join(m['simd'])}; hubzoo {m['git_commit']}; "
             f"read bandwidth {lim['read_gbs']:.1f} GB/s measured in the same run. Medians of {r['rounds']} "
             f"rounds, engines alternating. Load average {' '.join(f'{x:.2f}' for x in r['load_average_start'])} "
             f"at the start, {' '.join(f'{x:.2f}' for x in r['load_average_end'])} at the end. "
             f"Command: `{r['command']}`.", "",
             "| file | MB | MB read / token | engine | decode b1 | b4 | b16 | prefill 512 | load s | server ready s | peak RSS MB | "
             "RSS / (file + KV) | b1 / llama.cpp | b4 | b16 | prefill / llama.cpp | b1 / bandwidth bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in r["files"].items():
        ll = f["engines"].get("llama.cpp", {})
        read_mb = f"{f['bytes_read_per_token'] / 1e6:.0f}" if "bytes_read_per_token" in f else "-"
        bound = lim["read_gbs"] * 1e9 / f.get("bytes_read_per_token", f["bytes"])
        for e, x in f["engines"].items():
            if "error" in x:
                lines.append(f"| {name} | {f['bytes'] / 1e6:.0f} | {read_mb} | {e} | failed: {x['error'][-120:]!r} |"
                             + " |" * 12)
                continue
            d = [fig(x, "decode", "batch", b) for b in (1, 4, 16)]
            p = fig(x, "prefill", "tokens", 512)
            dl = [fig(ll, "decode", "batch", b) for b in (1, 4, 16)] if "error" not in ll else [None] * 3
            amx_b1 = fig(f["engines"].get("llama.cpp AMX", {}), "decode", "batch", 1)
            if amx_b1 and (dl[0] is None or amx_b1 > dl[0]):
                dl[0] = amx_b1  # the faster llama.cpp at batch 1
            pl = fig(ll, "prefill", "tokens", 512) if "error" not in ll else None

            def ratio(u, v):
                return f"{u / v:.2f}" if u and v else "-"

            def val(v, spec=".1f"):
                return "-" if v is None else format(v, spec)

            rss, kv = x.get("peak_rss_bytes"), x.get("max_kv_cache_bytes")
            is_llama = e.startswith("llama.cpp")
            lines.append(
                f"| {name} | {f['bytes'] / 1e6:.0f} | {read_mb} | {e} | {val(d[0])} | {val(d[1])} | {val(d[2])} | {val(p)} | "
                f"{val(x.get('load_seconds'), '.2f')} | {val(x.get('ready_seconds'), '.2f')} | "
                f"{val(rss / 1e6 if rss else None, '.0f')} | "
                f"{ratio(rss, f['bytes'] + kv) if rss and kv is not None else '-'} | "
                + (" | ".join(ratio(d[i], dl[i]) for i in range(3)) if not is_llama else "- | - | -")
                + f" | {ratio(p, pl) if not is_llama else '-'} | "
                + (f"{x['bound_ratio']:.2f} |" if "bound_ratio" in x else f"{ratio(d[0], bound)} |"))
    lines += ["", "Bandwidth bound: read bandwidth / the file's bytes a decode step reads (MB read / token: "
              "every tensor once, except an untied model's token embeddings, of which a step reads one row); "
              "b1 / bandwidth bound is the median over rounds of each run's decode against the "
              "bandwidth measured just before that run (a shared machine's bandwidth moves "
              "between runs: " + "; ".join(
                  f"{n} {min(f['read_gbs_rounds']):.1f}-{max(f['read_gbs_rounds']):.1f} GB/s"
                  for n, f in r["files"].items() if f.get("read_gbs_rounds")) + "). "
              "RSS / (file + KV): peak resident memory of the whole run over the file's size plus the "
              "largest KV cache the run allocated. Server ready: seconds from spawning `hubzoo serve` or "
              "`llama-server` (context 1024, no warm-up run) on the file until /health answers 200."]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
