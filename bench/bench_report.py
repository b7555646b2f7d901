"""Markdown table and PNG plots of bench/run.py's report (kept apart so a report JSON can be
re-rendered without re-running: .venv/bin/python bench/bench_report.py bench/results/bench.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _fig(engine: dict, figure: str, key: str, value: int, best: bool = False):
    return next((x.get("tok_s_best", x["tok_s"]) if best else x["tok_s"]
                 for x in engine.get(figure, []) if x[key] == value), None)


def _cell(engine: dict, figure: str, key: str, value: int) -> str:
    med, best = _fig(engine, figure, key, value), _fig(engine, figure, key, value, best=True)
    if med is None:
        return "-"
    return f"{med:.1f}" if best is None or abs(best - med) < 0.05 else f"{med:.1f} ({best:.1f})"


def _fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def write_markdown(r: dict, path: Path) -> None:
    m, lim = r["machine"], r["machine_limits"]
    e = r["engines"]
    thr = r["threads"]
    lt = next(x for x in lim["threads"] if x["threads"] == thr)
    pre = sorted({x["tokens"] for v in e.values() for x in v.get("prefill", [])})
    dec = sorted({x["batch"] for v in e.values() for x in v.get("decode", [])})
    lines = [
        f"# CPU benchmark: {r['model']}, {thr} threads",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, L2 {m['l2']}, L3 {m['l3']}; "
        f"SIMD {' '.join(m['simd'])}; kernel {m['kernel']}; hubzoo {m['git_commit']}. "
        f"Load average (1/5/15 min) {' '.join(f'{x:.2f}' for x in r['load_average_start'])} at the start, "
        f"{' '.join(f'{x:.2f}' for x in r['load_average_end'])} at the end (2 cores: above ~0.5 others shared them).",
        "",
        f"Measured in the same run ({lim['simd_target']}): fp32 FMA peak "
        + ", ".join(f"{x['fma_gflops']:.0f} GFLOP/s ({x['threads']} thr)" for x in lim["threads"])
        + "; read bandwidth "
        + ", ".join(f"{x['read_gbs']:.1f} GB/s ({x['threads']} thr)" for x in lim["threads"])
        + f". Medians of {r['rounds']} rounds; every round runs each engine in a fresh process, engines "
        f"alternating. Command: `{r['command']}`.",
        "",
        "## Targets",
        "",
        "| target | measured | bar | met |",
        "|---|---|---|---|",
    ]
    for t in r["targets"]:
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
        lines.append(f"| {t['target']} | {_fmt(t['value'], '.2f')} | {t['bar']} | {met} "
                     f"{('(' + t['note'] + ')') if t['note'] else ''} |")
    lines += [
        "",
        "Targets use each engine's best round (the least disturbed on a shared machine, for every "
        "engine alike); the machine's limits are the better of a measurement at the start and one at "
        "the end.",
        "",
        "## Prefill and decode (tokens/s, higher is better): median (best) of the rounds",
        "",
        "| engine | " + " | ".join(f"prefill {p}" for p in pre) + " | "
        + " | ".join(f"decode b{b}" for b in dec) + " | load s | TTFT cold s | peak RSS MiB |",
        "|---|" + "---|" * (len(pre) + len(dec) + 3),
    ]
    for name, v in e.items():
        rss = v.get("peak_rss_bytes")
        lines.append(
            f"| {name} | " + " | ".join(_cell(v, "prefill", "tokens", p) for p in pre) + " | "
            + " | ".join(_cell(v, "decode", "batch", b) for b in dec) + " | "
            + f"{_fmt(v.get('load_seconds'), '.3f')} | {_fmt(v.get('ttft_cold_process_seconds'), '.3f')} | "
            + f"{_fmt(rss / 2**20 if rss else None, '.0f')} |")
    ref = "llama.cpp BF16" if "llama.cpp BF16" in e else None
    if ref:
        lines += ["", f"Ratios of best rounds over {ref} (decode) and llama.cpp F32 (prefill):", ""]
        for name in ("hubzoo float32", "hubzoo bfloat16", "hubzoo bfloat16 bf16dot"):
            if name not in e:
                continue
            v = e[name]
            parts = []
            for p in pre:
                a = _fig(v, "prefill", "tokens", p, True)
                b = _fig(e.get("llama.cpp F32", {}), "prefill", "tokens", p, True)
                if a and b:
                    parts.append(f"prefill {p} **{a / b:.2f}x**")
            for bb in dec:
                a, b = _fig(v, "decode", "batch", bb, True), _fig(e[ref], "decode", "batch", bb, True)
                if a and b:
                    parts.append(f"decode b{bb} **{a / b:.2f}x**")
            lines.append(f"- {name}: " + ", ".join(parts))
    if "matmul" in r:
        lines += ["", f"## Matmul vs oneDNN {r['matmul'].get('onednn_version')} sgemm "
                  f"(model shapes, GFLOP/s; hubzoo target {r['matmul']['hubzoo_target']})", "",
                  "| shape | N | K | M | threads | hubzoo | oneDNN | hubzoo/oneDNN |", "|---|---|---|---|---|---|---|---|"]
        for x in r["matmul"]["results"]:
            lines.append(f"| {x['shape']} | {x['n']} | {x['k']} | {x['m']} | {x['threads']} | "
                         f"{_fmt(x['hubzoo_gflops'])} | {_fmt(x['onednn_gflops'])} | "
                         f"{_fmt(x['hubzoo_vs_onednn'], '.2f')} |")
    if "embed" in r:
        lines += ["", "## Embeddings", "", "See [embed.md](embed.md) (bench/embed.py, same run)."]
    # The plots write_plots made beside this file (named after it).
    lines += ["", f"![prefill]({path.stem}_prefill.png) ![decode]({path.stem}_decode.png)", ""]
    path.write_text("\n".join(lines))


def write_plots(r: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    e = r["engines"]
    for figure, key, label in (("prefill", "tokens", "prompt tokens"), ("decode", "batch", "batch")):
        xs = sorted({x[key] for v in e.values() for x in v.get(figure, [])})
        fig, ax = plt.subplots(figsize=(7, 3.8))
        width = 0.8 / max(1, len(e))
        for i, (name, v) in enumerate(e.items()):
            ys = [_fig(v, figure, key, x) or 0 for x in xs]
            ax.bar([j + i * width for j in range(len(xs))], ys, width, label=name)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(xs))], [str(x) for x in xs])
        ax.set_xlabel(label)
        ax.set_ylabel(f"{figure} tokens/s")
        ax.set_yscale("log")
        ax.set_title(f"{r['model']}, {r['threads']} threads: {figure}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out.parent / f"{out.name}_{figure}.png", dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    p = Path(sys.argv[1])
    rep = json.loads(p.read_text())
    write_markdown(rep, p.with_suffix(".md"))
    write_plots(rep, p.with_suffix(""))
