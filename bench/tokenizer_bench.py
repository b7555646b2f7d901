"""Single-threaded encode throughput: hubzoo's C++ tokenizer vs HF `tokenizers`, same run.

Two tokenizers (SmolLM2-135M-Instruct: byte-level BPE; all-MiniLM-L6-v2: Bert
normalizer + WordPiece), one corpus, two ways of encoding it, both with
add_special_tokens=True:
  - encode:       each document on its own, one call per document;
  - encode_batch: the whole corpus in one call.
HF runs in a subprocess with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false;
its CPU time / wall time over the timed runs (~1.0 for one thread) is recorded
as proof, and the same for the C++ driver (build/bench/tokenizer_bench, one
thread). Each side warms up once, then times --repeats runs; figures are medians.
MB = 10^6 bytes of UTF-8 input; tokens = ids produced (special tokens included).
Truncation and padding are switched off on both sides (all-MiniLM-L6-v2 ships
truncation to 128 and Fixed(128) padding) so every document is tokenized whole.
The ids of every document must be identical on both sides (and encode_batch
must equal encode on each side); otherwise the benchmark fails.

Corpus (deterministic for a given commit and venv; its sha256 is recorded),
--corpus-mb in total, split into documents of at most 16 KiB at line ends:
  - prose 40%: the venv's *.dist-info/METADATA (package READMEs) sorted by
    path, then the Python reference docs (pydoc_data.topics) sorted by topic;
  - python 30%: CPython stdlib *.py files (valid UTF-8), ordered by sha1 of
    their relative path;
  - repo 15%: this repository's *.cc *.h *.py *.md *.jinja files at HEAD
    (git show), sorted by path;
  - multiscript 15%: python/tests/data/tokenizer_corpus.json's hard strings
    (CJK, Arabic, Devanagari, emoji ZWJ sequences, combining marks, control
    characters, special-token lookalikes...) drawn with random.Random(1234)
    and joined into ~2 KB documents;
each category taken in order until its share is filled; documents then shuffled
with random.Random(0).

    .venv/bin/python bench/tokenizer_bench.py            # writes bench/results/tokenizer_encode.*
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench/work"
TOKENIZERS = {
    "SmolLM2-135M-Instruct": "byte-level BPE",
    "all-MiniLM-L6-v2": "Bert normalizer + WordPiece",
}
MODES = ("encode", "encode_batch")
MAX_DOC = 16 * 1024
SHARES = {"prose": 0.40, "python": 0.30, "repo": 0.15, "multiscript": 0.15}


# ----------------------------------------------------------------------------- corpus


def chunk(text: str, limit: int = MAX_DOC) -> list[str]:
    """Splits at line ends into pieces of at most `limit` UTF-8 bytes (a longer line stays whole)."""
    docs, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode())
        if cur and size + n > limit:
            docs.append("".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += n
    if cur:
        docs.append("".join(cur))
    return [d for d in docs if d.strip()]


def read_utf8(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def take(texts, budget: int) -> list[str]:
    docs, size = [], 0
    for text in texts:
        for d in chunk(text):
            if size >= budget:
                return docs
            docs.append(d)
            size += len(d.encode())
    return docs


def prose_texts():
    site = Path(sysconfig.get_paths()["purelib"])
    for meta in sorted(site.glob("*.dist-info/METADATA"), key=lambda p: str(p).lower()):
        if (t := read_utf8(meta)) is not None:
            yield t
    import pydoc_data.topics

    for key in sorted(pydoc_data.topics.topics):
        yield pydoc_data.topics.topics[key]


def python_texts():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts]
    files.sort(key=lambda p: hashlib.sha1(str(p.relative_to(stdlib)).encode()).hexdigest())
    for p in files:
        if (t := read_utf8(p)) is not None:
            yield t


def repo_texts():
    names = subprocess.run(["git", "ls-files", "*.cc", "*.h", "*.py", "*.md", "*.jinja"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in sorted(names):
        blob = subprocess.run(["git", "show", f"HEAD:{name}"], cwd=ROOT, capture_output=True).stdout
        try:
            yield blob.decode("utf-8")
        except UnicodeDecodeError:
            continue


def multiscript_docs(budget: int) -> list[str]:
    strings = [s for s in json.loads((ROOT / "python/tests/data/tokenizer_corpus.json").read_text())
               if s.strip()]
    rng = random.Random(1234)
    docs, size = [], 0
    while size < budget:
        parts, n = [], 0
        while n < 2000:
            s = rng.choice(strings)
            parts.append(s + rng.choice([" ", "\n", "\n\n", ". "]))
            n += len(s.encode()) + 1
        d = "".join(parts)
        docs.append(d)
        size += len(d.encode())
    return docs


def build_corpus(total_mb: float) -> tuple[list[str], dict]:
    total = int(total_mb * 1e6)
    parts = {
        "prose": take(prose_texts(), int(SHARES["prose"] * total)),
        "python": take(python_texts(), int(SHARES["python"] * total)),
        "repo": take(repo_texts(), int(SHARES["repo"] * total)),
        "multiscript": multiscript_docs(int(SHARES["multiscript"] * total)),
    }
    docs = [d for p in parts.values() for d in p]
    random.Random(0).shuffle(docs)
    sizes = sorted(len(d.encode()) for d in docs)
    info = {
        "documents": len(docs),
        "bytes": sum(sizes),
        "chars": sum(len(d) for d in docs),
        "median_doc_bytes": statistics.median(sizes),
        "max_doc_bytes": sizes[-1],
        "categories": {k: {"documents": len(v), "bytes": sum(len(d.encode()) for d in v)}
                       for k, v in parts.items()},
    }
    return docs, info


# ----------------------------------------------------------------------------- HF side


def ids_bytes(encodings) -> bytes:
    """Per document: little-endian uint32 count, then uint32 ids (the C++ driver's --ids-out)."""
    import numpy as np

    chunks = []
    for e in encodings:
        ids = e.ids
        chunks.append(np.array([len(ids), *ids], dtype="<u4").tobytes())
    return b"".join(chunks)


def hf_worker(args) -> None:
    """Runs in a subprocess whose environment pins HF tokenizers to one thread."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(args.tokenizer)
    tok.no_truncation()
    tok.no_padding()
    docs = json.loads(Path(args.corpus).read_text(encoding="utf-8"))

    def time_runs(fn):
        fn()  # warm-up
        times, cpu_times = [], []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(args.repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        cpu_over_wall = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
        return {"times_s": times, "cpu_times_s": cpu_times, "median_s": statistics.median(times),
                "cpu_over_wall": cpu_over_wall}

    def encode_each():
        for d in docs:
            tok.encode(d, add_special_tokens=True)

    batch_out = []

    def encode_batch():  # the previous batch is freed inside the timing, as in the C++ driver
        batch_out[:] = tok.encode_batch(docs, add_special_tokens=True)

    ref = [tok.encode(d, add_special_tokens=True) for d in docs]
    enc = time_runs(encode_each)
    batch = time_runs(encode_batch)
    # Threads of this process after the timed runs (before numpy, whose BLAS may start its own).
    threads = next((int(line.split()[1]) for line in open("/proc/self/status")
                    if line.startswith("Threads:")), None)
    for i, (a, b) in enumerate(zip(ref, batch_out)):
        if a.ids != b.ids:
            sys.exit(f"HF encode_batch differs from encode on document {i}")
    if args.ids_out:
        Path(args.ids_out).write_bytes(ids_bytes(ref))
    print(json.dumps({
        "documents": len(docs),
        "tokens": sum(len(e.ids) for e in ref),
        "repeats": args.repeats,
        "encode": enc,
        "encode_batch": batch,
        "process_threads_after": threads,
        "env": {k: os.environ.get(k) for k in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM")},
        "tokenizers": tokenizers.__version__,
    }))


def run_hf(tokenizer: Path, corpus: Path, repeats: int, ids_out: Path | None) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, __file__, "--hf-worker", "--tokenizer", str(tokenizer),
           "--corpus", str(corpus), "--repeats", str(repeats)]
    if ids_out:
        cmd += ["--ids-out", str(ids_out)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"HF worker failed:\n{out.stderr}")
    return json.loads(out.stdout)


def run_cpp(binary: Path, tokenizer: Path, corpus: Path, repeats: int, ids_out: Path | None) -> dict:
    cmd = [str(binary), "--tokenizer", str(tokenizer), "--corpus", str(corpus),
           "--repeats", str(repeats)]
    if ids_out:
        cmd += ["--ids-out", str(ids_out)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{binary} failed:\n{out.stderr}")
    return json.loads(out.stdout)


# ----------------------------------------------------------------------------- checks, report


def check_same_ids(name: str, hf_file: Path, cpp_file: Path, docs: list[str]) -> str:
    import numpy as np

    a, b = hf_file.read_bytes(), cpp_file.read_bytes()
    if a == b:
        return hashlib.sha256(a).hexdigest()
    x, y = np.frombuffer(a, dtype="<u4"), np.frombuffer(b, dtype="<u4")
    pos_x = pos_y = 0
    for i, doc in enumerate(docs):
        nx, ny = int(x[pos_x]), int(y[pos_y])
        ix, iy = x[pos_x + 1:pos_x + 1 + nx].tolist(), y[pos_y + 1:pos_y + 1 + ny].tolist()
        if ix != iy:
            k = next((j for j in range(min(nx, ny)) if ix[j] != iy[j]), min(nx, ny))
            sys.exit(f"FAIL {name}: ids differ on document {i} ({len(doc.encode())} bytes, "
                     f"{nx} HF vs {ny} hubzoo tokens) at token {k}:\n"
                     f"  HF     {ix[max(0, k - 3):k + 5]}\n  hubzoo {iy[max(0, k - 3):k + 5]}\n"
                     f"  text starts {doc[:120]!r}")
        pos_x += 1 + nx
        pos_y += 1 + ny
    sys.exit(f"FAIL {name}: id streams differ in length")


def sh(cmd: str) -> str:
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=ROOT).stdout.strip()


def cmake_cache(key: str) -> str:
    for line in (ROOT / "build/CMakeCache.txt").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    return ""


def ninja_flags(obj_suffix: str) -> str:
    """The compile flags ninja uses for the object ending in `obj_suffix` (the library's, not the cache's)."""
    lines = (ROOT / "build/build.ninja").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("build ") and line.split(":")[0].endswith(obj_suffix):
            for follow in lines[i + 1:i + 8]:
                if follow.strip().startswith("FLAGS ="):
                    return follow.split("=", 1)[1].strip()
    return ""


def plot(report: dict, path: Path) -> None:
    """Two panels: MB/s from wall-clock medians and from CPU-time medians."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{name}\n{mode}" for name in report["results"] for mode in MODES]
    xs = range(len(labels))
    w = 0.38
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, key, what in ((axes[0], "mb_s", "wall clock"), (axes[1], "cpu_mb_s", "process CPU time")):
        hf = [r["hf_tokenizers"][m][key] for r in report["results"].values() for m in MODES]
        hz = [r["hubzoo"][m][key] for r in report["results"].values() for m in MODES]
        b1 = ax.bar([x - w / 2 for x in xs], hf, w, label=f"HF tokenizers {report['versions']['tokenizers']}")
        b2 = ax.bar([x + w / 2 for x in xs], hz, w, label="hubzoo")
        for bars in (b1, b2):
            ax.bar_label(bars, fmt="%.2f", fontsize=8)
        for x, a, b in zip(xs, hf, hz):
            ax.text(x, max(a, b) * 1.12, f"{b / a:.2f}x", ha="center", fontsize=9, weight="bold")
        ax.set_xticks(list(xs), labels, fontsize=7)
        ax.set_ylabel(f"MB/s, median {what}")
        ax.set_ylim(0, max(hf + hz) * 1.3)
        ax.set_title(f"by {what}", fontsize=10)
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"Tokenizer encode throughput, one thread, {report['corpus']['bytes'] / 1e6:.1f} MB corpus "
                 f"(hubzoo / HF above the bars)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_markdown(report: dict, path: Path) -> None:
    c = report["corpus"]
    m = report["machine"]
    lines = [
        "# Tokenizer encode throughput, single thread: hubzoo vs HF tokenizers",
        "",
        f"{m['cpu']} ({m['logical_cpus']} logical CPUs), 1 thread each side; "
        f"HF tokenizers {report['versions']['tokenizers']} (RAYON_NUM_THREADS=1, "
        f"TOKENIZERS_PARALLELISM=false), hubzoo {report['versions']['hubzoo']} at "
        f"{report['git']['commit'][:12]}{' (dirty)' if report['git']['dirty'] else ''}, "
        f"{report['versions']['compiler']}, `{report['versions']['cxx_flags']}`.",
        "",
        f"Corpus: {c['documents']} documents, {c['bytes'] / 1e6:.2f} MB UTF-8 "
        f"(median document {c['median_doc_bytes']:.0f} B, max {c['max_doc_bytes']} B; "
        + ", ".join(f"{k} {v['bytes'] / 1e6:.2f} MB" for k, v in c["categories"].items())
        + f"), sha256 {c['sha256'][:16]}. add_special_tokens=True, truncation and padding off. "
        f"Median of {report['repeats']} runs after one warm-up; MB = 10^6 bytes.",
        "",
        "Wall-clock medians, and (last three columns) medians of the process CPU time of each run,",
        "which a busy machine disturbs less (each side runs one thread, so CPU time is its running time).",
        "",
        "| tokenizer | mode | tokens | HF MB/s | hubzoo MB/s | HF Mtok/s | hubzoo Mtok/s | hubzoo / HF "
        "| HF MB/s (CPU) | hubzoo MB/s (CPU) | hubzoo / HF (CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["results"].items():
        for mode in MODES:
            h, z = r["hf_tokenizers"][mode], r["hubzoo"][mode]
            lines.append(f"| {name} ({TOKENIZERS[name]}) | {mode} | {r['tokens']} | {h['mb_s']:.2f} | "
                         f"{z['mb_s']:.2f} | {h['tokens_s'] / 1e6:.3f} | {z['tokens_s'] / 1e6:.3f} | "
                         f"**{r['ratio_hubzoo_over_hf'][mode]:.2f}x** | {h['cpu_mb_s']:.2f} | "
                         f"{z['cpu_mb_s']:.2f} | {r['ratio_hubzoo_over_hf_cpu_time'][mode]:.2f}x |")
    lines += ["", "Identical ids on both sides for every document (sha256 of the id stream): "
              + ", ".join(f"{n} {r['ids_sha256'][:16]}" for n, r in report["results"].items()) + ".",
              "One thread each side: process CPU time / wall time over the timed runs (above 1 only "
              "if threads ran in parallel) at most "
              + "; ".join(f"{n} HF {max(r['hf_tokenizers'][mo]['cpu_over_wall'] for mo in MODES):.2f}, "
                          f"hubzoo {max(r['hubzoo'][mo]['cpu_over_wall'] for mo in MODES):.2f}"
                          for n, r in report["results"].items())
              + "; threads in the HF process after its runs: "
              + ", ".join(str(r["hf_process_threads_after"]) for r in report["results"].values()) + ".",
              "", f"Load average before/after: {m['loadavg_before']} / {m['loadavg_after']}."
              + (" CPU/wall well below 1: the machine was busy and each process often waited for a "
                 "core, so the wall-clock figures are noisy; the CPU-time columns are the steadier measure."
                 if min(r[s][mode]["cpu_over_wall"] for r in report["results"].values()
                        for s in ("hf_tokenizers", "hubzoo") for mode in MODES) < 0.8 else ""),
              "", "Reproduce: `.venv/bin/python bench/tokenizer_bench.py`", ""]
    path.write_text("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus-mb", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate HF and hubzoo this many times; medians over all runs")
    ap.add_argument("--tokenizers", nargs="*", default=list(TOKENIZERS))
    ap.add_argument("--binary", default=str(ROOT / "build/bench/tokenizer_bench"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--json", default=str(ROOT / "bench/results/tokenizer_encode.json"))
    # internal: the HF subprocess
    ap.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--ids-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_worker:
        return hf_worker(args)

    if not args.no_build:
        subprocess.run(["ninja", "-C", str(ROOT / "build"), "tokenizer_bench"], check=True,
                       stdout=subprocess.DEVNULL)
    WORK.mkdir(parents=True, exist_ok=True)
    docs, corpus = build_corpus(args.corpus_mb)
    corpus_file = WORK / "tokenizer_corpus.json"
    corpus_file.write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    corpus["sha256"] = hashlib.sha256(corpus_file.read_bytes()).hexdigest()
    corpus["file"] = str(corpus_file.relative_to(ROOT))
    print(f"corpus: {corpus['documents']} documents, {corpus['bytes'] / 1e6:.2f} MB", flush=True)

    loadavg_before = os.getloadavg()
    results, cpp_meta = {}, {}
    for name in args.tokenizers:
        tokenizer = ROOT / "models" / name / "tokenizer.json"
        sides = ("hf_tokenizers", "hubzoo")
        runs = {s: {m: [] for m in MODES} for s in sides}
        cpu_runs = {s: {m: [] for m in MODES} for s in sides}
        cpu = {s: {m: [] for m in MODES} for s in sides}
        for rnd in range(args.rounds):
            first = rnd == 0
            hf = run_hf(tokenizer, corpus_file, args.repeats, WORK / f"{name}.hf.ids" if first else None)
            cc = run_cpp(Path(args.binary), tokenizer, corpus_file, args.repeats,
                         WORK / f"{name}.hubzoo.ids" if first else None)
            if first:
                sha = check_same_ids(name, WORK / f"{name}.hf.ids", WORK / f"{name}.hubzoo.ids", docs)
                hf_first, cpp_meta = hf, cc
            for side, r in (("hf_tokenizers", hf), ("hubzoo", cc)):
                for m in MODES:
                    runs[side][m] += r[m]["times_s"]
                    cpu_runs[side][m] += r[m]["cpu_times_s"]
                    cpu[side][m].append(r[m]["cpu_over_wall"])
            print(f"{name} round {rnd + 1}: HF encode {hf['encode']['median_s']:.3f}s "
                  f"batch {hf['encode_batch']['median_s']:.3f}s | hubzoo encode "
                  f"{cc['encode']['median_s']:.3f}s batch {cc['encode_batch']['median_s']:.3f}s", flush=True)
        tokens = hf_first["tokens"]
        assert tokens == cpp_meta["tokens"]
        res = {"description": TOKENIZERS[name], "tokens": tokens, "ids_sha256": sha,
               "hf_process_threads_after": hf_first["process_threads_after"],
               "hf_env": hf_first["env"]}
        for side in runs:
            res[side] = {}
            for m in MODES:
                med = statistics.median(runs[side][m])
                cpu_med = statistics.median(cpu_runs[side][m])
                res[side][m] = {"median_s": med, "times_s": runs[side][m],
                                "mb_s": corpus["bytes"] / 1e6 / med, "tokens_s": tokens / med,
                                "cpu_median_s": cpu_med, "cpu_times_s": cpu_runs[side][m],
                                "cpu_mb_s": corpus["bytes"] / 1e6 / cpu_med,
                                "cpu_over_wall": max(cpu[side][m])}
        res["hubzoo_load_s"] = cpp_meta["load_s"]
        res["ratio_hubzoo_over_hf"] = {m: res["hubzoo"][m]["mb_s"] / res["hf_tokenizers"][m]["mb_s"]
                                       for m in MODES}
        res["ratio_hubzoo_over_hf_cpu_time"] = {
            m: res["hubzoo"][m]["cpu_mb_s"] / res["hf_tokenizers"][m]["cpu_mb_s"] for m in MODES}
        for m in MODES:
            if max(cpu["hf_tokenizers"][m]) > 1.3 or max(cpu["hubzoo"][m]) > 1.3:
                print(f"WARNING {name} {m}: CPU/wall above 1.3, more than one thread ran", flush=True)
        results[name] = res

    report = {
        "benchmark": "tokenizer encode throughput, single thread",
        "threads": 1,
        "repeats": args.repeats * args.rounds,
        "rounds": args.rounds,
        "add_special_tokens": True,
        "truncation_padding": "disabled on both sides",
        "corpus": corpus,
        "results": results,
        "versions": {
            "tokenizers": hf_first["tokenizers"],
            "hubzoo": cpp_meta["hubzoo_version"],
            "python": platform.python_version(),
            "compiler": sh(f"{cmake_cache('CMAKE_CXX_COMPILER') or 'c++'} --version | head -1"),
            "cxx_flags": ninja_flags("tokenizer/bpe.cc.o"),
            "ndebug": cpp_meta["ndebug"],
            "pcre2": cpp_meta["pcre2"],
        },
        "git": {"commit": sh("git rev-parse HEAD"), "binary_configured_at": cpp_meta["git_commit"],
                "dirty": bool(sh("git status --porcelain -- tokenizer bench/tokenizer_bench.cc")),
                "dirty_files": subprocess.run("git status --porcelain -- tokenizer bench", shell=True, cwd=ROOT,
                                              capture_output=True, text=True).stdout.splitlines()},
        "machine": {
            "cpu": sh("lscpu | sed -n 's/^Model name:[ \\t]*//p'"),
            "logical_cpus": os.cpu_count(),
            "kernel": platform.release(),
            "loadavg_before": [round(x, 2) for x in loadavg_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, out.with_suffix(".md"))
    plot(report, out.with_suffix(".png"))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
