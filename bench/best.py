"""Best vs best (issue 16): each engine's fastest configuration whose error was measured, per
model, for decode at batch 1 and prefill of 512 tokens, with its error beside it.

    .venv/bin/python bench/best.py

Reads what the other benchmarks wrote (run them first; nothing is measured here):
  bench/results/bench.json          fp32 / bf16 speeds: hubzoo, llama.cpp F32/BF16, transformers
  bench/results/quant.json          quantized GGUF speeds: hubzoo fused / int8, llama.cpp
  bench/results/quant_quality.json  errors: KL against llama.cpp's F32 run (llama-perplexity's
                                    statistic) and top-1 agreement on the same positions
A configuration without a measured error is not a candidate. Writes bench/results/best.md.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench/results"
# quant.json's SmolLM2 files (made by llama-quantize) and quant_quality.json's names for them.
QUANT_FILES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k": "Q4_K_M"}


def figure(engine: dict, kind: str, key: str, value: int) -> float | None:
    return next((x["tok_s"] for x in engine.get(kind, []) if x[key] == value), None)


def candidates(bench: dict, quant: dict) -> list[dict]:
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
            out.append({"engine": engine, "config": config, "source": "bench.json",
                        "decode": figure(e, "decode", "batch", 1),
                        "prefill": figure(e, "prefill", "tokens", 512), "error": err})
    for stem, f in quant["files"].items():
        kind = next((k for k in QUANT_FILES if stem.startswith("SmolLM2") and stem.endswith(k)), None)
        if not kind:
            continue
        ft = QUANT_FILES[kind]
        for name, e in f["engines"].items():
            if "error" in e:
                continue
            if name == "llama.cpp":
                engine, config, err = "llama.cpp", f"{ft} GGUF", f"llama.cpp ({ft} file)"
            else:
                mode = name.split()[-1]
                engine, config, err = "hubzoo", f"{ft} GGUF, {mode}", f"hubzoo {mode} ({ft} file)"
            out.append({"engine": engine, "config": config, "source": "quant.json",
                        "decode": figure(e, "decode", "batch", 1),
                        "prefill": figure(e, "prefill", "tokens", 512), "error": err})
    return out


def error_of(quality: dict, label: str | None) -> dict | None:
    if label is None:
        return {"mean_kld": 0.0, "same_top1": 1.0}
    r = quality["quality"].get(label, {}).get("vs_llama_base")
    return r if r and r.get("mean_kld") is not None else None


def main():
    bench = json.loads((RESULTS / "bench.json").read_text())
    quant = json.loads((RESULTS / "quant.json").read_text())
    quality = json.loads((RESULTS / "quant_quality.json").read_text())
    rows = []
    for c in candidates(bench, quant):
        c["err"] = error_of(quality, c["error"])
        if c["err"] is not None:
            rows.append(c)
    lines = ["# Best vs best: SmolLM2-135M-Instruct, 2 threads", "",
             "Each engine's fastest configuration among those whose error was measured "
             "(bench/results/quant_quality.md: mean KL against llama.cpp's F32 run, as "
             "llama-perplexity computes it, and top-1 agreement, over the same 1020 positions; "
             "llama.cpp F32 is that reference). Speeds are medians from bench/results/bench.md "
             "(fp32, bf16) and bench/results/quant.md (GGUF files), each measured with the "
             "peers alternating in the same run; the two runs are different runs, so compare "
             "across them with their noise in mind. Command: `python bench/best.py`.", ""]
    for kind, title in (("decode", "decode, batch 1"), ("prefill", "prefill, 512 tokens")):
        lines += [f"## Fastest {title} (tokens/s)", "",
                  "| engine | configuration | tok/s | mean KLD vs F32 | same top-1 | "
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
    lines += ["## Every candidate", "",
              "| engine | configuration | decode b1 | prefill 512 | mean KLD vs F32 | same top-1 | from |",
              "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["engine"], -(r["decode"] or 0))):
        d = f"{r['decode']:.1f}" if r["decode"] else "-"
        p = f"{r['prefill']:.1f}" if r["prefill"] else "-"
        lines.append(f"| {r['engine']} | {r['config']} | {d} | {p} | {r['err']['mean_kld']:.5f} | "
                     f"{r['err']['same_top1']:.2%} | {r['source']} |")
    (RESULTS / "best.md").write_text("\n".join(lines) + "\n")
    print((RESULTS / "best.md").read_text())


if __name__ == "__main__":
    main()
