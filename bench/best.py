"""Best vs best (issue 16): each engine's fastest configuration whose error was measured, per
model, for decode at batch 1 and prefill of 512 tokens, with its error beside it.

    .venv/bin/python bench/best.py
    .venv/bin/python bench/best.py --bench bench_xeon.json --quant quant_xeon.json \\
        --real-speed quant_real_xeon.json --out best_xeon.md

Reads what the other benchmarks wrote (run them first; nothing is measured here), all under
bench/results/:
  --bench         bench.json          SmolLM2 fp32 / bf16 speeds: hubzoo, llama.cpp F32/BF16,
                                      transformers (bench/run.py)
  --quant         quant.json          SmolLM2's quantized GGUF speeds: hubzoo fused / int8,
                                      llama.cpp (bench/quant.py)
  --quality       quant_quality.json  SmolLM2 errors: KL against llama.cpp's F32 run
                                      (llama-perplexity's statistic) and top-1 agreement on the
                                      same positions (bench/quant_quality.py)
  --real-speed    (none)              the real Q4_K_M GGUFs' speeds with transformers on the same
                                      files (bench/quant.py --transformers ...); with it, a
                                      section per model
  --real-quality  quant_quality_real.json  their errors against the model each file holds
                                      (bench/quant_quality.py --real)
A configuration without a measured error is not a candidate. Writes --out (best.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench/results"
# quant.json's SmolLM2 files (made by llama-quantize) and quant_quality.json's names for them.
QUANT_FILES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k": "Q4_K_M"}
AMX_NOTE = ", AMX build (error: the build without AMX)"


def figure(engine: dict, kind: str, key: str, value: int) -> float | None:
    return next((x["tok_s"] for x in engine.get(kind, []) if x[key] == value), None)


def row(engine: str, config: str, source: str, e: dict, err: str | None) -> dict:
    return {"engine": engine, "config": config, "source": source,
            "decode": figure(e, "decode", "batch", 1),
            "prefill": figure(e, "prefill", "tokens", 512), "error": err}


def gguf_engine(name: str, ft: str) -> tuple[str, str, str]:
    """(engine, configuration, error label) of one of quant.py's engines on an ft file."""
    if name == "llama.cpp":
        return "llama.cpp", f"{ft} GGUF", f"llama.cpp ({ft} file)"
    if name == "llama.cpp AMX":  # decode at batch 1 only; its error is the same file's
        return "llama.cpp", f"{ft} GGUF{AMX_NOTE}", f"llama.cpp ({ft} file)"
    if name.startswith("transformers "):
        dtype = name.split()[-1]
        return "transformers", f"{ft} GGUF as {dtype}", f"transformers {dtype} ({ft} file)"
    mode = name.split()[-1]
    if mode == "bf16dot-dequantize":
        return "hubzoo", f"{ft} GGUF dequantized at load, bf16dot", f"hubzoo {mode} ({ft} file)"
    return "hubzoo", f"{ft} GGUF, {mode}", f"hubzoo {mode} ({ft} file)"


def smollm2_candidates(bench: dict, quant: dict, bench_name: str, quant_name: str) -> list[dict]:
    """(engine, configuration, decode b1, prefill 512, error label) for SmolLM2."""
    out = []
    fixed = {
        "hubzoo float32": ("hubzoo", "fp32 (safetensors)", "hubzoo fp32 (F32 file)"),
        "hubzoo bfloat16": ("hubzoo", "bf16 fused (safetensors)", "hubzoo bfloat16 fused (snapshot)"),
        "hubzoo bfloat16 bf16dot": ("hubzoo", "bf16 bf16dot (safetensors)",
                                    "hubzoo bfloat16 bf16dot (snapshot)"),
        "llama.cpp F32": ("llama.cpp", "F32 GGUF", None),  # the reference itself: error 0
        "llama.cpp BF16": ("llama.cpp", "BF16 GGUF", "llama.cpp (BF16 file)"),
        "transformers bfloat16": ("transformers", "bfloat16", "transformers bfloat16 (snapshot)"),
    }
    for name, (engine, config, err) in fixed.items():
        e = bench["engines"].get(name)
        if e and "error" not in e:
            out.append(row(engine, config, bench_name, e, err))
    for stem, f in quant["files"].items():
        kind = next((k for k in QUANT_FILES if stem.startswith("SmolLM2") and stem.endswith(k)), None)
        if not kind:
            continue
        for name, e in f["engines"].items():
            if "error" not in e:
                engine, config, err = gguf_engine(name, QUANT_FILES[kind])
                out.append(row(engine, config, quant_name, e, err))
    return out


