"""Server start, A/B: seconds from spawning `hubzoo serve` (two builds) and `llama-server` on one
GGUF until /health answers 200, alternating, in fresh processes.

    .venv/bin/python bench/ready_ab.py --a /tmp/base/build/hubzoo --b build/hubzoo \
        -m models/gguf/gemma-3-270m-Q4_K_M.gguf --rounds 7 --out bench/results/ready_ab

Each round starts A, B and llama-server (context 1024, no warm-up run, as bench/quant.py)
once, the order reversed every other round so that a drift in machine load hits all alike.
Reports each one's median and min-max over rounds and the ratios of medians. hubzoo runs
`--mode int8` (its panels are made at load) unless --mode says otherwise. A benchmark,
never a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, free_port, log, machine_description, run_process, seconds_to_ready  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="hubzoo binary A (before)")
    ap.add_argument("--b", required=True, help="hubzoo binary B (after)")
    ap.add_argument("-m", "--model", required=True, help="a .gguf file")
    ap.add_argument("--mode", default="int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="", help="write OUT.json and OUT.md")
    a = ap.parse_args()

    out, _ = run_process(["bash", str(ROOT / "bench/build_llama_cpp.sh"), str(ROOT / "models/SmolLM2-135M-Instruct")])
    llama_server = Path(out.strip().splitlines()[-1]) / "bin" / "llama-server"
    model = str(Path(a.model).resolve())

    def hubzoo(binary: str):
        def start(port: int) -> list[str]:
            return [binary, "serve", "-m", model, "--mode", a.mode, "--threads", str(a.threads),
                    "--max-concurrency", "1", "--max-context", "1024", "--port", str(port)]
        return start

    def llama(port: int) -> list[str]:
        return [str(llama_server), "-m", model, "-t", str(a.threads), "-c", "1024", "--no-warmup",
                "--host", "127.0.0.1", "--port", str(port)]

    engines = {"A": hubzoo(a.a), "B": hubzoo(a.b), "llama-server": llama}
    seconds: dict[str, list[float]] = {e: [] for e in engines}
    order = list(engines)
    for rnd in range(a.rounds):
        for e in (order if rnd % 2 == 0 else order[::-1]):
            port = free_port()
            seconds[e].append(seconds_to_ready(engines[e](port), port))
            log(f"round {rnd + 1}/{a.rounds}: {e} {seconds[e][-1]:.3f} s")
    med = {e: statistics.median(s) for e, s in seconds.items()}
    report = {"command": " ".join([Path(sys.executable).name] + sys.argv), "machine": machine_description(),
              "model": model, "mode": a.mode, "threads": a.threads, "rounds": a.rounds,
              "binaries": {"A": a.a, "B": a.b, "llama-server": str(llama_server)},
              "seconds": seconds, "median": med,
              "B/A": med["B"] / med["A"], "B/llama-server": med["B"] / med["llama-server"],
              "A/llama-server": med["A"] / med["llama-server"]}
    lines = [f"engine | median s | min-max s", "---|---|---"]
    for e, s in seconds.items():
        lines.append(f"{e} | {med[e]:.3f} | {min(s):.3f}-{max(s):.3f}")
    lines.append("")
    lines.append(f"B/A {report['B/A']:.2f}, B/llama-server {report['B/llama-server']:.2f}, "
                 f"A/llama-server {report['A/llama-server']:.2f} (ratios of medians)")
    print("\n".join(lines))
    if a.out:
        Path(a.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
        md = [f"# Server start A/B: {Path(model).name}", "",
              f"Command: `{report['command']}`; A: `{a.a}`, B: `{a.b}`. Seconds from spawning each "
              f"server until /health answers 200, {a.rounds} rounds, order alternating; "
              f"hubzoo `--mode {a.mode} --threads {a.threads}`, llama-server `-c 1024 --no-warmup`.", ""]
        Path(a.out + ".md").write_text("\n".join(md + lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
