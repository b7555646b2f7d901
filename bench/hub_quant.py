"""Speed, peak memory and load time of the Hub's int4 / int8 checkpoints in int8 mode and of
their bf16 originals in float32 numerics, two hubzoo binaries side by side in alternating rounds.

    .venv/bin/python bench/hub_quant.py --baseline /tmp/old/build/hubzoo   # ~10 min
    .venv/bin/python bench/hub_quant.py --baseline B --rounds 3 --models smollm2
    .venv/bin/python bench/hub_quant.py --baseline B --schemes w4a16_g64_fp16,fp16

The checkpoints are made once (under ~/.cache/hubzoo/hub_quant/) by the compressed-tensors
package from the real bf16 snapshots scripts/prepare_models.py prepares, with min-max
(round-to-nearest) parameters as python/tests/test_hub_quant.py makes them: W4A16
("pack-quantized" int4, symmetric, group 64, as SmolLM2's 576 columns are no whole number of
128-groups: Q4_G in hubzoo) and W8A16 ("int-quantized" int8,
channel-wise: Q8_G), scales and the rest in bf16 as the Hub's files have them. Every linear of
the decoder layers is quantized; the tied embedding and lm_head stay bf16. GPTQ and AWQ files
load into the same two block types, so their speed is these rows'. Scheme "bf16" is the
snapshot saved in bf16 by transformers (the prepared snapshots are F32; the Hub's originals
are bf16), run with `--dtype float32` (fused). With --schemes, also "w4a16_g64_fp16" and
"fp16": the same saved in fp16, as GPTQ and AWQ checkpoints are (their scales, embedding and
lm_head fp16).

Each round runs `hubzoo bench` (2 threads: prefill of 512 tokens, decode at batch 1) with the
baseline and with build/hubzoo, in alternating order, machine_bench's read bandwidth and
core-to-core round trip before each pair. Reported per checkpoint: medians of decode and
prefill tok/s, peak RSS and load seconds, and the median of the per-round decode ratios. Writes bench/results/hub_quant.{json,md}. A
benchmark, never a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, log, machine_description, machine_now  # noqa: E402

PREPARED = Path.home() / ".cache/hubzoo/models"  # scripts/prepare_models.py's snapshots
MODELS = {"smollm2": "SmolLM2-135M-Instruct-*", "gemma": "gemma-3-270m-*"}
# scheme: (dtype of what is not quantized, (format, bits, strategy, group size, symmetric) or
# None: not quantized, the snapshot in that dtype)
SCHEMES = {
    "w4a16_g64": ("bfloat16", ("pack-quantized", 4, "group", 64, True)),
    "w8a16_channel": ("bfloat16", ("int-quantized", 8, "channel", None, True)),
    "bf16": ("bfloat16", None),
    # GPTQ / AWQ checkpoints are saved in fp16: their scales, embedding and lm_head.
    "w4a16_g64_fp16": ("float16", ("pack-quantized", 4, "group", 64, True)),
    "fp16": ("float16", None),
}
DEFAULT_SCHEMES = "w4a16_g64,w8a16_channel,bf16"
CACHE = Path.home() / ".cache/hubzoo/hub_quant"


def checkpoint(model: str, scheme: str) -> Path:
    """The compressed-tensors checkpoint of `model` in `scheme`, made once."""
    found = sorted(p for p in PREPARED.glob(MODELS[model]) if (p / "config.json").exists())
    if not found:
        raise SystemExit(f"no {MODELS[model]} under {PREPARED}: run scripts/prepare_models.py")
    base = found[-1]
    out = CACHE / f"{base.name}-{scheme}"
    if (out / "config.json").exists():
        return out
    sys.path.insert(0, str(ROOT / "python/tests"))
    import test_hub_quant as hq  # the test suite's compressed-tensors writer

    log(f"writing {out.name} with the compressed-tensors package")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    dtype, quant = SCHEMES[scheme]
    if quant is None:
        hq._util.tiny_models.load_hf(base, dtype).save_pretrained(tmp)
    else:
        hq.ct_checkpoint(base, tmp, *quant, dtype=dtype)
    for f in base.iterdir():  # tokenizer, chat template, generation config
        if f.suffix in (".json", ".jinja") and f.name not in ("config.json", "hubzoo_source.json") \
                and not (tmp / f.name).exists():
            shutil.copy(f, tmp / f.name)
    tmp.rename(out)
    return out


def bench(binary: Path, model: Path, mode: str, tokens: int, threads: int) -> dict:
    cmd = [str(binary), "bench", "-m", str(model), "--dtype", "float32", "--mode", mode,
           "--threads", str(threads), "--prefill", "512", "--decode-batch", "1",
           "--decode-tokens", str(tokens), "--repeats", "1"]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800).stdout)
    return {"decode_tok_s": r["decode"][0]["tok_s"], "prefill_tok_s": r["prefill"][0]["tok_s"],
            "peak_rss_bytes": r["peak_rss_bytes"],
            "load_seconds": r["load_seconds"], "panel_matrices": r["panel_matrices"],
            "weight_bytes": r["weight_bytes"], "git_commit": r["git_commit"]}


def render(result: dict) -> str:
    m = result["machine"]
    first = next(iter(result["summary"].values()))
    rounds = next(iter(result["rounds"].values()))
    vnni = "avx512_vnni" in m["simd"]
    lines = ["# The Hub's int4 / int8 checkpoints (int8 mode) and their unquantized originals (float32), "
             "two builds side by side", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {'with' if vnni else 'without'} AVX512-VNNI; "
             f"baseline hubzoo {first['commits']['baseline']}, new {first['commits']['new']}; "
             f"{result['threads']} threads, prefill of 512 tokens and decode at batch 1 of {result['tokens']} "
             f"tokens, medians of {len(rounds)} alternating rounds. `{result['command']}`", "",
             "| checkpoint | mode | decode tok/s baseline | new | new / baseline (median of rounds) "
             "| prefill tok/s baseline | new | new / baseline "
             "| peak RSS MB baseline | new | load s baseline | new | panel matrices baseline / new |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for case, s in result["summary"].items():
        b, n = s["median"]["baseline"], s["median"]["new"]
        lines.append(f"| {case} | {s['mode']} | {b['decode_tok_s']:.1f} | {n['decode_tok_s']:.1f} | "
                     f"{s['decode_ratio']:.2f}x | {b['prefill_tok_s']:.0f} | {n['prefill_tok_s']:.0f} | "
                     f"{s['prefill_ratio']:.2f}x | "
                     f"{b['peak_rss_bytes'] / 2**20:.0f} | {n['peak_rss_bytes'] / 2**20:.0f} | "
                     f"{b['load_seconds']:.2f} | {n['load_seconds']:.2f} | "
                     f"{s['panel_matrices']['baseline']} / {s['panel_matrices']['new']} |")
    levels = sorted(r["read_gbs"] for rs in result["rounds"].values() for r in rs)
    lines += ["", f"Read bandwidth before each pair: {levels[0]:.0f}-{levels[-1]:.0f} GB/s (an EPYC host's "
              "two vCPUs sit on one CCD or on two). Each round runs both binaries on a checkpoint, "
              "in alternating order; the ratio is the median of the rounds' ratios."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, type=Path, help="the hubzoo binary to compare with")
    ap.add_argument("--baseline-label", help="what the baseline is (default: the commit it reports)")
    ap.add_argument("--label", help="what build/hubzoo is (default: the commit it reports)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--schemes", default=DEFAULT_SCHEMES, help=f"of {', '.join(SCHEMES)}")
    ap.add_argument("--out", default=str(ROOT / "bench/results/hub_quant"))
    a = ap.parse_args()
    build = ROOT / "build"
    binaries = {"baseline": a.baseline.resolve(), "new": (build / "hubzoo").resolve()}
    cases = {f"{m} {s}": (checkpoint(m, s), "fused" if SCHEMES[s][1] is None else "int8")
             for m in a.models.split(",") for s in a.schemes.split(",")}
    rounds: dict[str, list] = {c: [] for c in cases}
    for i in range(a.rounds):
        order = list(binaries) if i % 2 == 0 else list(reversed(binaries))
        for case, (path, mode) in cases.items():
            gbs, pingpong = machine_now(build, a.threads)
            got = {name: bench(binaries[name], path, mode, a.tokens, a.threads) for name in order}
            got.update(read_gbs=gbs, pingpong_ns=pingpong, order=order)
            rounds[case].append(got)
            log(f"round {i + 1} {case}: " + ", ".join(
                f"{n} {got[n]['decode_tok_s']:.1f} tok/s" for n in binaries) + f" ({gbs:.0f} GB/s, {pingpong} ns)")
    summary = {}
    for case, rs in rounds.items():
        med = {n: {k: statistics.median(r[n][k] for r in rs)
                   for k in ("decode_tok_s", "prefill_tok_s", "peak_rss_bytes", "load_seconds")}
               for n in binaries}
        summary[case] = {
            "median": med,
            "mode": cases[case][1],
            "decode_ratio": statistics.median(r["new"]["decode_tok_s"] / r["baseline"]["decode_tok_s"] for r in rs),
            "prefill_ratio": statistics.median(r["new"]["prefill_tok_s"] / r["baseline"]["prefill_tok_s"]
                                               for r in rs),
            "rss_ratio": statistics.median(r["new"]["peak_rss_bytes"] / r["baseline"]["peak_rss_bytes"] for r in rs),
            "panel_matrices": {n: rs[0][n]["panel_matrices"] for n in binaries},
            "weight_bytes": rs[0]["new"]["weight_bytes"],
            "commits": {"baseline": a.baseline_label or rs[0]["baseline"]["git_commit"],
                        "new": a.label or rs[0]["new"]["git_commit"]},
        }
    result = {"command": " ".join([Path(sys.executable).name] + sys.argv), "machine": machine_description(),
              "threads": a.threads, "tokens": a.tokens, "rounds": rounds, "summary": summary}
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(render(result))
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