def error_of(quality: dict, label: str | None) -> dict | None:
    if label is None:
        return {"mean_kld": 0.0, "same_top1": 1.0}
    r = quality.get(label, {}).get("vs_llama_base")
    return r if r and r.get("mean_kld") is not None else None


def section(title: str, candidates: list[dict], quality: dict, reference: str) -> list[str]:
    rows = []
    for c in candidates:
        c["err"] = error_of(quality, c["error"])
        if c["err"] is not None:
            rows.append(c)
    lines = [f"## {title}", ""]
    for kind, what in (("decode", "decode, batch 1"), ("prefill", "prefill, 512 tokens")):
        lines += [f"### Fastest {what} (tokens/s)", "",
                  f"| engine | configuration | tok/s | mean KLD vs {reference} | same top-1 | "
                  "tok/s over llama.cpp's best |", "|---|---|---|---|---|---|"]
        best = {}
        for r in rows:
            if r[kind] and (r["engine"] not in best or r[kind] > best[r["engine"]][kind]):
                best[r["engine"]] = r
        ll = best.get("llama.cpp", {}).get(kind)
        for engine in ("hubzoo", "llama.cpp", "transformers"):
            r = best.get(engine)
            if not r:
                continue
            ratio = f"{r[kind] / ll:.2f}" if ll else "-"
            lines.append(f"| {engine} | {r['config']} | {r[kind]:.1f} | {r['err']['mean_kld']:.5f} | "
                         f"{r['err']['same_top1']:.2%} | {ratio} |")
        lines.append("")
    lines += ["### Every candidate", "",
              f"| engine | configuration | decode b1 | prefill 512 | mean KLD vs {reference} | "
              "same top-1 | from |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["engine"], -(r["decode"] or 0))):
        d = f"{r['decode']:.1f}" if r["decode"] else "-"
        p = f"{r['prefill']:.1f}" if r["prefill"] else "-"
        lines.append(f"| {r['engine']} | {r['config']} | {d} | {p} | {r['err']['mean_kld']:.5f} | "
                     f"{r['err']['same_top1']:.2%} | {r['source']} |")
    return lines + [""]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="bench.json")
    ap.add_argument("--quant", default="quant.json")
    ap.add_argument("--quality", default="quant_quality.json")
    ap.add_argument("--real-speed", default=None)
    ap.add_argument("--real-quality", default="quant_quality_real.json")
    ap.add_argument("--out", default="best.md")
    a = ap.parse_args()
    load = lambda name: json.loads((RESULTS / name).read_text())  # noqa: E731
    bench, quant, quality = load(a.bench), load(a.quant), load(a.quality)
    machine = bench.get("machine", {}).get("cpu", "")
    sources = f"bench/results/{a.bench} (fp32, bf16) and bench/results/{a.quant} (GGUF files)"
    lines = ["# Best vs best, 2 threads", "",
             f"Machine: {machine}. Each engine's fastest configuration among those whose error "
             "was measured; speeds are medians, each measured with the peers alternating in the "
             "same run (different files are different runs: compare across them with their "
             "noise in mind). Command: `python bench/best.py "
             + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v) + "`.", "",
             "SmolLM2-135M-Instruct: errors from bench/results/quant_quality.md (mean KL against "
             "llama.cpp's F32 run of the F32 file, as llama-perplexity computes it, and top-1 "
             f"agreement, over the same 1020 positions; llama.cpp F32 is that reference); speeds "
             f"from {sources}.", ""]
    if a.real_speed:
        lines += ["The real Q4_K_M files (no unquantized weights ship with them): errors from "
                  f"bench/results/{a.real_quality} (the same statistic against llama.cpp's F32 "
                  "run of the file dequantized by llama-quantize, i.e. the model the file holds); "
                  f"speeds from bench/results/{a.real_speed}, where transformers ran on the same "
                  "file (gguf_file=, dequantized at load).", ""]
    lines += section("SmolLM2-135M-Instruct",
                     smollm2_candidates(bench, quant, a.bench, a.quant), quality["quality"], "F32")
    if a.real_speed:
        speed, real = load(a.real_speed), load(a.real_quality)
        for stem, m in real["models"].items():
            f = speed["files"].get(stem)
            if not f:
                continue
            cands = []
            for name, e in f["engines"].items():
                if "error" not in e:
                    engine, config, err = gguf_engine(name, "Q4_K_M")
                    cands.append(row(engine, config, a.real_speed, e, err))
            lines += section(stem, cands, m["quality"], "the file's F32")
    (RESULTS / a.out).write_text("\n".join(lines))
    print((RESULTS / a.out).read_text())


if __name__ == "__main__":
    main()
